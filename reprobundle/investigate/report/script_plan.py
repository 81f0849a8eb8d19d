"""A bundle's reproducer script with what its stored replay measured and what its investigation answered
(`reprobundle script`, and the script of `reprobundle issue`). Nothing runs: the bundle, its stored runs and its
stored answers are read.

Which script, from the latest stored bisection (investigate/answers.py) when there is one:

- a change the retraced program shows (the bisection ran retraced: a lowering change): the program itself
  (bundle/program_script.py), checked against the last good release's retraced outputs; it exits 1 on the bad
  release and 0 on the good one. The frozen module could not show it: every release runs the same StableHLO.
  With no release bisection that found a boundary, a stored commit bisection that found a first bad commit
  (`bisect-commits`: its probes all ran retraced, and only a lowering change is ever sent to one, so its layer is
  JAX's lowering; a commit window's by construction) gives the same script, checked against the good release's
  retraced run stored by that bisection; it exits 1 on JAX at the first bad commit and 0 on the good release.
- a change of the frozen module's outputs or bits (the compiler's): the frozen script with the last good release's
  outputs as its reference (bits judged bit for bit), so it exits 1 on the bad release and 0 on the good one.
- a slowdown the frozen module shows, or no bisection: the frozen script with the stored replay's times
  (analysis/slowdown.py), which `--compare A B` times on two releases.

Where the bisection lists more than one change (its `changes`, the headline first), or its slowdown shows only where
each release traces the program, the script is bundle/changes_script.py's: every change the report lists, each its
own check (`--change N`) in its own mode against its own last good release (`change_plans`, one Plan a change, from
that change's own stored answer and runs), a slowdown by `--compare` of its two releases.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...analysis.slowdown import measured_times
from ...bundle.changes_script import ChangeCheck, changes_script_text
from ...bundle.frozen_script import (
    NoScriptError,
    Reference,
    ScriptTooLargeError,
    script_text,
    stored_runs,
    write_text,
)
from ...bundle.model import commit_of_run, release_of
from ...bundle.program_script import program_of, program_script_text, run_outputs, value_changes
from ...bundle.registry import Bundle, Registry, open_ref
from ...errors import ReproBundleError
from ..answers import COMMIT_BISECTION, latest_bisection, latest_commit_bisection

OUTPUT_CRITERIA = ("outputs", "outputs vs good", "bits", "error")


@dataclass
class Plan:
    """Which script a bundle's reproducer is: `kind` program (a lowering change), good (the frozen module against
    the last good release's outputs), frozen (against the packed reference, with the stored times) or none (a
    commit window whose program or good outputs are missing: no script, never the frozen module); the runs of the
    last good and first bad release that the bisection stored; `why`: one line for the report."""

    kind: str = "frozen"
    good: dict | None = None
    bad: dict | None = None
    bits: bool = False
    why: str = ""
    answer: dict | None = None
    cannot_show: bool = False  # a lowering change that this (frozen) script cannot show
    commit: str | None = None  # a commit bisection's plan: the first bad commit's hash (`bad` is its run)
    row: int = 1  # the change's number in the report's table (1: the headline)

    @property
    def labels(self) -> tuple[str, str] | None:
        """(the last good release, the first bad one or the JAX version the first bad commit's run records, else the
        commit) of a script checked against the last good release, and of every commit bisection's plan; None for
        the frozen script."""
        a = (self.answer or {}).get("answer") or {}
        if self.commit is not None:
            return str(a.get("good")), release_of(self.bad) if self.bad else self.commit[:10]
        if self.kind in ("frozen", "none") or self.good is None:
            return None
        return str(a.get("last_good")), str(a.get("first_bad"))


def window_changes(bisection: dict | None) -> list[dict]:
    """The stored bisection's changes (its `changes`, the headline first), else the headline alone; [] without a
    boundary. A stranger's record may hold anything: only maps with both releases are kept. The headline's entry
    carries the bisection's own layer (the whole of its layer check)."""
    a = (bisection or {}).get("answer") or {}
    found = a.get("changes")
    listed = [c for c in found if _a_listed_change(c)] if isinstance(found, list) else []
    if listed:
        head = listed[0]
        if same_change(head, a) and isinstance(a.get("layer"), dict):
            listed[0] = {**head, "layer": a["layer"]}
        return listed
    if a.get("first_bad") and a.get("last_good") and a["first_bad"] != a["last_good"]:
        return [{"criterion": a.get("criterion"), "first_bad": a["first_bad"], "last_good": a["last_good"],
                 "mode": a.get("mode"), "layer": a.get("layer"), "confirmation": a.get("confirmation"),
                 "answer_id": (bisection or {}).get("answer_id")}]
    return []


