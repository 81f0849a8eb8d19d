"""The first bad commit: JAX's commits between two adjacent releases searched for the one that changed a program's
lowering (`reprobundle bisect-commits`).

Each probe runs JAX's Python at a commit over the released jaxlib it accepts (envs/jax_commit.py), retraces the
bundle's program and compares its outputs with the good release's by the release bisection's own criterion
(outputs beyond the tolerance, or bits). The search is bisection.py's, unchanged: each commit of the first-parent
line from the good tag to the bad tag has a label that sorts as a PEP 440 version between the two releases
(`0.7.1.post452+a7b01146f219`), so the same `bisect` orders, splits, classes and skips them; the probe maps a
label to its commit's environment and back. A commit whose JAX does not import or run over that jaxlib is
skipped, as `git bisect skip` does, and said.

Before the search, the endpoints in that setting: the first commit after the good tag must behave like the good
release, the bad tag's commit like the bad release. When the first commit already shows the change, or the bad
tag's commit does not, JAX's Python at those commits does not carry it over a fixed jaxlib: the change came with
jaxlib (or XLA), and the answer says so instead of naming a commit.

The answer names the first bad commit (hash, title, date, author, the pull request its message names, its URL), the
commits skipped, the probes, and the lowering diff of its StableHLO against its parent's by source line
(analysis/lowering_diff.py), as the release bisection's layer check gives it for two releases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ...envs.jax_commit import Commit, JaxRepo, commit_headline, pull_request
from ...envs.versions import parse_version, version_key
from ...errors import UsageError
from .bisection import (
    BEYOND,
    BITS,
    BITS_ONLY,
    OUTPUTS,
    OUTPUTS_VS_GOOD,
    BisectResult,
    OutputsDiffer,
    ReplayTogether,
    by_outputs,
    classify,
)

# the release bisection's criterion -> what the commit bisection asks of `bisect` (`by`)
BY_OF_CRITERION = {OUTPUTS: "outputs", OUTPUTS_VS_GOOD: "outputs", BITS: "bits"}
_LABEL = re.compile(r"\d+(?:\.\d+)*\.post\d+\+([0-9a-f]{12})")
EnvOf = Callable[[str], "tuple[str | None, str]"]  # label -> (the environment's path, or None, and what it runs over)


@dataclass
class CommitPlan:
    """The commits a commit bisection searches: the first-parent line from the good tag (excluded) to the bad tag."""

    repo: JaxRepo
    good: str  # the good release
    bad: str  # the bad release
    good_tag: str
    bad_tag: str
    commits: list[Commit] = field(default_factory=list)  # oldest first; the last is the bad tag's
    # a commit window (--bad COMMIT): the bad end is that commit, not a release (then `bad` is its sha, `bad_tag`
    # its short hash); every probe runs over the good release's jaxlib
    bad_commit: Commit | None = None
    # where the good tag's release branch left the bad commit's history (the tag is no ancestor of it: JAX tags a
    # release on a branch of its own since 0.10.2), None where the tag is on it
    branch_point: str | None = None

    @property
    def labels(self) -> list[str]:
        return [commit_label(self.good, i, c.sha) for i, c in enumerate(self.commits)]

    @property
    def bad_end(self) -> str:
        """What the search replays as its bad end: the bad release, or the bad commit's label."""
        return self.labels[-1] if self.bad_commit is not None else self.bad

    @property
    def start(self) -> str:
        """What the first commit comes after: "jax-v0.7.1", or "jax-v0.10.2's branch point 7db3a70e49"."""
        return f"{self.good_tag}'s branch point {self.branch_point[:10]}" if self.branch_point else self.good_tag

    @property
    def bad_name(self) -> str:
        """The bad end as the answer says it: "jax 0.7.2", or "commit 0145058aa0"."""
        return f"commit {self.bad_commit.short}" if self.bad_commit is not None else f"jax {self.bad}"

    def commit_of(self, label: str) -> Commit | None:
        m = _LABEL.fullmatch(label)
        return next((c for c in self.commits if c.sha.startswith(m[1])), None) if m else None


