"""The changes of a window as a report's first screen lists them: one row each (release, kind, how much, layer,
commit, cause, documented or not, newest), read from the stored answers alone (nothing runs).

The stored bisection lists every change (investigate/search/window_changes.change_entry); each row's claims are
that change's own, measured for it, and a cell where nothing was measured for it says "-" (two changes at one
release share their releases, never their facts):
- how much: the stored runs of its last good and first bad release in its mode (the outputs that differ, with
  their ULPs for a change of the last bits), or the ratio its confirmation measured;
- the layer as its own layer check measured it: JAX's lowering is claimed (and the JAX function named, from the
  lowering diff's source lines) only where the retraced pair was judged for this change; a slowdown bisected
  frozen, whose retraced pair ran once untimed for its StableHLO, is the compiler's as the frozen module showed it;
- the first bad commit from the commit bisection of its releases by its own kind (a commit bisection compares
  outputs or bits: never a slowdown's);
- the cause from the explanation of its releases by its own criterion and mode (a diagnosis that found one: a
  changed default, a located cause; "did not restore" is no cause and stays in the details);
- documented from the entry its own first bad commit adds to CHANGELOG.md, else the release notes that name its
  own cause's default or the function its own lowering change names;
- the newest release from the stored replay that ran it beside its last good release (investigate/report/
  newest.py), judged the way the change was.
`changed_function` names the JAX function whose lowering changed, for the title.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...bundle.model import release_of
from ...bundle.program_script import program_files, program_of, run_outputs, ulps_text, value_changes
from ...bundle.registry import Bundle, Registry
from ...envs.versions import same_release
from ...errors import ReproBundleError
from .script_plan import same_change, window_changes

KIND_WORD = {"outputs vs good": "outputs", "outputs": "outputs", "error": "error", "time": "slower", "bits": "bits"}
LAYER_SHORT = {"lowering": "JAX's lowering", "compiler": "XLA (compiler)", "both": "lowering and XLA",
               "neither": "did not show again"}
# what explain judged a change by, for each bisection criterion (explain's --by)
BY_OF = {"time": "time", "bits": "bits", "outputs": "outputs", "outputs vs good": "outputs", "error": "outputs"}
NOT_MEASURED = "-"


def a_map(value: Any) -> dict:
    """`value` where it is a map, else an empty one (a stored record may hold anything)."""
    return value if isinstance(value, dict) else {}


def change_rows(registry: Registry, bundle: Bundle, bisection: dict | None, answers: Sequence[dict],
                runs: Sequence[dict], jax_repo: str | None = None) -> list[dict]:
    """One row per change of the stored bisection (`window_changes`), the headline first: {"row" (1, 2, ...),
    "release", "last_good", "criterion", "mode", "kind", "how_much", "within" (a change of bits: all within the
    tolerance), "layer", "function", "commit", "cause", "intended", "newest"}; [] where it found none."""
    return [_row(registry, bundle, c, k, (answers, runs), jax_repo)
            for k, c in enumerate(window_changes(bisection), 1)]


def _row(registry: Registry, bundle: Bundle, change: dict, number: int,
         stored: tuple[Sequence[dict], Sequence[dict]], jax_repo: str | None) -> dict:
    from .newest import newest_verdict

    answers, runs = stored
    good, bad, criterion = str(change["last_good"]), str(change["first_bad"]), str(change.get("criterion"))
    mode = str(change.get("mode") or "frozen")
    layer = measured_layer(_own_layer(change, answers), criterion, mode)
    function = changed_function(registry, bundle, layer) if layer.get("layer") in ("lowering", "both") else None
    commit = commit_bisection_of(answers, change, layer)
    explanation = explanation_of(answers, good, bad, criterion, mode)
    figure = how_much(registry, change, runs)
    notes = _commit_entry(commit, bad) or _intended(registry, bundle, (layer, explanation), bad, jax_repo)
    return {"row": number, "release": bad, "last_good": good, "criterion": criterion, "mode": mode,
            "kind": KIND_WORD.get(criterion, NOT_MEASURED), "how_much": figure["text"], "within": figure["within"],
            "layer": LAYER_SHORT.get(str(layer.get("layer")), NOT_MEASURED), "function": function,
            "commit": _short_sha(commit), "cause": cause_of(explanation), "intended": notes[0] if notes else None,
            "newest": newest_verdict(registry, {"answer": change}, list(runs))}


def _own_layer(change: dict, answers: Sequence[dict]) -> dict:
    """The change's layer as its own stored answer recorded it whole (frozen, retraced, lowering), else the entry's."""
    own = next((r for r in answers if r.get("kind") == "bisection" and change.get("answer_id")
                and r.get("answer_id") == change.get("answer_id")), None)
    found = a_map((own or {}).get("answer"))
    if own is not None and same_change(found, change) and isinstance(found.get("layer"), dict):
        return found["layer"]
    return a_map(change.get("layer"))


def measured_layer(layer: dict, criterion: str, mode: str) -> dict:
    """The layer as measured for this change: "both" (the frozen module shows it and the lowering differs) claims
    JAX's lowering only where the retraced pair was judged for this change; a time change bisected frozen ran its
    retraced pair once, untimed, for its StableHLO alone, so what was measured of it is the compiler's."""
    if layer.get("layer") != "both":
        return layer
    retraced = a_map(layer.get("retraced")).get("changed") if "retraced" in layer else \
        (criterion != "time" or mode == "retrace") or None
    return layer if retraced is True else {**layer, "layer": "compiler"}


