"""Where a workaround's setting lives across releases, told without running the program: whether each release takes
the flag or option as a user pastes it and what it says then (envs/release_facts.setting_said: its own deprecation
warning, as JAX or XLA prints it, or its refusal: "AttributeError: Unrecognized config option: jax_safer_randint",
XLA's "Unknown flag in XLA_FLAGS"), checked against what its release facts list; and where it is gone, the release
that removed it and, for a JAX option with a JAX repository here, the commit ("removed in 0.9.0 (a9dac1167d): on
0.12.1 the option is unknown").

The release that removed it is the first release tag of the repository whose `jax/` no longer names the option
(quoted, as its definition names it), the commit the first on the first-parent line from the release before that
no longer does; without a repository (or for an XLA flag, which JAX's repository does not define), the first
release checked here without it, where no release lies between it and the last with it, else both ("removed after
0.8.0, by 0.12.1"). Nothing is installed for it: the releases are those the reach already has.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from ...envs.versions import version_key
from ...errors import ReproBundleError
from .default_experiments import DefaultChange


def said_on(envs: Sequence[Any], change: DefaultChange) -> dict[str, dict]:
    """{release: {"defined": its facts list it (None: unknown), "accepted": the release takes the setting (None:
    unknown), "said": [its own words about it], "error": its refusal}} for each environment, asked side by side."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(4, len(envs)))) as pool:
        return dict(zip((env.jax_version for env in envs), pool.map(lambda env: _said_by(env, change), envs)))


def _said_by(env: Any, change: DefaultChange) -> dict:
    from ...envs.release_facts import release_facts, setting_said

    try:
        facts = release_facts(env)
        table = facts.get("xla_flags") if change.kind == "flag" else facts.get("jax_options")
        defined = None if table is None else change.name in table
    except ReproBundleError:
        defined = None
    try:  # the release's own answer decides: a facts list can miss a flag (absl cuts --help's text)
        found = setting_said(env, change.kind, change.name, change.restoring_value)
        accepted, said, error = found["accepted"], found["said"], found["error"]
    except ReproBundleError:
        accepted, said, error = defined, [], None
    return {"defined": defined, "accepted": accepted, "said": said, "error": error}


def noun(change: DefaultChange) -> str:
    return "the flag" if change.kind == "flag" else "the option"


def gone_text(release: str, change: DefaultChange, entry: dict) -> str:
    """`0.12.1: the option is unknown (AttributeError: Unrecognized config option: jax_safer_randint): the
    workaround stops working there`."""
    why = f" ({entry['error']})" if entry.get("error") else ""
    return f"{release}: {noun(change)} is unknown{why}: the workaround stops working there"


def deprecation(said: dict[str, dict], change: DefaultChange) -> dict | None:
    """Where releases that take the setting warn when it is set: {"releases", "said": the first one's words,
    "text": `deprecated: 0.7.2, 0.8.0 warn when it is set (JAX says: DeprecationWarning: ...)`}; None where none
    does (the words as the release prints them: XLA's own open with a quoted flag name)."""
    warned = sorted((v for v, e in said.items() if e.get("accepted") and e.get("said")), key=version_key)
    if not warned:
        return None
    words = said[warned[0]]["said"][0]
    who = "XLA" if change.kind == "flag" else "JAX"
    verb = "warns" if len(warned) == 1 else "warn"
    return {"releases": warned, "said": words,
            "text": f"deprecated: {', '.join(warned)} {verb} when it is set ({who} says: {words})"}


def removal(said: dict[str, dict], change: DefaultChange, clone: Any, available: Sequence[str] | None) -> dict | None:
    """Where the setting was removed, among the releases `said` checked: {"release" (None where it cannot be told),
    "after", "by", "newest", "commit", "title", "text"}; None where no release after the last that takes it
    refuses it. `clone`: a JAX repository (envs/jax_commit.JaxRepo) or None; `available`: the index's releases."""
    ends = _last_taken_first_refused(said)
    if ends is None:
        return None
    last, first, newest = ends
    found = _removed_by(clone, change.name, last, first) if change.kind == "option" and clone is not None else None
    release = found["release"] if found else first if _next_release(available, last, first) else None
    where = f"removed in {release}" if release else f"removed after {last}, by {first}"
    if found and found.get("commit"):
        where += f" ({found['commit'][:10]})"
    why = f" ({said[newest]['error']})" if said[newest].get("error") else ""
    return {"release": release, "after": last, "by": first, "newest": newest,
            "commit": (found or {}).get("commit"), "title": (found or {}).get("title"),
            "text": f"{where}: on {newest} {noun(change)} is unknown{why}"}


def _last_taken_first_refused(said: dict[str, dict]) -> tuple[str, str, str] | None:
    """(the last release that takes the setting, the first after it that refuses it, the newest that refuses it),
    or None where no release after the last that takes it refuses it."""
    taken = [v for v, e in said.items() if e.get("accepted")]
    if not taken:
        return None
    last = max(taken, key=version_key)
    later = sorted((v for v, e in said.items() if e.get("accepted") is False and version_key(v) > version_key(last)),
                   key=version_key)
    return (last, later[0], later[-1]) if later else None


def _next_release(available: Sequence[str] | None, a: str, b: str) -> bool:
    """Whether no release of the index lies between `a` and `b` (b the next release after a)."""
    if not available:
        return False
    ka, kb = version_key(a), version_key(b)
    return not any(ka < version_key(v) < kb for v in available)


def _removed_by(clone: Any, name: str, last: str, first: str) -> dict | None:
    """The release tag after `last` (up to `first`) whose `jax/` first no longer names the option, and the commit
    that removed it on the first-parent line from the release tag before it: {"release", "commit", "title"}; None
    where the repository does not show it (no tag of `last`, or one that does not name it either)."""
    from ..release_notes import release_tags

    tags = release_tags(clone)
    kept = [t for v, t in tags if v == last]
    if not kept or not _names(clone, kept[0], name):
        return None
    before = kept[0]
    for release, tag in tags:
        if not version_key(last) < version_key(release) <= version_key(first):
            continue
        if _names(clone, tag, name):
            before = tag
            continue
        return {"release": release, **_removing_commit(clone, before, tag, name)}
    return None


def _removing_commit(clone: Any, before: str, tag: str, name: str) -> dict:
    """{"commit", "title"} of the first commit from `before` (naming the option) to `tag` (not naming it) on the
    first-parent line that no longer names it, where its parent still does; {} where none is."""
    try:
        commits = clone.commits_between(before, tag)
    except ReproBundleError:
        return {}
    lo, hi = 0, len(commits) - 1  # commits[hi] (the tag's commit) does not name it
    if hi < 0 or _names(clone, commits[hi].sha, name):
        return {}
    while lo < hi:
        mid = (lo + hi) // 2
        if _names(clone, commits[mid].sha, name):
            lo = mid + 1
        else:
            hi = mid
    found = commits[lo]
    parent = commits[lo - 1].sha if lo > 0 else before
    return {"commit": found.sha, "title": found.title} if _names(clone, parent, name) else {}


def _names(clone: Any, ref: str, name: str) -> bool:
    """Whether JAX's Python at `ref` names the option, quoted as its definition does (`name='jax_safer_randint'`)."""
    try:
        clone.git("grep", "-q", "-E", "-e", f"['\"]{re.escape(name)}['\"]", ref, "--", "jax")
        return True
    except ReproBundleError:  # git grep exits 1 where nothing matches
        return False
