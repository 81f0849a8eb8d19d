"""What an investigation works on, as the API face opened it: the ref as the user named it (the commands an answer
offers repeat it), its store, the environments' configuration and manager, where progress goes, and the registry
and bundle once resolved. The searches (search/build_search.py, release_search.py, commit_search.py), explain
(explain/explanation.py) and the chain (chain.py) take one, so none of them reaches back up into `api/`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..bundle.registry import Bundle, Registry, open_ref, utc_now
from ..envs.env_config import EnvConfig
from ..errors import UsageError


@dataclass
class Case:
    ref: str
    store: str | None
    config: EnvConfig
    manager: Any  # envs/manager.py's EnvironmentManager of `config`
    progress: Callable[[str], None] | None = None
    registry: Registry | None = field(default=None, repr=False)
    bundle: Bundle | None = field(default=None, repr=False)
    started: str = field(default_factory=utc_now)  # when this investigation began (UTC, as records say `created`)

    def where(self) -> tuple[Registry, Bundle]:
        """The registry and the bundle: as the face resolved them, else resolved now (the same open_ref)."""
        if self.registry is None or self.bundle is None:
            self.registry, self.bundle = open_ref(self.ref, self.store)
        return self.registry, self.bundle

    def writable(self) -> tuple[Registry, Bundle]:
        """where(), refused with what to do where the store is read-only (the investigation stores what it makes)."""
        registry, bundle = self.where()
        if registry.store.read_only:
            raise UsageError(f"{self.ref} is in a read-only store", hint="pull it first: reprobundle pull " + self.ref)
        return registry, bundle

    @property
    def store_args(self) -> list[str]:
        """--store STORE where one was named: the commands an answer offers repeat it."""
        return ["--store", self.store] if self.store else []