def _a_listed_change(entry) -> bool:
    """Whether an entry of a stored answer's `changes` is a change: a map with both releases, apart."""
    return isinstance(entry, dict) and bool(entry.get("first_bad")) and bool(entry.get("last_good")) and \
        entry["first_bad"] != entry["last_good"]


def same_change(one: dict, other: dict) -> bool:
    """Whether two answers or entries are of one change: its releases and criterion."""
    return all(one.get(k) == other.get(k) for k in ("first_bad", "last_good", "criterion"))


def stored_answers(registry: Registry, bundle: Bundle) -> list[dict]:
    """The answers stored beside the bundle's runs (a zip's: its copy's in the default local store)."""
    try:
        return (Registry.open(None) if registry.store.read_only else registry).answers(bundle.ref.bundle_id)
    except ReproBundleError:
        return []


def _answer_runs(registry: Registry, bundle: Bundle, answer: dict) -> list[dict]:
    wanted = {str(r) for r in answer.get("runs") or []}
    try:
        found = (Registry.open(None) if registry.store.read_only else registry).runs(bundle.ref.bundle_id)
    except ReproBundleError:
        return []
    return [r for r in found if str(r.get("run_id")) in wanted]


def answer_runs(registry: Registry, bundle: Bundle, answer: dict) -> list[dict]:
    """The stored runs a stored answer rests on (its `runs`)."""
    return _answer_runs(registry, bundle, answer)


def release_run(runs: list[dict], release: str, mode: str) -> dict | None:
    """The run of `release` in `mode` (no variant's settings) that ran with its outputs stored; the latest."""
    for run in reversed(runs):
        contender = run.get("contender") or {}
        settings = contender.get("settings") or {}
        if (str((run.get("environment") or {}).get("jax") or contender.get("jax")) == release
                and str(contender.get("mode") or "frozen") == mode and not any(settings.values())
                and run.get("status") in ("ok", "mismatch") and run.get("outputs")):
            return run
    return None


def _a_change_of_outputs(a: dict) -> bool:
    """Whether a bisection's answer found a boundary where the outputs (or bits, or an error) changed."""
    return bool(a.get("last_good")) and a.get("last_good") != a.get("first_bad") \
        and str(a.get("criterion") or "") in OUTPUT_CRITERIA