def commit_label(good: str, index: int, sha: str) -> str:
    """A commit's name in the search: a PEP 440 version after the good release and before the next one, in the
    commits' order (`0.7.1.post452+a7b01146f219`)."""
    return f"{good}.post{index + 1}+{sha[:12]}"


def plan_commits(repo: JaxRepo, good: str, bad: str) -> CommitPlan:
    """The commits from the good release's tag (excluded) to the bad release's (included), first parent; from the
    good tag's branch point where it is on a release branch of its own (branch_point)."""
    good_tag, bad_tag = repo.tag_of(good), repo.tag_of(bad)
    plan = CommitPlan(repo, good, bad, good_tag, bad_tag, repo.commits_between(good_tag, bad_tag),
                      branch_point=branch_point_of(repo, good_tag, bad_tag))
    if not plan.commits:
        raise UsageError(f"no commit lies between {good_tag} and {bad_tag} in {repo.git_dir}",
                         hint="--good must be the older release, and its tag an ancestor of --bad's")
    return plan


def names_a_release(text: str) -> bool:
    """Whether --bad names a release ("0.7.2", "v0.7.2") rather than a commit of the repository (a hash or a prefix,
    a branch such as main, a tag that is no release's version): a version with a dot in it."""
    return "." in text and parse_version(text) is not None


def plan_commit_window(repo: JaxRepo, good: str, commitish: str) -> CommitPlan:
    """The commits from the good release's tag (excluded) to a commit of the repository (included), first parent:
    the window of `bisect-commits --bad COMMIT`. A good tag on a release branch (no ancestor of the commit) starts
    it where that branch left the commit's history (its branch point): the release's own commits on its branch are
    not searched, and the endpoints' check of the first commit says whether they matter. UsageError for a commit the
    repository lacks or one that shares no history with the tag; whether its JAX accepts the good release's jaxlib
    is the caller's check (jaxlib_refusal)."""
    good_tag = repo.tag_of(good)
    sha = repo.sha_of(commitish)
    branch_point = branch_point_of(repo, good_tag, sha)
    if branch_point == "":
        raise UsageError(f"{good_tag} and {commitish} ({sha[:10]}) share no history in {repo.git_dir}",
                         hint="--good must be a release older than the commit, on its history")
    commits = repo.commits_between(good_tag, sha)
    if not commits:
        raise UsageError(f"no commit lies between {good_tag} and {commitish} ({sha[:10]}) in {repo.git_dir}",
                         hint="--bad must be a commit after the good release's tag")
    return CommitPlan(repo, good, sha, good_tag, commits[-1].short, commits, bad_commit=commits[-1],
                      branch_point=branch_point)


def branch_point_of(repo: JaxRepo, good_tag: str, bad: str) -> str | None:
    """Where the good tag's release branch left `bad`'s history (JAX tags a release on a branch of its own since
    0.10.2), None where the tag is an ancestor of `bad`, "" where they share no history."""
    if repo.is_ancestor(good_tag, bad):
        return None
    return repo.merge_base(good_tag, bad) or ""


def jaxlib_refusal(plan: CommitPlan, minimum: str | None, jaxlib: str) -> str | None:
    """Why the bad commit cannot run over the good release's jaxlib (its `_minimum_jaxlib_version` is newer), or
    None when it can."""
    if minimum is None or version_key(jaxlib) >= version_key(minimum) or plan.bad_commit is None:
        return None
    return (f"{plan.bad_name} needs jaxlib {minimum} or newer (its jax/version.py's _minimum_jaxlib_version), and "
            f"jax {plan.good}'s environment has jaxlib {jaxlib}: a commit window runs every commit over the good "
            "release's jaxlib")