def how_much(registry: Registry, change: dict, runs: Sequence[dict]) -> dict:
    """{"text": one figure, "within": for bits, whether every element that differs is within the tolerance}: a
    slowdown's ratio as its confirmation measured it, the outputs that differ between the stored runs of the last
    good and the first bad release (`64 of 64 elements of output 0`, a change of bits with its ULPs), an error's
    status; "-" where nothing measured it."""
    criterion = str(change.get("criterion"))
    if criterion == "time":
        return {"text": _ratio(a_map(change.get("confirmation")) or change) or NOT_MEASURED, "within": None}
    pair = [_run_of(runs, str(change[k]), str(change.get("mode") or "frozen")) for k in ("last_good", "first_bad")]
    if pair[1] is not None and pair[1].get("status") not in ("ok", "mismatch"):
        return {"text": f"fails: {pair[1].get('status')}", "within": None}
    if pair[0] is None or pair[1] is None:
        return {"text": NOT_MEASURED, "within": None}
    try:
        changed = value_changes(run_outputs(registry, pair[0]), run_outputs(registry, pair[1]), criterion == "bits")
    except ReproBundleError:
        return {"text": NOT_MEASURED, "within": None}
    within = all(c.get("beyond") == 0 for c in changed) if criterion == "bits" and changed else None
    return {"text": outputs_figure(changed), "within": within}


def _ratio(found: dict) -> str | None:
    ratio, ci = found.get("ratio"), found.get("ci95")
    if not isinstance(ratio, (int, float)):
        return None
    return f"{ratio:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if isinstance(ci, list) and len(ci) == 2 else "")


