"""`reprobundle investigate REF --good A --bad B`: the whole chain from "it broke between A and B" to the issue body,
one step after another, each answer kept as it comes (the bisection's answer record, the minimized piece, the
issue file), so an interrupted investigation keeps the steps already answered.

1. bisect: the endpoints run frozen and retraced, untimed, and every kind of change they show bisected, the most
   severe first (outputs beyond the tolerance, a settled slowdown, bits within it: investigate/search/mode_choice.py),
   unless `mode` (--retrace/--frozen) or `by` (--by outputs|bits|time) directs it; a speedup, or a time change its
   confirmation did not reproduce, is no regression and is said so; the headline (the most severe change that
   stands) with the layer at its boundary, its answer stored beside its runs; endpoints that show no change end it
   there, with bisect's one line saying what was compared;
2. explain at the boundary, in the bisection's mode and by its criterion: the changed default, pass or flag that
   restores the last good release, and the line to paste (its answer stored beside its runs);
2b. the first bad JAX commit, for a change in JAX's lowering, when a JAX repository is here (commit_search.py);
3. minimize, for a change the frozen module shows (outputs, bits or time): the smallest piece that still shows it;
3b. the newest release beside the last good one (investigate/report/newest.py): still broken there, or fixed;
4. the issue body of the bundle (investigate/report/issue_facts.py), which says the stored bisection's release and layer, and
   whether the release notes document a changed default (from `jax_repo`, else a clone in the cache).
With `bad` a commit of JAX's repository (a hash, `main`; no release lies between it and `good`) the chain is the
commit bisection from `good` to it (commit_search.commit_window_step) and the issue; the steps that compare releases
say why they do not apply.
A step that does not apply says why; each says where its time went and the command that reruns it alone.
`max_time_s` counts from the start and bounds every step: the bisection's probes are not started where they would
end past it (the search then keeps what it had narrowed: run/spent.Ledger), its timed rounds end within it, explain,
minimize and the newest release get what is left (explain at most its own default), and a step with under
MIN_STEP_S left is not started. Each step records when it started (`started_s`, from the start).

The chain is a plan of steps over stored answers: the bisection, the explanation, the commit bisection, the minimized
piece (minimize/stored_piece.py; and the newest release's replay) whose answer for the same bundle, question and builds is stored
here is reused, status `stored` ("stored 2 min ago": answers.reusable decides, exactly, and never trusts a record
another store or machine computed); `again` recomputes every step. Each answer is stored as its step ends, so an
interrupted or time-bounded investigation is resumed by the next call: a bisection --max-time cut short is stored
`unfinished`, never reused as an answer, and the next call's search starts inside the window it had narrowed (its
endpoints checked again, the releases outside it not probed again: "resumed from a stored search cut short: ...").
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..analysis.diagnosis import still_slower
from ..errors import TimeSpentError, UsageError
from .answers import BISECTION, EXPLANATION, reusable, stored_ago
from .case import Case
from .explain.explanation import EXPLAIN_OPTIONS, explain_between, explanation_asked
from .search.bisection import confirmed_ends, first_bad_text
from .search.bisection_answer import reported_run, stored_bisection
from .search.commit_search import commit_step, commit_window_step, repo_here
from .search.release_search import BISECT_OPTIONS, bisect_releases, bisection_asked, check_bisect_request

MIN_STEP_S = 20.0  # less time than this left: a timed step is not started


@dataclass
class Step:
    name: str  # bisect, explain, commits, minimize, newest, issue
    # "answered", "stored" (a stored answer reused: `reused` says when), "skipped" (with why), "left" (no time
    # left under --max-time: the next call runs it), "failed" (with the error)
    status: str
    answer: str  # one line
    spent_s: float = 0.0
    command: str | None = None  # reruns this step alone
    stored: str | None = None  # what it left in the store or on disk: an answer id, a bundle ref, a file
    started_s: float | None = None  # when it started, from the investigation's start (None: not started)
    # the bisection's probes: what each replayed and when it started, from the investigation's start
    probes: list[dict] | None = None
    reused: str | None = None  # "stored 2 min ago", where the answer was a stored one


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

    def data(self) -> dict:
        return {"ref": self.ref, "good": self.good, "bad": self.bad, "first_bad": self.first_bad,
                "layer": self.layer, "chosen": self.chosen, "max_time_s": self.max_time_s, "unsettled": self.unsettled,
                "steps": [vars(s) for s in self.steps]}


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
    ref, progress = case.ref, case.progress
    from ..run.spent import Ledger

    ledger = Ledger(max_time_s)  # the bisection's probes, within --max-time from here
    left = ledger.left
    out = Investigation(ref, good, bad, max_time_s=max_time_s)
    say = progress or (lambda _line: None)
    from .search.commit_bisect import names_a_release

    # a commit of a JAX repository here (else --bad is read as a release, and a typo is said as one)
    if not names_a_release(bad) and repo_here(jax_repo, case.manager):
        if _commit_window(out, (good, bad), case, jax_repo, max_time_s):
            say("investigate: writing the issue body")
            _issue_step(out, case, (issue_path, markdown), None, jax_repo)
        else:
            out.steps.append(Step("issue", "skipped", "no first bad commit: nothing to report"))
        return out
    result, reported = _bisect_step(out, case, (good, bad), (mode, by), ledger, again)
    if result is None:  # --max-time spent before the bisection answered: the next call goes on from here
        out.steps += [Step(name, "left", "--max-time spent before the bisection answered")
                      for name in ("explain", "commits", "minimize", "newest", "issue")]
        return out
    for change in [result, *result.changes]:  # every change in the window answered whole, the headline first
        _started(out, ledger, _explain_step, out, change, case, left(), again)
        # the first bad commit, for a change in JAX's lowering (commit_search.py decides whether and says why not)
        _started(out, ledger, _commit_step, out, change, case, left(), jax_repo, again)
        _of_change(out.steps[-2:], change, result)
    _started(out, ledger, _minimize_step, out, result, case, left(), again)
    for change in [result, *result.changes]:
        _started(out, ledger, _newest_step, out, change, case, left(), again)
        _of_change(out.steps[-1:], change, result)
    say("investigate: writing the issue body")
    _started(out, ledger, _issue_step, out, case, (issue_path, markdown), reported, jax_repo)
    return out


def _of_change(steps: list[Step], change, headline) -> None:
    """The steps of a change other than the headline named by its release and kind: `explain 0.5.1 (bits)` (two
    kinds may change at one release)."""
    from .search.window_changes import KIND_OF

    for step in steps if change is not headline else []:
        step.name = f"{step.name} {change.first_bad} ({KIND_OF.get(change.criterion, change.criterion)})"


def _started(out: Investigation, ledger, step: Callable[..., None], *args: Any) -> None:
    """`step(*args)`, each Step it adds that ran (not skipped, nor left for want of time) marked with when it
    started."""
    at, before = round(time.perf_counter() - ledger.started, 3), len(out.steps)
    step(*args)
    for added in out.steps[before:]:
        if added.status not in ("skipped", "left") and added.started_s is None:
            added.started_s = at


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
    out.steps.append(Step(**commit_step(result, case, jax_repo, again, left)))


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    value = fn()
    return value, round(time.monotonic() - t0, 1)


def _bisect_step(out: Investigation, case: Case, ends: tuple[str, str], asked: tuple[str, str | None], ledger,
                 again: bool):
    """(the BisectResult, the run its report shows): a stored bisection of the same question reused, else one run
    now (its probes in `ledger`, within its --max-time; its answer stored as it ends); (None, None) where --max-time
    was spent before it answered anything."""

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
        result, spent = stored_bisection(record, registry.answers(bundle.ref.bundle_id)), 0.0
    else:
        try:
            result, spent = _timed(lambda: bisect_releases(case, good, bad, mode=mode, by=by, ledger=ledger,
                                                           resume=not again)[0])
        except TimeSpentError as e:
            out.steps.append(Step("bisect", "failed", e.message, round(ledger.as_dict()["wall_s"], 1), command,
                                  started_s=0.0, probes=probes()))
            return None, None
    layer = result.layer or {}
    out.first_bad, out.layer = result.first_bad, layer.get("layer")
    out.chosen = result.mode_why or f"as asked: {_flags(mode, by)}"
    out.steps.append(Step("bisect", "answered" if record is None else "stored", _bisect_answer(result, out.chosen),
                          spent, command, result.answer_id, started_s=0.0 if record is None else None,
                          probes=probes() if record is None else None,
                          reused=None if record is None else stored_ago(record.get("created"))))
    return result, reported_run(result) if record is None else record["answer"].get("reported_run")


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


def _explain_step(out: Investigation, result, case: Case, left: float | None, again: bool) -> None:
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
    specs, reach = [ContenderSpec(v) for v in pair], window_releases(result.classes, result.first_bad)
    budget = EXPLAIN_OPTIONS.max_time_s if left is None else min(left, EXPLAIN_OPTIONS.max_time_s or left)
    options = replay_options(None, {"max_time_s": max(budget or 1.0, 1.0)}, base=EXPLAIN_OPTIONS)
    ends = confirmed_ends(result) if by == "time" else None
    if ends is not None:  # each experiment's rounds end once the test between the confirmed ends says its side
        options = replace(options, ends=ends.as_data())
    record = None if again else reusable(*case.where(), EXPLANATION,
                                         explanation_asked(specs, options, mode, by, reach), case.manager)
    if record is not None:
        out.steps.append(Step("explain", "stored", record["answer"]["diagnosis"]["summary"], 0.0, command,
                              record["answer_id"], reused=stored_ago(record.get("created"))))
        return
    if left is not None and left < MIN_STEP_S:
        out.steps.append(Step("explain", "left", _no_time(left), command=command))
        return
    try:
        found, spent = _timed(lambda: explain_between(case, specs, options, mode=mode, by=by, reach=reach))
    except TimeSpentError as e:  # not even its evidence could end within --max-time: the next call runs it
        out.steps.append(Step("explain", "left", f"{e.message}: the next `investigate` runs it", command=command))
        return
    except UsageError as e:
        out.steps.append(Step("explain", "failed", e.message, command=command))
        return
    out.steps.append(Step("explain", "answered", found["diagnosis"]["summary"], spent, command, found["answer_id"]))
    _settled_again(out, result, found.get("regression"))


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
                              0.0, nxt, a["packed"], reused=stored_ago(record.get("created"))))
        return
    if left is not None and left < MIN_STEP_S:
        out.steps.append(Step("minimize", "left", _no_time(left), command=nxt))
        return
    try:
        found, spent = _timed(lambda: _minimized(case, versions, prop=asked["property"], bits=asked["bits"],
                                                 max_time_s=left))
    except UsageError as e:
        out.steps.append(Step("minimize", "failed", e.message, command=nxt))
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
        out.steps.append(Step("newest", "stored", stored["text"], reused=stored_ago(stored.get("created"))))
        return
    if left is not None and left < MIN_STEP_S:
        out.steps.append(Step("newest", "left", _no_time(left)))
        return
    found, spent = _timed(lambda: check_newest(case.ref, result.answer_id, store=case.store,
                                               python=case.config.python, env_dir=case.config.root,
                                               progress=case.progress, max_time_s=left))
    out.steps.append(Step("newest", "answered" if found else "skipped",
                          found["text"] if found else "the first bad release is the newest", spent))


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
                run_id: str | None, jax_repo: str | None = None) -> None:
    from ..bundle.frozen_script import write_text
    from .report.issue_facts import issue_data

    issue_path, issue_markdown = written
    ref, store, store_args = case.ref, case.store, case.store_args
    _, bundle = case.where()
    path = Path(issue_path) if issue_path else Path(f"{bundle.ref.name}-issue.md")
    data, spent = _timed(lambda: issue_data(ref, store=store, run_id=run_id, jax_repo=jax_repo))
    write_text(path, issue_markdown(data))
    out.steps.append(Step("issue", "answered", data["title"], spent,
                          _command("issue", ref, "-o", str(path), *(["--run", run_id] if run_id else []),
                                   *store_args), str(path)))


def _command(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in ["reprobundle", *args])