def replays_of(runs: list[dict]) -> list[list[dict]]:
    """The stored replays (runs of one `group`; a run without one is a replay of its own), oldest first."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(str(run.get("group") or f"run:{run.get('run_id')}"), []).append(run)
    return list(groups.values())


def answered_replays(replays: list[list[dict]], bisection: dict | None) -> list[list[dict]]:
    """The replays holding a run of the bisection's first bad release that its answer rests on (a time answer's:
    those timed beside the last good release); of a commit bisection's, its first bad commit's."""
    record = bisection or {}
    answer = record.get("answer") or {}
    own = _holding(replays, str(answer.get("reported_run") or ""))
    if own:  # the headline's own probe (the bisections of its `also` run the same releases)
        return own
    ids = {str(r) for r in record.get("runs") or []}
    if record.get("kind") == COMMIT_BISECTION:
        return _first_bad_commit_probes(replays, ids, answer)
    return _first_bad_release_probes(replays, ids, answer)


def _first_bad_release_probes(replays: list[list[dict]], ids: set[str], answer: dict) -> list[list[dict]]:
    """The replays holding a release bisection's run (of `ids`) of its first bad release, those that ran the last
    good release beside it first."""
    bad, good = str(answer.get("first_bad")), str(answer.get("last_good"))
    hits = [g for g in replays if any(str(r.get("run_id")) in ids and release_of(r) == bad for r in g)]
    return [g for g in hits if any(release_of(r) == good for r in g)] or hits


def _first_bad_commit_probes(replays: list[list[dict]], ids: set[str], answer: dict) -> list[list[dict]]:
    """The replays holding a commit bisection's run (of `ids`) of its first bad commit."""
    first = answer.get("first_bad")
    sha = str(first.get("sha") or "?") if isinstance(first, dict) else "?"
    return [g for g in replays if any(str(r.get("run_id")) in ids and commit_of_run(r) == sha for r in g)]


def _holding(replays: list[list[dict]], run_id: str) -> list[list[dict]]:
    """The replays holding the run `run_id` ([] for none, or no id)."""
    return [g for g in replays if any(str(r.get("run_id")) == run_id for r in g)] if run_id else []


def plan(registry: Registry, bundle: Bundle, answer: dict | None = None) -> Plan:
    """Which reproducer the bundle's latest bisection (or `answer`) calls for; see the module's docstring."""
    if answer is not None and answer.get("kind") == COMMIT_BISECTION:
        return commit_plan(registry, bundle, answer) or Plan(why="the frozen module, against its packed reference")
    answers = stored_answers(registry, bundle) if answer is None else None  # read once, and only where needed
    record = answer if answer is not None else latest_bisection(answers or [])
    if record and _a_slowdown(record.get("answer") or {}):
        return _time_plan(registry, bundle, record)
    if not record or not _a_change_of_outputs(record.get("answer") or {}):
        return _without_release_boundary(registry, bundle, answers, record)
    return _release_plan(registry, bundle, record)


def _a_slowdown(a: dict) -> bool:
    """Whether a bisection's answer found a boundary where the time changed (a slowdown its confirmation kept)."""
    return bool(a.get("last_good")) and a.get("last_good") != a.get("first_bad") and a.get("criterion") == "time"


def _time_plan(registry: Registry, bundle: Bundle, record: dict) -> Plan:
    """A slowdown's plan: its two releases, timed by `--compare`; the runs of its last good and first bad release
    in its mode (the last good one's outputs what each side is checked against)."""
    a = record.get("answer") or {}
    mode = "retrace" if a.get("mode") == "retrace" else "frozen"
    runs = _answer_runs(registry, bundle, record)
    good, bad = (release_run(runs, str(a[k]), mode) for k in ("last_good", "first_bad"))
    how = "the program as each release traces it" if mode == "retrace" else "the frozen module"
    return Plan("time", good, bad, False, f"{how}, timed on jax {a['last_good']} and {a['first_bad']} by --compare",
                record)


def change_plans(registry: Registry, bundle: Bundle, bisection: dict | None, changes: list[dict]) -> list[Plan]:
    """One plan a change of the stored bisection (`changes`: change_rows.window_changes' list, the headline first),
    each from the change's own stored answer and its runs (the headline's answer where the change has none of its
    own stored): its number `row`, what its check runs (program, good, time; else it cannot be checked, saying
    why)."""
    from dataclasses import replace

    answers = stored_answers(registry, bundle)
    found = []
    for row, change in enumerate(changes, 1):
        record = _change_record(change, bisection, answers)
        chosen = _time_plan(registry, bundle, record) if _a_slowdown(record["answer"]) else \
            _release_plan(registry, bundle, record) if _a_change_of_outputs(record["answer"]) else \
            Plan("none", why="no boundary stored for it", answer=record)
        found.append(replace(chosen, row=row))
    return found


