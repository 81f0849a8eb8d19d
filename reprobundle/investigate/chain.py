"""`reprobundle investigate REF --good A --bad B`: the whole chain from "it broke between A and B" to the issue body,
the user's answer first: the headline's whole chain and its report, then every other change, each answer kept as it
comes (the bisection's answer record, the minimized piece, the issue file), so an interrupted investigation keeps
the steps already answered and the report of all that was answered.

1. bisect, the headline's search (search/headline_first.py): the endpoints run frozen and retraced, untimed, and the
   kinds of change they show bisected one at a time, the most severe first (outputs beyond the tolerance, a settled
   slowdown, bits within it: investigate/search/mode_choice.py), until one stands, unless `mode` (--retrace/--frozen)
   or `by` (--by outputs|bits|time) directs it; a speedup, or a time change its confirmation did not reproduce, is
   no regression and is said so; the headline (the first change that stands) with the layer at its boundary, its
   answer stored beside its runs (`unfinished` while more is to search); endpoints that show no change end it there,
   with bisect's one line saying what was compared;
2. the headline's chain: explain at the boundary, in the bisection's mode and by its criterion (the changed
   default, pass or flag that restores the last good release, and the line to paste; its answer stored); the first
   bad JAX commit, for a change in JAX's lowering, when a JAX repository is here (commit_search.py); minimize, for a
   change the frozen module shows (the smallest piece that still shows it); the newest release beside the last good
   one (investigate/report/newest.py): still broken there, or fixed;
3. the issue body (investigate/report/issue_facts.py), which says the stored bisection's release and layer, and
   whether the release notes document a changed default (from `jax_repo`, else a clone in the cache): the report,
   `report_written_s` from the start, what was still to search then in `left_at_report`;
4. then the rest, stage by stage (headline_first.HeadlineFirst.next_stage, a step `search bits (retraced)` each):
   the rest of the headline's window (other changes of its kind), then each later kind of the plan; each change a
   stage lands gets its own explain, commits and newest release (named by its release and kind: `explain 0.5.1
   (bits)`), and the issue body is written again (`issue 0.5.1 (bits)`).
The body is also written after each of the headline's steps that answered something new (`written` lists every
write), each write atomic (a temporary file renamed over the last: a partial body never becomes visible), so Ctrl-C
at any point leaves the body of all that was answered.
With `bad` a commit of JAX's repository (a hash, `main`; no release lies between it and `good`) the chain is the
commit bisection from `good` to it (commit_search.commit_window_step) and the issue; the steps that compare releases
say why they do not apply.
A step that does not apply says why; each says where its time went and the command that reruns it alone. A step
that fails (explain, commits, minimize, the newest release, the issue body, a later stage's search: a worker that hung
or crashed, a release that would not install) is one line, `failed` with what happened (`jax 0.10.0 hung in
'execute' for 63 s`: the release, the phase and the seconds, from how the worker's end was said:
run/worker_launch.deaths_said; `failure` in `--json`), and the chain goes on; a full disk still ends it.
`max_time_s` counts from the start and bounds every step: the bisection's probes are not started where they would
end past it (the search then keeps what it had narrowed: run/spent.Ledger), its timed rounds end within it, explain,
minimize and the newest release get what is left (explain at most its own default), and a step with under
MIN_STEP_S left is not started. Each step records when it started (`started_s`, from the start).

The chain is a plan of steps over stored answers: the bisection, the explanation, the commit bisection, the minimized
piece (minimize/stored_piece.py; and the newest release's replay) whose answer for the same bundle, question and builds is stored
here is reused, status `stored` ("stored 2 min ago": answers.reusable decides, exactly, and never trusts a record
another store or machine computed); `again` recomputes every step. Each answer is stored as its step ends, so an
interrupted or time-bounded investigation is resumed by the next call: a bisection --max-time (or a stage not yet
run) left unfinished is never reused as an answer; the next call takes its headline and the changes it listed as
they are and searches what it left (headline_first.py), or, where its headline's own search was cut short, starts
inside the window it had narrowed (its endpoints checked again, the releases outside it not probed again: "resumed
from a stored search cut short: ...").
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..analysis.diagnosis import still_slower
from ..bundle.registry import utc_now
from ..errors import ReproBundleError, TimeSpentError, UsageError
from .answers import BISECTION, EXPLANATION, reusable, stored_ago
from .case import Case
from .explain.explanation import EXPLAIN_OPTIONS, explain_between, explanation_asked
from .search.bisection import BisectionInterrupted, confirmed_ends, first_bad_text
from .search.bisection_answer import reported_run, stored_bisection
from .search.commit_search import commit_step, commit_window_step, repo_here
from .search.headline_first import HeadlineFirst, Stage
from .search.release_search import BISECT_OPTIONS, bisection_asked, check_bisect_request

MIN_STEP_S = 20.0  # less time than this left: a timed step is not started


@dataclass
class Step:
    name: str  # bisect, explain, commits, minimize, newest, issue; search KIND (MODE); a later change's by release
    # "answered", "stored" (a stored answer reused: `reused` says when), "skipped" (with why), "left" (no time
    # left under --max-time: the next call runs it), "failed" (with what happened: `failure`)
    status: str
    answer: str  # one line
    spent_s: float = 0.0
    command: str | None = None  # reruns this step alone
    stored: str | None = None  # what it left in the store or on disk: an answer id, a bundle ref, a file
    started_s: float | None = None  # when it started, from the investigation's start (None: not started)
    # the bisection's probes (and a later stage's): what each replayed and when it started, from the start
    probes: list[dict] | None = None
    reused: str | None = None  # "stored 2 min ago", where the answer was a stored one
    # a failed step: {"error": the error's line, "deaths": [{"release", "how" ("hung", "crashed"), "phase",
    # "seconds", "signal", "times"}]}: the workers that hung or crashed, as their end was said
    failure: dict | None = None


@dataclass
class Investigation:
    ref: str
    good: str
    bad: str
    steps: list[Step] = field(default_factory=list)
    first_bad: str | None = None
    layer: str | None = None
    chosen: str | None = None  # what the bisection looked at and why, one line (as asked, or mode_choice.plan's)
    max_time_s: float | None = None
    # a headline slowdown explain's own measurement did not settle: said so, and then no first bad release
    unsettled: str | None = None
    report_written_s: float | None = None  # when the headline's issue body was written, from the start
    left_at_report: list[str] = field(default_factory=list)  # what was still to search then
    # every write of the issue body: {"at_s": when it was written, from the start, "after": the step it followed}
    written: list[dict] = field(default_factory=list)

    def data(self) -> dict:
        return {"ref": self.ref, "good": self.good, "bad": self.bad, "first_bad": self.first_bad,
                "layer": self.layer, "chosen": self.chosen, "max_time_s": self.max_time_s, "unsettled": self.unsettled,
                "report_written_s": self.report_written_s, "left_at_report": list(self.left_at_report),
                "written": list(self.written), "steps": [vars(s) for s in self.steps]}


def investigate(case: Case, good: str, bad: str, *, max_time_s: float | None = None,
                issue_path: str | Path | None = None, mode: str = "auto", by: str | None = None,
                jax_repo: str | None = None, markdown: Callable[[dict], str] = str,
                again: bool = False) -> Investigation:
    """The chain above on the case's bundle between releases `good` and `bad` (api.investigate's work once the
    store is open); the issue body written to `issue_path` (default NAME-issue.md in the current folder). `mode`
    ("auto", "frozen", "retrace") and `by` (None, "outputs", "bits", "time") direct the bisection as bisect's do.
    `jax_repo`: a clone of JAX (a folder or URL) for the first bad commit and the release notes (default: a clone an
    earlier `bisect-commits` left in the cache; none is made). `markdown`: the issue's data as its Markdown body
    (render/issue.py's issue_markdown, which the face passes: render is a layer above this one). `again`:
    recompute every step, stored answers or not."""
    if max_time_s is not None and max_time_s <= 0:
        raise UsageError(f"invalid --max-time {max_time_s}", hint="seconds, above 0")
    from ..run.spent import Ledger

    ledger = Ledger(max_time_s)  # the bisection's probes, within --max-time from here
    out = Investigation(case.ref, good, bad, max_time_s=max_time_s)
    body = _Body(out, case, ledger, (issue_path, markdown), jax_repo)
    try:
        return _chain_of(out, case, body, ledger, (good, bad), (mode, by), jax_repo, again)
    except KeyboardInterrupt as e:  # Ctrl-C: said what stays, then the command ends as Ctrl-C ends it
        if case.progress:
            from ..logs import Status

            case.progress(Status(kept_line(out, body.path, e), "interrupted"))
        raise


def _chain_of(out: Investigation, case: Case, body: "_Body", ledger, ends: tuple[str, str],
              asked: tuple[str, str | None], jax_repo: str | None, again: bool) -> Investigation:
    """investigate's chain once its record, body and ledger exist."""
    from .search.commit_bisect import names_a_release

    (good, bad), max_time_s = ends, ledger.max_time_s
    # a commit of a JAX repository here (else --bad is read as a release, and a typo is said as one)
    if not names_a_release(bad) and repo_here(jax_repo, case.manager):
        if _commit_window(out, (good, bad), case, jax_repo, max_time_s):
            body.write("issue", "commits")
        else:
            out.steps.append(Step("issue", "skipped", "no first bad commit: nothing to report"))
        return out
    found = _bisect_step(out, case, (good, bad), asked, ledger, again)
    if found is None:  # --max-time spent before the bisection answered: the next call goes on from here
        out.steps += [Step(name, "left", "--max-time spent before the bisection answered")
                      for name in ("explain", "commits", "minimize", "newest", "issue")]
        return out
    search, body.run_id = found
    chain = _Chain(out, case, ledger, jax_repo, again, body)
    chain.headline(search.result)
    chain.report(search.left())
    for change in list(search.result.changes):  # those a stored answer listed already
        chain.change(change, search.result)
    while (stage := _staged(out, ledger, search, case.progress)) is not None:
        for change in stage.changes:
            chain.change(change, search.result)
        chain.stage_done(stage, search)
    return out


def kept_line(out: Investigation, body_path: str | None, interrupted: KeyboardInterrupt) -> str:
    """What an investigation Ctrl-C stopped keeps, one progress line: each step's answer stored as the step ended, a
    search it stopped stored unfinished (bisection.BisectionInterrupted), the issue body as last written; the same
    command goes on from them."""
    answered = [s.name for s in out.steps if s.status in ("answered", "stored")]
    kept = [f"the answers of {', '.join(answered)}"] if answered else []
    if isinstance(interrupted, BisectionInterrupted) and interrupted.result is not None:
        kept.append("the search so far, unfinished")
    body = f"; the issue body as last written: {body_path}" if body_path else ""
    if not kept:
        return f"investigate: interrupted before anything was answered{body}; the same command starts it again"
    return f"investigate: interrupted: kept {' and '.join(kept)}{body}; the same command again goes on from them"


class _Answered:
    """A stored bisection reused whole: its headline and every change it listed; no stage is left."""

    def __init__(self, result):
        self.result = result

    @staticmethod
    def left() -> list[str]:
        return []

    @staticmethod
    def next_stage() -> Stage | None:
        return None

    @staticmethod
    def leave(_why: str) -> list[str]:
        return []


class _Chain:
    """The steps after the bisection, each change's in turn, the issue body written as answers come."""

    def __init__(self, out: Investigation, case: Case, ledger, jax_repo: str | None, again: bool, body: "_Body"):
        self.out, self.case, self.ledger, self.jax_repo, self.again, self.body = out, case, ledger, jax_repo, again, body
        self.say = case.progress or (lambda _line: None)

    def headline(self, result) -> None:
        """The headline's chain: explain, its first bad commit, minimize, the newest release, the body written after
        each that answered something new (the first after the bisection itself)."""
        out, case, left = self.out, self.case, self.ledger.left
        self.body.write(None, "bisect")
        _started(out, self.ledger, _explain_step, out, result, case, left(), self.again, self.jax_repo)
        self._written()
        # the first bad commit, for a change in JAX's lowering (commit_search.py decides whether and says why not)
        _started(out, self.ledger, _commit_step, out, result, case, left(), self.jax_repo, self.again)
        self._written()
        _started(out, self.ledger, _minimize_step, out, result, case, left(), self.again)
        self._written()
        _started(out, self.ledger, _newest_step, out, result, case, left(), self.again)  # then the report

    def _written(self) -> None:
        """The body written again where the step just run answered something new (or failed: said)."""
        if self.out.steps[-1].status in ("answered", "failed"):
            self.body.write(None, self.out.steps[-1].name)

    def report(self, left: list[str]) -> None:
        """The headline's issue body, said with what is still to search."""
        from ..logs import Status

        if self.body.write("issue", "newest"):
            self.out.report_written_s = self.out.written[-1]["at_s"]
            self.out.left_at_report = list(left)
            rest = f"; still to search: {', '.join(left)}" if left else "; nothing more to search"
            self.say(Status(f"investigate: report written in {self.out.report_written_s:.0f} s "
                            f"({self.out.steps[-1].stored}){rest}", "report"))

    def change(self, change, headline) -> None:
        """A change other than the headline answered whole (explain, commits, newest), then the body written again
        where it answered something new."""
        out, before = self.out, len(self.out.steps)
        _started(out, self.ledger, _explain_step, out, change, self.case, self.ledger.left(), self.again,
                 self.jax_repo)
        _started(out, self.ledger, _commit_step, out, change, self.case, self.ledger.left(), self.jax_repo,
                 self.again)
        _started(out, self.ledger, _newest_step, out, change, self.case, self.ledger.left(), self.again)
        _of_change(out.steps[before:], change, headline)
        if any(s.status in ("answered", "failed") for s in out.steps[before:]):
            self.body.write(_change_name("issue", change), out.steps[-1].name)

    def stage_done(self, stage: Stage, search) -> None:
        """After a stage: the body written once more where the stage landed nothing but was the last (what the body
        says is the whole answer's now)."""
        if not stage.changes and not search.left():
            self.body.write(None, stage.name)


def _staged(out: Investigation, ledger, search, progress: Callable[[str], None] | None) -> Stage | None:
    """The search's next stage run, as a step of its own (`search bits (retraced)`); None where none is left."""
    if progress and search.left():
        progress(f"investigate: searching {search.left()[0]}")
    left = ledger.left()
    if left is not None and left < MIN_STEP_S:  # no stage starts past --max-time: the next call runs them
        out.steps += [Step(name, "left", _no_time(left)) for name in search.leave(_no_time(left))]
        _update_bisect(out, search.result)
        return None
    at, before = round(time.perf_counter() - ledger.started, 3), len(ledger.probes)
    stage, spent = _timed(search.next_stage)
    if stage is None:
        return None
    probes = [{k: p[k] for k in ("what", "versions", "at_s", "wall_s")} for p in ledger.probes[before:]]
    out.steps.append(Step(stage.name, "answered", stage.said, spent, stored=stage.answer_id, started_s=at,
                          probes=probes))
    _update_bisect(out, search.result)
    return stage


def _update_bisect(out: Investigation, result) -> None:
    """The bisect step's answer and record brought up to date: every change so far, the latest record."""
    step = next((s for s in out.steps if s.name == "bisect"), None)
    if step is not None:
        step.answer, step.stored = _bisect_answer(result, out.chosen or ""), result.answer_id


class _Body:
    """The issue body of the case's bundle, written as answers come (bundle/frozen_script.write_text: atomically)."""

    def __init__(self, out: Investigation, case: Case, ledger, written: tuple, jax_repo: str | None):
        self.out, self.case, self.ledger, self.written, self.jax_repo = out, case, ledger, written, jax_repo
        self.run_id: str | None = None  # the replay the report shows
        self.path: str | None = None  # where the body was last written

    def write(self, name: str | None, after: str) -> bool:
        """The body written now, as a step named `name` (None: not a step of its own, only in `written`); False
        where it could not be (a failed step, said, where it is one)."""
        out, at, before = self.out, time.perf_counter() - self.ledger.started, len(self.out.steps)
        try:
            _issue_step(out, self.case, self.written, self.run_id, self.jax_repo, name or "issue")
        except ReproBundleError as e:
            if isinstance(e, OSError):  # a full disk: nothing more can be written
                raise
            if name is not None:
                out.steps.append(_failed(name, e.message, [], started_s=round(at, 3)))
            return False
        step = out.steps.pop() if name is None else out.steps[before]
        step.started_s, self.path = round(at, 3), step.stored
        out.written.append({"at_s": round(time.perf_counter() - self.ledger.started, 3), "after": after})
        return True


def _change_name(name: str, change) -> str:
    """`issue 0.5.1 (bits)`: a step of a change other than the headline, by its release and kind."""
    from .search.window_changes import KIND_OF

    return f"{name} {change.first_bad} ({KIND_OF.get(change.criterion, change.criterion)})"


def _of_change(steps: list[Step], change, headline) -> None:
    """The steps of a change other than the headline named by its release and kind: `explain 0.5.1 (bits)` (two
    kinds may change at one release)."""
    for step in steps if change is not headline else []:
        step.name = _change_name(step.name, change)


def _started(out: Investigation, ledger, step: Callable[..., None], *args: Any) -> None:
    """`step(*args)`, each Step it adds that ran (not skipped, nor left for want of time) marked with when it
    started."""
    at, before = round(time.perf_counter() - ledger.started, 3), len(out.steps)
    step(*args)
    for added in out.steps[before:]:
        if added.status not in ("skipped", "left") and added.started_s is None:
            added.started_s = at


def _failed(name: str, message: str, releases: list[str], **fields: Any) -> Step:
    """A step that failed, in one line: each worker that hung or crashed with its release, phase and seconds, then
    the error's own line."""
    deaths = deaths_of(message, releases)
    said = "; ".join(death_line(d) for d in deaths)
    return Step(name, "failed", f"{said}: {message}" if said else message,
                failure={"error": message, "deaths": deaths}, **fields)


def deaths_of(text: str, releases: list[str]) -> list[dict]:
    """The workers `text` says hung or crashed (run/worker_launch.deaths_said), each with its release (the
    `jax V` or the baseline/candidate named before it, else the last of `releases`), the same end of one release in
    one phase counted (`times`)."""
    import re

    from ..run.worker_launch import deaths_said

    sides = {"baseline": releases[0] if releases else None, "candidate": releases[-1] if releases else None}
    out: list[dict] = []
    for death in deaths_said(text):
        named = list(re.finditer(r"\bjax (\d[\w.+-]*\w)|\bthe (baseline|candidate)\b", text[:death["at"]]))
        release = (named[-1].group(1) or sides[named[-1].group(2)]) if named else (releases[-1] if releases else None)
        key = {"release": release, "how": death["how"], "phase": death["phase"], "signal": death["signal"]}
        same = next((d for d in out if all(d[k] == v for k, v in key.items())), None)
        if same is not None:
            same["times"] += 1
        else:
            out.append({**key, "seconds": death["seconds"], "times": 1})
    return out


def death_line(death: dict) -> str:
    """`jax 0.10.0 hung in 'execute' for 63 s, twice`; `jax 0.4.35 crashed (SIGABRT) in 'load'`."""
    who = f"jax {death['release']}" if death.get("release") else "a worker"
    how = "hung" if death["how"] == "hung" else f"crashed ({death['signal']})" if death.get("signal") else "crashed"
    where = f" in {death['phase']!r}" if death.get("phase") else ""
    long = f" for {death['seconds']:.0f} s" if death.get("seconds") else ""
    times = {1: "", 2: ", twice"}.get(death["times"], f", {death['times']} times")
    return f"{who} {how}{where}{long}{times}"


def _commit_window(out: Investigation, ends: tuple[str, str], case: Case, jax_repo: str | None,
                   max_time_s: float | None = None) -> bool:
    """investigate --bad COMMIT: the commits from the good release to the commit, each over the good release's
    jaxlib (so the change is JAX's lowering by construction); explain, minimize and the newest release compare
    releases or the frozen module, and say why they do not apply. Whether a first bad commit was found."""
    good, bad = ends
    step, found = commit_window_step(case, good, bad, jax_repo, max_time_s)
    out.steps.append(Step(**step))
    out.first_bad = (found.get("first_bad") or {}).get("sha", "")[:10] or None
    out.layer, out.chosen = "lowering", f"the commits from jax {good} to {bad}, retraced over jax {good}'s jaxlib"
    out.steps += [Step("explain", "skipped", "the bad end is a commit: explain compares two releases or environments "
                                             "(`envs --add-commit` makes one of a commit for `explain --jax PATH`)"),
                  Step("minimize", "skipped", "a change of JAX's lowering (every probe ran over one jaxlib) is no "
                                              "property of the frozen module minimize reduces"),
                  Step("newest", "skipped", "the bad end is a commit, not a release the newest one is compared to")]
    return out.first_bad is not None


def _commit_step(out: Investigation, result, case: Case, left: float | None, jax_repo: str | None,
                 again: bool) -> None:
    """The first bad commit, for a change in JAX's lowering (commit_search.py decides whether, reuses a stored
    answer of the same window, and says why not); left for the next call with under MIN_STEP_S of --max-time."""
    if left is not None and left < MIN_STEP_S:
        out.steps.append(Step("commits", "left", _no_time(left)))
        return
    step = commit_step(result, case, jax_repo, again, left)
    if step["status"] == "failed":
        out.steps.append(_failed("commits", step["answer"], [result.last_good, result.first_bad],
                                 spent_s=step.get("spent_s", 0.0), command=step.get("command")))
        return
    out.steps.append(Step(**step))


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    value = fn()
    return value, round(time.monotonic() - t0, 1)


def _bisect_step(out: Investigation, case: Case, ends: tuple[str, str], asked: tuple[str, str | None], ledger,
                 again: bool):
    """(the search, the run its report shows): a stored bisection of the same question reused whole, else the
    headline's search run now (search/headline_first.py: its probes in `ledger`, within its --max-time; its answer
    stored as it ends; a stored one a stage left unfinished taken as it is); None where --max-time was spent before
    it answered anything."""
    good, bad = ends
    mode, by = asked
    ref, store_args = case.ref, case.store_args
    check_bisect_request(good, bad, mode, None, False, case.config, by)
    flags = _flags(mode, by).split()
    command = _command("bisect", ref, "--good", good, "--bad", bad, *flags, *store_args)
    probes = (lambda: [{k: p[k] for k in ("what", "versions", "at_s", "wall_s")} for p in ledger.probes])
    record = None if again else reusable(*case.where(), BISECTION, bisection_asked(
        good, bad, mode, by, False, BISECT_OPTIONS, True, False), case.manager)
    if record is not None:
        registry, bundle = case.where()  # every change it listed, each from its own stored answer
        search: Any = _Answered(stored_bisection(record, registry.answers(bundle.ref.bundle_id)))
        spent = 0.0
    else:
        search = HeadlineFirst(case, good, bad, mode=mode, by=by, ledger=ledger, resume=not again)
        try:
            _, spent = _timed(search.headline)
        except TimeSpentError as e:
            out.steps.append(Step("bisect", "failed", e.message, round(ledger.as_dict()["wall_s"], 1), command,
                                  started_s=0.0, probes=probes()))
            return None
        record = search.reused
    result = search.result
    layer = result.layer or {}
    out.first_bad, out.layer = result.first_bad, layer.get("layer")
    out.chosen = result.mode_why or f"as asked: {_flags(mode, by)}"
    out.steps.append(Step("bisect", "answered" if record is None else "stored", _bisect_answer(result, out.chosen),
                          spent, command, result.answer_id, started_s=0.0 if record is None else None,
                          probes=probes() if record is None else None,
                          reused=None if record is None else stored_ago(record.get("created"), case.started)))
    return search, reported_run(result) if record is None else record["answer"].get("reported_run")


def _flags(mode: str, by: str | None) -> str:
    """The bisection's flags as the user gave them: --retrace or --frozen, --by."""
    return " ".join([*({"retrace": ["--retrace"], "frozen": ["--frozen"]}.get(mode, [])),
                     *(["--by", by] if by else [])])


def _how(mode: str | None) -> str:
    return "retraced" if mode == "retrace" else "frozen"


def _bisect_answer(result, chosen: str) -> str:
    """The bisection's answer in one line: the headline (the most severe change that stands) and its layer, every
    other change with its own first bad release, what is no regression, and what it looked at and why."""
    layer = (result.layer or {}).get("text") or "?"
    said = [f"{first_bad_text(result)} (last good {result.last_good}; by {result.criterion}, "
            f"{_how(result.mode)}); layer: {layer}"]
    said += [f"also: {c.criterion} ({_how(c.mode)}) changed at {c.first_bad} (last good {c.last_good}); layer: "
             f"{(c.layer or {}).get('text') or '?'}" for c in result.changes]
    said += [f"also: {o['criterion']} ({_how(o.get('mode'))}) changed at {o['first_bad']} (last good "
             f"{o['last_good']})" for o in result.also[len(result.changes):]]
    said += [f"no regression: {s['criterion']} ({_how(s.get('mode'))}): {s['why']}" for s in result.set_aside]
    said += [f"not listed: {e['line']}" for e in result.not_listed]
    said += [c.resumed for c in [result, *result.changes] if c.resumed]
    said += [f"unfinished: {result.unfinished}"] if result.unfinished else []
    return "; ".join(said) + f"; chosen: {chosen}"


def _explain_step(out: Investigation, result, case: Case, left: float | None, again: bool,
                  jax_repo: str | None = None) -> None:
    from ..run.contenders import ContenderSpec
    from ..run.replay_options import replay_options
    from .explain.release_reach import window_releases

    ref, store_args = case.ref, case.store_args
    pair = [result.last_good, result.first_bad]
    mode, by = _explain_as(result)
    command = _command("explain", ref, "--jax", pair[0], "--jax", pair[1], "--retrace" if mode == "retrace" else
                       "--frozen", "--by", by, *store_args)
    if result.last_good == result.first_bad:
        out.steps.append(Step("explain", "skipped", "the bisection found no boundary to explain", command=command))
        return
    specs = [ContenderSpec(v) for v in pair]
    reach = window_releases(result.classes, result.first_bad, _newest(case, result.first_bad))
    budget = EXPLAIN_OPTIONS.max_time_s if left is None else min(left, EXPLAIN_OPTIONS.max_time_s or left)
    options = replay_options(None, {"max_time_s": max(budget or 1.0, 1.0)}, base=EXPLAIN_OPTIONS)
    ends = confirmed_ends(result) if by == "time" else None
    if ends is not None:  # each experiment's rounds end once the test between the confirmed ends says its side
        options = replace(options, ends=ends.as_data())
    record = None if again else reusable(*case.where(), EXPLANATION,
                                         explanation_asked(specs, options, mode, by, reach), case.manager)
    if record is not None:
        out.steps.append(Step("explain", "stored", record["answer"]["diagnosis"]["summary"], 0.0, command,
                              record["answer_id"], reused=stored_ago(record.get("created"), case.started)))
        return
    if left is not None and left < MIN_STEP_S:
        out.steps.append(Step("explain", "left", _no_time(left), command=command))
        return
    found = _explained(out, lambda: explain_between(case, specs, options, mode=mode, by=by, reach=reach,
                                                    jax_repo=jax_repo), pair,
                       command)
    if found is not None:
        _settled_again(out, result, found.get("regression"))


def _explained(out: Investigation, explain: Callable[[], dict], pair: list[str], command: str) -> dict | None:
    """explain's answer, its step added; None where it did not answer (its step says why: left for the next call
    where not even its evidence could end within --max-time, failed with what happened otherwise)."""
    t0 = time.monotonic()
    try:
        found, spent = _timed(explain)
    except TimeSpentError as e:
        out.steps.append(Step("explain", "left", f"{e.message}: the next `investigate` runs it", command=command))
        return None
    except ReproBundleError as e:  # a worker that hung or crashed, a release that would not install: one line
        if isinstance(e, OSError):  # a full disk is the machine's: nothing after it can be written
            raise
        out.steps.append(_failed("explain", e.message, pair, command=command,
                                 spent_s=round(time.monotonic() - t0, 1)))
        return None
    out.steps.append(Step("explain", "answered", found["diagnosis"]["summary"], spent, command, found["answer_id"]))
    return found


def _newest(case: Case, first_bad: str) -> str | None:
    """The newest release of the index (newest.py's), where it is later than `first_bad`, its environment made now;
    None where none is read. The newest step needs that environment anyway, and explain's answer is keyed on the
    builds its reach found: made after explain, it would change that key, and the next call would explain again."""
    from .report.newest import newest_release

    try:
        newest = newest_release(case.manager.available_versions(), first_bad)
        if newest is not None:
            from ..run.replay import replay_platform

            platform = replay_platform(case.where()[1], None).platform
            case.manager.ensure(newest, platform=platform, progress=case.progress)
        return newest
    except Exception:  # noqa: BLE001 - no index to read, or the newest does not install: the window's releases alone
        return None


def _settled_again(out: Investigation, result, regression: dict | None) -> None:
    """A headline slowdown that explain's measurement (new processes, new rounds) does not settle as slower, or
    find like the confirmed first bad release, is unsettled: said so, and no first bad release."""
    if result.criterion != "time" or result.first_bad != out.first_bad or still_slower(regression):
        return  # not the headline slowdown, or settled (or sided) again
    seen = "did not run" if not regression else f"{regression['ratio']:.3f}x" + (
        " [{:.3f}-{:.3f}]".format(*regression["ci95"]) if regression.get("ci95") else "") + \
        f" ({regression['verdict']}, {'settled' if regression.get('settled') else 'not settled'})"
    out.unsettled = (f"unsettled: jax {result.first_bad} looked slower than jax {result.last_good} in the bisection, "
                     f"but explain's own measurement of the pair {seen}: not a first bad release until a measurement "
                     "settles it (bisect --by time with more --rounds)")
    out.first_bad = None


def _explain_as(result) -> tuple[str, str]:
    """explain at the boundary in the bisection's mode and by its criterion: a lowering change retraced (a JAX
    option's default shows only there), outputs by outputs, time by time."""
    by = "time" if result.criterion == "time" else "bits" if result.criterion == "bits" else "outputs"
    return ("retrace" if result.mode == "retrace" else "frozen"), by


def _no_time(left: float) -> str:
    return f"--max-time spent ({max(0.0, left):.0f} s left): the next `investigate` runs it"


def _minimize_step(out: Investigation, result, case: Case, left: float | None, again: bool) -> None:
    """The smallest piece of the frozen module that still shows the change, for a change the compiler made; the
    piece minimize made of the same question on these builds is reused (minimize/stored_piece.py)."""
    from .minimize.stored_piece import minimization_asked, minimized_text, store_minimization, stored_minimization

    nxt = _minimize_command(out, result)
    if nxt is None:
        return
    words = shlex.split(nxt)
    versions = [words[i + 1] for i, w in enumerate(words) if w == "--jax"]
    asked = minimization_asked(versions, _property_of(words), "--bits" in words)
    record = None if again else stored_minimization(*case.where(), asked, case.manager)
    if record is not None:
        a = record["answer"]
        out.steps.append(Step("minimize", "stored", minimized_text(a["ops_before"], a["ops_after"], a["property"],
                                                                   versions, a["stopped"]),
                              0.0, nxt, a["packed"], reused=stored_ago(record.get("created"), case.started)))
        return
    if left is not None and left < MIN_STEP_S:
        out.steps.append(Step("minimize", "left", _no_time(left), command=nxt))
        return
    t0 = time.monotonic()
    try:
        found, spent = _timed(lambda: _minimized(case, versions, prop=asked["property"], bits=asked["bits"],
                                                 max_time_s=left))
    except TimeSpentError as e:
        out.steps.append(Step("minimize", "left", f"{e.message}: the next `investigate` runs it", command=nxt))
        return
    except ReproBundleError as e:  # a worker that hung or crashed: one line, and the chain goes on
        if isinstance(e, OSError):
            raise
        out.steps.append(_failed("minimize", e.message, versions, command=nxt, spent_s=round(time.monotonic() - t0, 1)))
        return
    store_minimization(*case.writable(), found, nxt, asked, case.manager)
    out.steps.append(Step("minimize", "answered", minimized_text(found.ops_before, found.ops_after, found.property,
                                                                 versions, found.stopped), spent, nxt, found.packed))


def _newest_step(out: Investigation, result, case: Case, left: float | None, again: bool) -> None:
    """Still broken? The newest release beside the last good one, as the bisection judged (its runs stored: the
    issue reads the verdict back from them; a stored replay of that pair on the builds here is reused)."""
    from .report.newest import check_newest, stored_newest

    if result.last_good == result.first_bad or result.answer_id is None:
        out.steps.append(Step("newest", "skipped", "the bisection found no boundary (or stored no answer)"))
        return
    stored = None if again else stored_newest(*case.where(), result.answer_id, case.manager)
    if stored is not None:
        out.steps.append(Step("newest", "stored", stored["text"], reused=stored_ago(stored.get("created"), case.started)))
        return
    if left is not None and left < MIN_STEP_S:
        out.steps.append(Step("newest", "left", _no_time(left)))
        return
    since = utc_now()
    try:
        found, spent = _timed(lambda: check_newest(case.ref, result.answer_id, store=case.store,
                                                   python=case.config.python, env_dir=case.config.root,
                                                   progress=case.progress, max_time_s=left))
    except TimeSpentError as e:
        out.steps.append(Step("newest", "left", f"{e.message}: the next `investigate` runs it"))
        return
    except ReproBundleError as e:  # a release that would not install, a store that failed: one line
        if isinstance(e, OSError):
            raise
        out.steps.append(_failed("newest", e.message, [result.last_good]))
        return
    ended = _runs_ended(case, since) if found and found.get("still") is None else []
    if ended:  # its replay did not run: how its workers ended, with the release, the phase and the seconds
        out.steps.append(_failed("newest", f"{found['text']}: " + "; ".join(ended), [found["release"]],
                                 spent_s=spent))
        return
    out.steps.append(Step("newest", "answered" if found else "skipped",
                          found["text"] if found else "the first bad release is the newest", spent))


def _runs_ended(case: Case, since: str) -> list[str]:
    """The reasons of the case's runs stored since `since` (utc_now) whose worker hung or crashed, each after its
    release (`jax V: ...`)."""
    registry, bundle = case.where()
    return [f"jax {r.get('requested')}: {r.get('reason')}" for r in registry.runs(bundle.ref.bundle_id)
            if str(r.get("created") or "") >= since and r.get("status") in ("timeout", "crashed")]


def _minimize_command(out: Investigation, result) -> str | None:
    """The boundary's minimize command, for a change the frozen module shows; None where the step is skipped (said
    in `out`)."""
    layer = (result.layer or {}).get("layer")
    nxt = next((s["command"] for s in (result.layer or {}).get("next") or [] if s["what"] == "minimize"), None)
    if layer == "lowering":
        out.steps.append(Step("minimize", "skipped", "the layer at the boundary is lowering: a change in JAX's "
                                                     "lowering is no property of the frozen module minimize reduces "
                                                     "(the issue shows the lowering diff)"))
    elif layer not in ("compiler", "both") or nxt is None:
        out.steps.append(Step("minimize", "skipped", f"the layer at the boundary is {layer or 'undecided'}: minimize "
                                                     "reduces the frozen module where the layer check found the "
                                                     "compiler's change, which it could not say here"))
    return nxt if layer in ("compiler", "both") else None


def _minimized(case: Case, versions: list[str], **settings: Any):
    """minimize/reduction.py's Minimization between `versions` of the case's (writable) bundle, as api.minimize makes it."""
    from ..run.contenders import contenders_from
    from .minimize.reduction import minimize

    registry, bundle = case.writable()
    return minimize(registry, bundle, contenders_from(versions, ()), env_manager=case.manager,
                    progress=case.progress, **settings)


def _property_of(words: list[str]) -> str:
    """The property of the boundary's minimize command: slower, error, else outputs."""
    return next((name for name in ("slower", "error") if f"--{name}" in words), "outputs")


def _issue_step(out: Investigation, case: Case, written: tuple[str | Path | None, Callable[[dict], str]],
                run_id: str | None, jax_repo: str | None = None, name: str = "issue") -> None:
    """The issue body of this investigation's own answer (its bisection's stored answer, or its commit window's,
    never the latest record of another window in the store), written where asked."""
    from ..bundle.frozen_script import write_text
    from .report.issue_facts import issue_data

    issue_path, issue_markdown = written
    ref, store, store_args = case.ref, case.store, case.store_args
    _, bundle = case.where()
    path = Path(issue_path) if issue_path else Path(f"{bundle.ref.name}-issue.md")
    answer_id = next((s.stored for s in out.steps if s.name in ("bisect", "commits") and s.stored), None)
    data, spent = _timed(lambda: issue_data(ref, store=store, run_id=run_id, jax_repo=jax_repo, answer_id=answer_id))
    write_text(path, issue_markdown(data))
    out.steps.append(Step(name, "answered", data["title"], spent,
                          _command("issue", ref, "-o", str(path), *(["--run", run_id] if run_id else []),
                                   *store_args), str(path)))


def _command(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in ["reprobundle", *args])
