"""Where things live by default. Environment variables override every default."""

from __future__ import annotations

import os
from pathlib import Path

# The timing a bundle's reference run (pack) gets by default; a replay's is run/options.py's.
DEFAULT_WARMUP = 5  # untimed calls per worker before its timed ones
REFERENCE_REPEAT = 50  # timed calls of the reference run

STORE_ENV = "REPROBUNDLE_STORE"
CACHE_ENV = "REPROBUNDLE_CACHE_DIR"


def _user_dir(kind: str) -> Path:
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("reprobundle"))


def default_store_url() -> str:
    return os.environ.get(STORE_ENV) or str(_user_dir("data") / "store")


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or _user_dir("cache"))


GC_GRACE_ENV = "REPROBUNDLE_GC_GRACE"
DEFAULT_GC_GRACE_S = 24 * 3600.0  # longer than any pack or push: a writer's unpublished blobs are never this old


def gc_grace_s() -> float:
    """How old an unreferenced blob must be before `gc` deletes it: $REPROBUNDLE_GC_GRACE ('6h', '30m', '0'), else
    24 hours. The grace period protects what a running pack or push wrote but has not yet published on stores where
    writers hold no lease (see bundle/registry.py, "Garbage collection")."""
    from .errors import UsageError
    from .units import parse_duration

    raw = os.environ.get(GC_GRACE_ENV, "").strip()
    if not raw:
        return DEFAULT_GC_GRACE_S
    try:
        return parse_duration(raw)
    except ValueError:
        raise UsageError(f"{GC_GRACE_ENV}={raw[:40]!r} is not a duration",
                         hint="write seconds, or a number with s, m, h or d (e.g. 6h)") from None
