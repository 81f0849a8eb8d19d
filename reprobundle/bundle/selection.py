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
            matched = [n for n in names if fnmatch.fnmatchcase(n, name)]
            bundles = [registry.resolve(n + at + selector) for n in matched if registry.versions(n)]
        else:
            bundles = [registry.resolve(pattern)]
        for bundle in bundles:
            chosen.setdefault(bundle.ref.bundle_id, bundle)
    picked = [b for b in chosen.values() if _has_labels(b, labels or {})]
    if not picked:
        what = " ".join(patterns) if patterns else "every bundle"
        wanted = "".join(f" --label {k}={v}" for k, v in sorted((labels or {}).items()))
        raise UsageError(f"nothing to sweep: {what}{wanted} selects no bundle in {registry.url}",
                         hint="`reprobundle ls` lists the bundles and their labels; give refs, a name glob such as "
                              "'attn*' (quoted), or --label KEY=VALUE")
    return picked



def _has_labels(bundle: Bundle, labels: dict[str, str]) -> bool:
    have = bundle.manifest.get("labels") or {}
    return all(str(have.get(k)) == v for k, v in labels.items()) if labels else True


