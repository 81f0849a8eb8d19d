"""Where things live by default. Environment variables override every default."""

from __future__ import annotations

import os
from pathlib import Path

STORE_ENV = "REPROBUNDLE_STORE"
CACHE_ENV = "REPROBUNDLE_CACHE_DIR"


def _user_dir(kind: str) -> Path:
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("reprobundle"))


def default_store_url() -> str:
    return os.environ.get(STORE_ENV) or str(_user_dir("data") / "store")


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or _user_dir("cache"))
