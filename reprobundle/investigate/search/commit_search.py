"""The first bad JAX commit (`bisect-commits`): from "jax 0.7.2 broke it" to the JAX commit that did. A release
window goes on from the release bisection (stored, else run now by release_search.py); a commit window (the good
release to a commit) chooses its criterion from its ends. The commits are searched by commit_bisect.py with the
commit probe here (each commit's environment made over a released jaxlib, replayed retraced and untimed), and the
answer is stored beside its runs. investigate's commit steps (`commit_step`, `commit_window_step`) go on to it.
The API face (api/commits.py's `bisect_commits`) checks the request and calls `commits_between`."""

from __future__ import annotations

import shlex
import time
from typing import Any

from ...bundle.registry import Bundle, Registry
from ...errors import TimeSpentError, UsageError
from ...run.replay_options import ReplayOptions
from ..answers import builds_of, reuse_key
from ..case import Case
from .bisection import BisectionInterrupted
from .build_search import Interruptible
from .probes import probe_jobs

COMMIT_OPTIONS = ReplayOptions(dump=False, profile=False)  # a probe needs its outputs: no dump, no per-op profile
RUN_PREFIX = "run-"  # a bisection's folder of commit environments (_commit_folder)


def commits_between(case: Case, good: str | None, bad: str | None, *, jax_repo: str | None = None,
                    xla_repo: str | None = None, options: ReplayOptions = COMMIT_OPTIONS,
                    jobs: int | None = None, max_time_s: float | None = None, resume: bool = True,
                    ledger=None) -> dict:
    """api.bisect_commits' answer once its request is checked (`options` outputs only): the release or commit
    window, its commits searched, the answer stored beside the runs. `max_time_s` (--max-time, from here): no probe
    is started that would end past it (run/spent.Ledger; the release bisection run first shares it); a search cut
    short keeps the window it had narrowed, stored `unfinished`, where the next call of the same question goes on
    from (`resume`). `ledger` (run/spent.Ledger): where the probes are recorded, with its own --max-time (default:
    one of `max_time_s`)."""
    from ...run.spent import Ledger
    from . import commit_bisect as cb
    from .xla_window import xla_window

    ref, manager, progress = case.ref, case.manager, case.progress
    ledger = ledger or Ledger(max_time_s)
    if bad is not None and not cb.names_a_release(bad):
        registry, bundle, plan, found = _commit_window(case, good, bad, jax_repo, options)
        release: dict = {}
    else:
        registry, bundle, release, repo = _release_window(case, good, bad, jax_repo, ledger)
        found = release["answer"]
        plan = cb.plan_commits(repo, found["last_good"], found["first_bad"])
    say = (lambda line: progress(cb.readable(line))) if progress else None
    if say:
        say(_opening(plan, found))
    window = _resumed(registry, bundle, plan, manager, say) if resume else None
    stop = Interruptible()  # Ctrl-C in a probe: the window so far stored, as --max-time's, then the command ends
    with _commit_folder(manager.root) as folder:
        probes = _commit_probe(registry, bundle, options, manager, plan, (ledger, stop), folder, say)
        try:
            answer = _search(registry, bundle, plan, probes, found, jobs or probe_jobs(bundle, options), say, window)
        except TimeSpentError:
            if stop.interrupted:  # at the endpoints: nothing found to store
                raise BisectionInterrupted(None) from None
            raise
    if plan.bad_commit is None:
        answer["xla"] = xla_window(plan.repo, plan.good_tag, plan.bad_tag, xla_repo, found)
    else:
        answer["xla"], answer["layer"] = None, cb.window_layer(found["layer"], answer)
    answer["release_answer"] = release.get("answer_id")
    answer["spent"] = ledger.as_dict()
    answer["probes"] = len(ledger.probes)
    runs = answer.pop("runs")
    command = _command(ref, plan.good, plan.bad, jax_repo, xla_repo)
    from ..answers import store_commit_bisection

    builds = builds_of(manager, [plan.good] + ([plan.bad] if plan.bad_commit is None else []))
    answer["answer_id"] = store_commit_bisection(registry, bundle, answer, runs, command,
                                                 reuse_key(registry, "commits", commits_asked(plan), builds))
    answer["command"] = command
    if stop.interrupted:
        raise BisectionInterrupted(None)
    return answer


