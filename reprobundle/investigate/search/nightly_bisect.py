"""`bisect --nightly`: the nightlies between a good and a bad JAX (releases or nightlies), searched by date, and what
the answer names: the last good and first bad nightly, the commits each was built from, the compare URLs.

The search itself is bisection.py's, over the nightlies' versions (PEP 440 orders `0.7.2 < 0.8.0.dev20251003 <
0.8.0`, so releases and nightlies share one order), with the same probes: each nightly timed beside the good
endpoint, or judged by its outputs. A day without a complete nightly on the index is never probed: it is reported
as skipped with the reason. The search ends when the last good and the first bad are adjacent nightlies: the commit
range between their builds is as narrow as nightlies can make it (a build can only be told apart by its commits,
and two days built from the same commits are the same build).
"""

from __future__ import annotations

import datetime as dt
import shlex
from dataclasses import dataclass, field
from typing import Sequence

from ...envs.nightly import Nightly, build_ref, compare_urls, find_nightly, missing_days, nightly_date, xla_commit
from ...envs.versions import version_key
from ...errors import UsageError
from .bisection import Known


@dataclass
class NightlySearch:
    """What `bisect --nightly` searches: the endpoints as versions, the nightlies strictly between, the skipped days."""

    index: str
    good: str  # a release, or a nightly's version
    bad: str
    nightlies: dict[str, Nightly] = field(default_factory=dict)  # version -> nightly, endpoints included
    candidates: list[str] = field(default_factory=list)  # versions, oldest first
    skipped: list[dict] = field(default_factory=list)  # [{"date", "reason"}]


def _endpoint(request: str, nightlies: list[Nightly], index: str) -> tuple[str, Nightly | None]:
    if nightly_date(request) is not None:
        n = find_nightly(request, nightlies, index)
        return n.jax_version, n
    if version_key(request)[0] == 0:
        raise UsageError(f"--good/--bad {request!r} is neither a release nor a nightly",
                         hint="e.g. --good 0.7.2 --bad 0.8.0, or --good nightly:2025-09-20")
    return request, None


def plan_search(manager, good: str, bad: str) -> NightlySearch:
    """The nightlies `manager`'s nightly index has between `good` and `bad`, and the days it lacks."""
    from ...envs.nightly import nightly_index_url

    index = nightly_index_url(manager.config.nightly_index)
    nightlies, incomplete = manager.nightlies()
    good_v, good_n = _endpoint(good, nightlies, index)
    bad_v, bad_n = _endpoint(bad, nightlies, index)
    if version_key(good_v) >= version_key(bad_v):
        raise UsageError(f"--good {good} ({good_v}) must be older than --bad {bad} ({bad_v})")
    search = NightlySearch(index, good_v, bad_v)
    search.nightlies = {n.jax_version: n for n in (good_n, bad_n) if n is not None}
    between = [n for n in nightlies if version_key(good_v) < version_key(n.jax_version) < version_key(bad_v)]
    if not between:
        raise UsageError(f"no nightly on {index} lies between {good_v} and {bad_v}",
                         hint="the two are adjacent builds already; or name the nightly index with --index-url")
    search.nightlies.update((n.jax_version, n) for n in between)
    search.candidates = [n.jax_version for n in between]
    first = good_n.date if good_n else between[0].date - dt.timedelta(days=1)
    last = bad_n.date if bad_n else between[-1].date + dt.timedelta(days=1)
    for day in missing_days(first, last, (n.date for n in between)):
        reason = incomplete.get(day, "no wheels on the index")
        search.skipped.append({"date": day.isoformat(), "reason": reason})
    return search


def build_of(manager, version: str, nightly: Nightly | None, *, jax_source: str | None = None) -> dict:
    """A tested build's identity: {"version", "date", "jax", "jaxlib" (commits its version modules record),
    "ref" (what GitHub names it: the commit, else a release's tag), "xla", "xla_source"}; from its environment
    (cached by the bisection's probes, so nothing is built here unless it was never made)."""
    env = manager.ensure(version)
    commits = dict(env.commits)
    ref = build_ref(version, commits.get("jaxlib") or commits.get("jax"))
    xla, where = xla_commit(ref, jax_source) if ref else (None, "the build records no commit")
    return {"version": version, "date": nightly.date.isoformat() if nightly else None, "jax": commits.get("jax"),
            "jaxlib": commits.get("jaxlib"), "ref": ref, "xla": xla, "xla_source": where}


def same_build(manager) -> Known:
    """bisection's `known` for nightlies: a day whose environment records the same jax and jaxlib commits as a day
    already classed good or bad is that build again (a day without commits in between): classed the same, unreplayed.
    Its environment is made here, as the probe would make it."""
    commits: dict[str, tuple] = {}

    def of(version: str) -> tuple:
        if version not in commits:
            commits[version] = manager.ensure(version).commits
        return commits[version]

    def known(version: str, classes: dict) -> tuple[str, str] | None:
        mine = of(version)
        if not mine:
            return None
        for other, cls in classes.items():
            if cls in ("good", "bad") and nightly_date(other) is not None and of(other) == mine:
                sha = dict(mine).get("jaxlib") or dict(mine).get("jax")
                return cls, f"the same build as {other} (jax@{str(sha)[:12]}): {cls} without a replay"
        return None

    return known


def report(manager, search: NightlySearch, last_good: str, first_bad: str, bundle_url: str,
           extra_args: Sequence[str] = ()) -> dict:
    """The nightly part of a bisect's answer: both builds, the compare URLs, the skipped days, the Reproduce lines
    (the two nightlies to install, the replay command)."""
    good = build_of(manager, last_good, search.nightlies.get(last_good))
    bad = build_of(manager, first_bad, search.nightlies.get(first_bad))
    urls = compare_urls(good, bad)
    installs = [f"pip install --pre 'jax=={v}' 'jaxlib=={search.nightlies[v].jaxlib_version}' "
                f"--extra-index-url {search.index}" for v in (last_good, first_bad) if v in search.nightlies]
    command = (f"reprobundle replay {shlex.quote(bundle_url)} --jax {shlex.quote(last_good)} "
               f"--jax {shlex.quote(first_bad)} --index-url {shlex.quote(search.index)}"
               + "".join(f" {shlex.quote(a)}" for a in extra_args))
    same = good["ref"] is not None and good["ref"] == bad["ref"]
    return {"index": search.index, "last_good": good, "first_bad": bad, "compare": urls,
            "skipped_days": search.skipped, "candidates": search.candidates, "install": installs,
            "command": command, "same_build": same}