def refusal(release_answer: dict) -> str | None:
    """Why a release bisection's answer is not sent on to a commit bisection (None: it is): its layer at the
    boundary is the compiler's, or undecided, or its criterion is time (commit probes compare outputs)."""
    answer = release_answer.get("answer") or release_answer
    layer = (answer.get("layer") or {}).get("layer")
    window = f"jax {answer.get('last_good')} to {answer.get('first_bad')}"
    if layer == "compiler":
        return (f"the release bisection found the change from {window} in XLA (the compiler): the frozen module "
                "shows it and both releases lower the program alike, so no JAX commit carries it")
    if layer not in ("lowering", "both"):
        said = f"the layer is {layer}" if layer else "the layer at its boundary is undecided"
        return f"the release bisection did not find a change in JAX's lowering from {window} ({said})"
    if answer.get("criterion") not in BY_OF_CRITERION:
        return (f"the release bisection judged by {answer.get('criterion')}: a commit bisection compares outputs "
                "or bits with the good release (a lowering that only changes time is not searched yet)")
    return None


def commit_probe(probe: Callable[[list[str], list[str]], list[dict]], env_of: EnvOf,
                 progress: Callable[[str], None] | None = None) -> ReplayTogether:
    """`probe` (versions or environment paths -> runs) over labels: each commit's label replayed as its
    environment's path (`env_of`), the runs named by their labels again (`requested`); a commit that has no jaxlib
    to run over is not replayed: its run says why (status "incompatible", which the search skips). Runs are
    remembered by label: a label asked for again is not replayed (the probes compare outputs, once each)."""
    seen: dict[str, dict] = {}
    said: set[str] = set()

    def replay(labels: Sequence[str]) -> list[dict]:
        wanted: dict[str, str] = {}
        for label in labels:
            if label in seen or label in wanted:
                continue
            path, why = env_of(label)
            if path is None:
                seen[label] = {"requested": label, "status": "incompatible", "reason": why}
            else:
                wanted[label] = path
        if wanted:
            for label, run in zip(wanted, probe(list(wanted.values()), list(wanted))):
                seen[label] = {**run, "requested": label, "over": env_of(label)[1]}
        for label in labels:
            run = seen[label]
            if progress and label not in said and run["status"] not in ("ok", "mismatch"):
                said.add(label)
                progress(f"bisect-commits: {label} skipped, as git bisect skip: {run['status']}: "
                         f"{run.get('reason')}")  # whole: why it could not run, and the way out
        return [seen[label] for label in labels]

    return replay


def check_endpoints(plan: CommitPlan, checks: ReplayTogether, criterion: str | None,
                    outputs_differ: OutputsDiffer, over_good: Callable[[str], bool] | None = None) -> dict:
    """The first commit after the good tag and the bad end's commit, each judged against the good release by
    `criterion`: {"first", "last": {"label", "class", "evidence", "over"}, "agree": bool, "text", "criterion"}. A
    commit window (plan.bad_commit) has no release bisection: its criterion is chosen here from the good release
    and the bad commit (criterion_of_ends), and where they do not differ, "same" is true and nothing is to be
    searched. A first commit that had to run over another jaxlib than the good release's (its jax/version.py
    refuses that one: a window after a patch release) and does not behave like the good release there proves
    nothing: the first commit that runs over the good release's jaxlib (`over_good`, label -> bool) is the first
    endpoint instead, and the commits before it, said in "lead_in", are not searched (`search_labels`)."""
    labels = plan.labels
    first, last = labels[0], labels[-1]
    good_run, first_run, last_run = checks([plan.good, first, last])
    if plan.bad_commit is not None:
        criterion, said = criterion_of_ends(plan, good_run, last_run, outputs_differ)
        if criterion is None:
            return {"last": {"label": last, "class": "good", "evidence": said, "over": last_run.get("over")},
                    "agree": False, "same": True,
                    "criterion": None, "text": said}
    assert criterion is not None  # a release window's comes from its release bisection
    ends: dict = {"criterion": criterion}
    for name, label, run in (("first", first, first_run), ("last", last, last_run)):
        cls, evidence = classify(run, good_run, None, criterion, outputs_differ)
        ends[name] = {"label": label, "class": cls, "evidence": evidence, "over": run.get("over")}
    if ends["first"]["class"] != "good" and not _over_good(plan, ends["first"]) and over_good is not None:
        _start_over_good(plan, ends, (checks, over_good), good_run, outputs_differ)
    agree, text = _ends_text(plan, ends)
    return {**ends, "agree": agree, "text": text}


