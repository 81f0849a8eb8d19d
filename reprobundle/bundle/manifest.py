"""The bundle manifest and the run record: versioned msgpack maps, encoded canonically, parsed strictly.

A manifest is pure data (maps, lists, str, int, float, bool, None; never bytes, never code). Its digest is the
bundle id. `decode_*` checks `format` and `format_version` on every read: a newer version than this reader
knows is an UnsupportedFormatVersionError; older versions are upgraded one step at a time by `_UPGRADES`.

Format versions (dated, like jax.export's serialization versions):
- manifest 1 (2026-11-30): first version. schemas/manifest-v1.schema.json describes it.
- manifest 2 (2026-11-30): any pytree. The exported function takes and returns a flat tuple; the user's trees
  stay as data: `inputs.leaves[i].path` and `function.outputs[i].path` (key paths), `key_impl` on leaves that are
  typed PRNG keys (stored as key data), `function.static` (values baked into the export: path, type, repr), tree
  node kind `static`, and symbolic dimensions (strings such as "b" or "2*b") in `function.fields` avals. A
  version 1 manifest upgrades unchanged. schemas/manifest-v2.schema.json.
- run 1 (2026-11-30): first version. schemas/run-v1.schema.json describes it.
- run 2 (2026-11-30): timing may say how it was measured interleaved with other runs: `steps` (calls per step),
  `rounds` (steps per round, a fresh worker process each) and `group` (shared by the runs timed together). A
  version 1 record upgrades unchanged: it was one process, not interleaved. schemas/run-v2.schema.json.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import msgpack

from ..errors import (
    CorruptBundleError,
    FormatError,
    InvalidNameError,
    UnsupportedFormatVersionError,
)
from .digest import check_digest, digest_bytes

MANIFEST_FORMAT = "reprobundle-bundle"
MANIFEST_VERSION = 2
RUN_FORMAT = "reprobundle-run"
RUN_VERSION = 2
STORE_FORMAT = "reprobundle-store"
STORE_VERSION = 1

# Bounds for decoding untrusted bytes: a manifest is metadata, so these are generous but finite.
MAX_MANIFEST_BYTES = 64 << 20
MAX_TREE_DEPTH = 100  # pytree nesting in in_tree/out_tree; real functions stay far below
_UNPACK_LIMITS = dict(
    max_str_len=32 << 20, max_bin_len=0, max_array_len=1 << 22, max_map_len=1 << 20, max_ext_len=0,
)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
TAG_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")
KNOWN_DTYPES = frozenset({
    "bool", "int4", "int8", "int16", "int32", "int64", "uint4", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn", "int2", "uint2",
})
SYNTHETIC_DISTRIBUTIONS = frozenset({"normal", "uniform", "randint", "zeros", "ones"})


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidNameError(
            f"invalid bundle name {name!r}",
            hint="names are 1-100 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
        )
    return name


def check_tag(tag: str) -> str:
    if not isinstance(tag, str) or not TAG_RE.fullmatch(tag):
        raise InvalidNameError(
            f"invalid tag {tag!r}",
            hint="tags are 1-64 characters of letters, digits, '.', '_' and '-', starting with a letter",
        )
    return tag


def _canonical(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        raise FormatError(f"non-finite float {obj!r} cannot be stored in a manifest")
    return obj


def encode(obj: dict) -> bytes:
    """Canonical msgpack: keys sorted at every level, so equal maps encode to equal bytes."""
    return msgpack.packb(_canonical(obj), use_bin_type=True)


def decode_map(data: bytes, what: str) -> dict:
    if len(data) > MAX_MANIFEST_BYTES:
        raise CorruptBundleError(f"{what} is {len(data)} bytes, more than the {MAX_MANIFEST_BYTES} allowed")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True, **_UNPACK_LIMITS)
    except Exception as e:  # msgpack raises many unrelated types for bad input
        raise CorruptBundleError(f"{what} is not valid msgpack ({type(e).__name__}: {e})",
                                 hint="the stored bytes are corrupt; verify the store or fetch the bundle again") from None
    if not isinstance(obj, dict):
        raise CorruptBundleError(f"{what} is not a map")
    _check_finite(obj, what)
    return obj


def _check_finite(obj: Any, what: str) -> None:
    """What `encode` refuses, decoding refuses too: NaN and infinities never come out of a stored map."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise CorruptBundleError(f"{what} holds a non-finite number ({item!r}), which no reprobundle writes",
                                     hint="the stored bytes are corrupt or hand-made; fetch the bundle again")