def _resumed(registry: Registry, bundle: Bundle, plan, manager, say) -> dict | None:
    """The window of the latest stored commit bisection of the same commits that --max-time cut short
    (answers.resumable), where this search starts; None where there is none."""
    from ..answers import COMMIT_BISECTION, resumable

    record = resumable(registry, bundle, COMMIT_BISECTION, commits_asked(plan), manager)
    window = ((record or {}).get("answer") or {}).get("window")
    if record is None or not isinstance(window, dict):
        return None
    if say:
        say(f"bisect-commits: going on from the search stored {record.get('created')} that --max-time or Ctrl-C "
            "cut short")
    return window


def commits_asked(plan) -> dict:
    """What a commit bisection was asked, as its stored answer records it for reuse: its ends and its commits, by
    hash (another history between the same tags is another question)."""
    import hashlib

    shas = "\n".join(c.sha for c in plan.commits)
    return {"good": plan.good, "bad": plan.bad, "commits": hashlib.sha256(shas.encode()).hexdigest()}


def _opening(plan, found: dict) -> str:
    """The first progress line: the window and how its commits are judged."""
    if plan.bad_commit is not None:
        return (f"bisect-commits: {len(plan.commits)} commits from {plan.start} to {plan.bad_name} (first "
                f"parent), each retraced over jax {plan.good}'s jaxlib, judged against jax {plan.good} by what tells "
                f"{plan.bad_name} from it")
    return (f"bisect-commits: {len(plan.commits)} commits from {plan.good_tag} to {plan.bad_tag} (first parent), "
            f"each retraced over a released jaxlib, judged by {found['criterion']} against jax {plan.good}")


def _release_window(case: Case, good: str | None, bad: str | None,
                    jax_repo: str | None, ledger=None) -> tuple[Registry, Bundle, dict, Any]:
    """The release bisection a release window goes on from (stored and finished, else run now, its probes in
    `ledger`), refused where it found no lowering change, and the JAX repository opened. TimeSpentError where
    --max-time cut that bisection short: stored, the next call goes on from it."""
    from ...envs.jax_commit import open_repo
    from ..answers import unfinished

    ref, manager, progress = case.ref, case.manager, case.progress
    local = jax_repo is not None and "://" not in jax_repo
    repo = open_repo(jax_repo, manager.root, progress) if local else None  # a wrong folder is said at once
    registry, bundle = case.where()
    stored = _stored_release(registry, bundle, good, bad)
    if stored is not None:  # a stored compiler change is refused before any clone
        _refuse(ref, stored)
    repo = repo or open_repo(jax_repo, manager.root, progress)  # before a bisection runs
    release = stored or _release_answer(case, good, bad, ledger)
    if unfinished(release):
        raise TimeSpentError(f"--max-time spent in the release bisection: {release['answer'].get('unfinished')}",
                             hint="what it narrowed is stored: the same command again goes on from it")
    _refuse(ref, release)
    return registry, bundle, release, repo


def _release_environment(manager, bundle: Bundle, options: ReplayOptions, version: str, progress):
    """The cached environment of a release that commits run over: of the platform (and build) the bundle replays
    on, as the release's own replay uses (a TPU's carries libtpu, a CPU's does not)."""
    from ...run.replay import replay_platform

    choice = replay_platform(bundle, options.platform)
    on_platform: dict[str, Any] = {} if choice.platform == "cpu" else {"platform": choice.platform,
                                                                       "build": choice.build}
    return manager.ensure(version, progress=progress, **on_platform)