def _over_good(plan: CommitPlan, end: dict) -> bool:
    """Whether an endpoint ran over the good release's own jaxlib (its environment)."""
    return f"(jax {plan.good}'s environment)" in str(end.get("over") or "")


def _start_over_good(plan: CommitPlan, ends: dict, probes: tuple, good_run: dict,
                     outputs_differ: OutputsDiffer) -> None:
    """The first endpoint moved to the first commit over the good release's jaxlib (before the last), judged as the
    first was; the commits before it are the window's lead-in ("lead_in": how many, what the first of them ran
    over and showed). Unchanged where no commit runs over that jaxlib."""
    checks, over_good = probes
    labels = plan.labels
    start = next((i for i, label in enumerate(labels[1:-1], 1) if over_good(label)), None)
    if start is None:
        return
    run = checks([labels[start]])[0]
    cls, evidence = classify(run, good_run, None, ends["criterion"], outputs_differ)
    ends["lead_in"] = {"count": start, "label": ends["first"]["label"], "class": ends["first"]["class"],
                       "evidence": ends["first"]["evidence"], "over": ends["first"]["over"]}
    ends["first"] = {"label": labels[start], "class": cls, "evidence": evidence, "over": run.get("over")}


def search_labels(plan: CommitPlan, ends: dict) -> list[str]:
    """The labels a search goes over: the plan's, after the lead-in the endpoints' check left out (check_endpoints),
    which ran only over another jaxlib than the good release's and did not behave like it there."""
    return plan.labels[int((ends.get("lead_in") or {}).get("count") or 0):]


def _lead_in_text(plan: CommitPlan, ends: dict) -> str:
    """What the endpoints' check said of the commits it left out: "" where it left none out."""
    lead = ends.get("lead_in")
    if not lead:
        return ""
    first = plan.commit_of(lead["label"])
    name = first.short if first is not None else lead["label"]
    n = int(lead["count"])
    over = lead.get("over") or "no released jaxlib"
    return (f"; the {n} commit{'s' if n != 1 else ''} from {name} (the first after {plan.start}) read an older "
            f"version and refuse jax {plan.good}'s jaxlib: over {over} {name} is {lead['class']} "
            f"({lead['evidence']}), which says nothing of JAX's Python under another compiler, so "
            f"{'they are' if n != 1 else 'it is'} not searched")


def _ends_text(plan: CommitPlan, ends: dict) -> tuple[bool, str]:
    """Whether the endpoints agree with the window's ends, and the sentence that says how. An endpoint that does
    not reproduce its release (over another jaxlib than the one it is judged with) is a stop with the reason; the
    change is said to come with jaxlib only where the bad tag's JAX, over the good release's own jaxlib, computes
    what the good release computes."""
    first_c, last_c = plan.commit_of(ends["first"]["label"]) or plan.commits[0], plan.commits[-1]
    lead = _lead_in_text(plan, ends)
    after = f"{first_c.short} (the first commit after {plan.start}" + \
        (f" over jax {plan.good}'s jaxlib)" if lead else ")")
    if ends["first"]["class"] == "good" and ends["last"]["class"] == "bad":
        if plan.bad_commit is not None:
            return True, (f"the endpoints: {after} behaves like jax {plan.good}; {plan.bad_name} does not: "
                          f"{ends['last']['evidence']}{lead}")
        return True, (f"the endpoints agree with the releases: {after} behaves like jax {plan.good}, "
                      f"{last_c.short} ({plan.bad_tag}) like jax {plan.bad}{lead}")
    if "skip" in (ends["first"]["class"], ends["last"]["class"]):
        which = "first" if ends["first"]["class"] == "skip" else "last"
        return False, (f"the endpoints could not be checked: {ends[which]['label']} did not run "
                       f"({ends[which]['evidence']}){lead}")
    if ends["first"]["class"] != "good":
        return False, _first_not_good(plan, ends, after, lead)
    return False, _last_not_bad(plan, ends, last_c)


