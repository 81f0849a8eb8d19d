"""`investigate`'s bisection in stages, the headline first: the user's answer as soon as it is known, then the rest.

`bisect` (release_search.bisect_releases) searches every kind of change the endpoints show, splits each window
into its changes, and answers once. `investigate` asks the same question in stages, so that the report of the
change the user asked about is written before anything else is searched:

1. `headline()`: the endpoints surveyed (untimed, mode_choice.survey), then mode_choice.plan's bisections, the most
   severe kind first, one at a time (mode_choice.standing_each) until one stands: the headline, with the layer at
   its boundary. Its answer is stored at once, `unfinished` with what is still to search (`cut_at` "split" where
   the rest of its own window is, else "kinds"; each kind not yet searched a `set_aside` entry marked `unfinished`),
   so that it is never reused as the whole answer and a call that stops now is resumed by the next one.
2. `next_stage()`, after the headline's chain and report: one more search, each a `Stage`: the rest of the
   headline's window (window_changes.split: other changes of its kind; what window_changes.place placed beside a
   headline whose first confirmation failed), then each later kind of the plan (its bisection and its window's
   changes), then the sweep (every release of the window run once, untimed: window_changes.swept_changes, the
   changes of outputs or bits no bisection saw, those undone a few releases later included).
   What a stage lands is stored as it lands: each change's own answer, then
   the headline's answer again, listing every change so far (the headline first, the others ranked:
   window_changes.ranked); each such record supersedes the one before it (the latest of a question is the one
   reused, resumed and reported). The last stage's record is the whole answer, as `bisect` would store it.

The headline stays the first change found: a change a later stage finds is listed after it, whatever its rank.
Where no bisection stood, the sweep runs at once and its first change, ranked, is the headline. What the answer
saw and does not list (a slowdown under the resolution, one not placed, the releases never run) is its
`not_listed`.

Resumed: a stored answer of the same question that a stage left unfinished (answers.resumable), whose headline's
own search was whole (its window narrowed to neighbouring releases, its layer read, every change listed after it
finished: `cut_at` "split" or "kinds"), is taken as it is (answers.stored_bisection: the headline and every change
it listed, each from its own answer) and only what it left is searched. Any other stored answer cut short is
resumed as `bisect` resumes it (release_search.resumed_from: each search inside the window it had narrowed).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterator

from ...errors import ReproBundleError, TimeSpentError, UsageError
from ..answers import BISECTION, answer_record, builds_of, resumable, reuse_key, store_answer
from ..case import Case
from .bisection import BisectionInterrupted, BisectResult, also_entry, unconfirmed
from .bisection_answer import bisect_command, bisection_answer, stored_bisection
from .build_search import Probes
from .mode_choice import nothing_stood, screened, standing_each
from .probes import probe_jobs
from .release_search import (
    BISECT_OPTIONS,
    KindSearches,
    bisection_asked,
    changed_defaults_of,
    layer_of,
    planned,
    probe_executor,
    resumed_from,
    stored_answer,
    surveyed_modes,
    tested_builds,
    with_tried,
)
from .window_changes import KIND_OF, change_entry, ranked

if TYPE_CHECKING:
    from ...envs.prefetch import Prefetch

REST = "rest"  # a stage's kind: the rest of the headline's own window (its other changes of that kind)
SWEEP = "sweep"  # a stage's kind: every release of the window run once, untimed (window_changes.swept_changes)
WHOLE = (REST, SWEEP)  # the stages that search the window itself, not one more kind of change


@dataclass
class Stage:
    """One search after the headline's: its name (`search bits (retraced)`), the changes it landed, what it set
    aside, one line that says both, and the answer record stored after it."""

    name: str
    changes: list[BisectResult] = field(default_factory=list)
    set_aside: list[dict] = field(default_factory=list)
    answer_id: str | None = None
    skipped: list[str] = field(default_factory=list)  # what it did not look at, and why (KindSearches.screen)

    @property
    def said(self) -> str:
        found = [f"{KIND_OF.get(c.criterion, c.criterion)} changed at {c.first_bad} (last good {c.last_good}; layer: "
                 f"{(c.layer or {}).get('text') or '?'})" for c in self.changes]
        aside = [f"{'not searched' if s.get('unfinished') else 'no regression'}: {s['criterion']} "
                 f"({_how(s.get('mode'))}): {s['why']}" for s in self.set_aside]
        return "; ".join(found + aside + [f"not looked at: {s}" for s in self.skipped]) or "no other change"


def _how(mode: str | None) -> str:
    return "retraced" if mode == "retrace" else "frozen"


def stage_name(mode: str, kind: str) -> str:
    """`search bits (retraced)`: a stage by the kind of change it searches and the program it replays; the sweep's
    `run every release once`."""
    if kind == SWEEP:
        return "run every release once"
    return f"search {KIND_OF.get(kind, kind)} ({_how(mode)})"


class HeadlineFirst:
    """The bisection of `case`'s bundle between `good` and `bad` in stages (see the module's docstring), its probes
    in `ledger` (within its --max-time), `mode` and `by` as bisect's. `resume`: go on from a stored answer of the
    same question a stage or --max-time left unfinished."""

    def __init__(self, case: Case, good: str, bad: str, *, mode: str, by: str | None, ledger, resume: bool = True):
        registry, bundle = case.where()
        self.case, self.ends, self.mode, self.by, self.resume = case, (good, bad), mode, by, resume
        self.probes = Probes(registry, bundle, BISECT_OPTIONS, probe_executor(registry, case.ref, None, None),
                             case.manager, case.progress, ledger, False)
        self.jobs = probe_jobs(bundle, BISECT_OPTIONS)
        self.asked = bisection_asked(good, bad, mode, by, False, BISECT_OPTIONS, True, False)
        self.head: BisectResult | None = None
        self.reused: dict | None = None  # the stored answer whose headline was taken as it is
        self.pending: list[tuple[str, str]] = []  # the stages left: (mode, kind), REST first where it is left
        self.set_aside: list[dict] = []
        self._also: list[dict] = []  # what a stood bisection found beside its own change (bits beside time)
        self._placed: list[BisectResult] = []  # changes found beside the headline, landed by the REST stage
        self.not_listed: list[dict] = []  # what was seen, or not, and is not a change (the headline's not_listed)
        self._steps: Iterator[tuple[int, BisectResult | None]] = iter(())
        self._kinds: KindSearches | None = None
        self._sweep_one = None  # the SWEEP stage's search (KindSearches.sweeper), where there is one
        self._failed: UsageError | None = None  # the error of a plan no bisection of stood, kept for the sweep
        self._prefetch: Prefetch | None = None
        self._base: dict = {}  # the headline's first stored record: what each later one extends

    # -- the stages ----------------------------------------------------------------------------------------------

    def headline(self) -> BisectResult:
        """The headline (its `changes`: those a resumed answer had listed already), its answer stored; a
        UsageError where no change stood (what was tried), TimeSpentError where --max-time left no time to tell the
        endpoints apart. Ctrl-C in a probe (which the search takes as --max-time: build_search.Interruptible):
        BisectionInterrupted, once what was found is stored."""
        try:
            head = self._headline()
        except TimeSpentError:
            if self.probes.stop.interrupted:
                raise BisectionInterrupted(None) from None
            raise
        if self.probes.stop.interrupted:
            raise BisectionInterrupted(head)
        return head

    def _headline(self) -> BisectResult:
        record = resumable(*self.case.where(), BISECTION, self.asked, self.case.manager) if self.resume else None
        if record is not None and whole_headline(record):
            return self._reuse(record)
        windows = resumed_from(*self.case.where(), self.asked, self.case.manager, self.case.progress) \
            if record is not None else []
        with self._prefetched():
            steps, why = planned(self.probes, self.mode, self.by, self.ends, self.case.progress)
            self._kinds = KindSearches(self.probes, self.jobs, self._want, self.case.manager, self.case.progress,
                                       windows)
            self._sweep_one = self._kinds.sweeper(self.ends, surveyed_modes(self.probes, self.mode), self.by)
            self._steps = standing_each(steps, self._run, self.by, why, self.set_aside, self.case.progress,
                                        screened(steps, self.by, self._screen))
            at, head = self._first_standing(steps, why)
            swept = head is None
            if head is None:  # no bisection stood: the sweep may still find changes that came and went
                head = self._swept_headline(why)
            self.pending = [(head.mode, REST)] * (splittable(head) or bool(self._placed)) + list(steps[at + 1:]) + \
                [(head.mode, SWEEP)] * (not swept and self._sweeps(head))
            head.layer = self._layer(head)
            self._keep(head)
            self.head = head
            self._store([head])
        return head

    def _sweeps(self, head: BisectResult) -> bool:
        """Whether the sweep may see what no other stage does: a window of more than two releases, unless the one
        kind and mode asked for is the headline's, whose window the rest-of-window stage runs whole."""
        from ...envs.versions import version_key

        good, bad = (version_key(v) for v in self.ends)
        inside = [v for v in self._kinds.versions if good < version_key(v) < bad] if self._kinds else []
        asked_only = self.by is not None and self.mode != "auto" and KIND_OF.get(head.criterion) == self.by
        return self._sweep_one is not None and bool(inside) and not asked_only

    def _first_standing(self, steps: list[tuple[str, str]], why: str | None) -> tuple[int, BisectResult | None]:
        """(the index of the first of the plan's bisections that stood, it), (count, None) where none did; a
        bisection's error (a lone step's) raised, saying what was tried, unless a sweep may still find a change:
        then what it set aside is kept."""
        from .window_changes import failed_aside

        try:
            return next((s for s in self._steps if s[1] is not None), (len(steps), None))
        except UsageError as e:  # an answer that tells nothing apart says what was tried
            if self._sweep_one is None:
                raise with_tried(e, why) from None
            self.set_aside += failed_aside(e, steps)
            self._failed = e
            return len(steps), None

    def left(self) -> list[str]:
        """What is still to search, one phrase a stage: `other outputs changes between 0.4.38 and 0.5.1
        (retraced)`, `time (frozen)`."""
        good, bad = self.ends
        return [f"other {self._kind_of(k)} changes between {good} and {bad} ({_how(m)})" if k == REST else
                f"every release between {good} and {bad} run once" if k == SWEEP else
                f"{k} ({_how(m)})" for m, k in self.pending]

    def _kind_of(self, kind: str) -> str:
        """A stage's kind of change: the headline's for the rest of its window."""
        return KIND_OF.get(self.result.criterion, self.result.criterion) if kind == REST else kind

    def next_stage(self) -> Stage | None:
        """The next stage run, what it landed stored (None: none is left)."""
        if not self.pending or self.head is None:
            return None
        mode, kind = self.pending.pop(0)
        stage = Stage(stage_name(mode, self._kind_of(kind)))
        before, cut = len(self.set_aside), False
        skipped = len(self._kinds.skipped) if self._kinds else 0
        with self._prefetched():
            try:
                stage.changes = self._rest() if kind == REST else self._swept() if kind == SWEEP else self._kind()
            except TimeSpentError as e:  # this stage and those after it: the next call's
                self._cut([(mode, kind), *self.pending], e.message)
                cut = True
            except ReproBundleError as e:
                if isinstance(e, OSError):  # a full disk is the machine's, not this stage's
                    raise
                self.set_aside.append({"criterion": self._kind_of(kind), "mode": mode,
                                       "why": f"not searched: {e.message}"[:2000]})
            interrupted = self.probes.stop.interrupted
            if interrupted and not cut:  # a search that took Ctrl-C as --max-time and kept what it had
                self._cut([(mode, kind), *self.pending], "interrupted by Ctrl-C")
                # a change it had not narrowed yet is not landed: the stored headline stays whole (whole_headline),
                # and the next call takes it as it is and searches this stage again
                stage.changes = [c for c in stage.changes if not c.unfinished]
            stage.set_aside = self.set_aside[before:]
            stage.skipped = self._kinds.skipped[skipped:] if self._kinds else []
            stage.answer_id = self._store(stage.changes)
        if interrupted:  # stored as --max-time would leave it; the next call resumes it
            raise BisectionInterrupted(self.head)
        return stage

    def leave(self, why: str) -> list[str]:
        """Every stage left to the next call (--max-time spent: `why`), stored so; their names."""
        names = [stage_name(m, self._kind_of(k)) for m, k in self.pending]
        if names:
            self._cut(list(self.pending), why)
            self._store([])
        return names

    @property
    def result(self) -> BisectResult:
        assert self.head is not None, "headline() first"
        return self.head

    # -- one stage's search ----------------------------------------------------------------------------------------

    def _run(self, mode: str, kind: str) -> BisectResult:
        """One bisection; a time bisection whose confirmation failed placed (window_changes.place): the first
        change it places stands in its stead (the others land with the rest of its window), its failed
        confirmation set aside."""
        assert self._kinds is not None
        result = self._kinds.run(mode, kind, self.ends)
        result.mode = mode
        found = self._kinds.place(result)
        self.not_listed += result.not_listed
        result.not_listed = []
        if not found:
            return result
        self.set_aside.append(unconfirmed(result))
        self._placed += found[1:]
        return found[0]

    def _swept_headline(self, why: str | None) -> BisectResult:
        """Where no bisection stood: the sweep's first change, ranked, the headline (its others land with the rest
        of its window); none: what each bisection set aside, and what the sweep did not run."""
        found = self._sweep_all(why)
        if not found:
            failed = self._failed or nothing_stood(self.set_aside)
            lines = [e["line"] for e in [*self._moved_out(), *self.not_listed] if e["line"] not in failed.message]
            raise with_tried(UsageError("; ".join([failed.message, *dict.fromkeys(lines)]), hint=failed.hint), why)
        head, *self._placed = ranked(found)
        return head

    def _sweep_all(self, why: str | None) -> list[BisectResult]:
        """Every change of outputs or bits the sweep finds (none where there is no sweep), its `never_ran` lines
        kept."""
        if self._sweep_one is None:
            return []
        swept, never = self._sweep_one()
        self.not_listed += never
        for change in swept:
            change.mode_why = why
        return swept

    def _moved_out(self) -> list[dict]:
        """The `not_listed` lines the entries set aside carried (a screen's or the endpoints' small slowdown), moved
        into `not_listed`: each said once; the lines moved."""
        moved = [aside.pop("not_listed") for aside in self.set_aside if aside.get("not_listed")]
        self.not_listed += moved
        return moved

    def _screen(self, mode: str) -> dict:
        assert self._kinds is not None
        return self._kinds.screen(mode, self.ends)

    def _rest(self) -> list[BisectResult]:
        """The headline's window searched for its other changes of its kind: those, each with its layer."""
        assert self._kinds is not None and self.head is not None
        head = self.head
        known = {_key(c) for c in [head, *head.changes]}
        placed, self._placed = self._placed, []
        found = ranked([c for c in [*self._kinds.split(head), *placed] if c is not head and _key(c) not in known])
        for change in found:
            change.layer = self._layer(change)
            self._keep(change)
        return found

    def _kind(self) -> list[BisectResult]:
        """The next kind of the plan bisected, and its window's changes, each with its layer ([]: set aside)."""
        assert self._kinds is not None
        step = next(self._steps, None)
        if step is None:  # --max-time ended the plan: its bisections set the rest aside, unfinished
            self.pending = []
            return []
        stood = step[1]
        if stood is None:
            return []
        known = {_key(c) for c in [self.result, *self.result.changes]}
        placed, self._placed = self._placed, []  # what its confirmation's failure placed beside it
        found = ranked([c for c in [*self._kinds.split(stood), *placed] if _key(c) not in known])
        for change in found:
            change.layer = self._layer(change)
            self._keep(change)
        return found

    def _swept(self) -> list[BisectResult]:
        """The sweep's changes no search listed yet, each with its layer."""
        known = {_key(c) for c in [self.result, *self.result.changes]}
        found = [c for c in ranked(self._sweep_all(self.result.mode_why)) if _key(c) not in known]
        for change in found:
            change.layer = self._layer(change)
        return found

    def _cut(self, stages: list[tuple[str, str]], why: str) -> None:
        """The stages --max-time left, set aside `unfinished` (the next call's), none left to run here."""
        self.set_aside += [{"criterion": k, "mode": m, "why": f"not searched: {why}", "unfinished": True}
                           for m, k in stages if k not in WHOLE]
        if any(k in WHOLE for _, k in stages):  # said by the headline's own cut, as window_changes.split says it
            self.result.unfinished = self.result.unfinished or f"the window's other changes were not searched: {why}"
            self.result.cut_at = self.result.cut_at or _cut_at(stages)
        self.pending = []

    def _layer(self, change: BisectResult) -> dict | None:
        assert self._kinds is not None
        case = self.case
        return layer_of(self._kinds.search(change.mode), change, self.probes, False,
                        (case.ref, case.store, BISECT_OPTIONS))

    def _keep(self, change: BisectResult) -> None:
        """What a change's own bisection said beside it (its `also`, its `set_aside`) kept for the headline's
        answer; the change keeps its own."""
        self._also += change.also
        self.set_aside += [s for s in change.set_aside if s not in self.set_aside]
        change.also, change.also_runs, change.set_aside = [], [], []

    # -- what is stored ----------------------------------------------------------------------------------------------

    def _store(self, landed: list[BisectResult]) -> str | None:
        """Each change `landed` stored as its own answer, then the headline's answer listing every change so far,
        `unfinished` while stages are left; its id (the headline's `answer_id`)."""
        registry, bundle = self.case.where()
        head, forced = self.result, None if self.mode == "auto" else self.mode
        self._land(landed, forced)
        self._list()
        record = self._record(registry, bundle, bisect_command(self.case.ref, head, forced))
        tested = [v for c in [head, *head.changes] for v in tested_builds(c)]
        builds = builds_of(self.case.manager, [*((self._base.get("reuse") or {}).get("builds") or {}), *tested])
        head.answer_id = store_answer(registry, record, reuse_key(registry, "bisect", self.asked, builds))
        return head.answer_id

    def _land(self, landed: list[BisectResult], forced: str | None) -> None:
        """Each change `landed`: its changed defaults (with time left), its own answer stored (the headline's is the
        list's)."""
        registry, bundle = self.case.where()
        left = self.probes.ledger.left()
        manager = self.case.manager if left is None or left > 0 else None  # no time: the defaults not read
        for change in landed:
            if manager is not None:
                change.changed_defaults = changed_defaults_of(change, manager, self.case.progress)
            if change is not self.head:
                change.answer_id = stored_answer(registry, bundle, change, self.case.ref, forced)
                self.result.changes.append(change)

    def _list(self) -> None:
        """The headline's list now: every other change ranked after it, each said in `also` too (and what a
        bisection found beside its own change, where no change lists it), what was set aside."""
        head = self.result
        head.changes = ranked([c for c in head.changes if c is not head])
        listed = {(KIND_OF.get(c.criterion), c.first_bad) for c in head.changes}
        head.also = [also_entry(c) for c in head.changes] + [
            o for o in self._also if (KIND_OF.get(o["criterion"]), o["first_bad"]) not in listed]
        self._moved_out()
        head.set_aside = list(self.set_aside)
        head.not_listed = list(self.not_listed)

    def _record(self, registry, bundle, command: str) -> dict:
        """The headline's answer record now: the first is bisection_answer's; each later one that record's answer
        with this list of changes, what is set aside and what is left, resting on its runs and the new changes'."""
        head = self.result
        unfinished, cut_at, left = self._unfinished()
        if not self._base:
            self._base = bisection_answer(bundle, replace(head, unfinished=unfinished, cut_at=cut_at,
                                                          set_aside=head.set_aside + left), command,
                                          registry.new_run_id())
            return self._base
        answer = dict(self._base["answer"])
        answer.update(also=head.also, set_aside=head.set_aside + left, unfinished=unfinished, cut_at=cut_at,
                      not_listed=head.not_listed)
        if head.changes:
            answer["changes"] = [change_entry(replace(head, unfinished=unfinished, cut_at=cut_at), {"answer_id": None}),
                                 *[change_entry(c, {"answer_id": c.answer_id}) for c in head.changes]]
        runs = [{"run_id": r} for r in self._base["runs"]] + [
            run for c in head.changes for run in [*c.runs.values(), *c.confirm_runs, *c.control_runs]]
        return answer_record(bundle, BISECTION, command, runs, answer, registry.new_run_id())

    def _unfinished(self) -> tuple[str | None, str | None, list[dict]]:
        """(unfinished, cut_at, the set_aside entries of the kinds still to search) of the headline's answer now."""
        head = self.result
        left = [{"criterion": k, "mode": m, "why": "not searched yet: the headline's report came first",
                 "unfinished": True} for m, k in self.pending if k not in WHOLE]
        if not self.pending:
            cut = [e["line"] for e in head.not_listed if e.get("unfinished")]  # releases --max-time left unrun
            if cut and not head.unfinished:
                return f"--max-time spent: {cut[0]}", "split", []
            return head.unfinished, head.cut_at, []
        said = f"the headline was answered first; still to search: {', '.join(self.left())}"
        return head.unfinished or said, head.cut_at or _cut_at(self.pending), left

    def _reuse(self, record: dict) -> BisectResult:
        """A stored answer a stage left unfinished, its headline whole: taken as it is, what it left still to
        search (the rest of the headline's window where `cut_at` says so; each kind set aside `unfinished`)."""
        registry, bundle = self.case.where()
        head = stored_bisection(record, registry.answers(bundle.ref.bundle_id))
        a = record["answer"]
        left = [s for s in head.set_aside if s.get("unfinished")]
        self.set_aside = [s for s in head.set_aside if not s.get("unfinished")]
        self.pending = [(head.mode, REST)] * (a.get("cut_at") == "split") + [
            (str(s.get("mode") or "frozen"), str(s["criterion"])) for s in left]
        listed = {(KIND_OF.get(c.criterion), c.first_bad) for c in head.changes}
        self._also = [o for o in head.also if (KIND_OF.get(str(o.get("criterion"))), o.get("first_bad")) not in listed]
        self._base, self.reused, self.head = record, record, head
        self._resume_sweep(head)
        steps = [(m, k) for m, k in self.pending if k not in WHOLE]
        planned_steps = [(head.mode, str(KIND_OF.get(head.criterion, head.criterion))), *steps]
        self._steps = standing_each(steps, self._run, self.by, head.mode_why, self.set_aside, self.case.progress,
                                    screened(planned_steps, self.by, self._screen), stood=True)
        head.resumed = (f"resumed from the search stored {record.get('created')}: its headline and "
                        f"{len(head.changes)} other change(s) taken as they are; still to search: "
                        f"{', '.join(self.left()) or 'nothing'}")
        if self.case.progress:
            self.case.progress(f"bisect: {head.resumed}")
        return head

    def _resume_sweep(self, head: BisectResult) -> None:
        """The searches of a resumed answer, and its sweep among the stages left: the sweep is the last stage, so
        an answer a stage left unfinished never finished it (its `never_ran` lines are the sweep's to say again)."""
        self._kinds = KindSearches(self.probes, self.jobs, self._want, self.case.manager, self.case.progress)
        for change in [head, *head.changes]:
            self._kinds.stood(change)
        self._sweep_one = self._kinds.sweeper(self.ends, surveyed_modes(self.probes, self.mode), self.by)
        self.pending += [(head.mode, SWEEP)] * self._sweeps(head)
        self.not_listed = [e for e in head.not_listed if e.get("kind") != "never_ran"]

    # -- environments made ahead, within a stage only --------------------------------------------------------------

    def _want(self, versions) -> None:
        if self._prefetch is not None:
            self._prefetch.want(versions)

    @contextmanager
    def _prefetched(self):
        """Environments made in the background while a stage searches, none while the chain's other steps run."""
        from ...envs.prefetch import Prefetch

        with Prefetch(self.case.manager, self.jobs) as prefetch:
            self._prefetch = prefetch
            try:
                yield
            finally:
                self._prefetch = None