def _commit_window(case: Case, good: str | None, bad: str, jax_repo: str | None,
                   options: ReplayOptions) -> tuple[Registry, Bundle, Any, dict]:
    """A commit window's plan (the good release's tag to the commit `bad`) and what its search goes on from: no
    criterion yet (its ends choose it), the layer by construction. UsageError without --good, for a commit the
    repository lacks, and for one whose JAX does not accept the good release's jaxlib."""
    from ...envs.jax_commit import open_repo
    from . import commit_bisect as cb

    ref, manager, progress = case.ref, case.manager, case.progress
    if good is None:
        raise UsageError(f"--bad {bad} names a commit, not a release: name the good release too",
                         hint=f"reprobundle bisect-commits {ref} --good RELEASE --bad {bad}")
    registry, bundle = case.where()  # a wrong ref is said before any clone
    repo = open_repo(jax_repo, manager.root, progress)
    plan = cb.plan_commit_window(repo, good, bad)
    good_env = _release_environment(manager, bundle, options, good, progress)
    jaxlib = good_env.jaxlib_version or good_env.jax_version
    _version, minimum = repo.versions_at(plan.bad)
    why_not = cb.jaxlib_refusal(plan, minimum, jaxlib)
    if why_not is not None:
        raise UsageError(f"{ref}: {why_not}",
                         hint=f"name a bad release instead (one at or after {plan.bad_name}): reprobundle "
                              f"bisect-commits {ref} --good {good} --bad RELEASE; or a good release whose jaxlib "
                              f"is {minimum} or newer")
    layer = (f"JAX's lowering, by construction: every probe, jax {good} itself included, ran over jaxlib {jaxlib} "
             f"(jax {good}'s environment), so only JAX's Python differed")
    return registry, bundle, plan, {"criterion": None, "last_good": good, "first_bad": plan.bad,
                                    "changed_defaults": None, "layer": layer}


def _commit_folder(root):
    """A folder of this bisection's own for its commits' environments (removed when it ends; one a killed bisection
    left is swept by the next): each is ~20 MB of JAX sources and takes a fraction of a second to make again."""
    from ...envs.jax_commit import COMMITS_DIR
    from ...store.scratch import scratch_dir, sweep

    sweep(root / COMMITS_DIR, stale_s=None, prefixes=(RUN_PREFIX,))
    return scratch_dir(root / COMMITS_DIR, RUN_PREFIX)


def _search(registry: Registry, bundle: Bundle, plan, probes: tuple, found: dict, jobs: int, say,
            window: dict | None = None) -> dict:
    """The endpoints checked (`probes`: the commit probe, and which commits run over the good release's jaxlib), the
    commits searched when they agree with the releases (inside `window`, where a stored search cut short had
    narrowed them), the answer with the first bad commit's changed defaults and its lowering against its parent
    (the search cut short by --max-time: the window so far, no first bad commit)."""
    from . import commit_bisect as cb

    probe, over_good = probes
    ends = cb.check_endpoints(plan, probe, found["criterion"], _outputs_differ(registry, bundle), over_good)
    criterion = ends["criterion"]
    if say:
        say(f"bisect-commits: {ends['text']}")
    if ends.get("same"):  # a commit window whose ends compute the same: their lowering said, nothing searched
        good_run, bad_run = probe([plan.good, plan.bad_end])
        lowering = _lowering_between(registry, bundle, good_run, bad_run, plan.good_tag)
        return {**cb.answer_of(plan, None, ends), "lowering": lowering, "runs": [good_run, bad_run]}
    if not ends["agree"]:
        return {**cb.answer_of(plan, None, ends), "lowering": None, "runs": []}
    result = cb.search(plan, probe, criterion, _outputs_differ(registry, bundle), ends, jobs=jobs, progress=say,
                       resume=[window] if window else None)
    first = None if result.unfinished else plan.commit_of(result.first_bad)
    defaults = cb.defaults_touched(plan.repo, first.sha, found.get("changed_defaults")) if first is not None else []
    answer = cb.answer_of(plan, result, ends, defaults)
    try:
        answer["lowering"] = None if result.unfinished else _lowering(registry, bundle, plan, result, probe)
    except TimeSpentError as e:  # the first bad commit stands; its lowering is the next call's
        answer = cb.cut_short(answer, result, f"its lowering against its parent was not read: {e.message}")
        answer["lowering"] = None
    return {**answer, "runs": list(result.runs.values())}