def _first_not_good(plan: CommitPlan, ends: dict, after: str, lead: str) -> str:
    """A stop: the first endpoint already differs from the good release, over its jaxlib or over another."""
    first = ends["first"]
    if _over_good(plan, first):
        return (f"{after} already differs from jax {plan.good} over the same jaxlib ({first['evidence']}): it made "
                f"the change, or JAX's Python run from the repository does not behave as jax {plan.good}'s own "
                f"package here; nothing was searched{lead}")
    return (f"{after} ran over {first.get('over') or 'no released jaxlib'}, not jax {plan.good}'s (its "
            f"jax/version.py refuses that one), and does not behave like jax {plan.good} there "
            f"({first['evidence']}); no commit of the window runs over jax {plan.good}'s jaxlib to start from, and "
            "an endpoint that does not reproduce its release says nothing of jaxlib: nothing was searched")


def _last_not_bad(plan: CommitPlan, ends: dict, last_c: Commit) -> str:
    """The bad tag's commit behaves like the good release: over the good release's own jaxlib, jaxlib carries the
    change; over another, that endpoint does not reproduce its release (a stop with the reason)."""
    last = ends["last"]
    if _over_good(plan, last):
        return (f"the change came with jaxlib, not with JAX's Python: over jax {plan.good}'s own jaxlib, "
                f"{last_c.short} ({plan.bad_tag}) computes what jax {plan.good} computes ({last['evidence']}); jax "
                f"{plan.bad}'s own jaxlib (and the XLA it was built with) makes the difference")
    return (f"{last_c.short} ({plan.bad_tag}) ran over {last.get('over') or 'no released jaxlib'} and does not "
            f"behave like jax {plan.bad} there ({last['evidence']}): JAX's Python run from the repository does not "
            f"reproduce jax {plan.bad}'s own package, so the window's commits cannot be judged against it; nothing "
            "was searched")


def window_layer(said: str, answer: dict) -> str:
    """A commit window's layer (`said`: JAX's lowering, by construction, one jaxlib under every probe), with the
    commits that refused the good release's jaxlib (their jax/version.py reads an older version) and ran over an
    older one said: between those and the rest, the compiler differs too."""
    good = f"(jax {answer['good']}'s environment)"
    ran = [t.get("over") for t in (answer.get("tested") or {}).values()]
    ran += [(answer.get("ends") or {}).get(end, {}).get("over") for end in ("first", "last")]
    others = sorted({str(o) for o in ran if o and o.startswith("jaxlib ") and good not in o})
    if not others:
        return said
    return (f"{said}; except the commits whose jax/version.py reads an older version than that jaxlib, which JAX's "
            f"check at import refuses: they ran over {' and '.join(others)}, so between them and the rest the "
            "compiler differs too")


def criterion_of_ends(plan: CommitPlan, good_run: dict, bad_run: dict,
                      outputs_differ: OutputsDiffer) -> tuple[str | None, str]:
    """A commit window's criterion, as a release bisection chooses it from its endpoints but untimed: the bad
    commit's outputs mismatch the reference where the good release's match it ("outputs"), differ from the good
    release's beyond the tolerance ("outputs vs good"), or in bits only ("bits"); None where they are the same
    bit for bit (nothing to search) or either did not run (then the endpoints' check says which). With the
    sentence that says so."""
    usable = ("ok", "mismatch")
    if good_run["status"] not in usable:
        raise UsageError(f"jax {plan.good} did not run ({good_run['status']}): {str(good_run.get('reason'))[:300]}",
                         hint="pick a good release on which the bundle runs")
    if bad_run["status"] not in usable:
        return OUTPUTS_VS_GOOD, ""  # classed "skip" by the endpoints' check, which says why
    if bad_run["status"] == "mismatch" and good_run["status"] == "ok":
        return OUTPUTS, f"its outputs mismatch the reference and jax {plan.good}'s match it"
    apart = outputs_differ(good_run, bad_run)
    if apart in (BEYOND, BITS_ONLY):
        criterion = OUTPUTS_VS_GOOD if apart == BEYOND else BITS
        return criterion, by_outputs(apart, plan.good, criterion)[1]
    return None, (f"no change between jax {plan.good} and {plan.bad_name}: over jax {plan.good}'s jaxlib, its "
                  f"outputs are jax {plan.good}'s bit for bit (retraced): nothing to search")


