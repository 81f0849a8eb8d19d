"""The compiler's window between two JAX releases: the XLA commit each release tag pins (`XLA_COMMIT` in
third_party/xla/revision.bzl, before mid-2025 workspace.bzl), the compare URL of that range, and, with a local XLA
clone (`--xla-repo PATH`), the commits in the range that touch what the investigation named: each flag whose
default changed between the releases, found by `git log -G FLAG`: the commits whose added or removed lines name
it (`git log -S` would miss the one that matters most, an edit of the default on a line that names the flag)."""

from __future__ import annotations

import re
from typing import Sequence

from ...envs.jax_commit import JaxRepo, git_in
from ...envs.nightly import XLA_REPO, pinned_xla_commit
from ...errors import EnvironmentCreationError

MAX_LISTED = 20  # commits listed per term


def pinned_by(repo: JaxRepo, ref: str) -> str | None:
    """The XLA commit JAX pins at `ref` (a tag or commit), or None when neither file names one."""
    for name in ("revision.bzl", "workspace.bzl"):
        pinned = pinned_xla_commit(repo.file_at(ref, f"third_party/xla/{name}") or "")
        if pinned:
            return pinned
    return None


def terms_of(release_answer: dict | None) -> list[str]:
    """What the release bisection named that an XLA commit may touch: the XLA flags whose default changed from its
    last good to its first bad release."""
    changed = (release_answer or {}).get("changed_defaults") or []
    return sorted({str(c["name"]) for c in changed if c.get("kind") == "flag" and c.get("name")})


def xla_window(repo: JaxRepo, good_tag: str, bad_tag: str, xla_repo: str | None = None,
               release_answer: dict | None = None, terms: Sequence[str] = ()) -> dict:
    """{"good", "bad": the pinned XLA commits, "compare": the URL of the range (None when either is unknown or they
    are the same), "touching": {term: [{"sha", "title"}]} from `xla_repo` (`git log -G TERM good..bad`), "note"}."""
    good, bad = pinned_by(repo, good_tag), pinned_by(repo, bad_tag)
    window: dict = {"good": good, "bad": bad, "compare": f"{XLA_REPO}/compare/{good}...{bad}"
                    if good and bad and good != bad else None, "touching": {}, "note": None}
    if good is None or bad is None:
        window["note"] = f"{good_tag if good is None else bad_tag} pins no XLA_COMMIT in third_party/xla"
        return window
    if xla_repo is None:
        return window
    wanted = list(terms) or terms_of(release_answer)
    if not wanted:
        window["note"] = "no flag whose default changed was named between the releases: nothing to look for"
    for term in wanted:
        try:
            out = git_in(xla_repo, "log", f"--max-count={MAX_LISTED}", "--format=%H%x1f%s", "-G", re.escape(term),
                         f"{good}..{bad}")
        except EnvironmentCreationError as e:
            window["note"] = f"--xla-repo {xla_repo}: {e.message}"
            break
        rows = [line.split("\x1f", 1) for line in out.splitlines() if "\x1f" in line]
        window["touching"][term] = [{"sha": sha, "title": title} for sha, title in rows[:MAX_LISTED]]
    return window