# ---------------------------------------------------------------------------------------------- validation

class _Checker:
    """Strict structural checks with paths in messages, e.g. `inputs.leaves[3].shape: expected list`."""

    def __init__(self, what: str) -> None:
        self.what = what

    def fail(self, path: str, msg: str):
        raise CorruptBundleError(f"{self.what}: {path}: {msg}",
                                 hint="the manifest is malformed; it was not written by a compatible reprobundle")

    def typed(self, obj, path, types, *, optional=False):
        if obj is None and optional:
            return None
        if isinstance(obj, bool) and bool not in types:
            self.fail(path, f"expected {'/'.join(t.__name__ for t in types)}, got bool")
        if not isinstance(obj, types):
            self.fail(path, f"expected {'/'.join(t.__name__ for t in types)}, got {type(obj).__name__}")
        return obj

    def map(self, obj, path, required: dict[str, Callable], optional: dict[str, Callable] = {}):  # noqa: B006
        self.typed(obj, path, (dict,))
        for key in obj:
            if key not in required and key not in optional:
                self.fail(path, f"unknown field {key!r}")
        for key, check in required.items():
            if key not in obj:
                self.fail(path, f"missing field {key!r}")
            check(obj[key], f"{path}.{key}")
        for key, check in optional.items():
            if key in obj:
                check(obj[key], f"{path}.{key}")
        return obj

    def list_of(self, check):
        def run(obj, path):
            self.typed(obj, path, (list,))
            for i, item in enumerate(obj):
                check(item, f"{path}[{i}]")
        return run

    def str_(self, obj, path):
        self.typed(obj, path, (str,))

    def opt_str(self, obj, path):
        self.typed(obj, path, (str,), optional=True)

    def int_(self, obj, path):
        self.typed(obj, path, (int,))

    def nonneg_int(self, obj, path):
        if self.typed(obj, path, (int,)) < 0:
            self.fail(path, "must be >= 0")

    def pos_int(self, obj, path):
        if self.typed(obj, path, (int,)) < 1:
            self.fail(path, "must be >= 1")

    def num(self, obj, path):
        self.typed(obj, path, (int, float))

    def bool_(self, obj, path):
        self.typed(obj, path, (bool,))

    def any_(self, obj, path):
        pass

    def str_map(self, obj, path):
        self.typed(obj, path, (dict,))
        for k, v in obj.items():
            self.typed(v, f"{path}.{k}", (str,))

    def blob(self, obj, path):
        self.map(obj, path, {"digest": self.digest, "size": self.nonneg_int})

    def opt_blob(self, obj, path):
        if obj is not None:
            self.blob(obj, path)

    def digest(self, obj, path):
        try:
            check_digest(obj)
        except FormatError:
            self.fail(path, f"not a sha256 digest: {obj!r}")

    def dtype(self, obj, path):
        if not isinstance(obj, str) or obj not in KNOWN_DTYPES:  # a list or map here is unhashable: check type first
            self.fail(path, f"unknown dtype {obj!r}")

    def shape(self, obj, path):
        self.list_of(self.nonneg_int)(obj, path)

    def synthetic(self, obj, path):
        self.map(obj, path, {"distribution": self.str_, "seed": self.nonneg_int},
                 {"low": self.num, "high": self.num, "mean": self.num, "std": self.num})
        if obj["distribution"] not in SYNTHETIC_DISTRIBUTIONS:
            self.fail(f"{path}.distribution", f"unknown distribution {obj['distribution']!r}")

    def leaf(self, obj, path):
        self.map(obj, path, {"shape": self.shape, "dtype": self.dtype},
                 {"blob": self.blob, "synthetic": self.synthetic, "path": self.str_, "key_impl": self.str_})
        if ("blob" in obj) == ("synthetic" in obj):
            self.fail(path, "a leaf has exactly one of 'blob' and 'synthetic'")

    def output_leaf(self, obj, path):
        self.map(obj, path, {"shape": self.shape, "dtype": self.dtype, "blob": self.blob})

    def aval(self, obj, path):
        self.map(obj, path, {"shape": self.list_of(self.dimension), "dtype": self.dtype})

    def dimension(self, obj, path):
        if isinstance(obj, str):
            if not obj or len(obj) > 200:
                self.fail(path, "a symbolic dimension is a non-empty expression of at most 200 characters")
        else:
            self.nonneg_int(obj, path)

    def leaf_name(self, obj, path):
        self.map(obj, path, {"path": self.str_}, {"key_impl": self.str_})

    def static_value(self, obj, path):
        self.map(obj, path, {"path": self.str_, "type": self.str_, "repr": self.str_})

    def tree(self, obj, path):
        if path.count(".children[") > MAX_TREE_DEPTH:  # bounded before recursing: no RecursionError on hostile input
            self.fail(path, f"tree nested deeper than {MAX_TREE_DEPTH} levels")
        self.map(obj, path, {"kind": self.str_}, {"children": self.list_of(self.tree), "keys": self.list_of(self.any_),
                                                   "type": self.str_})
        if obj["kind"] not in ("leaf", "static", "none", "tuple", "list", "dict", "custom"):
            self.fail(f"{path}.kind", f"unknown tree node kind {obj['kind']!r}")

    def artifact(self, obj, path):
        self.map(obj, path, {"blob": self.blob, "media_type": self.str_})

    def artifacts(self, obj, path):
        self.typed(obj, path, (dict,))
        for k, v in obj.items():
            self.artifact(v, f"{path}.{k}")

    def timing(self, obj, path):
        self.map(obj, path, {"warmup": self.nonneg_int, "samples_ns": self.list_of(self.nonneg_int),
                             "compile_s": self.num})

    def run_timing(self, obj, path):
        self.map(obj, path, {"warmup": self.nonneg_int, "samples_ns": self.list_of(self.nonneg_int),
                             "compile_s": self.num},
                 {"steps": self.list_of(self.pos_int), "rounds": self.list_of(self.nonneg_int), "group": self.str_})
        if ("steps" in obj) != ("rounds" in obj):
            self.fail(path, "steps and rounds come together")
        if "steps" in obj and sum(obj["steps"]) != len(obj["samples_ns"]):
            self.fail(f"{path}.steps", f"{sum(obj['steps'])} calls for {len(obj['samples_ns'])} samples")
        if "rounds" in obj and sum(obj["rounds"]) != len(obj["steps"]):
            self.fail(f"{path}.rounds", f"{sum(obj['rounds'])} steps for {len(obj['steps'])} listed")

    def per_op(self, obj, path):
        self.list_of(lambda o, p: self.map(o, p, {"name": self.str_, "kind": self.str_, "time_ns": self.num,
                                                  "count": self.nonneg_int}))(obj, path)


