"""A bundle's reproducer script with what its stored replay measured (`reprobundle script`, and the script of
`reprobundle issue`): the times of the runs timed together (analysis/slowdown.py) handed to bundle/reproducer.py,
which writes them into the script. Nothing runs: the bundle and its stored runs are read."""

from __future__ import annotations

from pathlib import Path

from ..analysis.slowdown import measured_times
from ..bundle.registry import Bundle, Registry, open_ref
from ..bundle.reproducer import script_text, stored_runs, write_text


def script_of(registry: Registry, bundle: Bundle, fname: str = "repro.py", runs: list[dict] | None = None) -> str:
    """The standalone script of `bundle` (bundle/reproducer.py's errors), with the times of `runs` (one stored
    replay; default: the latest, bundle/reproducer.stored_runs) where
    they can show a slowdown: every run ran with the reference's outputs, and minimize (if it made the piece) kept it
    for time. An outputs or error piece's script so never loads scipy (the verdict's t distribution)."""
    runs = stored_runs(registry, bundle) if runs is None else runs
    prop = str((bundle.manifest.get("labels") or {}).get("minimized-property") or "")
    timed = (not prop or prop.startswith("slower")) and all(r.get("status") == "ok" for r in runs)
    return script_text(registry, bundle, fname, measured_times(runs) if timed else None)


def write_script(ref: str, out: str | Path | None, *, store: str | None = None) -> dict:
    """The script of `ref`, written to `out` when given: {"bundle", "path", "bytes", "script"}."""
    registry, bundle = open_ref(ref, store)
    fname = Path(out).name if out else "repro.py"
    script = script_of(registry, bundle, fname)
    if out:
        write_text(Path(out), script)
        Path(out).chmod(0o755)  # it starts with #!/usr/bin/env python3
    return {"bundle": str(bundle.ref), "path": str(out) if out else None, "bytes": len(script.encode("utf-8")),
            "script": script}
