"""The changes of a window as a report's first screen lists them: one row each (release, kind, how much, layer,
commit, cause, intended or not, newest), read from the stored answers alone (nothing runs).

The stored bisection lists every change (investigate/search/window_changes.change_entry); each row's figures come from
where that change was answered: how much from the stored runs of its last good and first bad release in its mode
(the outputs that differ, or the ratio its confirmation measured), its first bad commit from the commit bisection
of its releases, its cause from the explanation of its releases (a diagnosis that found one: a changed default, a
located cause; "did not restore" is no cause and stays in the details), whether it was intended from the release
notes that name a function the program calls where its lowering changed, the newest release from the stored
replay that ran it beside the last good release (investigate/report/newest.py), judged the way the change was.
`changed_function` names the JAX function whose lowering changed, for the title.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...bundle.model import release_of
from ...bundle.program_script import program_files, program_of, run_outputs, value_changes
from ...bundle.registry import Bundle, Registry
from ...envs.versions import same_release
from ...errors import ReproBundleError

KIND_WORD = {"outputs vs good": "outputs", "outputs": "outputs", "error": "error", "time": "slower", "bits": "bits"}
LAYER_SHORT = {"lowering": "JAX's lowering", "compiler": "XLA (compiler)", "both": "lowering and XLA",
               "neither": "did not show again"}


def a_map(value: Any) -> dict:
    """`value` where it is a map, else an empty one (a stored record may hold anything)."""
    return value if isinstance(value, dict) else {}


def window_changes(bisection: dict | None) -> list[dict]:
    """The stored bisection's changes (its `changes`, the headline first), else the headline alone; [] without a
    boundary. A stranger's record may hold anything: only maps with both releases are kept."""
    a = (bisection or {}).get("answer") or {}
    found = a.get("changes")
    listed = [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []
    listed = [c for c in listed if c.get("first_bad") and c.get("last_good") and c["first_bad"] != c["last_good"]]
    if listed:
        return listed
    if a.get("first_bad") and a.get("last_good") and a["first_bad"] != a["last_good"]:
        return [{"criterion": a.get("criterion"), "first_bad": a["first_bad"], "last_good": a["last_good"],
                 "mode": a.get("mode"), "layer": a.get("layer"), "confirmation": a.get("confirmation")}]
    return []


def change_rows(registry: Registry, bundle: Bundle, bisection: dict | None, answers: Sequence[dict],
                runs: Sequence[dict], jax_repo: str | None = None) -> list[dict]:
    """One row per change of the stored bisection (`window_changes`): {"release", "last_good", "kind", "how_much",
    "layer", "function", "commit", "cause", "intended", "newest"}; [] where it found none."""
    return [_row(registry, bundle, c, answers, runs, jax_repo) for c in window_changes(bisection)]


def _row(registry: Registry, bundle: Bundle, change: dict, answers: Sequence[dict], runs: Sequence[dict],
         jax_repo: str | None) -> dict:
    from .newest import newest_verdict

    good, bad = str(change["last_good"]), str(change["first_bad"])
    layer = a_map(change.get("layer"))
    newest = newest_verdict(registry, {"answer": change}, list(runs))
    notes = _commit_entry(answers, good, bad) or _intended(registry, bundle, layer, bad, jax_repo)
    return {"release": bad, "last_good": good, "kind": KIND_WORD.get(str(change.get("criterion")), "?"),
            "how_much": how_much(registry, change, runs), "layer": LAYER_SHORT.get(str(layer.get("layer")), "?"),
            "function": changed_function(registry, bundle, layer), "commit": _commit(answers, good, bad),
            "cause": _cause(answers, good, bad), "intended": notes[0] if notes else None,
            "newest": newest}


def how_much(registry: Registry, change: dict, runs: Sequence[dict]) -> str:
    """One figure: a slowdown's ratio as its confirmation measured it (else the bisection's evidence), the outputs
    that differ between the stored runs of the last good and the first bad release (`64 of 64 elements of output
    0`), an error's status."""
    criterion = str(change.get("criterion"))
    if criterion == "time":
        return _ratio(a_map(change.get("confirmation")) or change) or str(change.get("evidence") or "?")[:80]
    pair = [_run_of(runs, str(change[k]), str(change.get("mode") or "frozen")) for k in ("last_good", "first_bad")]
    if pair[1] is not None and pair[1].get("status") not in ("ok", "mismatch"):
        return f"fails: {pair[1].get('status')}"
    if pair[0] is None or pair[1] is None:
        return "?"
    try:
        changed = value_changes(run_outputs(registry, pair[0]), run_outputs(registry, pair[1]), criterion == "bits")
    except ReproBundleError:
        return "?"
    return _outputs_figure(changed)


def _ratio(found: dict) -> str | None:
    ratio, ci = found.get("ratio"), found.get("ci95")
    if not isinstance(ratio, (int, float)):
        return None
    return f"{ratio:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if isinstance(ci, list) and len(ci) == 2 else "")


def _outputs_figure(changed: list[dict]) -> str:
    """`31 of 64 elements of output 1 (+1 more outputs)`, or a changed dtype or shape."""
    if not changed:
        return "?"
    first = changed[0]
    if "count" not in first:
        return f"output {first['output']}: {first['got_kind']} (was {first['expected_kind']})"
    more = f" (+{len(changed) - 1} more outputs)" if len(changed) > 1 else ""
    return f"{first['count']} of {first['size']} elements of output {first['output']}{more}"


def _run_of(runs: Sequence[dict], release: str, mode: str) -> dict | None:
    """The latest stored run of `release` in `mode`, plain (no settings)."""
    for run in reversed(list(runs)):
        contender = run.get("contender") or {}
        if same_release(release_of(run), release) and str(contender.get("mode") or "frozen") == mode \
                and not any((contender.get("settings") or {}).values()):
            return run
    return None


def changed_function(registry: Registry, bundle: Bundle, layer: dict) -> str | None:
    """The JAX function the program calls where its lowering changed (`jax.random.normal`), from the lowering diff's
    source lines and the program's text (release_notes.called_names), else the kinds of the ops added or removed
    (`stablehlo.while`); None where the lowering did not change or is unknown."""
    from ..release_notes import called_names

    lowering = a_map(layer.get("lowering"))
    text = lowering.get("text")
    if not lowering.get("changed") or not isinstance(text, str):
        return None
    program = program_of(bundle)
    try:
        names = called_names(dict(program_files(registry, program)), text) if program else []
    except ReproBundleError:
        names = []
    if names:
        return names[0]
    ops = [w.split()[-1] for w in text.split("; ") if w[:1] in "+-" and len(w.split()) >= 2]
    return ops[0] if ops else None


def _commit(answers: Sequence[dict], good: str, bad: str) -> str | None:
    """The first bad commit's short hash from the commit bisection of exactly these releases, else None."""
    for record in reversed(list(answers)):
        a = record.get("answer") or {}
        first = a.get("first_bad")
        if record.get("kind") == "commit-bisection" and (a.get("good"), a.get("bad")) == (good, bad) \
                and isinstance(first, dict) and first.get("sha"):
            return str(first["sha"])[:10]
    return None


def _commit_entry(answers: Sequence[dict], good: str, bad: str) -> list[str]:
    """The CHANGELOG.md entry the first bad commit of exactly these releases adds itself (its commit bisection's
    `notes`, commit_bisect.notes_of), as a release note's line; [] where none is stored."""
    for record in reversed(list(answers)):
        a = record.get("answer") or {}
        notes = a.get("notes")
        if record.get("kind") == "commit-bisection" and (a.get("good"), a.get("bad")) == (good, bad):
            return [f"documented in the {bad} release notes: {notes['entry']}"] \
                if isinstance(notes, dict) and notes.get("entry") else []
    return []


def explanation_of(answers: Sequence[dict], good: str, bad: str) -> dict | None:
    """The latest explanation that compared exactly these two releases (plain: no settings), or None."""
    for record in reversed(list(answers)):
        a = record.get("answer") or {}
        if record.get("kind") == "explanation" and _release(a.get("baseline")) == good and \
                _release(a.get("candidate")) == bad:
            return record
    return None


def _release(label: Any) -> str:
    """The release of a contender's label (`0.5.0 retraced` -> 0.5.0; one with settings is none)."""
    text = str(label or "")
    return "" if "[" in text else text.split(" ")[0]


def _cause(answers: Sequence[dict], good: str, bad: str) -> str | None:
    """explain's diagnosis of these releases where it found a cause (a changed default, a located cause, a setting
    that helps); None where it did not, or was not asked."""
    record = explanation_of(answers, good, bad)
    d = ((record or {}).get("answer") or {}).get("diagnosis")
    if not isinstance(d, dict) or d.get("kind") not in ("workaround", "cause", "partial"):  # found one
        return None
    default = a_map(d.get("default"))
    if default.get("name"):
        return f"the default of {default['name']} changed"
    return {"workaround": "a setting restores it", "partial": "a setting helps partly"}.get(
        str(d.get("kind")), "located, no workaround")  # one short cell: the sentence is the first screen's Cause


def _intended(registry: Registry, bundle: Bundle, layer: dict, release: str, jax_repo: str | None) -> list[str]:
    """The release notes' entries of `release` that name a function the program calls where its lowering changed."""
    from ..release_notes import called_names, documented

    lowering = a_map(layer.get("lowering"))
    program = program_of(bundle)
    if not lowering.get("changed") or not isinstance(lowering.get("text"), str) or program is None:
        return []
    try:
        names = called_names(dict(program_files(registry, program)), lowering["text"])
    except ReproBundleError:
        return []
    return documented(jax_repo, release, names) if names else []