def _check_fields(c: _Checker, obj, path):
    c.map(obj, path, {
        "fun_name": c.str_, "in_avals": c.list_of(c.aval), "out_avals": c.list_of(c.aval),
        "platforms": c.list_of(c.str_), "nr_devices": c.nonneg_int,
        "in_shardings_hlo": c.list_of(c.opt_str), "out_shardings_hlo": c.list_of(c.opt_str),
        "calling_convention_version": c.int_, "ordered_effects": c.list_of(c.str_),
        "unordered_effects": c.list_of(c.str_), "disabled_safety_checks": c.list_of(c.str_),
        "module_kept_var_idx": c.list_of(c.nonneg_int), "uses_global_constants": c.bool_,
    })


def validate_manifest(m: dict) -> dict:
    c = _Checker("manifest")
    c.map(m, "manifest", {
        "format": c.str_, "format_version": c.int_, "name": lambda o, p: _name_field(c, o, p),
        "version": c.pos_int, "created": c.str_, "description": c.str_, "labels": c.str_map,
        "parent": c.opt_str, "tool": lambda o, p: c.map(o, p, {"name": c.str_, "version": c.str_}),
        "function": lambda o, p: c.map(o, p, {
            "kind": c.str_, "fields": lambda o2, p2: _check_fields(c, o2, p2),
            "in_tree": c.tree, "out_tree": c.tree,
        }, {
            "exported": c.opt_blob, "mlir_module": c.opt_blob, "mlir_module_compat": c.opt_blob,
            "stablehlo_text": c.opt_blob, "source": c.opt_blob, "serialization_version": c.int_,
            "outputs": c.list_of(c.leaf_name), "static": c.list_of(c.static_value),
        }),
        "inputs": lambda o, p: c.map(o, p, {"leaves": c.list_of(c.leaf)}),
        "reference": lambda o, p: c.map(o, p, {
            "outputs": c.list_of(c.output_leaf), "timing": c.timing, "route": c.str_,
        }, {"per_op": c.per_op}),
        "environment": lambda o, p: c.typed(o, p, (dict,)),
        "artifacts": c.artifacts,
    })
    if m["function"]["kind"] not in ("jax.export", "stablehlo"):
        c.fail("manifest.function.kind", f"unknown kind {m['function']['kind']!r}")
    fn = m["function"]
    if not any(fn.get(k) for k in ("exported", "mlir_module", "stablehlo_text")):
        c.fail("manifest.function", "names no exported artifact, module or StableHLO text")
    n_in = len(fn["fields"]["in_avals"])
    if len(m["inputs"]["leaves"]) != n_in:
        c.fail("manifest.inputs.leaves", f"{len(m['inputs']['leaves'])} leaves for {n_in} function arguments")
    if "outputs" in fn and len(fn["outputs"]) != len(fn["fields"]["out_avals"]):
        c.fail("manifest.function.outputs", f"{len(fn['outputs'])} names for {len(fn['fields']['out_avals'])} outputs")
    return m