def search(plan: CommitPlan, probe: ReplayTogether, criterion: str, outputs_differ: OutputsDiffer,
           ends: dict, jobs: int = 1, progress: Callable[[str], None] | None = None,
           resume: Sequence[dict] | None = None) -> BisectResult:
    """bisection.bisect over the plan's commit labels (the endpoints' classes known from `ends`), by the release
    bisection's criterion; inside the window of `resume` (a stored search of the same commits --max-time cut short:
    its answer's "window") where there is one."""
    from .bisection import bisect

    known_classes = {ends[e]["label"]: (ends[e]["class"], ends[e]["evidence"]) for e in ("first", "last")}

    def known(label: str, _classes: dict) -> tuple[str, str] | None:
        return known_classes.get(label)

    return bisect(search_labels(plan, ends), plan.good, plan.bad_end, probe, progress=progress, known=known,
                  outputs_differ=outputs_differ, by=BY_OF_CRITERION[criterion], check_together=probe, jobs=jobs,
                  resume=resume)


def commit_record(repo: JaxRepo, commit: Commit) -> dict:
    """What the answer says of a commit: {"sha", "title", "date", "author", "pr", "url"}."""
    return {"sha": commit.sha, "title": commit.title, "date": commit.date, "author": commit.author,
            "pr": pull_request(repo.message(commit.sha)), "url": repo.commit_url(commit.sha)}




def answer_of(plan: CommitPlan, result: BisectResult | None, ends: dict, defaults: Sequence[dict] = ()) -> dict:
    """The commit bisection's answer as plain data (before the lowering diff and the time spent are added);
    `defaults`: the changed defaults the first bad commit's diff names (defaults_touched)."""
    labels = plan.labels
    answer: dict = {"good": plan.good, "bad": plan.bad, "good_tag": plan.good_tag, "bad_tag": plan.bad_tag,
                    "repo": plan.repo.web_url, "commits": len(plan.commits), "ends": ends, "first_bad": None,
                    "last_good": None, "could_be": [], "skipped": [], "tested": {}, "criterion": None, "why": "",
                    "defaults": list(defaults)}
    if plan.bad_commit is not None:
        answer["bad_commit"] = commit_record(plan.repo, plan.bad_commit)
    if plan.bad_commit is not None or plan.branch_point:
        answer["branch_point"] = plan.branch_point
    if result is None:
        answer["text"] = ends["text"]
        return answer
    answer.update(criterion=result.criterion, why=readable(result.why))
    if result.resumed:
        answer["resumed"] = readable(result.resumed)
    _tested(answer, plan, result)
    if result.unfinished:  # no first bad commit claimed: the window so far, where the next call goes on from
        return cut_short(answer, result, readable(result.unfinished))
    first_bad = plan.commit_of(result.first_bad)
    last_good = plan.commit_of(result.last_good)
    if first_bad is not None:
        answer["first_bad"] = commit_record(plan.repo, first_bad)
        lo = labels.index(result.last_good) + 1 if last_good is not None else 0
        between = [plan.commit_of(label) for label in labels[lo:labels.index(result.first_bad)]]
        answer["could_be"] = [c.sha for c in between if c is not None]  # skipped ones between: any may be it
    answer["last_good"] = last_good.sha if last_good is not None else plan.good_tag
    answer["jaxlib_moved"] = _jaxlib_moved(result, ends)
    answer["notes"] = notes_of(plan, first_bad)
    answer["text"] = _text(answer)
    return answer