def _refuse(ref: str, release: dict) -> None:
    """UsageError where the release bisection's answer is no lowering change a commit can carry (a compiler change,
    a time criterion, no boundary: commit_bisect.refusal)."""
    from . import commit_bisect as cb

    why_not = cb.refusal(release)
    if why_not is not None:
        raise UsageError(f"{ref}: not sent to a commit bisection: {why_not}",
                         hint="`reprobundle explain` and `minimize` go on from a compiler change")


def _stored_release(registry: Registry, bundle: Bundle, good: str | None, bad: str | None) -> dict | None:
    """The latest stored release bisection of this window, or None."""
    from ..answers import BISECTION, unfinished

    stored = [] if registry.store.read_only else registry.answers(bundle.ref.bundle_id)
    fits = [a for a in stored if a.get("kind") == BISECTION and _window_fits(a["answer"], good, bad)
            and not unfinished(a)]  # one --max-time cut short is resumed by the bisection run now
    return fits[-1] if fits else None


def _release_answer(case: Case, good: str | None, bad: str | None, ledger=None) -> dict:
    """The release bisection a commit bisection goes on from when none is stored: one run now (good and bad
    given; checked as bisect checks them)."""
    ref, progress = case.ref, case.progress
    if good is None or bad is None:
        raise UsageError(f"{ref} has no stored release bisection to go on from",
                         hint=f"name the releases: reprobundle bisect-commits {ref} --good GOOD --bad BAD")
    from .release_search import bisect_releases, check_bisect_request

    check_bisect_request(good, bad, "retrace", None, False, case.config)
    registry, bundle = case.where()
    if progress:
        progress(f"bisect-commits: first the releases from {good} to {bad} (retraced, with the layer check)")
    result, _ = bisect_releases(case, good, bad, mode="retrace", ledger=ledger)
    answers = registry.answers(bundle.ref.bundle_id)
    own = [a for a in answers if a.get("answer_id") == result.answer_id]
    if own:
        return own[-1]
    from .bisection_answer import bisection_answer

    return bisection_answer(bundle, result, "", "")  # a read-only store keeps none: the answer as it was found


def _window_fits(answer: dict, good: str | None, bad: str | None) -> bool:
    """Whether a stored release bisection answers the window asked (its endpoints, or its last good and first bad)."""
    from ...envs.versions import same_release

    def one_of(asked: str | None, *found: Any) -> bool:
        return asked is None or any(same_release(asked, str(f)) for f in found if f)

    return one_of(good, answer.get("good"), answer.get("last_good")) and \
        one_of(bad, answer.get("bad"), answer.get("first_bad"))


def _outputs_differ(registry: Registry, bundle: Bundle):
    from .probes import output_difference

    return output_difference(registry, bundle)


def _commit_probe(registry: Registry, bundle: Bundle, options: ReplayOptions, manager, plan, watch: tuple,
                  folder, progress):
    """(labels -> runs, label -> whether it runs over the good release's jaxlib): each commit's environment made
    (JAX at the commit over a released jaxlib it accepts both ways: the good or bad release's, else an older one:
    envs/jax_commit.ReleasesOver), all replayed retraced and untimed in one probe recorded in the ledger (`watch`:
    the ledger and the Interruptible that stops the search on Ctrl-C)."""
    from ...envs.jax_commit import ReleasesOver, commit_environment
    from ...fleet.connect import executor_for
    from ...run.spent import of_runs
    from .commit_bisect import commit_probe, readable
    from .probes import replay_probe

    def release_env(version: str):
        return _release_environment(manager, bundle, options, version, progress)

    good_env = release_env(plan.good)
    # a commit window has no bad release: every commit runs over the good release's jaxlib, or an older one
    ends = (good_env,) if plan.bad_commit is not None else (good_env, release_env(plan.bad))
    releases = ReleasesOver(ends, manager.available_versions, release_env, manager.left_out_versions,
                            newest=plan.good if plan.bad_commit is not None else None)
    made: dict[str, tuple[str | None, str]] = {}

    def env_of(label: str) -> tuple[str | None, str]:
        commit = plan.commit_of(label)
        if commit is None:  # a release: its own environment
            return label, f"jax {label}'s own"
        if label not in made:
            over, why = releases.over(*plan.repo.versions_at(commit.sha))
            if over is None:
                made[label] = (None, why)
            else:
                path = commit_environment(plan.repo, commit.sha, over, folder)
                made[label] = (str(path), f"jaxlib {over.jaxlib_version} (jax {over.jax_version}'s environment)")
        return made[label]

    ledger, stop = watch
    raw = replay_probe(registry, bundle, options, executor=None if registry.store.read_only else executor_for(None),
                       env_manager=manager, progress=progress, mode="retrace")

    @stop.guard
    def replay(paths: list[str], labels: list[str]) -> list[dict]:  # recorded in the ledger by short hashes
        ledger.check("untimed retrace")  # none started that would end past --max-time
        t0 = time.perf_counter()
        runs = raw(paths)
        ledger.record("untimed retrace", [readable(label) for label in labels], time.perf_counter() - t0,
                      of_runs(runs), at_once=len(paths))
        return runs

    def over_good(label: str) -> bool:  # read from jax/version.py: nothing is made
        commit = plan.commit_of(label)
        return commit is not None and releases.over_first(*plan.repo.versions_at(commit.sha))

    return commit_probe(replay, env_of, progress), over_good


