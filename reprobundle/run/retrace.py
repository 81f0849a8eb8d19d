"""The host's part of a retrace: whether a bundle can be retraced, and its program written where the worker reads it.

The source files are data here: they are written into the worker's job folder from their blobs and run only by the
worker (worker/retrace.py), in the environment of the release under test.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from ..bundle.registry import Registry
from ..errors import CorruptBundleError


def retrace_refusal(manifest: Mapping[str, Any]) -> str | None:
    """Why the bundle cannot be retraced, or None when it can."""
    function = manifest.get("function") or {}
    if function.get("program"):
        return None
    if function.get("kind") == "stablehlo":
        how = "it was packed from a raw StableHLO module, which has no Python program to trace"
    elif function.get("source") is None and function.get("kind") == "jax.export" and not function.get("outputs"):
        how = "it was packed from a serialized jax.export artifact (an Exported), which has no Python program to trace"
    else:
        how = ("it holds no program source (packed by a reprobundle before manifest 3, from a function object or "
               "captured from a running program)")
    return f"cannot retrace {manifest.get('name')}: {how}; pack it from a script (reprobundle pack SCRIPT.py:FACTORY)"


def write_program(registry: Registry, program: Mapping[str, Any], folder: Path) -> dict:
    """The program's files under `folder` (paths checked again: nothing escapes it); the job's `program` map."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in program["files"]:
        relative = PurePosixPath(item["path"])
        if relative.is_absolute() or any(part in ("..", ".", "") for part in relative.parts):
            raise CorruptBundleError(f"the bundle's program names the file {item['path']!r}, outside its folder",
                                     hint="the manifest is malformed; fetch the bundle again")
        target = folder.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(registry.get_blob(item["blob"]))
    return {"dir": str(folder), "script": str(program["script"]), "factory": str(program["factory"]),
            "static": list(program.get("static") or [])}


def program_file_names(manifest: Mapping[str, Any]) -> list[str]:
    program = (manifest.get("function") or {}).get("program") or {}
    return [str(item["path"]).rsplit("/", 1)[-1] for item in program.get("files") or []]


def lowering_fields(registry: Registry, manifest: Mapping[str, Any], artifacts: Mapping[str, Any]) -> dict:
    """A retraced run's `lowering_changed` (its StableHLO against the bundle's, locations, names and debug info
    aside) and `lowering_diff` (the ops it added and removed, with their source lines); {} without both texts."""
    from ..analysis.lowering_diff import lowering_diff

    mine = artifacts.get("stablehlo_retraced")
    packed = (manifest.get("function") or {}).get("stablehlo_text")
    if not mine or not packed:
        return {}
    before = registry.get_blob(packed).decode("utf-8", "replace")
    after = registry.get_blob(mine["blob"]).decode("utf-8", "replace")
    diff = lowering_diff(before, after, program_file_names(manifest))
    return {"lowering_changed": diff["changed"], "lowering_diff": diff["text"]}
