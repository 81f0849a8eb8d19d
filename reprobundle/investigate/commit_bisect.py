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

from ..envs.jax_commit import Commit, JaxRepo, commit_headline, pull_request
from ..errors import UsageError
from .bisection import BITS, OUTPUTS, OUTPUTS_VS_GOOD, BisectResult, OutputsDiffer, ReplayTogether, classify

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

    @property
    def labels(self) -> list[str]:
        return [commit_label(self.good, i, c.sha) for i, c in enumerate(self.commits)]

    def commit_of(self, label: str) -> Commit | None:
        m = _LABEL.fullmatch(label)
        return next((c for c in self.commits if c.sha.startswith(m[1])), None) if m else None


def commit_label(good: str, index: int, sha: str) -> str:
    """A commit's name in the search: a PEP 440 version after the good release and before the next one, in the
    commits' order (`0.7.1.post452+a7b01146f219`)."""
    return f"{good}.post{index + 1}+{sha[:12]}"


def plan_commits(repo: JaxRepo, good: str, bad: str) -> CommitPlan:
    good_tag, bad_tag = repo.tag_of(good), repo.tag_of(bad)
    plan = CommitPlan(repo, good, bad, good_tag, bad_tag, repo.commits_between(good_tag, bad_tag))
    if not plan.commits:
        raise UsageError(f"no commit lies between {good_tag} and {bad_tag} in {repo.git_dir}",
                         hint="--good must be the older release, and its tag an ancestor of --bad's")
    return plan


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
        return f"the release bisection did not find a change in JAX's lowering from {window} (layer: {layer})"
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
                         f"{str(run.get('reason'))[:300]}")
        return [seen[label] for label in labels]

    return replay


def check_endpoints(plan: CommitPlan, checks: ReplayTogether, criterion: str,
                    outputs_differ: OutputsDiffer) -> dict:
    """The first commit after the good tag and the bad tag's commit, each judged against the good release by
    `criterion`: {"first", "last": {"label", "class", "evidence"}, "agree": bool, "text"}."""
    labels = plan.labels
    first, last = labels[0], labels[-1]
    good_run, first_run, last_run = checks([plan.good, first, last])
    ends = {}
    for name, label, run in (("first", first, first_run), ("last", last, last_run)):
        cls, evidence = classify(run, good_run, None, criterion, outputs_differ)
        ends[name] = {"label": label, "class": cls, "evidence": evidence}
    first_c, last_c = plan.commits[0], plan.commits[-1]
    if ends["first"]["class"] == "good" and ends["last"]["class"] == "bad":
        agree, text = True, (f"the endpoints agree with the releases: {first_c.short} (the first commit after "
                             f"{plan.good_tag}) behaves like jax {plan.good}, {last_c.short} ({plan.bad_tag}) like "
                             f"jax {plan.bad}")
    elif "skip" in (ends["first"]["class"], ends["last"]["class"]):
        which = "first" if ends["first"]["class"] == "skip" else "last"
        agree, text = False, (f"the endpoints could not be checked: {ends[which]['label']} did not run "
                              f"({ends[which]['evidence']})")
    else:
        agree, text = False, (f"the change came with jaxlib, not with JAX's Python: over one jaxlib, "
                              f"{first_c.short} (the first commit after {plan.good_tag}) is "
                              f"{ends['first']['class']} and {last_c.short} ({plan.bad_tag}) is "
                              f"{ends['last']['class']} ({ends['last']['evidence']}); jax {plan.bad}'s own jaxlib "
                              "(and the XLA it was built with) makes the difference")
    return {**ends, "agree": agree, "text": text}


def search(plan: CommitPlan, probe: ReplayTogether, criterion: str, outputs_differ: OutputsDiffer,
           ends: dict, jobs: int = 1, progress: Callable[[str], None] | None = None) -> BisectResult:
    """bisection.bisect over the plan's commit labels (the endpoints' classes known from `ends`), by the release
    bisection's criterion."""
    from .bisection import bisect

    known_classes = {ends[e]["label"]: (ends[e]["class"], ends[e]["evidence"]) for e in ("first", "last")}

    def known(label: str, _classes: dict) -> tuple[str, str] | None:
        return known_classes.get(label)

    return bisect(plan.labels, plan.good, plan.bad, probe, progress=progress, known=known,
                  outputs_differ=outputs_differ, by=BY_OF_CRITERION[criterion], check_together=probe, jobs=jobs)


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
    if result is None:
        answer["text"] = ends["text"]
        return answer
    answer.update(criterion=result.criterion, why=result.why)
    for label, cls in result.classes.items():
        commit = plan.commit_of(label)
        if commit is None:
            continue
        answer["tested"][commit.sha] = {"class": cls, "evidence": result.evidence.get(label, ""),
                                        "over": (result.runs.get(label) or {}).get("over")}
        if cls == "skip":
            answer["skipped"].append({"sha": commit.sha, "title": commit.title,
                                      "why": result.evidence.get(label, "")})
    first_bad = plan.commit_of(result.first_bad)
    last_good = plan.commit_of(result.last_good)
    if first_bad is not None:
        answer["first_bad"] = commit_record(plan.repo, first_bad)
        lo = labels.index(result.last_good) + 1 if last_good is not None else 0
        between = [plan.commit_of(label) for label in labels[lo:labels.index(result.first_bad)]]
        answer["could_be"] = [c.sha for c in between if c is not None]  # skipped ones between: any may be it
    answer["last_good"] = last_good.sha if last_good is not None else plan.good_tag
    answer["jaxlib_moved"] = _jaxlib_moved(result)
    answer["text"] = _text(answer)
    return answer


def _jaxlib_moved(result: BisectResult) -> str | None:
    """When the first bad commit ran over another release's jaxlib than the last good one (its minimum jaxlib went
    up at that step), a sentence saying so: then that step changed jaxlib too, and the commit alone is not shown."""
    bad_over = (result.runs.get(result.first_bad) or {}).get("over")
    good_over = (result.runs.get(result.last_good) or {}).get("over") or f"jax {result.good}'s own"
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
    "text", "added", "removed", "parent"}; the parent replayed when the search did not. None where either has none."""
    from ..analysis.lowering_diff import lowering_diff

    if plan.commit_of(result.first_bad) is None:
        return None
    parent = parent_label(plan, result.first_bad)
    parent_run = result.runs.get(parent) or probe([parent])[0]
    before, after = stablehlo_of(parent_run), stablehlo_of(result.runs[result.first_bad])
    if not before or not after:
        return None
    diff = lowering_diff(before, after, program_files)
    parent_commit = plan.commit_of(parent)
    return {**diff, "parent": parent_commit.sha if parent_commit else plan.good_tag}


_ENV_PATH = re.compile(r"\S*/jax-commits/(?:[^/\s]+/)?([0-9a-f]{12})-over-jax-([\w.]+?)-py[\d.]+")


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