def _change_record(change: dict, bisection: dict | None, answers: list[dict]) -> dict:
    """The stored answer of one listed change: its own (by `answer_id`, the same change), the bisection's where it
    is the headline, else its entry as an answer over the bisection's runs."""
    same = ("first_bad", "last_good", "criterion")
    own = next((r for r in answers if r.get("kind") == "bisection" and change.get("answer_id")
                and r.get("answer_id") == change.get("answer_id")), None)
    for record in (own, bisection):
        a = (record or {}).get("answer") or {}
        if record is not None and all(a.get(k) == change.get(k) for k in same):
            return record
    return {"kind": "bisection", "answer_id": change.get("answer_id"), "answer": dict(change),
            "runs": (bisection or {}).get("runs") or []}


def change_checks(plans: list[Plan]) -> tuple[list[ChangeCheck], list[tuple[int, str]]]:
    """(the checks a script of the changes runs, one a plan that can show its change; (row, why) of each that
    cannot)."""
    checks, left = [], []
    for p in plans:
        a = (p.answer or {}).get("answer") or {}
        criterion = {"outputs vs good": "outputs"}.get(str(a.get("criterion")), str(a.get("criterion")))
        if p.kind not in ("program", "good", "time") or (p.kind != "time" and p.good is None):
            left.append((p.row, p.why or "no stored run of its last good release"))
            continue
        mode = "retrace" if p.kind == "program" or (p.kind == "time" and a.get("mode") == "retrace") else "frozen"
        checks.append(ChangeCheck(p.row, criterion, mode, str(a.get("last_good")), str(a.get("first_bad")),
                                  p.good, p.bad))
    return checks, left


def reproduced_changes(registry: Registry, bundle: Bundle, plans: list[Plan]) -> dict:
    """What a report says of the changes its script and zip check: {"checks": [{"row", "criterion", "mode", "good",
    "bad", "what"}] (bundle/changes_script.change_commands makes their lines), "left": [{"row", "why"}] (changes
    neither can check), "packages" (what the program needs beyond jax and numpy), "pythons" (the Python a release
    needs, for its uv line)}."""
    from ...bundle.program_script import needed_packages, program_files

    checks, left = change_checks(plans)
    program = program_of(bundle)
    retraced = program is not None and any(c.mode == "retrace" for c in checks)
    packages = needed_packages(program, program_files(registry, program)) if retraced and program else []
    return {"checks": [{"row": c.row, "criterion": c.criterion, "mode": c.mode, "good": c.good, "bad": c.bad,
                        "what": c.what} for c in checks],
            "left": [{"row": row, "why": why} for row, why in left], "packages": packages,
            "pythons": pythons_needed([v for c in checks for v in (c.good, c.bad)])}


def needs_changes_script(plans: list[Plan]) -> bool:
    """Whether the report's script is the changes' (bundle/changes_script.py): more than one change, or a slowdown
    only the program, traced by each release, shows (the frozen script times the frozen module)."""
    head = ((plans[0].answer or {}).get("answer") or {}) if plans else {}
    return len(plans) > 1 or bool(plans and plans[0].kind == "time" and head.get("mode") == "retrace")


def _release_plan(registry: Registry, bundle: Bundle, record: dict) -> Plan:
    """The plan of a release bisection that found a change of the outputs (or bits, or an error)."""
    a = record.get("answer") or {}
    criterion, mode = str(a.get("criterion") or ""), str(a.get("mode") or "frozen")
    runs = _answer_runs(registry, bundle, record)
    good, bad = (release_run(runs, str(a[k]), mode) for k in ("last_good", "first_bad"))
    bits = criterion == "bits"
    if mode == "retrace" and program_of(bundle) is not None and good is not None:
        return Plan("program", good, bad, bits, "the program as each release traces it; the frozen module computes "
                    "the same on both", record)
    if mode == "retrace":
        return Plan(why="the frozen module, which cannot show a lowering change (the bundle carries no program, or "
                        "no stored run of the last good release retraced)", answer=record, cannot_show=True)
    if good is not None:
        return Plan("good", good, bad, bits,
                    f"the frozen module, against the outputs of jax {a['last_good']}, the last good release", record)
    return Plan(why="the frozen module, against its packed reference (no stored run of the last good release)",
                answer=record)


