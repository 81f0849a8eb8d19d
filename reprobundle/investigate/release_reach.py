"""What explain reads of the two releases (the release delta, as experiments) and where a workaround still works on
the releases after the candidate's: a flag or option can be removed later, and a workaround that stops working at
the next upgrade is worth knowing about before it is pasted.

Both read only environments: the facts each release says of itself (envs/release_facts.py, cached beside it), and
one untimed run of the workaround on the newest release cached here. Nothing is installed for it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from ..analysis.release_delta import release_delta
from ..envs.release_facts import release_facts
from ..envs.versions import version_key
from ..run.contenders import ContenderSpec
from ..run.options import ReplayOptions
from .default_experiments import DefaultChange, default_changes

MAX_RELEASES_READ = 12  # releases whose facts are read to find where a workaround's flag was removed


class ReleasePair:
    """The baseline's and the candidate's environments and facts, read once (lazily: a read-only explanation that
    needs none reads none)."""

    def __init__(self, manager: Any, baseline: ContenderSpec, candidate: ContenderSpec, platform: str,
                 progress: Callable[[str], None] | None = None):
        self.manager, self.baseline, self.candidate, self.platform = manager, baseline, candidate, platform
        self.progress = progress
        self._facts: list[dict] | None = None
        self._envs: list[Any] = []

    def facts(self) -> list[dict]:
        if self._facts is None:
            self._envs = [self.manager.ensure(s.jax, platform=self.platform) for s in (self.baseline, self.candidate)]
            self._facts = [release_facts(env, self.progress) for env in self._envs]
        return self._facts

    def changes(self) -> tuple[list[DefaultChange], list[dict], str | None]:
        """The defaults that changed from the baseline's release to the candidate's, worth an experiment here;
        those left out and why; a note when the releases could not say."""
        from ..errors import ReproBundleError

        try:
            facts = self.facts()
        except ReproBundleError as e:
            return [], [], f"the releases' flags and options were not read: {e.message}"
        a, b = (env.jax_version for env in self._envs)
        delta = release_delta(a, b, *facts)
        changes, left = default_changes(delta, self.platform)
        note = None if delta["complete"] else "one release's flag list could not be read whole: flags may be missing"
        return changes, left, note

    def flag_types(self) -> dict | None:
        from ..errors import ReproBundleError

        try:
            return self.facts()[1].get("xla_flags")
        except ReproBundleError:
            return None


def reach(manager: Any, change: DefaultChange, spec: ContenderSpec, replay_fn: Callable[..., list[dict]],
          options: ReplayOptions, platform: str) -> dict:
    """Where the workaround of `change` still works on the releases cached here after the candidate's: the first
    whose facts no longer define it (removed), else the newest, where the workaround is run once, untimed.
    {"newest", "removed_in", "ran": status | None, "text"}."""
    later = _later_releases(manager, spec.jax, platform)
    if not later:
        return {"newest": None, "removed_in": None, "ran": None,
                "text": f"no release after {spec.jax} is cached here to try it on"}
    removed = _removed_in(later, change)
    if removed is not None:
        return {"newest": later[-1].jax_version, "removed_in": removed, "ran": None,
                "text": f"{_named(change)} is gone from jax {removed}: the workaround stops working there"}
    newest = later[-1].jax_version
    run = replay_fn([replace(spec, jax=newest)], replace(options.outputs_only(), dump=False), store_runs=False,
                    what="where the workaround works")[0]
    said = {"ok": "ran with the reference's outputs", "mismatch": "ran (its outputs differ from the reference's)"}
    ran = said.get(run["status"], f"did not run ({run['status']}: {str(run.get('reason', ''))[:200]})")
    return {"newest": newest, "removed_in": None, "ran": run["status"],
            "text": f"jax {newest}, the newest release cached here, still defines {_named(change)}; the workaround "
                    f"{ran} there, untimed"}


def _named(change: DefaultChange) -> str:
    return f"--{change.name}" if change.kind == "flag" else change.name


def _later_releases(manager: Any, version: str, platform: str) -> list[Any]:
    """One environment per release cached here after `version` (releases only), oldest first."""
    try:
        key = version_key(version)
    except Exception:  # noqa: BLE001 - "installed", a path: no release order to place it in
        return []
    try:
        releases = set(manager.available_versions())  # an environment made under another name is no release
    except Exception:  # noqa: BLE001 - no index to read: nothing to say about later releases
        return []
    seen: dict[str, Any] = {}
    for env in manager.list():
        if env.nightly or env.local or env.path is None or env.platform != platform or env.jax_version not in releases:
            continue
        if version_key(env.jax_version) > key:
            seen.setdefault(env.jax_version, env)
    return [seen[v] for v in sorted(seen, key=version_key)]


def _removed_in(later: list[Any], change: DefaultChange) -> str | None:
    """The first of `later` whose facts lack the flag or option (the newest read first: usually it is there)."""
    from ..errors import ReproBundleError

    def defines(env: Any) -> bool | None:
        try:
            facts = release_facts(env)
        except ReproBundleError:
            return None
        table = facts.get("xla_flags") if change.kind == "flag" else facts.get("jax_options")
        return None if table is None else change.name in table

    if defines(later[-1]) is not False:
        return None
    for env in later[:MAX_RELEASES_READ]:
        if defines(env) is False:
            return env.jax_version
    return later[-1].jax_version
