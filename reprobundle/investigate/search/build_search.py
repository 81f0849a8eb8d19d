"""One search over an ordered list of builds (releases, nightlies) with its probes: `Probes` replays some builds as
fleet tasks (investigate/search/probes.py), timed or outputs only, each recorded in the ledger; `Search` runs
bisection.py's search over the builds with them, `jobs` builds a step for outputs, environments asked for ahead of
need, and says the layer at the boundary (boundary.py). release_search.py searches releases and nightlies with it;
commit_search.py labels JAX's commits as builds between two releases for the same bisection.py search."""

from __future__ import annotations

from typing import Callable, Sequence

from ...bundle.registry import Bundle, Registry
from ...run.replay_options import ReplayOptions


class Interruptible:
    """Ctrl-C during a probe stops the search as --max-time does: the probe unwinds (its workers killed), then
    bisection.Interrupted, a TimeSpentError, is what the search meets, so it keeps what it had narrowed; every probe
    after it is refused at once. `interrupted` says whether it came: the caller stores the unfinished answer, then
    raises bisection.BisectionInterrupted. A probe holds the exit watchdog off (store/watchdog.handling_signals):
    the Ctrl-C it takes is the search's, which ends the command once the answer is stored; a second Ctrl-C, outside
    a probe, ends it at once as before."""

    def __init__(self) -> None:
        self.interrupted = False

    def guard(self, probe: Callable[..., list]) -> Callable[..., list]:
        from ...store.watchdog import handling_signals
        from .bisection import Interrupted

        def guarded(*args) -> list:
            if self.interrupted:
                raise Interrupted("interrupted by Ctrl-C")
            try:
                with handling_signals():
                    return probe(*args)
            except KeyboardInterrupt:
                self.interrupted = True
                raise Interrupted("interrupted by Ctrl-C") from None
        return guarded