def _stablehlo_of(registry: Registry):
    from ...errors import NotFoundError

    def stablehlo_of(run: dict) -> str | None:
        art = (run.get("artifacts") or {}).get("stablehlo_retraced")
        try:
            return registry.get_blob(art["blob"]).decode("utf-8", "replace") if art else None
        except NotFoundError:  # a read-only store keeps no runs, nor their artifacts
            return None

    return stablehlo_of


def _lowering(registry: Registry, bundle: Bundle, plan, result, probe) -> dict | None:
    from ...run.retrace import program_file_names
    from .commit_bisect import lowering_of_first_bad

    found = lowering_of_first_bad(plan, result, probe, _stablehlo_of(registry),
                                  program_file_names(bundle.manifest))
    if found is None:
        return None
    return {"changed": found["changed"], "text": found["text"], "parent": found["parent"]}


def _lowering_between(registry: Registry, bundle: Bundle, before_run: dict, after_run: dict,
                      parent: str) -> dict | None:
    """Two runs' retraced StableHLO by source line, as the answer's "lowering" says it (`parent`: what the first
    was run from); None where either has none."""
    from ...run.retrace import program_file_names
    from .commit_bisect import runs_lowering

    found = runs_lowering(before_run, after_run, _stablehlo_of(registry), program_file_names(bundle.manifest), parent)
    return None if found is None else {"changed": found["changed"], "text": found["text"], "parent": parent}


def _command(ref: str, good: str, bad: str, jax_repo: str | None, xla_repo: str | None) -> str:
    args = ["reprobundle", "bisect-commits", ref, "--good", good, "--bad", bad]
    if jax_repo:
        args += ["--jax-repo", jax_repo]
    if xla_repo:
        args += ["--xla-repo", xla_repo]
    return " ".join(shlex.quote(a) for a in args)


