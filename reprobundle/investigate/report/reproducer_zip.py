"""The zip as the reproducer: what `python NAME.zip` judges, built from the bundle's stored answer (the record of
bundle/zip_expectation.py), and the export that writes it (`reprobundle export`, `issue --attach`, a report's
attachment).

From the latest stored bisection, else a commit bisection with a first bad commit (investigate/report/script_plan.py's
`plan`, which also picks the stored runs of the last good and first bad release):

- outputs, bits or an error, the change in JAX's lowering (the bisection ran retraced, the bundle carries its
  program): the zip retraces the program and checks it against the last good release's retraced outputs;
- the same, the compiler's change (frozen): the zip runs its module against the last good release's outputs;
- a slowdown (a time bisection whose first bad release stands): `--compare GOOD BAD` times both releases, a single
  run checks the outputs (against the last good release's where stored) and says so;
- anything else (no answer, no boundary, a lowering change with no program to retrace): no record, and the zip
  checks its frozen module against its packed reference as before.

Where the bisection lists more than one change (or its slowdown shows only retraced), the record lists each change
the zip can check (`changes`, one record each with its `row` in the report's table: script_plan.change_plans), the
headline's first and also at the top; `python NAME.zip --change N` judges change N.
"""

from __future__ import annotations

from pathlib import Path

from ...bundle.model import release_of
from ...bundle.registry import Bundle, Registry
from ...bundle.zip_expectation import FORMAT, FORMAT_VERSION, ZipExpectation
from ..answers import COMMIT_BISECTION, latest_bisection
from .script_plan import (
    Plan,
    answer_runs,
    change_checks,
    change_plans,
    needs_changes_script,
    plan,
    release_run,
    stored_answers,
    window_changes,
)

_CRITERIA = {"outputs": "outputs", "outputs vs good": "outputs", "bits": "bits", "error": "error", "time": "time"}


def _runs_registry(registry: Registry) -> Registry:
    """Where the bundle's runs and answers are: a zip's in the default local store."""
    return Registry.open(None) if registry.store.read_only else registry


def zip_expectation(registry: Registry, bundle: Bundle, bisection: dict | None = None) -> ZipExpectation | None:
    """What the bundle's zip judges (the module docstring): of `bisection` (a stored answer), else the latest stored
    bisection's; None where no stored answer calls for a check of its own."""
    record = bisection if bisection is not None else latest_bisection(stored_answers(registry, bundle))
    plans = change_plans(registry, bundle, record, window_changes(record)) \
        if record is not None and record.get("kind") != COMMIT_BISECTION else []
    if needs_changes_script(plans):
        return _changes_expectation(registry, bundle, plans)
    chosen = plan(registry, bundle, record)
    if chosen.kind in ("program", "good") and chosen.good is not None:
        return _outputs_expectation(registry, bundle, chosen)
    return _time_expectation(registry, bundle, record)


def _changes_expectation(registry: Registry, bundle: Bundle, plans: list[Plan]) -> ZipExpectation | None:
    """Every change the zip can check, each its record with its `row`; the first at the top."""
    checks, _ = change_checks(plans)
    by_row = {p.row: p for p in plans}
    rows = []
    for c in checks:
        answer = by_row[c.row].answer or {}
        compare = [c.good, c.bad] if c.criterion == "time" else None
        found = _expectation(registry, bundle, answer, c.criterion, c.mode, c.good, c.bad, c.good_run,
                             by_row[c.row].why, compare)
        if found is not None:
            rows.append({**found.record, "row": c.row})
    if not rows:
        return None
    return ZipExpectation({**rows[0], "changes": rows}, _runs_registry(registry).store)


def _outputs_expectation(registry: Registry, bundle: Bundle, chosen: Plan) -> ZipExpectation | None:
    a = (chosen.answer or {}).get("answer") or {}
    if chosen.labels is None:
        return None
    good, bad = chosen.labels
    if chosen.commit is not None:
        bad = f"JAX at commit {chosen.commit[:10]}" + (f" ({release_of(chosen.bad)})" if chosen.bad else "")
    criterion = _CRITERIA.get(str(a.get("criterion") or ""), "outputs")
    mode = "retrace" if chosen.kind == "program" else "frozen"
    return _expectation(registry, bundle, chosen.answer or {}, criterion, mode, good, bad, chosen.good, chosen.why)


def _time_expectation(registry: Registry, bundle: Bundle, record: dict | None) -> ZipExpectation | None:
    """A time bisection's: its first bad release stood (confirmed), the releases `--compare` times."""
    a = (record or {}).get("answer") or {}
    good, bad = str(a.get("last_good") or ""), str(a.get("first_bad") or "")
    if record is None or a.get("criterion") != "time" or not good or not bad or good == bad or not _stands(a):
        return None
    mode = "retrace" if a.get("mode") == "retrace" else "frozen"
    good_run = release_run(answer_runs(registry, bundle, record), good, mode)
    why = f"jax {bad} is slower than jax {good}" + (" (the program as each release traces it)" if mode == "retrace"
                                                    else " (the frozen module)")
    return _expectation(registry, bundle, record or {}, "time", mode, good, bad, good_run, why, compare=[good, bad])


def _stands(answer: dict) -> bool:
    """Whether a time answer's first bad release stands: its confirmation kept it (or none ran, as before one
    was made)."""
    confirmation = answer.get("confirmation")
    return confirmation.get("confirmed", True) if isinstance(confirmation, dict) else True


def _expectation(registry: Registry, bundle: Bundle, answer: dict, criterion: str, mode: str, good: str, bad: str,
                 good_run: dict | None, why: str, compare: list[str] | None = None) -> ZipExpectation | None:
    source = _runs_registry(registry)
    expected = _expected_leaves(source, good_run)
    if criterion != "time" and not expected:
        return None  # nothing to judge against: the zip checks its packed reference, as before
    platform = ((good_run or {}).get("environment") or {}).get("platform")
    record = {"format": FORMAT, "format_version": FORMAT_VERSION, "bundle_id": bundle.ref.bundle_id,
              "criterion": criterion, "mode": mode, "good": good, "bad": bad, "expected": expected,
              "compare": compare, "why": why, "platform": str(platform) if platform else None,
              "answer": {"kind": str(answer.get("kind") or ""), "answer_id": str(answer.get("answer_id") or "")}}
    return ZipExpectation(record, source.store)


def _expected_leaves(source: Registry, run: dict | None) -> list[dict]:
    """The stored outputs of `run` as a record's leaves, [] where it has none or a blob is not in `source`."""
    from ...bundle.digest import blob_key

    outputs = [leaf for leaf in (run or {}).get("outputs") or [] if isinstance(leaf.get("blob"), dict)]
    digests = [str(leaf["blob"]["digest"]) for leaf in outputs]
    leaves = [{"dtype": str(leaf["dtype"]), "shape": [int(d) for d in leaf["shape"]],
               "blob": {"digest": digest, "size": int(leaf["blob"]["size"])}} for leaf, digest in zip(outputs, digests)]
    held = all(source.store.exists(blob_key(digest)) for digest in digests)
    return leaves if held and len(leaves) == len((run or {}).get("outputs") or []) else []


def export_reproducer_zip(registry: Registry, bundle: Bundle, path: str | Path,
                          bisection: dict | None = None) -> Path:
    """The bundle's zip at `path`, judging what its stored answer (`bisection`, else the latest) found where there is
    one (module docstring)."""
    return registry.export_zip(bundle, path, expectation=zip_expectation(registry, bundle, bisection))