class Probes:
    """A bisection's probes: replays of some versions as fleet tasks (investigate/search/probes.py), timed or outputs only
    (ReplayOptions.outputs_only), each recorded in the ledger; Ctrl-C during one stops the search as --max-time
    does (`stop`, Interruptible)."""

    def __init__(self, registry: Registry, bundle: Bundle, options: ReplayOptions, executor, manager, progress,
                 ledger, timed_only: bool):
        self.args = (registry, bundle)
        self.options, self.executor, self.manager, self.progress = options, executor, manager, progress
        self.ledger, self.timed_only = ledger, timed_only
        self.seen: dict[tuple, list[dict]] = {}
        self.stop = Interruptible()

    def probe(self, mode: str, timed: bool = True, ends=None):
        """Versions -> runs; the runs of versions already probed the same way are reused (the endpoints' probe of
        the mode choice is the bisection's first). `ends` (analysis/which_end.Ends, timed only): a time
        bisection's probe, whose rounds stop once the test between the change's two ends says its side; a timed
        probe without them (the endpoints) stops once a slowdown is ruled out, since only a slowdown regresses."""
        from dataclasses import replace

        from .probes import replay_probe

        timed = timed or self.timed_only
        options = self.options if timed else self.options.outputs_only()
        if timed:
            options = replace(options, ends=ends.as_data()) if ends is not None else \
                replace(options, slowdown_only=True)
        replay = replay_probe(*self.args, options, executor=self.executor, env_manager=self.manager,
                              progress=self.progress, mode=mode, left=self.ledger.left)
        what = ("timed" if timed else "untimed") + ("" if mode == "frozen" else f" {mode}")
        watched = self.stop.guard(self.ledger.watched(what, replay, concurrent=not timed))

        def remembered(versions: Sequence[str]) -> list[dict]:
            key = (mode, timed, tuple(versions), options.ends)
            if key not in self.seen:
                self.seen[key] = watched(versions)
            return self.seen[key]

        return remembered if timed or mode not in ("frozen", "retrace") else self._each_once(mode, watched)

    def _each_once(self, mode: str, watched: Callable[[Sequence[str]], list[dict]]):
        """An untimed probe whose runs are remembered version by version: a release run once, untimed, in this
        mode (its outputs do not depend on what ran beside it) serves every later probe of it, the window's sweep
        and the bisections alike."""
        def remembered(versions: Sequence[str]) -> list[dict]:
            missing = [v for v in dict.fromkeys(versions) if (mode, False, v) not in self.seen]
            if missing:
                for v, run in zip(missing, watched(missing)):
                    self.seen[mode, False, v] = [run]
            return [self.seen[mode, False, v][0] for v in versions]

        return remembered

    def taken_as_endpoints(self, mode: str, ends: Sequence[str], runs: list[dict]) -> bool:
        """The runs of the endpoints `ends` timed in `mode` by the endpoints' own design at fewer looks (a time
        screen: adaptive rounds that stop as theirs do, at most SCREEN_ROUNDS), kept as the endpoints' timed probe
        where they settle a slowdown the endpoints list as they stand (slowdown_claim.listed_as_they_stand) and the
        rounds are adaptive: one claim, one measurement; the confirmation still measures anew. Whether they were
        kept."""
        from .slowdown_claim import listed_as_they_stand

        if self.options.rounds is not None or len(runs) != 2 or not listed_as_they_stand(runs[0], runs[1], ends[0]):
            return False
        self.seen[(mode, True, tuple(ends), None)] = list(runs)
        return True

    def confirming(self, mode: str):
        """The probe of a confirmation: fresh, timed until a slowdown is shown beyond the resolution or ruled out
        (ReplayOptions.slowdown_only), whatever its pair (a control among them: run/contenders.control_of)."""
        from dataclasses import replace

        return self.fresh(mode, "confirm", replace(self.options, slowdown_only=True))

    def fresh(self, mode: str, what: str, options: ReplayOptions | None = None):
        """Versions -> runs measured anew, timed (`options`, default the bisection's), never remembered nor
        reused: a confirmation, a time screen (bisection.confirm, mode_choice.time_screen; a screen's runs become the
        endpoints' only where `taken_as_endpoints` says they settle them)."""
        from .probes import replay_probe

        replay = replay_probe(*self.args, options or self.options, executor=self.executor, env_manager=self.manager,
                              progress=self.progress, mode=mode, left=self.ledger.left)
        return self.stop.guard(self.ledger.watched(what + ("" if mode == "frozen" else f" {mode}"), replay,
                                                   concurrent=False))


class Search:
    """One bisection's search with its probes (timed, and outputs only unless every probe is timed), `jobs` versions
    a step for outputs, environments asked for ahead of need, and the layer at the boundary; where a stored search
    of the same question was cut short by --max-time, inside the window it had narrowed (`windows`)."""

    def __init__(self, probes: Probes, mode: str, jobs: int, ahead, by: str | None, windows=None,
                 control: bool = False):
        from .probes import output_difference

        self.probes, self.mode, self.jobs, self.ahead, self.by = probes, mode, jobs, ahead, by
        self.control = control  # time its endpoints and confirmation beside an A/A control (bisection.bisect)
        self.compare = output_difference(*probes.args)
        # where a stored search of this mode that --max-time cut short had narrowed (bisection.resumed_window)
        self.resume = [w for w in windows or [] if w.get("mode") == mode]

    def run(self, versions, good: str, bad: str, progress, known=None, left_out=None):
        from .bisection import bisect_every_change as _bisect

        checks = None if self.probes.timed_only else self.probes.probe(self.mode, timed=False)
        return _bisect(versions, good, bad, self.probes.probe(self.mode), progress=progress, known=known,
                       outputs_differ=self.compare, by=self.by, check_together=checks, jobs=self.jobs,
                       ahead=self.ahead, left_out=left_out, confirm_with=self.probes.confirming(self.mode),
                       resume=self.resume, sided_probe=lambda ends: self.probes.probe(self.mode, ends=ends),
                       control=self.control)

    def layer(self, result, probe_for, ref: str, store_args, replay_args):
        from .boundary import layer_at_boundary

        return layer_at_boundary(self.probes.args[0], self.probes.args[1], result, self.mode, probe_for,
                                 self.compare, self.probes.progress, next_args=(ref, store_args, replay_args))