def _without_release_boundary(registry: Registry, bundle: Bundle, answers: list[dict] | None,
                              record: dict | None) -> Plan:
    """The plan where no release bisection found a boundary: the latest stored commit bisection's (of `answers`, the
    stored ones where None), else the frozen module against its packed reference."""
    commits = latest_commit_bisection(stored_answers(registry, bundle) if answers is None else answers)
    found = commit_plan(registry, bundle, commits) if commits is not None else None
    return found or Plan(why="the frozen module, against its packed reference", answer=record)


def commit_plan(registry: Registry, bundle: Bundle, record: dict) -> Plan | None:
    """The program's script from a stored commit bisection that found a first bad commit: checked against the good
    release's retraced run among its probes (by the JAX it ran: the run may have asked for `installed`), else the
    bundle's packed reference where the good release packed it (its frozen module is that release's own lowering),
    the first bad commit's run giving the "got" values. Never the frozen module: it is the good release's lowering
    on every JAX, so it cannot show a commit's change; with no program or no outputs of the good release the plan is
    `none`, saying why. None where the commit bisection found no first bad commit."""
    a = record.get("answer") or {}
    first = a.get("first_bad")
    if not isinstance(first, dict) or not first.get("sha") or str(a.get("criterion") or "") not in OUTPUT_CRITERIA:
        return None
    release, sha = str(a.get("good")), str(first["sha"])
    good, bad = _window_ends(registry, bundle, record, release, sha)
    if program_of(bundle) is None or good is None:
        lacking = "the bundle carries no program" if program_of(bundle) is None else \
            f"no stored run of jax {release} retraced, and the bundle was not packed on it"
        return Plan("none", None, bad, why=f"no script: {lacking}; the frozen module cannot show a commit's change "
                                            f"(replay it retraced on jax {release}, then ask again)", answer=record,
                    cannot_show=True, commit=sha)
    return Plan("program", good, bad, str(a.get("criterion")) == "bits",
                "the program as each JAX traces it; the frozen module computes the same on both", record,
                commit=sha)


def _window_ends(registry: Registry, bundle: Bundle, record: dict, release: str,
                 sha: str) -> tuple[dict | None, dict | None]:
    """(the good release's retraced run among a commit bisection's probes, else its packed reference; the first bad
    commit's run), each None where not stored."""
    runs = _answer_runs(registry, bundle, record)
    good = release_run([r for r in runs if commit_of_run(r) is None], release, "retrace") or \
        packed_reference_run(bundle, release)
    bad = next((r for r in reversed(runs) if commit_of_run(r) == sha and r.get("status") in ("ok", "mismatch")
                and r.get("outputs")), None)
    return good, bad


def packed_reference_run(bundle: Bundle, release: str) -> dict | None:
    """The bundle's packed reference as a run of `release` where that release packed it (with the outputs stored):
    its frozen module is that release's own lowering of the program, so its outputs are that release's."""
    env = bundle.manifest.get("environment") or {}
    reference = bundle.manifest.get("reference") or {}
    traced_by = bundle.manifest["function"].get("traced_by")  # {"jax": the release that traced it}, or none
    traced = traced_by.get("jax") if isinstance(traced_by, dict) else traced_by
    if str(env.get("jax") or "") != release or not reference.get("outputs") or traced not in (None, release):
        return None
    return {"run_id": "reference", "status": "ok", "outputs": reference["outputs"], "requested": release,
            "environment": {"jax": release}, "contender": {"jax": release, "mode": "retrace"}}


