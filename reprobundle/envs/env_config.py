"""Where a host's JAX environments come from, as one value: `EnvConfig` (root folder, interpreter, package index,
nightly index). Every command builds one from its options and hands it down whole (api -> replay, the executors, a
sweep's or a bisection's task), and `EnvironmentManager(config)` is made from it; it crosses machines in a Ray task
as plain JSON (`to_dict`/`from_dict`). None in a field means the default, decided where it is used:
$REPROBUNDLE_ENV_DIR or the user cache (envs/env_folders.default_root), the interpreter chosen per release
(interpreters.py), the index uv installs from (package_index.index_url), $REPROBUNDLE_NIGHTLY_INDEX or JAX's
(nightly.nightly_index_url).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from ..errors import UsageError


@dataclass(frozen=True)
class EnvConfig:
    """`root`: the folder environments live in; `python`: the interpreter --python names (a path, a command or a
    version such as "3.12": the only candidate when given, and what "installed" means); `index_url`: the package
    index releases come from (a mirror of PyPI); `nightly_index`: the index nightlies come from. `--index-url`
    sets both (`of`)."""

    root: str | None = None
    python: str | None = None
    index_url: str | None = None
    nightly_index: str | None = None

    @classmethod
    def of(cls, env_dir: Any = None, python: Any = None, index_url: str | None = None) -> EnvConfig:
        """The configuration of a command's --env-dir, --python and --index-url (one index for releases and
        nightlies); empty values are the defaults."""
        index = index_url.rstrip("/") if index_url else None
        return cls(root=str(env_dir) if env_dir else None, python=str(python) if python else None,
                   index_url=index, nightly_index=index)

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvConfig:
        """The configuration `to_dict` wrote; an unknown key is a UsageError (a task from another reprobundle)."""
        names = [f.name for f in fields(cls)]
        unknown = set(data) - set(names)
        if unknown:
            raise UsageError(f"unknown environment setting(s): {', '.join(sorted(unknown))}",
                             hint=f"known: {', '.join(names)}")
        return cls(**{k: None if data.get(k) is None else str(data[k]) for k in names})
