"""Still broken? The newest release replayed beside the last good one, after a bisection found a boundary: a
maintainer's first question about a report. Its runs are stored as a replay of their own, so the issue reads the
answer from the store (`newest_verdict`), as it reads everything else.

`replay_newest` runs it (an investigation's step: the api's chain calls it after explain and minimize); the verdict
is judged as the bisection judged: outputs against the last good release's (beyond the tolerance, or any bit for a
bisection by bits); time as a time bisection's probe is: by the sequential test between the two ends of the change
its confirmation measured (analysis/which_end.py), the newest release timed beside the last good one until that
test says which end it is like ("still" or "fixed": a claim about the change found, not that the two releases are
within 5% of each other), else by the paired verdict beside the last good release's. A slowdown still there or gone
is then told in a few rounds, where a verdict of "the same within 5%" about a release near the good end's time took
up to 32 (65-72 s of a quiet investigation, benchmarks/README.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from ...analysis.which_end import MIN_FIGURE_ROUNDS, rounds_text
from ...bundle.model import release_of
from ...bundle.program_script import run_outputs, ulps_text, value_changes
from ...bundle.registry import Bundle, Registry, open_ref
from ...envs.versions import version_key

if TYPE_CHECKING:
    from ...analysis.which_end import Ends
    from ...envs.manager import EnvironmentManager
    from ...run.replay_options import ReplayOptions

TIMED_CRITERIA = ("time",)


def newest_release(available: list[str], first_bad: str) -> str | None:
    """The newest release, where it is newer than the first bad one (else there is nothing more to ask)."""
    finals = sorted(available, key=version_key)
    if not finals or version_key(finals[-1]) <= version_key(first_bad):
        return None
    return finals[-1]


def replay_newest(registry: Registry, bundle: Bundle, answer: dict, options: ReplayOptions,
                  env_manager: EnvironmentManager, *, executor=None, progress: Callable[[str], None] | None = None,
                  newest: str | None = None) -> dict | None:
    """Replay the last good and the newest release (the index's, or `newest`) together, in the bisection's mode
    (timed where it judged by time, else outputs only), storing the runs; the verdict (`newest_verdict`), or None
    where the first bad release is the newest."""
    from ...fleet.executor import LocalExecutor
    from ..search.probes import replay_probe

    a = answer.get("answer") or {}
    good, bad = str(a.get("last_good") or ""), str(a.get("first_bad") or "")
    newest = newest_release([newest] if newest else env_manager.available_versions(), bad)
    if not good or newest is None:
        return None
    timed = a.get("criterion") in TIMED_CRITERIA
    confirming = confirmation_runs(a, registry.runs(bundle.ref.bundle_id)) if timed else []
    ends = change_ends(confirming)
    probe = replay_probe(registry, bundle, options.outputs_only() if not timed else
                         replace(options, ends=ends.as_data()) if ends else options,
                         executor=executor or LocalExecutor(), env_manager=env_manager, progress=progress,
                         mode=str(a.get("mode") or "frozen"))
    runs = probe([good, newest])
    return newest_verdict(registry, answer, [*confirming, *runs])


def confirmation_runs(answer: dict, runs: Sequence[dict]) -> list[dict]:
    """The runs of a time answer's confirmation (its last good and first bad release timed together again) among
    `runs`, the last good release's first; [] where it did not run or they are not there."""
    ids = ((answer.get("confirmation") or {}).get("run_ids") or answer.get("confirmed_by") or [])
    by_id = {r.get("run_id"): r for r in runs if r.get("run_id")}
    found = [by_id[i] for i in ids if i in by_id]
    if len(found) != 2:
        return []
    return sorted(found, key=lambda r: version_key(release_of(r)))


def change_ends(confirming: Sequence[dict]) -> Ends | None:
    """The change the confirmation's paired rounds measured (analysis/which_end.Ends), or None."""
    from ..search.bisection import pair_ends

    return pair_ends(*confirming) if len(confirming) == 2 else None


def stored_newest(registry: Registry, bundle: Bundle, answer_id: str, env_manager: EnvironmentManager) -> dict | None:
    """An investigation's newest step answered already: the verdict (with its newest run's `created`) read back from
    the stored replay of the last good and the newest release, where the newest is still the index's and both ran
    on the builds here (answers.builds_of); None: replay them."""
    from ..answers import builds_of
    from .script_plan import stored_answers

    answer = next((a for a in stored_answers(registry, bundle) if a.get("answer_id") == answer_id), None)
    all_runs = registry.runs(bundle.ref.bundle_id)
    found = _stored_pair(all_runs, answer)
    bad = str(((answer or {}).get("answer") or {}).get("first_bad") or "")
    if found is None or release_of(found[1]) != newest_release(env_manager.available_versions(), bad):
        return None
    builds = builds_of(env_manager, [release_of(r) for r in found])
    if not all(_ran_on(r, builds[release_of(r)]) for r in found):
        return None
    verdict = newest_verdict(registry, answer, [*confirmation_runs((answer or {}).get("answer") or {}, all_runs),
                                                 *found])
    return None if verdict is None else {**verdict, "created": found[1].get("created")}


def _stored_pair(runs: list[dict], answer: dict | None) -> tuple[dict, dict] | None:
    a = (answer or {}).get("answer") or {}
    good, bad = str(a.get("last_good") or ""), str(a.get("first_bad") or "")
    if not good or not bad or good == bad:
        return None
    return _latest_pair(runs, good, bad, str(a.get("mode") or "frozen"))


def _ran_on(run: dict, identities: list[str]) -> bool:
    env = run.get("environment") or {}
    return any(i.startswith(f"jax {env.get('jax')} jaxlib {env.get('jaxlib')} ") for i in identities)


def _plain(run: dict, mode: str) -> bool:
    contender = run.get("contender") or {}
    return str(contender.get("mode") or "frozen") == mode and not any((contender.get("settings") or {}).values())


def newest_verdict(registry: Registry, answer: dict | None, runs: list[dict]) -> dict | None:
    """Whether the change is still there on the newest release that stored runs hold beside the last good release
    (one replay, the bisection's mode): {"release", "still": True/False/None, "text"}; None where no stored replay
    ran a release newer than the first bad one beside the last good one. By time, `runs` holding the answer's
    confirmation (confirmation_runs) judges by the test between its two ends."""
    a = (answer or {}).get("answer") or {}
    good, bad, mode = str(a.get("last_good") or ""), str(a.get("first_bad") or ""), str(a.get("mode") or "frozen")
    if not good or not bad or good == bad:
        return None
    found = _latest_pair(runs, good, bad, mode)
    if found is None:
        return None
    base, newest = found
    if a.get("criterion") in TIMED_CRITERIA:
        return _time_verdict(base, newest, good, change_ends(confirmation_runs(a, runs)))
    return _outputs_verdict(registry, base, newest, good, a.get("criterion") == "bits")


def _latest_pair(runs: list[dict], good: str, bad: str, mode: str) -> tuple[dict, dict] | None:
    """(the last good release's run, the newest release's) of the stored replay in `mode` that ran the newest
    release after `bad` beside `good`; None where none did."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        if _plain(run, mode) and run.get("group"):
            groups.setdefault(str(run["group"]), []).append(run)
    found = None
    for group in groups.values():
        base = next((r for r in group if release_of(r) == good), None)
        later = [r for r in group if version_key(release_of(r)) > version_key(bad)]
        if base is None or not later:
            continue
        newest = max(later, key=lambda r: version_key(release_of(r)))
        if found is None or version_key(release_of(newest)) >= version_key(release_of(found[1])):
            found = (base, newest)
    return found


def _outputs_verdict(registry: Registry, base: dict, newest: dict, good: str, bits: bool) -> dict:
    release = release_of(newest)
    if newest.get("status") not in ("ok", "mismatch") or not newest.get("outputs"):
        return {"release": release, "still": None, "text": f"jax {release} did not run it ({newest.get('status')})"}
    changes = value_changes(run_outputs(registry, base), run_outputs(registry, newest), bits)
    if not changes:
        return {"release": release, "still": False,
                "text": f"gone on jax {release}: its outputs are jax {good}'s (last good)"
                        + (", bit for bit" if bits else "")}
    first = changes[0]
    within = bits and all(c.get("beyond") == 0 for c in changes if "count" in c) and "count" in first
    if within:
        return {"release": release, "still": True, "within": True,
                "text": f"last bits within the tolerance, still changed on jax {release} (the newest): "
                        f"{first['count']} of {first['size']} elements of output {first['output']} differ"
                        f"{ulps_text(first).replace(',', ' by', 1)}"}
    what = (f"{first['count']} of {first['size']} elements of output {first['output']} differ"
            + (" beyond the tolerance" if first.get("beyond") else "") if "count" in first
            else f"it gives {first['got_kind']} where jax {good} gave {first['expected_kind']}")
    return {"release": release, "still": True, "text": f"still changed on jax {release} (the newest): {what}"}


def _time_verdict(base: dict, newest: dict, good: str, ends: Ends | None) -> dict:
    from ...analysis.slowdown import measured_times

    release = release_of(newest)
    times = measured_times([base, newest])
    row = (times or {}).get("rows", [None, None])[1] if times else None
    sided = _sided_verdict(base, newest, good, ends, row) if ends is not None else None
    if sided is not None:
        return sided
    if row is None or not row.get("ratio"):
        return {"release": release, "still": None, "text": f"jax {release} was not timed beside jax {good}"}
    said = f"{timed_text(row)} of jax {good}'s time"
    if row["settled"] and row["verdict"] == "slower":
        return {"release": release, "still": True, "text": f"still slower on jax {release} (the newest): {said}"}
    if row["settled"]:
        return {"release": release, "still": False, "text": f"gone on jax {release}: {said}"}
    return {"release": release, "still": None, "text": f"on jax {release} (the newest): {said}, not settled"}


def timed_text(row: dict) -> str:
    """A paired row's ratio with its 95% interval (`1.15x [1.08-1.22]`) where at least MIN_FIGURE_ROUNDS rounds made
    it, else the rounds alone (`timed in 1 round`): one text for one verdict wherever a report prints it."""
    rounds = int(row.get("rounds") or 0)
    if rounds < MIN_FIGURE_ROUNDS:
        return f"timed in {rounds_text(rounds)}, too few for a figure"
    ci = row.get("ci95")
    return f"{row['ratio']:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def _sided_verdict(base: dict, newest: dict, good: str, ends: Ends, row: dict | None) -> dict | None:
    """Still or fixed, where the test between the change's ends decided which end the newest release is like; "fixed"
    only where its paired verdict (`row`) does not show it slower than the last good release at all (else the paired
    verdict says what is left)."""
    from ...analysis.verdict import paired_log_ratios, shown_slower
    from ...analysis.which_end import BAD, against_text, which_end

    release = release_of(newest)
    found = which_end(paired_log_ratios(base.get("timing") or {}, newest.get("timing") or {}) or [], ends)
    if found.side is None or found.side != BAD and shown_slower(row):
        return None
    like = "first bad" if found.side == BAD else "last good"
    figure = f"{found.ratio:.2f}x of jax {good}'s time in {rounds_text(found.rounds)}: " \
        if found.rounds >= MIN_FIGURE_ROUNDS else ""  # a side decided in fewer rounds is said alone
    said = (f"{figure}like the {like} release (decided in {rounds_text(found.rounds)} by the "
            f"{against_text(ends, 'confirmed')})")
    if found.side == BAD:
        return {"release": release, "still": True, "text": f"still slower on jax {release} (the newest): {said}"}
    return {"release": release, "still": False, "text": f"gone on jax {release}: {said}"}


def check_newest(ref: str, answer_id: str | None, *, store: str | None = None, python: str | None = None,
                 env_dir: str | None = None, progress: Callable[[str], None] | None = None,
                 newest: str | None = None, max_time_s: float | None = None) -> dict | None:
    """An investigation's step after its bisection (`answer_id`: the answer it stored): the newest release
    replayed beside the last good one (`replay_newest`, the probes' settings: no dump, no profile; its rounds within
    `max_time_s`), the verdict; None where the answer found no boundary or the first bad release is the newest."""
    from ...envs.env_config import EnvConfig
    from ...envs.manager import EnvironmentManager
    from ...run.replay_options import ReplayOptions
    from .script_plan import stored_answers

    registry, bundle = open_ref(ref, store)
    answer = next((a for a in stored_answers(registry, bundle) if a.get("answer_id") == answer_id), None)
    if answer is None:
        return None
    return replay_newest(registry, bundle, answer, ReplayOptions(dump=False, profile=False, max_time_s=max_time_s),
                         EnvironmentManager(EnvConfig.of(env_dir, python)), progress=progress, newest=newest)