def _name_field(c: _Checker, obj, path):
    c.str_(obj, path)
    if not NAME_RE.fullmatch(obj):
        c.fail(path, f"invalid bundle name {obj!r}")


def validate_run(r: dict) -> dict:
    c = _Checker("run record")
    c.map(r, "run", {
        "format": c.str_, "format_version": c.int_, "run_id": c.str_, "bundle_id": c.digest, "bundle": c.str_,
        "created": c.str_, "requested": c.str_, "status": c.str_, "reason": c.str_,
        "environment": lambda o, p: c.typed(o, p, (dict,)),
        "outputs": c.list_of(c.output_leaf), "check": lambda o, p: c.typed(o, p, (dict,), optional=True),
        "artifacts": c.artifacts,
    }, {"route": c.opt_str, "timing": c.run_timing, "per_op": c.per_op, "attempts": c.list_of(c.any_),
        "duration_s": c.num, "labels": c.str_map})
    if r["status"] not in RUN_STATUSES:
        c.fail("run.status", f"unknown status {r['status']!r}")
    return r


RUN_STATUSES = ("ok", "mismatch", "incompatible", "error", "crashed", "timeout")

# ------------------------------------------------------------------------------------------------ versions


def _to_version_2(obj: dict) -> dict:
    """Manifest 1 -> 2 and run 1 -> 2: every version 1 map is a valid version 2 map."""
    return {**obj, "format_version": 2}


# Upgraders from version N to N+1: {N: fn}.
_UPGRADES: dict[str, dict[int, Callable[[dict], dict]]] = {MANIFEST_FORMAT: {1: _to_version_2},
                                                           RUN_FORMAT: {1: _to_version_2}}
_CURRENT = {MANIFEST_FORMAT: MANIFEST_VERSION, RUN_FORMAT: RUN_VERSION}


def _check_version(obj: dict, fmt: str, what: str) -> dict:
    if obj.get("format") != fmt:
        raise CorruptBundleError(f"{what} has format {obj.get('format')!r}, expected {fmt!r}")
    version = obj.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptBundleError(f"{what} has an invalid format_version {version!r}")
    current = _CURRENT[fmt]
    if version > current:
        raise UnsupportedFormatVersionError(
            f"{what} has format_version {version}; this reprobundle reads up to {current}",
            hint="upgrade reprobundle (pip install -U reprobundle)",
        )
    while version < current:
        obj = _UPGRADES[fmt][version](obj)
        version = obj["format_version"]
    return obj


def decode_manifest(data: bytes) -> dict:
    return validate_manifest(_check_version(decode_map(data, "manifest"), MANIFEST_FORMAT, "manifest"))


def encode_manifest(m: dict) -> bytes:
    return encode(validate_manifest(m))


def bundle_id(manifest_bytes: bytes) -> str:
    return digest_bytes(manifest_bytes)


def decode_run(data: bytes) -> dict:
    return validate_run(_check_version(decode_map(data, "run record"), RUN_FORMAT, "run record"))


def encode_run(r: dict) -> bytes:
    return encode(validate_run(r))


def blob_refs(m: dict) -> list[dict]:
    """Every blob a manifest names, each once, in a stable order."""
    found: dict[str, dict] = {}

    def walk(o):
        if isinstance(o, dict):
            if set(o) == {"digest", "size"}:
                found.setdefault(o["digest"], o)
                return
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk({k: v for k, v in m.items() if k != "environment"})
    return list(found.values())