def script_of(registry: Registry, bundle: Bundle, fname: str = "repro.py", runs: list[dict] | None = None,
              answer: dict | None = None) -> str:
    """The standalone script of `bundle` (bundle/frozen_script.py's errors) that the plan above calls for; a frozen
    one with the times of `runs` (one stored replay; default: the latest, bundle/frozen_script.stored_runs) where
    they can show a slowdown: every run ran with the reference's outputs, and minimize (if it made the piece) kept it
    for time. An outputs or error piece's script so never loads scipy (the verdict's t distribution)."""
    return script_and_plan(registry, bundle, fname, runs, answer)[0]


def script_and_plan(registry: Registry, bundle: Bundle, fname: str = "repro.py", runs: list[dict] | None = None,
                    answer: dict | None = None) -> tuple[str, Plan]:
    """script_of's script and the plan it was written by: a compiler change's frozen script that would pass
    SCRIPT_LIMIT (its inputs cannot be made smaller than compressed) is the program's where the bundle carries it
    and the bisection stored both releases retraced with the change showing there too (its inputs then made by the
    factory's seed); a commit window without a program script (plan `none`) is NoScriptError, never the frozen
    module."""
    chosen = plan(registry, bundle, answer)
    record = answer if answer is not None else latest_bisection(stored_answers(registry, bundle))
    plans = change_plans(registry, bundle, record, window_changes(record)) if record is not None and \
        record.get("kind") != COMMIT_BISECTION else []
    if needs_changes_script(plans):
        return changes_script(registry, bundle, fname, plans), plans[0]
    if chosen.kind == "none":
        raise NoScriptError(f"{bundle.ref}: {chosen.why}", hint="share the bundle's zip: reprobundle export "
                                                               f"{bundle.ref.name}@{bundle.ref.version}")
    try:
        return _script_by(registry, bundle, fname, runs, chosen), chosen
    except ScriptTooLargeError:
        other = _retraced_pair(registry, bundle, chosen) if chosen.kind == "good" else None
        if other is None:
            raise
        return _script_by(registry, bundle, fname, runs, other), other


def changes_script(registry: Registry, bundle: Bundle, fname: str, plans: list[Plan]) -> str:
    """bundle/changes_script.py's script of the changes `plans` can check; NoScriptError where none can."""
    checks, left = change_checks(plans)
    if not checks:
        raise NoScriptError(f"{bundle.ref}: none of its {len(plans)} changes can be checked by a script: "
                            + "; ".join(f"change {row}: {why}" for row, why in left),
                            hint=f"share the bundle's zip: reprobundle export {bundle.ref.name}@{bundle.ref.version}")
    releases = [v for c in checks for v in (c.good, c.bad)]
    return changes_script_text(registry, bundle, checks, fname, pythons_needed(releases))


def _script_by(registry: Registry, bundle: Bundle, fname: str, runs: list[dict] | None, chosen: Plan) -> str:
    if chosen.kind == "program" and chosen.good is not None:
        versions = [release_of(r) for r in (chosen.good, chosen.bad) if r is not None and commit_of_run(r) is None]
        return program_script_text(registry, bundle, chosen.good, chosen.bad, fname, chosen.bits,
                                   pythons_needed(versions))
    if chosen.kind == "good" and chosen.good is not None and chosen.labels is not None:
        release = chosen.labels[0]
        return script_text(registry, bundle, fname, None,
                           Reference(chosen.good, f"jax {release} (last good)", chosen.bits, chosen.bad))
    return _frozen_script(registry, bundle, fname, runs, chosen)


def _frozen_script(registry: Registry, bundle: Bundle, fname: str, runs: list[dict] | None, chosen: Plan) -> str:
    """The frozen script against the packed reference, with the times of `runs` where they can show a slowdown."""
    runs = _reported_runs(registry, bundle, chosen.answer) if runs is None else runs
    prop = str((bundle.manifest.get("labels") or {}).get("minimized-property") or "")
    timed = (not prop or prop.startswith("slower")) and all(r.get("status") == "ok" for r in runs)
    notes = [f"Note: the investigation found the change by retracing; this is {chosen.why}."] if chosen.cannot_show \
        else []
    return script_text(registry, bundle, fname, measured_times(runs) if timed else None, notes=notes)