def cut_short(answer: dict, result: BisectResult, why: str) -> dict:
    """A commit bisection's answer that --max-time cut short (`why`): `unfinished`, and the window it had narrowed
    (labels, classes) where the next call of the same question goes on from (bisection.resumed_window)."""
    answer["unfinished"] = why
    answer["window"] = {"criterion": result.criterion, "last_good": result.last_good, "first_bad": result.first_bad,
                        "classes": dict(result.classes), "evidence": {k: v[:2000] for k, v in result.evidence.items()}}
    answer["text"] = f"unfinished: {why}" if answer.get("first_bad") is None else f"{_text(answer)}; unfinished: {why}"
    return answer


def _tested(answer: dict, plan: CommitPlan, result: BisectResult) -> None:
    """Each tested commit's class, evidence and what it ran over (an endpoint classed by the endpoints' check: its
    run there); the skipped ones with why."""
    ends = answer.get("ends") or {}
    checked = {e.get("label"): e.get("over") for e in (ends.get("first"), ends.get("last")) if isinstance(e, dict)}
    for label, cls in result.classes.items():
        commit = plan.commit_of(label)
        if commit is None:
            continue
        answer["tested"][commit.sha] = {"class": cls, "evidence": result.evidence.get(label, ""),
                                        "over": (result.runs.get(label) or {}).get("over") or checked.get(label)}
        if cls == "skip":
            answer["skipped"].append({"sha": commit.sha, "title": commit.title,
                                      "why": result.evidence.get(label, "")})


def notes_of(plan: CommitPlan, first_bad: Commit | None) -> dict | None:
    """The CHANGELOG.md entry the first bad commit itself adds, its workaround, and where the notes of the release
    it shipped in carry it (the bad release's tag; a commit window's bad commit), under whatever heading
    (release_notes.commit_notes); None where it adds none."""
    from ..release_notes import commit_notes

    if first_bad is None:
        return None
    return commit_notes(plan.repo, first_bad.sha, None if plan.bad_commit is not None else plan.bad, plan.bad)


def notes_where(notes: dict) -> str:
    """Where a commit's CHANGELOG entry ships: `jax 0.4.31's notes, under "jax 0.4.30 (June 18, 2024)"`, or, for a
    commit window, `the notes at commit 0145058aa0, under "Unreleased"`."""
    at = f"jax {notes['release']}'s notes" if notes.get("release") else \
        f"the notes at commit {str(notes.get('at') or notes.get('commit'))[:10]}, of the coming release"
    return at + (f', under "{notes["heading"]}"' if notes.get("heading") else "")


def _jaxlib_moved(result: BisectResult, ends: dict) -> str | None:
    """When the first bad commit ran over another release's jaxlib than the last good one (its minimum jaxlib went
    up at that step, or its version came down below the other's), a sentence saying so: then that step changed
    jaxlib too, and the commit alone is not shown. (An end the endpoints' check classed has its run there.)"""
    def over(label: str) -> str | None:
        end: dict = next((e for e in (ends.get("first"), ends.get("last")) if e and e.get("label") == label), {})
        return (result.runs.get(label) or {}).get("over") or end.get("over")

    bad_over = over(result.first_bad)
    good_over = over(result.last_good) or f"jax {result.good}'s own"
    if bad_over is None or bad_over == good_over:
        return None
    return (f"careful: the first bad commit ran over {bad_over} and the last good one over {good_over}: the jaxlib "
            "changed at the same step")


