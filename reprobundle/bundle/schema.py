"""Validation of manifests and run records by their JSON Schemas (reprobundle/schemas/), the single source of truth.

The schemas say what every field is; `check` runs them (jsonschema, compiled once per schema) and turns the most
relevant violation into one line with a precise path (`manifest.inputs.leaves[3].shape[0]: must be >= 0`). What a
schema cannot say, the callers check by hand (counts that must agree between fields, sums of timing steps).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ..errors import CorruptBundleError

if TYPE_CHECKING:
    import jsonschema  # loaded where used: only a refused document needs it (0.3 s of every command's start)

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
MAX_TREE_DEPTH = 100  # pytree nesting in in_tree/out_tree; real functions stay far below
# The schemas scripts/compile_schemas.py compiles ahead of time (the ones every read validates against)
COMPILED = (("manifest", 3), ("run", 4))
# Our schemas use only keywords whose meaning draft 7 and draft 2020-12 share (no $ref with siblings), so they are
# compiled as draft 7, which fastjsonschema implements.
DRAFT = "http://json-schema.org/draft-07/schema#"
_SHORT = 60
_TYPE_NAMES = {"integer": "int", "string": "str", "array": "list", "object": "map", "number": "number",
               "boolean": "bool", "null": "null"}


@functools.cache
def validator(kind: str, version: int) -> jsonschema.Draft202012Validator:
    """The validator of `schemas/{kind}-v{version}.schema.json` ("manifest" or "run")."""
    import jsonschema

    schema = json.loads((SCHEMA_DIR / f"{kind}-v{version}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@functools.cache
def fast_validator(kind: str, version: int) -> Callable[[Any], Any]:
    """The same schema compiled by fastjsonschema (~30x faster than jsonschema on a run record: a history reads
    thousands): the module scripts/compile_schemas.py wrote for it while that still matches the schema file, else
    compiled now."""
    raw = (SCHEMA_DIR / f"{kind}-v{version}.schema.json").read_bytes()
    ahead = _compiled_ahead(kind, version, hashlib.sha256(raw).hexdigest())
    if ahead is not None:
        return ahead
    import fastjsonschema

    compiled: Callable[[Any], Any] = fastjsonschema.compile({**json.loads(raw), "$schema": DRAFT})
    return compiled


def compiled_module_name(kind: str, version: int) -> str:
    return f"{kind}_v{version}"


def _compiled_ahead(kind: str, version: int, sha256: str) -> Callable[[Any], Any] | None:
    """The validator compiled ahead of time for exactly this schema text, or None."""
    try:
        module = importlib.import_module(f"{__package__}.compiled_schemas.{compiled_module_name(kind, version)}")
    except ImportError:
        return None
    if getattr(module, "SCHEMA_SHA256", None) != sha256:
        return None
    validate: Callable[[Any], Any] = module.validate
    return validate


def check(obj: Mapping[str, Any], kind: str, version: int, what: str) -> None:
    """Raise CorruptBundleError naming the path and the problem when `obj` breaks its schema. The compiled
    validator decides what passes; only what it refuses goes through jsonschema, whose best_match names the most
    relevant violation (and whose verdict stands where the two would disagree)."""
    _check_tree_depth(obj, what)
    try:
        fast_validator(kind, version)(obj)
        return
    except Exception:  # noqa: BLE001 - any refusal, or a hostile value it cannot handle: jsonschema decides
        pass
    import jsonschema

    error = jsonschema.exceptions.best_match(validator(kind, version).iter_errors(obj))
    if error is not None:
        raise _corrupt(what, _path(kind, error.absolute_path), _describe(error))


def _corrupt(what: str, path: str, problem: str) -> CorruptBundleError:
    return CorruptBundleError(f"{what}: {path}: {problem}",
                              hint="the manifest is malformed; it was not written by a compatible reprobundle")


def _check_tree_depth(obj: Mapping[str, Any], what: str) -> None:
    """Bound pytree nesting before a recursive validator sees it: no RecursionError on hostile input."""
    function = obj.get("function") if isinstance(obj, dict) else None
    if not isinstance(function, dict):
        return
    for key in ("in_tree", "out_tree"):
        stack: list[tuple[Any, int]] = [(function.get(key), 0)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_TREE_DEPTH:
                raise _corrupt(what, f"manifest.function.{key}", f"tree nested deeper than {MAX_TREE_DEPTH} levels")
            children = node.get("children") if isinstance(node, dict) else None
            if isinstance(children, list):
                stack.extend((child, depth + 1) for child in children)


def _path(kind: str, parts: Iterable[str | int]) -> str:
    text = kind if kind == "manifest" else "run"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _short(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= _SHORT else text[:_SHORT - 3] + "..."
    return text.encode("ascii", "backslashreplace").decode()  # no control characters reach a terminal


def _describe(error: jsonschema.ValidationError) -> str:
    """One phrase for the violation, in the words the rest of reprobundle uses."""
    field = error.absolute_path[-1] if error.absolute_path else None
    return (_describe_shape(error) or _describe_field(field, error.validator, error.instance)
            or _describe_value(field, error))


def _describe_shape(error: jsonschema.ValidationError) -> str | None:
    """A missing or unknown field, a wrong type, a number below its minimum."""
    describe = _SHAPE_PHRASES.get(str(error.validator))
    return describe(error) if describe else None


def _missing_field(error: jsonschema.ValidationError) -> str:
    instance = error.instance
    missing = [k for k in error.validator_value if isinstance(instance, dict) and k not in instance]
    return f"missing field {missing[0]!r}" if missing else "missing field"


def _unknown_field(error: jsonschema.ValidationError) -> str | None:
    instance = error.instance
    if not isinstance(instance, dict):
        return None
    allowed = set(error.schema.get("properties") or {})
    extra = sorted(str(k) for k in instance if k not in allowed)
    return f"unknown field {_short(extra[0])}" if extra else "unknown field"


def _wrong_type(error: jsonschema.ValidationError) -> str:
    value, instance = error.validator_value, error.instance
    wanted = value if isinstance(value, list) else [value]
    got = "bool" if isinstance(instance, bool) else type(instance).__name__
    return f"expected {'/'.join(_TYPE_NAMES.get(str(t), str(t)) for t in wanted)}, got {got}"


def _below_minimum(error: jsonschema.ValidationError) -> str:
    return f"must be >= {error.validator_value}"


_SHAPE_PHRASES: dict[str, Callable[[jsonschema.ValidationError], str | None]] = {
    "required": _missing_field, "additionalProperties": _unknown_field, "type": _wrong_type,
    "minimum": _below_minimum}


def _describe_field(field: Any, kind: Any, instance: Any) -> str | None:
    """A field whose values have a name of their own: a dtype, a digest, a bundle name."""
    if field == "dtype":
        return f"unknown dtype {_short(instance)}"
    if field == "digest":
        return f"not a sha256 digest: {_short(instance)}"
    if field == "name" and kind == "pattern":
        return f"invalid bundle name {_short(instance)}"
    return None


def _describe_value(field: Any, error: jsonschema.ValidationError) -> str:
    kind, value = error.validator, error.validator_value
    instance = error.instance
    if kind == "oneOf" and isinstance(instance, dict) and {"blob", "synthetic"} & set(instance):
        return "a leaf has exactly one of 'blob' and 'synthetic'"
    if kind == "enum":
        return f"unknown {field if isinstance(field, str) else 'value'} {_short(instance)}"
    if kind == "const":
        return f"expected {value!r}, got {_short(instance)}"
    if kind in ("minLength", "maxLength"):
        return f"length must be {'>=' if kind == 'minLength' else '<='} {value}"
    return f"{_short(instance)} is invalid ({kind})"