def _retraced_pair(registry: Registry, bundle: Bundle, chosen: Plan) -> Plan | None:
    """A compiler change's program plan: the retraced runs of its last good and first bad release that the bisection
    stored at the boundary, where the bundle carries its program and those runs differ as the answer says."""
    a = (chosen.answer or {}).get("answer") or {}
    runs = _answer_runs(registry, bundle, chosen.answer or {})
    good, bad = (release_run(runs, str(a.get(k)), "retrace") for k in ("last_good", "first_bad"))
    if program_of(bundle) is None or good is None or bad is None or \
            not value_changes(run_outputs(registry, good), run_outputs(registry, bad), chosen.bits):
        return None
    return Plan("program", good, bad, chosen.bits, "the program as each release traces it (both lower it alike: the "
                "compiler's change shows there too, and its inputs are made by its own seed)", chosen.answer)


def pythons_needed(versions: list[str]) -> dict[str, str]:
    """{release: the Python minor its `uv run` line must name} for the releases that do not take the Python here
    (envs/package_index.python_to_name, from the package index's metadata, cached beside the environments)."""
    from ...envs.env_folders import default_root
    from ...envs.package_index import CACHE_FILE, PackageIndex, python_to_name

    index = PackageIndex(default_root() / CACHE_FILE)
    if index.load() is None:  # unreadable and nothing cached: uv's own error will say it
        return {}
    found = {v: python_to_name(index, v) for v in dict.fromkeys(versions) if v}
    return {v: p for v, p in found.items() if p}


def minimized_piece(registry: Registry, bundle: Bundle) -> Bundle | None:
    """The latest piece minimize packed from `bundle` (its label minimized-from-id; minimize names it NAME-min, or
    NAME-min-2...), in the bundle's store; None where there is none."""
    found: list[Bundle] = []
    try:
        names = [n for n in registry.names() if n.startswith(f"{bundle.ref.name}-min")]
    except ReproBundleError:
        return None
    for name in names:
        try:
            piece = registry.resolve(name)
        except ReproBundleError:
            continue
        if (piece.manifest.get("labels") or {}).get("minimized-from-id") == bundle.ref.bundle_id:
            found.append(piece)
    return max(found, key=lambda b: str(b.manifest.get("created") or ""), default=None)


def _reported_runs(registry: Registry, bundle: Bundle, answer: dict | None) -> list[dict]:
    """The runs whose times a script shows: the stored bisection's probe of its first bad release (what the issue
    reports), else the latest stored replay."""
    from ...bundle.frozen_script import every_run

    answered = answered_replays(replays_of(every_run(registry, bundle)), answer)
    return answered[-1] if answered else stored_runs(registry, bundle)


def write_script(ref: str, out: str | Path | None, *, store: str | None = None) -> dict:
    """The script of `ref`, written to `out` when given: {"bundle", "path", "bytes", "script"}."""
    registry, bundle = open_ref(ref, store)
    fname = Path(out).name if out else "repro.py"
    try:
        script = script_of(registry, bundle, fname)
    except (ScriptTooLargeError, NoScriptError) as e:
        piece = minimized_piece(registry, bundle)
        if piece is None:
            raise
        raise type(e)(e.message, hint=f"the minimized piece has a script of its own: reprobundle script {piece.ref} "
                                      f"-o {piece.ref.name}.py; or {e.hint}") from None
    if out:
        write_text(Path(out), script)
        Path(out).chmod(0o755)  # it starts with #!/usr/bin/env python3
    return {"bundle": str(bundle.ref), "path": str(out) if out else None, "bytes": len(script.encode("utf-8")),
            "script": script}