def _text(answer: dict) -> str:
    first = answer["first_bad"]
    if first is None:
        return "no commit between the tags shows the change"
    said = f"first bad commit: {commit_headline(first)}"
    for d in answer.get("defaults") or []:
        said += f"; it changed the default of {d['name']} ({d['a']} -> {d['b']})"
    if answer.get("notes"):
        said += f"; it documents the change in CHANGELOG.md ({notes_where(answer['notes'])})"
    if answer.get("jaxlib_moved"):
        said += f"; {answer['jaxlib_moved']}"
    if answer["could_be"]:
        said += (f"; {len(answer['could_be'])} skipped commit(s) just before it could not be tested, and any of "
                 "them may be the first bad one: " + ", ".join(sha[:10] for sha in answer["could_be"]))
    return said


def parent_label(plan: CommitPlan, label: str) -> str:
    """The label of a commit's first parent in the plan, or the good release for the first commit (the good tag)."""
    i = plan.labels.index(label)
    return plan.labels[i - 1] if i > 0 else plan.good


def lowering_of_first_bad(plan: CommitPlan, result: BisectResult, probe: ReplayTogether,
                          stablehlo_of: Callable[[dict], str | None], program_files: Sequence[str]) -> dict | None:
    """The first bad commit's retraced StableHLO against its parent's, by source line (lowering_diff): {"changed",
    "text", "added", "removed", "parent"}; the parent (and the first bad commit, which a resumed search may have
    from the stored one) replayed when the search did not. None where either has none."""
    if plan.commit_of(result.first_bad) is None:
        return None
    parent = parent_label(plan, result.first_bad)
    parent_run = result.runs.get(parent) or probe([parent])[0]
    bad_run = result.runs.get(result.first_bad) or probe([result.first_bad])[0]  # a resumed search's bound
    parent_commit = plan.commit_of(parent)
    return runs_lowering(parent_run, bad_run, stablehlo_of, program_files,
                         parent_commit.sha if parent_commit else plan.good_tag)


def runs_lowering(before_run: dict, after_run: dict, stablehlo_of: Callable[[dict], str | None],
                  program_files: Sequence[str], parent: str) -> dict | None:
    """Two runs' retraced StableHLO by source line (lowering_diff): {"changed", "text", "added", "removed",
    "parent"} (`parent`: what the first ran); None where either has none."""
    from ...analysis.lowering_diff import lowering_diff

    before, after = stablehlo_of(before_run), stablehlo_of(after_run)
    if not before or not after:
        return None
    return {**lowering_diff(before, after, program_files), "parent": parent}


_ENV_PATH = re.compile(r"\S*/jax-commits/(?:[^/\s]+/)?([0-9a-f]{12})-over-jax-([\w.]+?)(?:-[a-z]+\d*)?-py[\d.]+")


def readable(line: str) -> str:
    """A progress line with each commit label, and each commit environment's path, as the commit's short hash."""
    line = _ENV_PATH.sub(lambda m: f"{m[1][:10]} (over jaxlib {m[2]})", line)
    return _LABEL.sub(lambda m: m[1][:10], line)


def defaults_touched(repo: JaxRepo, sha: str, changed_defaults: Sequence[dict] | None) -> list[dict]:
    """The JAX options whose default changed between the releases (the release bisection's `changed_defaults`)
    that the commit's own diff names in a changed hunk (`git show -U5`): the changed default and the commit that
    changed it, one story. [{"name", "a", "b"}]."""
    options = [c for c in changed_defaults or [] if c.get("kind") == "option" and c.get("name")]
    if not options:
        return []
    hunks = repo.git("show", "--format=", "-U5", sha).split("\n@@")
    return [{"name": c["name"], "a": c.get("a"), "b": c.get("b")} for c in options
            if any(_named_in(str(c["name"]), hunk) for hunk in hunks[1:])]


def _named_in(name: str, hunk: str) -> bool:
    """Whether a hunk names the option: `jax_safer_randint`, or its name without the jax_ prefix (config.py's
    `safer_randint = bool_state(name='jax_safer_randint', ...)` spells both)."""
    short = name.removeprefix("jax_")
    return name in hunk or re.search(rf"\b{re.escape(short)}\b", hunk) is not None