def commit_step(result, case: Case, jax_repo: str | None = None, again: bool = False,
                max_time_s: float | None = None) -> dict:
    """investigate's step after the release bisection `result` (a BisectResult): the first bad commit when the layer
    at the boundary is JAX's lowering (commits_between), skipped with why otherwise: a compiler change, no boundary,
    or no JAX repository here (`jax_repo`, else the clone cached by an earlier bisect-commits; never a clone made
    here, so an investigation needs no network), with the command that gives one. `max_time_s`: what is left of
    investigate's --max-time (a search cut short is resumed by the next call). A dict of investigate's Step
    fields: name, status, answer, spent_s, command, stored."""
    from ...errors import ReproBundleError
    from ..answers import stored_ago
    from .commit_bisect import refusal

    ref, store = case.ref, case.store
    command = _command(ref, result.last_good, result.first_bad, jax_repo or "PATH", None) + \
        (f" --store {shlex.quote(store)}" if store else "")
    step = {"name": "commits", "status": "skipped", "answer": "", "spent_s": 0.0, "command": command,
            "stored": None}
    why_not = "the bisection found no boundary" if result.last_good == result.first_bad else refusal(
        {"answer": {"layer": result.layer, "criterion": result.criterion, "last_good": result.last_good,
                    "first_bad": result.first_bad}})
    repo = repo_here(jax_repo, case.manager)
    if why_not is None and repo is None:
        why_not = ("no JAX repository here to bisect its commits: give a clone of https://github.com/jax-ml/jax "
                   "(or its URL) with --jax-repo")
    if why_not is not None:
        return {**step, "answer": why_not}
    stored = None if again else _stored_commits(case, str(repo), result)
    if stored is not None:  # the same window of the same history, answered here on these builds
        found = {**stored["answer"], "command": stored["command"], "answer_id": stored["answer_id"]}
        return {**_answered(step, found, store, time.monotonic()), "status": "stored",
                "reused": stored_ago(stored.get("created"), case.started)}
    t0 = time.monotonic()
    try:
        found = commits_between(case, result.last_good, result.first_bad, jax_repo=repo,
                                options=COMMIT_OPTIONS.outputs_only(), max_time_s=max_time_s, resume=not again)
    except ReproBundleError as e:
        return {**step, "status": "failed", "answer": e.message}
    return _answered(step, found, store, t0)


def _stored_commits(case: Case, repo: str, result) -> dict | None:
    """The stored commit bisection of the release bisection's window that reusable finds (its commits the same
    hashes in `repo` now), or None."""
    from ...envs.jax_commit import open_repo
    from ...errors import ReproBundleError
    from ..answers import COMMIT_BISECTION, reusable
    from . import commit_bisect as cb

    registry, bundle = case.where()
    try:
        plan = cb.plan_commits(open_repo(repo, case.manager.root, None), result.last_good, result.first_bad)
    except ReproBundleError:  # the search says it, as it always did
        return None
    return reusable(registry, bundle, COMMIT_BISECTION, commits_asked(plan), case.manager)


def _answered(step: dict, found: dict, store: str | None, t0: float) -> dict:
    """A commit bisection's answer as investigate's step: the first bad commit (with its lowering against its
    parent) or what the ends said."""
    from ...envs.jax_commit import first_bad_line

    said = found["text"] if found.get("unfinished") else first_bad_line(found) if found["first_bad"] else \
        found["ends"]["text"]
    said = f"{found['resumed']}; {said}" if found.get("resumed") else said
    if found.get("lowering") and found["lowering"]["changed"]:
        said += f"; against its parent: {found['lowering']['text']}"
    return {**step, "status": "answered", "answer": said, "spent_s": round(time.monotonic() - t0, 1),
            "command": found["command"] + (f" --store {shlex.quote(store)}" if store else ""),
            "stored": found["answer_id"]}


def repo_here(jax_repo: str | None, manager) -> str | None:
    """The JAX repository an investigation may use without the network: the one given, else the clone an earlier
    bisect-commits cached beside the environments, else None."""
    from ...envs.jax_commit import CACHED_REPO

    cached = manager.root / CACHED_REPO
    return jax_repo or (str(cached) if (cached / "HEAD").exists() else None)


def commit_window_step(case: Case, good: str, commit: str, jax_repo: str | None = None,
                       max_time_s: float | None = None) -> tuple[dict, dict]:
    """investigate --bad COMMIT's search: the commits from release `good` to `commit` (commits_between's commit
    window): (a dict of investigate's Step fields, the answer). UsageError when no JAX repository is here (it is the
    whole investigation: nothing else could answer; investigate reads such a --bad as a release instead)."""
    repo = repo_here(jax_repo, case.manager)
    if repo is None:
        raise UsageError(f"--bad {commit} names a commit, and no JAX repository is here to find it in",
                         hint="give a clone of https://github.com/jax-ml/jax (or its URL) with --jax-repo")
    t0 = time.monotonic()
    found = commits_between(case, good, commit, jax_repo=repo, options=COMMIT_OPTIONS.outputs_only(),
                            max_time_s=max_time_s)
    step = {"name": "commits", "status": "answered", "answer": "", "spent_s": 0.0, "command": None, "stored": None}
    return _answered(step, found, case.store, t0), found
