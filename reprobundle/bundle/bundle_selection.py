"""Which bundles a sweep or a history covers: refs, name globs and labels over one registry."""

from __future__ import annotations

import fnmatch
from typing import Sequence

from ..errors import UsageError
from .registry import Bundle, Registry


def select_bundles(registry: Registry, patterns: Sequence[str], labels: dict[str, str] | None = None) -> list[Bundle]:
    """The bundles a sweep replays, in order, each once: every pattern is a ref (NAME, NAME@3, NAME@TAG,
    sha256:PREFIX) or a glob over the registry's names (`attn*`, `llm-*@2`: fnmatch, the newest version of each
    name unless a version is given); no pattern means every name. `labels` keeps the bundles carrying every
    key=value given. An empty selection is a UsageError."""
    chosen: dict[str, Bundle] = {}
    names = None
    for pattern in patterns or ["*"]:
        name, at, selector = pattern.partition("@")
        if any(c in name for c in "*?[") and not pattern.startswith("sha256:"):
            names = registry.names() if names is None else names
            bundles = _glob_bundles(registry, names, name, at + selector)
        else:
            bundles = [registry.resolve(pattern)]
        for bundle in bundles:
            chosen.setdefault(bundle.ref.bundle_id, bundle)
    picked = [b for b in chosen.values() if _has_labels(b, labels or {})]
    if not picked:
        raise _nothing_selected(registry, patterns, labels)
    return picked


def _glob_bundles(registry: Registry, names, glob: str, version: str) -> list[Bundle]:
    """The bundles of every name matching `glob` that has versions; `version` is "" or "@SELECTOR"."""
    matched = [n for n in names if fnmatch.fnmatchcase(n, glob)]
    return [registry.resolve(n + version) for n in matched if registry.versions(n)]


def _nothing_selected(registry: Registry, patterns: Sequence[str], labels: dict[str, str] | None) -> UsageError:
    what = " ".join(patterns) if patterns else "every bundle"
    wanted = "".join(f" --label {k}={v}" for k, v in sorted((labels or {}).items()))
    return UsageError(f"nothing to sweep: {what}{wanted} selects no bundle in {registry.url}",
                      hint="`reprobundle ls` lists the bundles and their labels; give refs, a name glob such as "
                           "'attn*' (quoted), or --label KEY=VALUE")



def _has_labels(bundle: Bundle, labels: dict[str, str]) -> bool:
    have = bundle.manifest.get("labels") or {}
    return all(str(have.get(k)) == v for k, v in labels.items()) if labels else True