def outputs_figure(changed: list[dict]) -> str:
    """`31 of 64 elements of output 1 (+1 more outputs)`, `47 of 64 elements of output 0, up to 3 ULP`, or a changed
    dtype or shape; "-" where none differs."""
    if not changed:
        return NOT_MEASURED
    first = changed[0]
    if "count" not in first:
        return f"output {first['output']}: {first['got_kind']} (was {first['expected_kind']})"
    more = f" (+{len(changed) - 1} more outputs)" if len(changed) > 1 else ""
    return f"{first['count']} of {first['size']} elements of output {first['output']}{ulps_text(first)}{more}"


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
    source lines and the program's text (release_notes.called_names); None where the lowering did not change, is
    unknown, or its changed lines name no JAX function (an op's kind is no function: one the change removed least
    of all)."""
    from ..release_notes import called_names

    lowering = a_map(layer.get("lowering"))
    text = lowering.get("text")
    program = program_of(bundle)
    if not lowering.get("changed") or not isinstance(text, str) or program is None:
        return None
    try:
        names = called_names(dict(program_files(registry, program)), text)
    except ReproBundleError:
        return None
    return names[0] if names else None


def commit_bisection_of(answers: Sequence[dict], change: dict, layer: dict | None = None) -> dict | None:
    """The latest commit bisection of exactly this change's releases and kind (a commit bisection compares outputs
    or bits: a slowdown's row never takes the commit of the outputs change beside it), where its layer names JAX's
    lowering; None where none is stored."""
    good, bad, criterion = change.get("last_good"), change.get("first_bad"), str(change.get("criterion"))
    if criterion == "time" or (layer is not None and layer.get("layer") not in ("lowering", "both")):
        return None
    for record in reversed(list(answers)):
        a = a_map(record.get("answer"))
        if record.get("kind") == "commit-bisection" and (a.get("good"), a.get("bad")) == (good, bad) \
                and BY_OF.get(str(a.get("criterion"))) in (None, BY_OF.get(criterion)):
            return record
    return None


def _short_sha(record: dict | None) -> str | None:
    first = a_map(a_map((record or {}).get("answer")).get("first_bad"))
    return str(first["sha"])[:10] if first.get("sha") else None


def _commit_entry(record: dict | None, bad: str) -> list[str]:
    """The CHANGELOG.md entry this change's first bad commit adds itself (its commit bisection's `notes`,
    commit_bisect.notes_of), as a release note's line; [] where none is stored."""
    notes = a_map(a_map((record or {}).get("answer")).get("notes"))
    return [f"documented in the {bad} release notes: {notes['entry']}"] if notes.get("entry") else []


def explanation_of(answers: Sequence[dict], good: str, bad: str, criterion: str | None = None,
                   mode: str | None = None) -> dict | None:
    """The latest explanation that compared exactly these two releases (plain: no settings), by this change's own
    criterion and in its mode where they are given (explain judges a slowdown by time, bits by bits), or None."""
    for record in reversed(list(answers)):
        a = a_map(record.get("answer"))
        if record.get("kind") == "explanation" and _release(a.get("baseline")) == good and \
                _release(a.get("candidate")) == bad and (criterion is None or a.get("by") == BY_OF.get(criterion)) \
                and (mode is None or str(a.get("mode") or "frozen") == mode):
            return record
    return None


def _release(label: Any) -> str:
    """The release of a contender's label (`0.5.0 retraced` -> 0.5.0; one with settings is none)."""
    text = str(label or "")
    return "" if "[" in text else text.split(" ")[0]


def cause_of(explanation: dict | None) -> str | None:
    """explain's diagnosis where it found a cause (a changed default, a located cause, a setting that helps); None
    where it did not, or was not asked."""
    d = a_map(a_map((explanation or {}).get("answer")).get("diagnosis"))
    if d.get("kind") not in ("workaround", "cause", "partial"):  # found one
        return None
    default = a_map(d.get("default"))
    if default.get("name"):
        return f"the default of {default['name']} changed"
    return {"workaround": "a setting restores it", "partial": "a setting helps partly"}.get(
        str(d.get("kind")), "located, no workaround")  # one short cell: the sentence is the first screen's Cause


def _intended(registry: Registry, bundle: Bundle, own: tuple[dict, dict | None], release: str,
              jax_repo: str | None) -> list[str]:
    """The release notes' entries of `release` that name this change's own cause (the default its explanation
    found changed), else a function the program calls where its own lowering change is (its layer as measured)."""
    from ..release_notes import called_names, documented

    layer, explanation = own
    default = a_map(a_map(a_map((explanation or {}).get("answer")).get("diagnosis")).get("default"))
    if default.get("name") and cause_of(explanation):
        return documented(jax_repo, release, [str(default["name"])])
    lowering = a_map(layer.get("lowering"))
    program = program_of(bundle)
    if layer.get("layer") not in ("lowering", "both") or not lowering.get("changed") or \
            not isinstance(lowering.get("text"), str) or program is None:
        return []
    try:
        names = called_names(dict(program_files(registry, program)), lowering["text"])
    except ReproBundleError:
        return []
    return documented(jax_repo, release, names) if names else []
