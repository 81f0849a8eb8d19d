"""Environments made ahead of need: while an investigation's step runs, the releases its next step may test are
made ready in the background, so that a cold cache costs little more than a warm one."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from .manager import EnvironmentManager

log = logging.getLogger(__name__)


class Prefetch:
    """`want(versions)` makes each version's environment (platform `platform`) in at most `jobs` background threads,
    once, in the order asked; a failure is only logged (the probe that needs the version meets it again and reports
    it). `close` cancels what has not started and waits for what has (an environment is created whole or not at
    all: envs/build.py); `with Prefetch(...)` closes it."""

    def __init__(self, manager: EnvironmentManager, jobs: int = 1, platform: str = "cpu"):
        self.manager = manager
        self.platform = platform
        self.pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="reprobundle-env")
        self.wanted: dict[str, Future] = {}

    def want(self, versions: Iterable[str]) -> None:
        """Make these next, in this order; a version asked for before and not started since, but not now, is
        dropped (the search went elsewhere: its turn would delay one it needs)."""
        versions = list(versions)
        for version, future in list(self.wanted.items()):
            if version not in versions and future.cancel():
                del self.wanted[version]
        for version in versions:
            if version not in self.wanted:
                self.wanted[version] = self.pool.submit(self._make, version)

    def _make(self, version: str) -> None:
        try:
            self.manager.ensure(version, platform=self.platform)
        except Exception as e:  # said again, with its hint, by the probe that needs it
            log.info("jax %s: its environment could not be made ahead of need: %s", version, e)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "Prefetch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
