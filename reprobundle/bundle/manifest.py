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
- manifest 3 (2026-12-01): the program a bundle can be retraced from, `function.program`: the script and the local
  modules it imports (blobs, by path relative to the script's folder), the factory's name, the arguments baked in
  as static, the third-party distributions it imports with the versions installed when packed, and the files left
  out (secret-looking, too large) with why; `function.traced_by`, the JAX that traced the stored program. Source is
  data on the host: only a retrace's worker runs it, in the environment under test. A version 2 manifest upgrades
  unchanged: it has no program to retrace. schemas/manifest-v3.schema.json.
- run 1 (2026-11-30): first version. schemas/run-v1.schema.json describes it.
- run 2 (2026-11-30): timing may say how it was measured interleaved with other runs: `steps` (calls per step),
  `rounds` (steps per round, a fresh worker process each) and `group` (shared by the runs timed together). A
  version 1 record upgrades unchanged: it was one process, not interleaved. schemas/run-v2.schema.json.
- run 3 (2026-11-30): `notes`, what the worker adjusted to run the function on that release (an expired-version
  override, a clamped calling convention, a registered kernel...), shown by replay and compare; `group`, the id
  shared by the runs of one replay, failed ones included (`compare` picks a replay's runs by it). A version 2
  record upgrades unchanged: it recorded neither. schemas/run-v3.schema.json.
- run 4 (2026-12-01): `contender`, what the run was a contender of: the JAX as requested (`jax`), the mode (`frozen`,
  the bundle's stored program, or `retrace`, its source traced by that JAX) and the settings applied to that
  contender's workers only (XLA flags, JAX config options, environment variables). A version 3 record upgrades
  unchanged: it was a frozen replay of `requested` without settings. schemas/run-v4.schema.json.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any, Callable, Final, Mapping, NoReturn, cast, get_args

import msgpack

from ..errors import CorruptBundleError, FormatError, InvalidNameError, UnsupportedFormatVersionError
from ..text import exception_line, quoted
from . import schema
from .digest import digest_bytes
from .model import Blob, Manifest, RunRecord, RunStatus

MANIFEST_FORMAT = "reprobundle-bundle"
MANIFEST_VERSION = 3
RUN_FORMAT: Final = "reprobundle-run"
RUN_VERSION = 4
ANSWER_FORMAT: Final = "reprobundle-answer"
ANSWER_VERSION = 1
STORE_FORMAT = "reprobundle-store"
STORE_VERSION = 1

# Bounds for decoding untrusted bytes: a manifest is metadata, so these are generous but finite.
MAX_MANIFEST_BYTES = 64 << 20
_UNPACK_LIMITS: dict[str, int] = dict(
    max_str_len=32 << 20, max_bin_len=0, max_array_len=1 << 22, max_map_len=1 << 20, max_ext_len=0,
)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
TAG_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")
RESERVED_TAGS = frozenset({"latest"})  # refs give them a meaning of their own: a tag so named could never be reached
MAX_NESTING = 256  # maps and lists inside one another: trees of MAX_TREE_DEPTH levels take ~2 each, plus the frame


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidNameError(
            f"invalid bundle name {quoted(name)}",
            hint="names are 1-100 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
        )
    return name


def check_tag(tag: object) -> str:
    if not isinstance(tag, str) or not TAG_RE.fullmatch(tag):
        raise InvalidNameError(
            f"invalid tag {quoted(tag)}",
            hint="tags are 1-64 characters of letters, digits, '.', '_' and '-', starting with a letter",
        )
    if tag in RESERVED_TAGS:
        raise InvalidNameError(f"the tag {tag!r} is reserved: NAME@{tag} always means the newest version",
                               hint="choose another tag name")
    return tag


def _canonical(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        raise FormatError(f"non-finite float {obj!r} cannot be stored in a manifest")
    return obj


def encode(obj: Mapping[str, Any]) -> bytes:
    """Canonical msgpack: keys sorted at every level, so equal maps encode to equal bytes."""
    return cast(bytes, msgpack.packb(_canonical(obj), use_bin_type=True))


def decode_map(data: bytes, what: str) -> dict[str, Any]:
    if len(data) > MAX_MANIFEST_BYTES:
        raise CorruptBundleError(f"{what} is {len(data)} bytes, more than the {MAX_MANIFEST_BYTES} allowed")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True, **_UNPACK_LIMITS)
    except Exception as e:  # msgpack raises many unrelated types for bad input
        raise CorruptBundleError(f"{what} is not valid msgpack ({exception_line(e, 120)})",
                                 hint="the stored bytes are corrupt; verify the store or fetch the bundle again") from None
    if not isinstance(obj, dict):
        raise CorruptBundleError(f"{what} is not a map")
    _check_finite(obj, what)
    return obj


def _check_finite(obj: Any, what: str) -> None:
    """What `encode` refuses, decoding refuses too: NaN and infinities never come out of a stored map; nor maps and
    lists nested deeper than MAX_NESTING, which recursive readers (JSON output, validators) could not take."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)) and depth > MAX_NESTING:
            raise CorruptBundleError(f"{what} nests maps and lists deeper than {MAX_NESTING} levels, which no "
                                     "reprobundle writes",
                                     hint="the stored bytes are corrupt or hand-made; fetch the bundle again")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise CorruptBundleError(f"{what} holds a non-finite number ({item!r}), which no reprobundle writes",
                                     hint="the stored bytes are corrupt or hand-made; fetch the bundle again")


# ---------------------------------------------------------------------------------------------- validation


def validate_manifest(m: Mapping[str, Any]) -> Manifest:
    """The current manifest schema, then what it cannot say: counts that must agree between fields."""
    schema.check(m, "manifest", MANIFEST_VERSION, "manifest")
    fn = m["function"]
    if not any(fn.get(k) for k in ("exported", "mlir_module", "stablehlo_text")):
        _fail("manifest.function", "names no exported artifact, module or StableHLO text")
    n_in = len(fn["fields"]["in_avals"])
    if len(m["inputs"]["leaves"]) != n_in:
        _fail("manifest.inputs.leaves", f"{len(m['inputs']['leaves'])} leaves for {n_in} function arguments")
    if "outputs" in fn and len(fn["outputs"]) != len(fn["fields"]["out_avals"]):
        _fail("manifest.function.outputs", f"{len(fn['outputs'])} names for {len(fn['fields']['out_avals'])} outputs")
    return cast(Manifest, m)


def validate_run(r: Mapping[str, Any]) -> RunRecord:
    """The current run schema, then the timing's consistency: steps and rounds add up to the samples."""
    schema.check(r, "run", RUN_VERSION, "run record")
    timing = r.get("timing")
    if timing is not None:
        if ("steps" in timing) != ("rounds" in timing):
            _fail("run.timing", "steps and rounds come together", "run record")
        if "steps" in timing and sum(timing["steps"]) != len(timing["samples_ns"]):
            _fail("run.timing.steps", f"{sum(timing['steps'])} calls for {len(timing['samples_ns'])} samples",
                  "run record")
        if "rounds" in timing and sum(timing["rounds"]) != len(timing["steps"]):
            _fail("run.timing.rounds", f"{sum(timing['rounds'])} steps for {len(timing['steps'])} listed", "run record")
    return cast(RunRecord, r)


def _fail(path: str, problem: str, what: str = "manifest") -> NoReturn:
    raise CorruptBundleError(f"{what}: {path}: {problem}",
                             hint="the manifest is malformed; it was not written by a compatible reprobundle")


RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)  # the schema's enum too (tests/test_maintainability.py)

# ------------------------------------------------------------------------------------------------ versions


def _to_version_2(obj: dict[str, Any]) -> dict[str, Any]:
    """Manifest 1 -> 2 and run 1 -> 2: every version 1 map is a valid version 2 map."""
    return {**obj, "format_version": 2}


def _manifest_to_version_3(obj: dict[str, Any]) -> dict[str, Any]:
    """Manifest 2 -> 3: `function.program` and `function.traced_by` are new and optional."""
    return {**obj, "format_version": 3}


def _run_to_version_3(obj: dict[str, Any]) -> dict[str, Any]:
    """Run 2 -> 3: `notes` is new and optional; a version 2 record kept none."""
    return {**obj, "format_version": 3}


def _run_to_version_4(obj: dict[str, Any]) -> dict[str, Any]:
    """Run 3 -> 4: `contender` is new and optional; without it a run was a frozen replay without settings."""
    return {**obj, "format_version": 4}


# Upgraders from version N to N+1: {N: fn}.
_UPGRADES: dict[str, dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    MANIFEST_FORMAT: {1: _to_version_2, 2: _manifest_to_version_3},
    RUN_FORMAT: {1: _to_version_2, 2: _run_to_version_3, 3: _run_to_version_4}, ANSWER_FORMAT: {}}
_CURRENT = {MANIFEST_FORMAT: MANIFEST_VERSION, RUN_FORMAT: RUN_VERSION, ANSWER_FORMAT: ANSWER_VERSION}


def _check_version(obj: dict[str, Any], fmt: str, what: str) -> dict[str, Any]:
    if obj.get("format") != fmt:
        raise CorruptBundleError(f"{what} has format {quoted(obj.get('format'), 40)}, expected {fmt!r}")
    version = obj.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptBundleError(f"{what} has an invalid format_version {quoted(version, 40)}")
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


def decode_manifest(data: bytes) -> Manifest:
    return validate_manifest(_check_version(decode_map(data, "manifest"), MANIFEST_FORMAT, "manifest"))


def encode_manifest(m: Mapping[str, Any]) -> bytes:
    return encode(validate_manifest(m))


def bundle_id(manifest_bytes: bytes) -> str:
    return digest_bytes(manifest_bytes)


def decode_run(data: bytes) -> RunRecord:
    key = hashlib.sha256(data).digest()
    known = _decoded_runs.get(key)
    if known is not None:  # the same bytes read again: the same record, each caller's objects its own
        return cast(RunRecord, msgpack.unpackb(known, raw=False, strict_map_key=True, use_list=True, **_UNPACK_LIMITS))
    run = validate_run(_check_version(decode_map(data, "run record"), RUN_FORMAT, "run record"))
    _decoded_runs.remember(key, msgpack.packb(run, use_bin_type=True))
    return run


class _Decoded(dict[bytes, bytes]):
    """Records this process decoded and checked, as msgpack of what decoding returned, by the sha256 of the bytes
    read, within a budget of bytes: an investigation reads every run record of its bundle again at every step
    (Registry.runs), and checking one (every value walked, the schema validated) costs milliseconds of Python where
    unpacking it again costs microseconds of C."""

    def __init__(self, budget_bytes: int) -> None:
        super().__init__()
        self.left = budget_bytes

    def remember(self, key: bytes, packed: bytes) -> None:
        if len(packed) <= self.left and key not in self:
            self[key] = packed
            self.left -= len(packed)


_decoded_runs = _Decoded(64 * 2**20)


def encode_run(r: Mapping[str, Any]) -> bytes:
    return encode(validate_run(r))


def validate_answer(a: Mapping[str, Any]) -> dict[str, Any]:
    """An answer record (schemas/answer-v1.schema.json): what an investigation answered, beside its runs."""
    schema.check(a, "answer", ANSWER_VERSION, "answer record")
    return dict(a)


def decode_answer(data: bytes) -> dict[str, Any]:
    return validate_answer(_check_version(decode_map(data, "answer record"), ANSWER_FORMAT, "answer record"))


def encode_answer(a: Mapping[str, Any]) -> bytes:
    return encode(validate_answer(a))


def blob_refs(m: Mapping[str, Any]) -> list[Blob]:
    """Every blob a manifest names, each once, in a stable order."""
    found: dict[str, Blob] = {}

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            if set(o) == {"digest", "size"}:
                found.setdefault(o["digest"], cast(Blob, o))
                return
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk({k: v for k, v in m.items() if k != "environment"})
    return list(found.values())