def _cut_at(left: list[tuple[str, str]]) -> str:
    """A stored headline's `cut_at` with the stages `left` still to run: "split" only where the rest of its window is
    among them (the next call, _reuse, searches it then); "kinds" else: a sweep left is run again by any resumed
    call (_resume_sweep)."""
    return "split" if any(kind == REST for _, kind in left) else "kinds"


def splittable(head: BisectResult) -> bool:
    """Whether the rest of the headline's window may hold other changes of its kind that window_changes.split would
    search: by time, where its probes' verdicts show the time moved elsewhere too (time_windows); else where its
    window holds releases besides its own change's pair."""
    from .window_changes import time_windows

    if head.first_bad == head.last_good or head.unfinished or head.searched_whole:
        return False
    if KIND_OF.get(head.criterion) == "time":
        return bool(time_windows(head))
    return (head.last_good, head.first_bad) != (head.good, head.bad)


def whole_headline(record: dict) -> bool:
    """Whether a stored answer cut short had its headline whole (its search narrowed to neighbouring releases, its
    layer read, each change listed after it finished): what it left is later stages only."""
    a = record.get("answer") or {}
    listed = a.get("changes")
    changes: list = listed if isinstance(listed, list) else []
    return a.get("cut_at") in ("split", "kinds") and isinstance(a.get("layer"), dict) and \
        a.get("first_bad") != a.get("last_good") and \
        not any(isinstance(c, dict) and c.get("unfinished") for c in changes[1:])


def _key(change: BisectResult) -> tuple:
    return KIND_OF.get(change.criterion, change.criterion), change.last_good, change.first_bad
