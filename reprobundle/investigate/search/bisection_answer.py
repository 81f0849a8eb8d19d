"""A bisection's answer record (investigate/answers.py) written from its BisectResult, and read back as one for the
steps after it: the command that asks it again, the run its report shows, every change it listed."""

from __future__ import annotations

import shlex
from typing import Any, Sequence

from ...bundle.registry import Bundle, Registry
from ..answers import BISECTION, answer_record, store_answer
from .bisection import BisectResult


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
    answer = {"good": result.good, "bad": result.bad, "criterion": result.criterion, "first_bad": result.first_bad,
              "last_good": result.last_good, "mode": result.mode, "mode_why": result.mode_why, "why": result.why,
              "by": result.by, "classes": dict(result.classes), "evidence": dict(result.evidence),
              "left_out": dict(result.left_out), "nightly": result.nightly, "layer": result.layer,
              "also": list(result.also), "changed_defaults": result.changed_defaults,
              "beyond_ends": list(result.beyond_ends), "set_aside": list(result.set_aside),
              "confirmation": result.confirmation,
              "reported_run": reported_run(result), "unfinished": result.unfinished, "cut_at": result.cut_at,
              "resumed": result.resumed, "not_listed": list(result.not_listed), "undone": result.undone}
    if result.changes:  # every change in the window, the headline first, each with its own stored answer
        from .window_changes import change_entry

        answer["changes"] = [change_entry(c, {"answer_id": c.answer_id}) for c in [result, *result.changes]]
    return answer_record(bundle, BISECTION, command, [*result.runs.values(), *result.confirm_runs,
                                                      *result.control_runs, *result.also_runs], answer, answer_id)


def store_bisection(registry: Registry, bundle: Bundle, result: BisectResult, command: str,
                    reuse: dict | None = None) -> str | None:
    """The bisection's answer stored beside its runs (with `reuse`: what it was asked, reuse_key's); its id (None
    for a read-only store, which kept no runs)."""
    return store_answer(registry, bisection_answer(bundle, result, command, Registry.new_run_id()), reuse)


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
                        set_aside=list(a.get("set_aside") or []), confirmation=a.get("confirmation"),
                        not_listed=[e for e in a.get("not_listed") or [] if isinstance(e, dict)],
                        undone=a.get("undone") if isinstance(a.get("undone"), str) else None)


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
                        answer_id=None, confirmation=confirmation,
                        undone=entry.get("undone") if isinstance(entry.get("undone"), str) else None)
