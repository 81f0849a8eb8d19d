"""Builders of valid manifests and run records without JAX, and the schema check every test write goes through."""

import json
from pathlib import Path

import jsonschema

from reprobundle.bundle import manifest as mf

SCHEMAS = Path(__file__).parent.parent / "schemas"
_VALIDATORS = {
    (path.name.split("-v")[0], int(path.name.split("-v")[1].split(".")[0])):
        jsonschema.Draft202012Validator(json.loads(path.read_text()))
    for path in SCHEMAS.glob("*-v*.schema.json")
}


def assert_schema_valid(obj: dict, kind: str = "manifest") -> None:
    """Valid against the schema of the object's own format_version (current when it has none)."""
    current = mf.MANIFEST_VERSION if kind == "manifest" else mf.RUN_VERSION
    _VALIDATORS[kind, obj.get("format_version", current)].validate(obj)


def fields(n_in=1, n_out=1):
    return {
        "fun_name": "f", "in_avals": [{"shape": [2, 3], "dtype": "float32"}] * n_in,
        "out_avals": [{"shape": [2, 3], "dtype": "float32"}] * n_out, "platforms": ["cpu"], "nr_devices": 1,
        "in_shardings_hlo": [None] * n_in, "out_shardings_hlo": [None] * n_out, "calling_convention_version": 9,
        "ordered_effects": [], "unordered_effects": [], "disabled_safety_checks": [],
        "module_kept_var_idx": list(range(n_in)), "uses_global_constants": False,
    }


def make_manifest(registry, name="demo", payload=b"module", input_bytes=b"\0" * 24) -> dict:
    """A structurally valid manifest whose blobs are stored in `registry` (not runnable: no real module)."""
    module = registry.put_blob(payload)
    leaf = registry.put_blob(input_bytes)
    out = registry.put_blob(b"\1" * 24)
    leaf_tree = {"kind": "leaf"}
    return {
        "format": mf.MANIFEST_FORMAT, "format_version": mf.MANIFEST_VERSION, "name": name, "version": 0,
        "created": "2026-11-30T00:00:00.000000Z", "description": "", "labels": {}, "parent": None,
        "tool": {"name": "reprobundle", "version": "test"},
        "function": {"kind": "jax.export", "fields": fields(), "in_tree": leaf_tree, "out_tree": leaf_tree,
                     "exported": module, "mlir_module": module, "mlir_module_compat": None,
                     "stablehlo_text": module, "source": None},
        "inputs": {"leaves": [{"shape": [2, 3], "dtype": "float32", "blob": leaf}]},
        "reference": {"outputs": [{"shape": [2, 3], "dtype": "float32", "blob": out}],
                      "timing": {"warmup": 1, "samples_ns": [10, 11, 12], "compile_s": 0.1}, "route": "deserialize"},
        "environment": {"jax": "0.0"}, "artifacts": {},
    }


def make_run_record(bundle_id: str, run_id: str = "r1", *, group: str = "replay-1", status: str = "error") -> dict:
    """A minimal valid run record of the current format (a failed run: no timing, no outputs)."""
    return {"format": mf.RUN_FORMAT, "format_version": mf.RUN_VERSION, "run_id": run_id, "bundle": "demo@1",
            "bundle_id": bundle_id, "created": "2026-11-30T00:00:00.000000Z", "requested": "0.0", "status": status,
            "reason": "made by a test", "outputs": [],
            "route": "deserialize", "environment": {"jax": "0.0"}, "per_op": [], "artifacts": {}, "check": None,
            "group": group}
