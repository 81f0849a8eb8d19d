"""Where things live by default, and the settings a user gives in the environment: every REPROBUNDLE_* variable is
read here (`settings()`), and each layer parses what it uses. Environment variables override every default.

Three more variables are no user's: they pass data to processes that do not import this package (REPROBUNDLE_CAPTURE
and REPROBUNDLE_CAPTURE_ROOT to a program run by `capture`, capture/staging.py; REPROBUNDLE_PIN_CPUS to a worker's
launcher, run/worker_launch.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class Settings:
    """The REPROBUNDLE_* variables, as given (stripped; "" when unset). Field `x` is the variable REPROBUNDLE_X."""

    store: str = ""  # the default store's URL or folder (config.default_store_url)
    cache_dir: str = ""  # the read-through cache of remote blobs and downloaded zips
    cache_max_bytes: str = ""  # the cache's size limit ("20G"; bundle/cache.py)
    answer_key: str = ""  # the file of this machine's key that seals the answers it stores (bundle/answer_seal.py)
    gc_grace: str = ""  # how old an unreferenced blob must be before gc deletes it ("6h"; gc_grace_s)
    env_dir: str = ""  # the cached JAX environments (envs/env_folders.py)
    install: str = ""  # the install line a Reproduce block shows (bundle/sharing.py)
    debug: str = ""  # "1": tracebacks with the one-line errors
    log: str = ""  # the log level without -v (logs.py)
    platforms: str = ""  # the accelerators here, replacing detection (envs/platforms.py)
    schedule: str = ""  # "alternate": versions visited one process at a time, as on a TPU (run/replay.py)
    http_timeout: str = ""  # seconds an http(s) store waits for the next byte (store/http.py)
    http_deadline: str = ""  # seconds one http(s) request may take in all (store/http.py)
    http_max_download: str = ""  # the largest zip an https URL may download ("2G"; store/http.py)
    http_min_rate: str = ""  # bytes/s a body must average over the rate window (store/http_client.py)
    http_rate_window: str = ""  # seconds over which that rate is judged (store/http_client.py)
    http_record_deadline: str = ""  # seconds a record (marker, tag, manifest, run) may take (store/http_client.py)
    gcs_token: str = ""  # store/gcs.py: credentials
    gcs_timeout: str = ""  # store/gcs.py: seconds a request may keep retrying
    gcs_read_timeout: str = ""  # store/gcs.py: seconds without a byte before a request fails
    gcs_retries: str = ""  # store/gcs.py
    gcs_concurrency: str = ""  # store/gcs.py: requests in flight

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of field `name`: REPROBUNDLE_GC_GRACE for gc_grace."""
        return "REPROBUNDLE_" + name.upper()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        return cls(**{f.name: environ.get(cls.variable(f.name), "").strip() for f in fields(cls)})


def settings() -> Settings:
    """The settings in the environment now (read at each call: a test or a command may change them)."""
    return Settings.from_environ()

# The timing a bundle's reference run (pack) gets by default; a replay's is run/replay_options.py's.
DEFAULT_WARMUP = 5  # untimed calls per worker before its timed ones
REFERENCE_REPEAT = 50  # timed calls of the reference run
# Here, not in run/, so that the CLI's option defaults cost nothing to load.
# Seconds of work a worker process gets before it is killed, unless told otherwise: the default of pack, replay,
# bisect and the CLI's --timeout (see run/execution.py's WorkerProcess for what counts as work).
DEFAULT_TIMEOUT_S = 1800.0
# Timed steps per version over all rounds (run/schedule.py): at 100 steps in 8 rounds, replays of identical versions
# on the 2-core CI VM gave no false verdict and a 10% slowdown was flagged every time (benchmarks/README.md); at 50,
# 92%.
DEFAULT_STEPS = 100
# A piece's workers warm up less than a replay's (investigate/minimize/pieces.py): its calls are short, and there are many.
ISOLATE_WARMUP = 2

STORE_ENV = "REPROBUNDLE_STORE"
CACHE_ENV = "REPROBUNDLE_CACHE_DIR"


def _user_dir(kind: str) -> Path:
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("reprobundle"))


def default_store_url() -> str:
    return settings().store or str(_user_dir("data") / "store")


def cache_dir() -> Path:
    return Path(settings().cache_dir or _user_dir("cache"))


def answer_key_file() -> Path:
    """The file of this machine's answer key: $REPROBUNDLE_ANSWER_KEY, else `answer-key` in the user's data folder
    (beside the default store, never inside any store: nothing a transfer copies)."""
    return Path(settings().answer_key or _user_dir("data") / "answer-key")


GC_GRACE_ENV = "REPROBUNDLE_GC_GRACE"
DEFAULT_GC_GRACE_S = 24 * 3600.0  # longer than any pack or push: a writer's unpublished blobs are never this old


def gc_grace_s() -> float:
    """How old an unreferenced blob must be before `gc` deletes it: $REPROBUNDLE_GC_GRACE ('6h', '30m', '0'), else
    24 hours. The grace period protects what a running pack or push wrote but has not yet published on stores where
    writers hold no lease (see bundle/registry.py, "Garbage collection")."""
    from .errors import UsageError
    from .units import parse_duration

    raw = settings().gc_grace
    if not raw:
        return DEFAULT_GC_GRACE_S
    try:
        return parse_duration(raw)
    except ValueError:
        raise UsageError(f"{GC_GRACE_ENV}={raw[:40]!r} is not a duration",
                         hint="write seconds, or a number with s, m, h or d (e.g. 6h)") from None
