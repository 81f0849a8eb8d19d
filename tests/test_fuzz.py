"""Untrusted input: manifests, tags, refs, keys and zip bundles from someone else are data, never code or paths.

Every test feeds hostile bytes to the real readers (decode_manifest, Registry.resolve/load/verify/gc, open_ref on a
.zip, the stores) and checks three things:
- only ReproBundleError subclasses come out (the CLI turns those into one line and an exit code; anything else is
  "unexpected error: this is a bug");
- nothing is executed and no path outside the store escapes: a Python audit hook (sys.addaudithook, the
  interpreter's own instrumentation, not a mock) records every open/listdir/remove/rename/link/mkdir and every
  exec/compile/pickle/subprocess/ctypes event while the product runs, and each is checked against the store root;
- memory stays bounded: declared sizes and counts are checked before allocation (tracemalloc peaks, and a
  subprocess under RLIMIT_AS for msgpack header bombs).
The source scan at the end checks that no eval/exec/pickle/shell route exists in the package at all.
"""

from __future__ import annotations

import ast
import io
import json
import os
import random
import re
import struct
import subprocess
import sys
import sysconfig
import tracemalloc
import uuid
import zipfile
from contextlib import contextmanager
from pathlib import Path

import msgpack
import pytest
from audit import audited
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from manifests import make_manifest

import reprobundle
from reprobundle.bundle import manifest as mf
from reprobundle.bundle import sharing
from reprobundle.bundle.registry import Registry, blob_key, open_ref
from reprobundle.errors import (
    CorruptBundleError,
    FormatError,
    ReproBundleError,
    StoreError,
)
from reprobundle.render import listing as report
from reprobundle.run.replay import reference_arrays
from reprobundle.store import check_key
from reprobundle.store.local import LocalStore
from reprobundle.store.zip_store import ZipStore

ROOT = Path(__file__).parent.parent
PKG = Path(reprobundle.__file__).parent
GOLDEN_ZIP = ROOT / "tests/golden/v1-tanh-matmul.zip"
SCALE = int(os.environ.get("REPROBUNDLE_FUZZ_SCALE", "1"))  # e.g. 20 for a long local run; CI keeps 1
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                  HealthCheck.data_too_large])

# ------------------------------------------------------------------------------------------ the audit hook

_FILE_EVENTS = {"open", "os.listdir", "os.scandir", "os.remove", "os.rename", "os.link", "os.symlink", "os.mkdir",
                "os.rmdir", "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree", "shutil.copyfile",
                "shutil.move"}
_EXEC_EVENTS = {"exec", "compile"}
_FORBIDDEN_EVENTS = {"pickle.find_class", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                     "os.fork", "os.forkpty", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "os.startfile",
                     "builtins.input", "marshal.load"}
_WATCHED = _FILE_EVENTS | _EXEC_EVENTS | _FORBIDDEN_EVENTS


def _importing() -> bool:
    """Whether an import is under way (a lazy import of an installed module compiles and runs its code)."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename.startswith("<frozen importlib"):
            return True
        f = f.f_back
    return False


def _typing_forward_ref() -> bool:
    """Whether typing is compiling or evaluating a string annotation (a library's `"Text"` type hint, resolved when
    it is first used: the name of a type, never data)."""
    import typing

    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename == typing.__file__ and f.f_code.co_qualname.startswith("ForwardRef."):
            return True
        f = f.f_back
    return False


def _lazy_code(event, args) -> bool:
    """Code compiled or run by an import or by typing's string annotations: the interpreter's, not the product's."""
    return event in _EXEC_EVENTS and (_importing() or _typing_forward_ref())

# Code the interpreter may import lazily while the product runs (stdlib, site-packages, the package itself).
_LIBRARY_ROOTS = tuple({f(p) for f in (os.path.realpath, os.path.abspath) for p in (
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
    sys.prefix, sys.base_prefix, sys.exec_prefix, str(PKG))})


def _under(path: str, roots) -> bool:
    """Whether `path`, as named (a symlink inside a root counts as inside: names are what a bundle controls), lies
    under one of `roots`."""
    named = os.path.normpath(os.path.abspath(path))
    return any(named == r or named.startswith(r.rstrip("/") + "/") for r in roots)


def _compile_schema_validators() -> None:
    """fastjsonschema turns the package's own JSON Schemas into Python code (compiled and exec'd from '<string>') the
    first time a process checks a record of that kind and version: do it for every schema before recording, so that
    what the audit sees does not depend on which test ran first in this process (pytest-xdist spreads them)."""
    from reprobundle.bundle.schema import SCHEMA_DIR, fast_validator, validator

    for path in sorted(SCHEMA_DIR.glob("*-v*.schema.json")):
        kind, version = path.name.split(".")[0].rsplit("-v", 1)
        fast_validator(kind, int(version))
        validator(kind, int(version))


@contextmanager
def confined(*roots: str | Path):
    """Record what the block does; fail if it touches a path outside `roots` (library reads excepted), runs code
    that is not an installed module, unpickles, or starts a process."""
    roots = tuple({f(str(r)) for f in (os.path.realpath, os.path.abspath) for r in roots})
    _compile_schema_validators()
    # A lazy import inside the block would write its .pyc (scripts/test.sh turns bytecode caches on): the
    # interpreter's cache, not the product's file access, so it is not written while recording.
    dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        with audited(_WATCHED, skip=_lazy_code) as recorded:
            yield
    finally:
        sys.dont_write_bytecode = dont_write
    events = recorded.events
    bad = []
    for event, args in events:
        if event in _FORBIDDEN_EVENTS:
            bad.append(f"{event} {args!r:.200}")
        elif event == "exec":
            code = args[0] if args else None
            filename = getattr(code, "co_filename", "<?>")
            if not (os.path.isabs(filename) and _under(filename, _LIBRARY_ROOTS)):
                bad.append(f"exec of code from {filename!r}")
        elif event == "compile":
            filename = args[1] if len(args) > 1 else "<?>"
            filename = os.fsdecode(filename) if isinstance(filename, (str, bytes)) else str(filename)
            if not (os.path.isabs(filename) and _under(filename, _LIBRARY_ROOTS)):
                source = args[0] if args else None
                shown = source[:80] if isinstance(source, (str, bytes)) else type(source).__name__
                bad.append(f"compile of {filename!r}: {shown!r}")
        elif event in _FILE_EVENTS:
            for arg in args[:2] if event in ("os.rename", "os.link", "os.symlink", "shutil.copyfile",
                                             "shutil.move") else args[:1]:
                if isinstance(arg, int) or arg is None:
                    continue  # a file descriptor (dir_fd walks of an already checked folder)
                path = os.path.abspath(os.fsdecode(arg))
                if _under(path, roots):
                    continue
                if event == "open" and _under(path, _LIBRARY_ROOTS) and "w" not in str(args[1] if len(args) > 1
                                                                                        else "r"):
                    continue  # lazy imports and package data
                if event in ("os.listdir", "os.scandir") and _under(path, _LIBRARY_ROOTS):
                    continue
                bad.append(f"{event} {path}")
    assert not bad, "escaped the store root or ran code:\n" + "\n".join(bad[:20])


def only_reprobundle_errors(fn, *args, **kwargs):
    """fn's result, or None when it raised a ReproBundleError; any other exception fails the test."""
    try:
        return fn(*args, **kwargs)
    except ReproBundleError as e:
        assert str(e), f"{type(e).__name__} without a message"
        return None


def _walk_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk_paths(v, prefix + (i,))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _set(obj, path, value):
    if not path:
        return value
    _get(obj, path[:-1])[path[-1]] = value
    return obj


def _deepcopy(obj):
    return msgpack.unpackb(msgpack.packb(obj), raw=False, strict_map_key=False)


# ---------------------------------------------------------------------------------------- hostile values

TRAVERSAL = ["../x", "../../etc/passwd", "/etc/passwd", "..", ".", "a/../../b", "a/b", "a\\..\\b", "C:\\x",
             "a\x00b", "\x00", "", " ", "~/x", "$HOME", "%2e%2e%2f", "..%2f", "a/./b", "a//b", "/", "bündle",
             "\u202eevil", "ｅｖｉｌ", "a" * 300, "日本", "file:///etc/passwd", "gs://b/../x",
             "sha256:" + "../" * 20 + "a" * 4, "sha256:" + "0" * 63 + "/", "sha256:" + "A" * 64,
             "demo\n", "good\n", "1\n", "sha256:" + "0" * 64 + "\n", "a/b\n", "demo\r", "demo@1\n"]
hostile_text = st.one_of(st.sampled_from(TRAVERSAL), st.text(max_size=40),
                         st.text(alphabet=st.sampled_from("./\\\x00a1-_@:~%"), max_size=20))
hostile_int = st.one_of(st.sampled_from([0, -1, 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, -(2**63), 2**64 - 1]),
                        st.integers(min_value=-(2**63), max_value=2**64 - 1))
hostile_scalar = st.one_of(st.none(), st.booleans(), hostile_int, st.floats(allow_nan=True, allow_infinity=True),
                           hostile_text, st.binary(max_size=8))
hostile_value = st.recursive(
    hostile_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4),
                            st.builds(lambda d, s: {"digest": d, "size": s}, hostile_text, hostile_int),
                            st.lists(hostile_int, max_size=4)),  # shapes
    max_leaves=8)


@pytest.fixture
def demo(tmp_path):
    """A folder store with one structurally valid bundle (demo@1) whose blobs are stored."""
    registry = Registry.open(tmp_path / "store")
    m = make_manifest(registry)
    m["environment"] = _deepcopy(_GOLDEN_ENVIRONMENT)  # a real one: what `show` and `url` render
    m["environment"]["packages"] = dict(list(m["environment"]["packages"].items())[:3])
    ref = registry.publish(m)
    assert ref.version == 1
    yield registry, registry.load("demo", 1).manifest
    registry.close()  # its lease (a file in the store) goes now, not whenever the registry is garbage-collected


def _golden_environment() -> dict:
    with zipfile.ZipFile(GOLDEN_ZIP) as zf:
        name = next(n for n in zf.namelist() if n.startswith("bundles/"))
        return mf.decode_manifest(zf.read(name))["environment"]


_GOLDEN_ENVIRONMENT = _golden_environment()


def _exercise_registry(registry: Registry, cache: Path) -> None:
    """Every read path a user reaches with a bundle from somewhere else; only ReproBundleErrors may come out."""
    for ref in ("demo", "demo@1", "demo@latest", "demo@good"):
        only_reprobundle_errors(registry.resolve, ref)
    bundle = only_reprobundle_errors(registry.load, "demo", 1)
    if bundle is not None:
        problems = only_reprobundle_errors(registry.verify, bundle)
        assert problems is None or all(isinstance(p, str) for p in problems)
        for r in mf.blob_refs(bundle.manifest):
            assert check_key(blob_key(r["digest"])).startswith("blobs/sha256/")
            only_reprobundle_errors(registry.get_blob, r)
            only_reprobundle_errors(registry.blob_file, r, cache)
        # what `show`, `url` and a replay's first step do with it
        only_reprobundle_errors(reference_arrays, registry, bundle)
        only_reprobundle_errors(report.describe_bundle, bundle, [])
        only_reprobundle_errors(report.bundle_data, bundle, [])
        only_reprobundle_errors(sharing.share_info, "demo@1", store=str(registry.store.root))
    only_reprobundle_errors(lambda: list(registry.iter_bundles()))
    only_reprobundle_errors(registry.gc, dry_run=True)
    only_reprobundle_errors(registry.tags, "demo")


# ------------------------------------------------------------------------------------------ manifests


@pytest.mark.slow
@settings(max_examples=250 * SCALE, **FUZZ)
@given(data=st.data())
def test_structure_aware_manifest_mutations(demo, tmp_path, data):
    """Wrong types, missing/unknown fields, huge sizes and shapes, traversal in names/digests/keys, NUL, unicode:
    decode_manifest and the registry only raise ReproBundleErrors, and what validates is safe to use as keys."""
    registry, base = demo
    m = _deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = list(_walk_paths(m))
        path = data.draw(st.sampled_from(paths), label="path")
        op = data.draw(st.sampled_from(["replace", "replace", "delete", "add", "wrap"]), label="op")
        target = _get(m, path) if path else m
        if op == "replace" or not path:
            m = _set(m, path, data.draw(hostile_value, label="value"))
        elif op == "delete":
            parent = _get(m, path[:-1])
            del parent[path[-1]]
        elif op == "add" and isinstance(target, dict):
            target[data.draw(hostile_text, label="key")] = data.draw(hostile_value, label="value")
        else:
            m = _set(m, path, [target])
    try:
        raw = msgpack.packb(m, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        assume(False)
    decoded = only_reprobundle_errors(mf.decode_manifest, raw)
    if decoded is not None:  # it validated: then names and digests are safe keys, and it re-encodes canonically
        mf.check_name(decoded["name"])
        for r in mf.blob_refs(decoded):
            check_key(blob_key(r["digest"]))
            assert isinstance(r["size"], int) and not isinstance(r["size"], bool) and r["size"] >= 0
        encoded = only_reprobundle_errors(mf.encode_manifest, decoded)  # NaN/inf decode, and refuse to encode
        if encoded is not None:
            assert mf.decode_manifest(encoded) == decoded
    registry.store.put("bundles/demo/1.msgpack", raw)
    cache = tmp_path / "cache"
    with confined(registry.store.root, cache):
        _exercise_registry(registry, cache)


def _mutate_bytes(data, raw: bytes) -> bytes:
    b = bytearray(raw)
    kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "overwrite", "splice"]), label="kind")
    if kind == "truncate":
        return bytes(b[:data.draw(st.integers(0, max(0, len(b) - 1)), label="at")])
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 8), label="n")):
            i = data.draw(st.integers(0, len(b) - 1), label="i")
            b[i] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        return bytes(b)
    i = data.draw(st.integers(0, len(b)), label="i")
    chunk = data.draw(st.binary(min_size=1, max_size=16), label="chunk")
    if kind == "insert":
        return bytes(b[:i] + chunk + b[i:])
    if kind == "overwrite":
        return bytes(b[:i] + chunk + b[i + len(chunk):])
    j = data.draw(st.integers(0, len(b)), label="j")
    return bytes(b[:i] + b[j:j + 64] + b[i:])


@pytest.mark.slow
@settings(max_examples=250 * SCALE, **FUZZ)
@given(data=st.data())
def test_byte_level_manifest_corruption(demo, tmp_path, data):
    """Flipped bits, truncation, inserted and spliced bytes in a stored manifest, and arbitrary bytes."""
    registry, base = demo
    raw = mf.encode_manifest(base)
    bad = data.draw(st.one_of(st.binary(max_size=200), st.just(None)), label="random")
    bad = _mutate_bytes(data, raw) if bad is None else bad
    decoded = only_reprobundle_errors(mf.decode_manifest, bad)
    if decoded is not None:
        mf.check_name(decoded["name"])
    registry.store.put("bundles/demo/1.msgpack", bad)
    cache = tmp_path / "cache"
    with confined(registry.store.root, cache):
        _exercise_registry(registry, cache)


def _deep(level: bytes, depth: int, tail: bytes) -> bytes:
    return level * depth + tail


@pytest.mark.parametrize("where", ["in_tree", "out_tree"])
@pytest.mark.parametrize("depth", [150, 400, 505, 3000])
def test_deeply_nested_trees_are_a_format_error(demo, where, depth):
    """A pytree nested hundreds of levels deep (msgpack allows ~510) must not blow Python's recursion limit."""
    _, base = demo
    placeholder = "P" * 24
    m = _deepcopy(base)
    m["function"][where] = placeholder
    level = (b"\x82" + msgpack.packb("kind") + msgpack.packb("tuple") + msgpack.packb("children") + b"\x91")
    raw = msgpack.packb(m).replace(msgpack.packb(placeholder), _deep(level, depth, msgpack.packb({"kind": "leaf"})))
    with pytest.raises(CorruptBundleError):
        mf.decode_manifest(raw)


def test_shallow_trees_still_decode(demo):
    _, base = demo
    tree = {"kind": "leaf"}
    for _ in range(60):
        tree = {"kind": "tuple", "children": [tree]}
    m = _deepcopy(base)
    m["function"]["in_tree"] = tree
    assert mf.decode_manifest(mf.encode_manifest(m))["function"]["in_tree"] == tree


_BOMB_SCRIPT = r"""
import resource, struct, sys
limit = 768 << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from reprobundle.bundle import manifest as mf
from reprobundle.errors import CorruptBundleError
k = b"\xa1k"
cases = {
    "nested array32 headers claiming 4M items each": b"\xdd" + struct.pack(">I", 1 << 22) * 1,
    "1000 nested arrays of 4M items": (b"\xdd" + struct.pack(">I", 1 << 22)) * 1000,
    "400 nested maps of 1M entries": (b"\xdf" + struct.pack(">I", 1 << 20) + k) * 400,
    "array of 2**32-1 items": b"\xdd\xff\xff\xff\xff",
    "map of 2**32-1 entries": b"\xdf\xff\xff\xff\xff",
    "str of 4 GiB": b"\x81" + k + b"\xdb\xff\xff\xff\xff",
    "bin of 1 GiB": b"\x81" + k + b"\xc6" + struct.pack(">I", 1 << 30),
    "ext of 1 GiB": b"\x81" + k + b"\xc9" + struct.pack(">I", 1 << 30) + b"\x05",
    "65 MiB of nils": b"\xc0" * (65 << 20),
}
for name, data in cases.items():
    try:
        mf.decode_manifest(data)
    except CorruptBundleError:
        continue
    raise SystemExit(f"{name}: decoded")
# VmHWM is this program's own peak; ru_maxrss would also count the parent's pages shared between fork and exec.
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("peak_kib", peak.split()[1])
"""


def test_msgpack_header_bombs_stay_bounded():
    """Headers that declare 4-GiB strings, billions of items or deep nests of big containers: a clean
    CorruptBundleError each, inside 768 MiB of address space (a real RLIMIT_AS, in a subprocess)."""
    done = subprocess.run([sys.executable, "-c", _BOMB_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout
    peak_mib = int(done.stdout.split("peak_kib")[1]) / 1024
    # The hard bound is the 768 MiB RLIMIT_AS above (an allocation past it fails the run); this is a sanity bound
    # on the resident peak of the decoding process itself.
    assert peak_mib < 768, f"decoding hostile headers peaked at {peak_mib:.0f} MiB"


def test_huge_declared_shapes_load_without_allocating(demo, tmp_path):
    """Leaves declaring 2**40 elements (inputs, synthetic inputs, reference outputs): loading, verifying and listing
    the bundle allocates nothing of that size; using the reference outputs fails cleanly, also without allocating."""
    registry, base = demo
    m = _deepcopy(base)
    huge = [2**20, 2**20]
    m["function"]["fields"]["in_avals"] = [{"shape": huge, "dtype": "float32"}] * 2
    m["inputs"]["leaves"] = [dict(m["inputs"]["leaves"][0], shape=huge),
                             {"shape": huge, "dtype": "float32", "synthetic": {"distribution": "normal", "seed": 0}}]
    m["function"]["fields"]["module_kept_var_idx"] = [0, 1]
    m["function"]["fields"]["in_shardings_hlo"] = [None, None]
    m["reference"]["outputs"][0]["shape"] = [2**40]
    ref = registry.publish(m)
    from reprobundle.run.replay import reference_arrays

    tracemalloc.start()
    try:
        bundle = registry.resolve(f"demo@{ref.version}")
        assert registry.verify(bundle) == []
        assert [b.ref for b in registry.iter_bundles("demo")][-1] == ref
        with pytest.raises(FormatError, match="shape|bytes|size"):
            reference_arrays(registry, bundle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB"


def test_output_leaf_size_mismatch_is_a_format_error(demo):
    """A reference output whose blob does not hold shape x dtype bytes is corrupt, not a numpy ValueError."""
    registry, base = demo
    m = _deepcopy(base)
    m["reference"]["outputs"][0]["shape"] = [5, 5]  # the blob holds 24 bytes, 2x3 float32
    registry.publish(m)
    from reprobundle.run.replay import reference_arrays

    with pytest.raises(FormatError):
        reference_arrays(registry, registry.resolve("demo@2"))


# --------------------------------------------------------------------------------------- refs, tags, keys


@settings(max_examples=300 * SCALE, **FUZZ)
@given(ref=st.one_of(hostile_text, st.builds(lambda a, b: f"{a}@{b}", hostile_text, hostile_text),
                     st.builds(lambda b: f"demo@{b}", hostile_text), st.builds(lambda h: f"sha256:{h}", hostile_text)))
def test_hostile_refs_stay_inside_the_store(demo, ref):
    registry, _ = demo
    assume("://" not in ref)  # URLs go to other stores (network); Registry.resolve is what reads this store
    with confined(registry.store.root):
        bundle = only_reprobundle_errors(registry.resolve, ref)
    if bundle is not None:
        assert bundle.ref.name == "demo"


@settings(max_examples=200 * SCALE, **FUZZ)
@given(tag=hostile_text, content=st.one_of(st.binary(max_size=40), st.sampled_from(
    [b"../../etc/passwd", b"1\x00", b"-1", b"1e9", b"9" * 400, "\u0663".encode(), "\u00b2".encode(), b" 1 ", b""])))
def test_hostile_tags_stay_inside_the_store(demo, tag, content):
    """Tag names (traversal, NUL, unicode) and tag file contents (not a number, paths, huge numbers)."""
    registry, _ = demo
    with confined(registry.store.root):
        only_reprobundle_errors(registry.tag, "demo", 1, tag)
        only_reprobundle_errors(registry.tag_version, "demo", tag)
        only_reprobundle_errors(registry.resolve, f"demo@{tag}")
    (registry.store.root / "tags/demo").mkdir(parents=True, exist_ok=True)
    (registry.store.root / "tags/demo/good").write_bytes(content)
    with confined(registry.store.root):
        version = only_reprobundle_errors(registry.tag_version, "demo", "good")
        bundle = only_reprobundle_errors(registry.resolve, "demo@good")
        only_reprobundle_errors(registry.tags, "demo")
    if bundle is not None:
        assert bundle.ref.version == version == 1


@settings(max_examples=300 * SCALE, **FUZZ)
@given(key=hostile_text)
def test_hostile_keys_are_refused_by_every_store(tmp_path, key):
    """Keys with '..', absolute paths, NUL or odd characters never reach the filesystem or the memory store."""
    local = LocalStore(tmp_path / "k")
    from reprobundle.store import open_store

    memory = open_store(f"memory://fuzz-{uuid.uuid4().hex[:8]}")
    try:
        check_key(key)
        ok = True
    except ReproBundleError:
        ok = False
    for store in (local, memory):
        with confined(tmp_path / "k"):
            ops = [lambda: store.get(key), lambda: store.exists(key), lambda: store.size(key),
                   lambda: store.put(key, b"x", create_only=True), lambda: store.delete(key)]
            if key:  # list("") is the whole store, by design
                ops.append(lambda: list(store.list(key)))
            for op in ops:
                try:
                    op()
                except ReproBundleError:
                    pass
                else:
                    assert ok, f"{store!r} accepted the unsafe key {key!r}"
    assert {p.name for p in tmp_path.iterdir()} <= {"k"}  # nothing was written beside the store folder


def test_names_from_a_store_folder_cannot_escape(tmp_path):
    """Odd folder names under bundles/ and tags/ and a symlinked blob: listing, verify and gc stay inside the
    root; gc removes the symlink, never its target; verify reports the symlink out of the store, unread."""
    registry = Registry.open(tmp_path / "store")
    m = make_manifest(registry)
    registry.publish(m)
    root = registry.store.root
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    digest = m["inputs"]["leaves"][0]["blob"]["digest"]
    blob = root / blob_key(digest)
    blob.unlink()
    blob.symlink_to(outside)
    (root / "bundles/Evil Name").mkdir()
    (root / "bundles/Evil Name/1.msgpack").write_bytes(mf.encode_manifest(dict(m, version=1)))
    (root / "tags/demo").mkdir(parents=True)
    (root / "tags/demo/.hidden").write_bytes(b"1")
    cache = tmp_path / "cache"
    with confined(root, cache):
        problems = registry.verify(registry.load("demo", 1))
        assert any(digest in p and "symbolic link out of the store" in p for p in problems), problems
        with pytest.raises(ReproBundleError):
            registry.get_blob(digest)
        only_reprobundle_errors(lambda: list(registry.iter_bundles()))
        only_reprobundle_errors(registry.resolve, "Evil Name")
    # gc deletes orphan keys inside the root only; a symlink is removed as a link
    (root / "blobs/sha256/ff").mkdir(parents=True, exist_ok=True)
    orphan_link = root / "blobs/sha256/ff" / ("f" * 64)
    orphan_link.symlink_to(outside)
    (root / "bundles/Evil Name/1.msgpack").unlink()
    (root / "bundles/Evil Name").rmdir()
    with confined(root):
        dead = registry.gc(dry_run=False, grace_s=0)
    assert blob_key("sha256:" + "f" * 64) in dead
    assert not orphan_link.is_symlink() and outside.read_bytes() == b"precious"


# ----------------------------------------------------------------------------------------------- zips


def _zip_members(data: bytes) -> list[zipfile.ZipInfo]:
    return zipfile.ZipFile(io.BytesIO(data)).infolist()


def _exercise_zip(path: Path, cache: Path) -> None:
    opened = only_reprobundle_errors(open_ref, str(path))
    if opened is None:
        return
    registry, bundle = opened
    problems = only_reprobundle_errors(registry.verify, bundle)
    for r in mf.blob_refs(bundle.manifest):
        data = only_reprobundle_errors(registry.get_blob, r)
        if data is not None:
            from reprobundle.bundle.digest import digest_bytes

            assert digest_bytes(data) == r["digest"]  # what is handed out is what the digest names
        only_reprobundle_errors(registry.blob_file, r, cache)
    if problems == []:  # verified: then every blob reads back intact
        for r in mf.blob_refs(bundle.manifest):
            assert registry.get_blob(r) is not None
    only_reprobundle_errors(lambda: list(registry.iter_bundles()))
    registry.store.close()


@settings(max_examples=200 * SCALE, **FUZZ)
@given(data=st.data())
def test_mutated_and_truncated_zips(tmp_path, data):
    """The golden bundle (a real one) with flipped bits, truncation, overwritten headers or central directory."""
    raw = GOLDEN_ZIP.read_bytes()
    where = data.draw(st.sampled_from(["anywhere", "central directory", "local headers"]), label="where")
    b = bytearray(raw)
    if where == "anywhere":
        bad = _mutate_bytes(data, raw)
    else:
        infos = _zip_members(raw)
        if where == "central directory":
            lo, hi = raw.find(b"PK\x01\x02"), len(raw)
        else:
            info = data.draw(st.sampled_from(infos), label="member")
            lo, hi = info.header_offset, info.header_offset + 30 + len(info.filename) + 40
        for _ in range(data.draw(st.integers(1, 4), label="n")):
            i = data.draw(st.integers(lo, hi - 1), label="i")
            b[i] = data.draw(st.integers(0, 255), label="byte")
        bad = bytes(b)
    path = tmp_path / "fuzzed.zip"
    path.write_bytes(bad)
    cache = tmp_path / "cache"
    with confined(path, cache, tmp_path):
        _exercise_zip(path, cache)


def _zip_of(entries: list[tuple[str, bytes]], *, compress=zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compress) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compress
            with _nowarn():
                zf.writestr(info, data)
    return buf.getvalue()


@contextmanager
def _nowarn():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names, which we write on purpose
        yield


@pytest.fixture(scope="module")
def golden_entries() -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(GOLDEN_ZIP) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def _manifest_entry(entries):
    return next(i for i, (n, _) in enumerate(entries) if n.startswith("bundles/"))


def _patch_all(data: bytes, old: bytes, new: bytes) -> bytes:
    assert len(old) == len(new) and data.count(old) >= 2  # local header and central directory
    return data.replace(old, new)


def _set_header_fields(data: bytes, name: str, **fields) -> bytes:
    """Rewrite fields of one member in both its local header and its central directory record."""
    b = bytearray(data)
    enc = name.encode()
    for sig, offs in ((b"PK\x03\x04", dict(flags=6, method=8, size=22, crc=14, csize=18, version=4)),
                      (b"PK\x01\x02", dict(flags=8, method=10, size=24, crc=16, csize=20, version=6))):
        nlen_off = 26 if sig == b"PK\x03\x04" else 28
        name_off = 30 if sig == b"PK\x03\x04" else 46
        pos = 0
        while (pos := bytes(b).find(sig, pos)) != -1:
            nlen = struct.unpack_from("<H", b, pos + nlen_off)[0]
            if bytes(b[pos + name_off:pos + name_off + nlen]) == enc:
                for field, value in fields.items():
                    fmt = "<H" if field in ("flags", "method", "version") else "<I"
                    struct.pack_into(fmt, b, pos + offs[field], value)
            pos += 4
    return bytes(b)


def _hostile_zips(entries) -> dict[str, bytes]:
    mi = _manifest_entry(entries)
    mname, mdata = entries[mi]
    blob_name, blob_data = next((n, d) for n, d in entries if n.startswith("blobs/") and len(d) > 64)
    zeros = b"\0" * (48 << 20)
    out = {}
    for evil in ["../evil", "../../../../tmp/evil", "/etc/passwd", "/abs/bundles/x/1.msgpack", "blobs/../../evil",
                 "bundles/golden/../../../evil", "bundles\\..\\..\\evil", "C:/evil", "bundles//golden/1.msgpack",
                 "bundles/./golden/2.msgpack", "bundles/gölden/1.msgpack", "bundles/golden/1.msgpack ",
                 "x" * 300, "bundles/golden/-1.msgpack/..", "~/.ssh/authorized_keys"]:
        out[f"traversal entry {evil!r}"] = _zip_of(entries + [(evil, b"pwned")])
    out["NUL in an entry name"] = _zip_of(entries).replace(b"reprobundle-store.json", b"reprobundle\x00store.json")
    out["zip bomb: 48 MiB of zeros deflated as a blob"] = _zip_of(entries[:mi] + [(blob_name, zeros)] + entries[mi:],
                                                                   compress=zipfile.ZIP_DEFLATED)
    stored = _zip_of(entries)
    out["declares 4 GiB for a 24-byte manifest"] = _set_header_fields(stored, mname, size=0xFFFFFFF0)
    out["declares less than it inflates to"] = _set_header_fields(
        _zip_of(entries[:mi] + [(mname, mdata + b"\0" * (8 << 20))], compress=zipfile.ZIP_DEFLATED), mname,
        size=len(mdata))
    out["duplicate manifest entries"] = _zip_of(entries + [(mname, mdata.replace(b"golden", b"goldeN"))])
    out["duplicate blob entries, the last one corrupt"] = _zip_of(entries + [(blob_name, blob_data[::-1])])
    out["duplicate blob entries, the first one corrupt"] = _zip_of(
        [(n, d[::-1] if n == blob_name else d) for n, d in entries] + [(blob_name, blob_data)])
    out["encrypted flag on the manifest"] = _set_header_fields(stored, mname, flags=1)
    out["unsupported compression method"] = _set_header_fields(stored, blob_name, method=99)
    out["needs zip version 63"] = _set_header_fields(stored, blob_name, version=63)
    out["wrong CRC on a blob"] = _set_header_fields(stored, blob_name, crc=0xDEADBEEF)
    out["wrong CRC on the manifest"] = _set_header_fields(stored, mname, crc=0xDEADBEEF)
    out["empty file"] = b""
    out["not a zip"] = b"PK\x05\x06" + os.urandom(200)
    out["only the end record"] = b"PK\x05\x06" + b"\0" * 18
    out["marker only"] = _zip_of([e for e in entries if e[0] == "reprobundle-store.json"])
    out["no marker"] = _zip_of([e for e in entries if e[0] != "reprobundle-store.json"])
    out["marker from the future"] = _zip_of(
        [(n, b'{"format": "reprobundle-store", "format_version": 99}' if n == "reprobundle-store.json" else d)
         for n, d in entries])
    out["marker is not json"] = _zip_of([(n, b"\xff\xfe[" if n == "reprobundle-store.json" else d)
                                        for n, d in entries])
    out["blobs missing"] = _zip_of([e for e in entries if not e[0].startswith("blobs/")])
    out["manifest renamed to another name"] = _zip_of(
        [(n.replace("bundles/golden/", "bundles/other/") if n == mname else n, d) for n, d in entries])
    out["manifest is garbage"] = _zip_of([(n, os.urandom(64) if n == mname else d) for n, d in entries])
    return out


def test_hostile_zips(tmp_path, golden_entries):
    """Path traversal entries, a zip bomb, lying declared sizes, duplicate entries, encryption, unknown methods and
    versions, bad CRCs, empty/foreign files, a missing/foreign/future marker: only ReproBundleErrors, nothing read
    or written outside the zip, memory bounded, and nothing a reader hands out differs from what verify checked."""
    from reprobundle.bundle.digest import digest_bytes

    zips = _hostile_zips(golden_entries)
    tracemalloc.start()
    try:
        for label, data in zips.items():
            path = tmp_path / f"{uuid.uuid4().hex[:8]}.zip"
            path.write_bytes(data)
            cache = tmp_path / "cache"
            tracemalloc.reset_peak()
            with confined(path, cache):
                _exercise_zip(path, cache)
            _, peak = tracemalloc.get_traced_memory()
            assert peak < 24 << 20, f"{label}: peak {peak / 2**20:.1f} MiB"
            assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()
            if label.startswith(("traversal", "duplicate", "zip bomb", "declares 4 GiB")):
                with pytest.raises(StoreError):
                    ZipStore(path)
                    pytest.fail(f"{label}: the zip was accepted")
            if label.startswith("NUL"):
                only_reprobundle_errors(open_ref, str(path))
    finally:
        tracemalloc.stop()
    # the untouched golden zip still opens, verifies and reads back
    registry, bundle = open_ref(str(GOLDEN_ZIP))
    assert registry.verify(bundle) == []
    assert all(digest_bytes(registry.get_blob(r)) == r["digest"] for r in mf.blob_refs(bundle.manifest))


def test_corrupt_zip_entry_is_reported_by_verify_and_cli(tmp_path, golden_entries):
    """A damaged blob inside a zip (bad CRC): verify lists it (naming the digest), the CLI exits 6, no traceback."""
    import contextlib

    from reprobundle.cli import main

    blob_name = next(n for n, d in golden_entries if n.startswith("blobs/") and len(d) > 64)
    path = tmp_path / "bad.zip"
    path.write_bytes(_set_header_fields(_zip_of(golden_entries), blob_name, crc=0xDEADBEEF))
    registry, bundle = open_ref(str(path))
    problems = registry.verify(bundle)
    assert len(problems) == 1 and blob_name.rsplit("/", 1)[1] in problems[0], problems
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(err):
        code = main(["verify", str(path)])
    assert code == 6 and blob_name.rsplit("/", 1)[1] in out.getvalue() and "Traceback" not in err.getvalue()


def test_too_many_zip_entries(tmp_path, monkeypatch):
    """The entry-count bound is enforced before any entry is examined (bound lowered here to keep the test fast)."""
    import reprobundle.store.zip_store as store_mod

    monkeypatch.setattr(store_mod, "MAX_ZIP_ENTRIES", 1000)
    path = tmp_path / "many.zip"
    path.write_bytes(_zip_of([(f"blobs/sha256/00/{i:064x}", b"") for i in range(1001)]))
    with pytest.raises(StoreError, match="entries"):
        ZipStore(path)


# ----------------------------------------------------------------------------------- nothing is executed

# Places in the package that may run code or start processes, each for a stated reason. Anything else that
# matches is a new route from data to code and fails the test.
ALLOWED_TEXT_MATCHES = {
    ("capture/files.py", "np.load(path, allow_pickle=False)"): "numpy's loader with pickles refused",
    ("fleet/ray_executor.py", "Ray serializes the task function itself (our own code"):
        "its docstring says that Ray serializes our own task function; tasks and results cross as plain data",
    ("errors.py", "def __reduce__(self)"):
        "DiskFullError (an OSError with its own constructor) is rebuilt from its three strings when Ray or a process "
        "pool sends it back: our own error, never bundle data",
}
ALLOWED_CALLS = {
    ("capture/script.py", "load_factory", "exec_module"): "runs the user's own pack script, only when `pack SCRIPT.py` asks",
    ("capture/export.py", "load_exported", "deserialize"): "jax.export.deserialize of a file the user passes to pack",
    ("capture/export.py", "concrete_module", "deserialize"):
        "minimize of a bundle with symbolic shapes: jax.export.deserialize of its artifact (a flatbuffer of data) to "
        "lower it at the packed sizes; nothing of it runs on the host",
    ("worker/__main__.py", "<module>", "exec_module"): "loads the worker's own folder as a package, run by path",
    ("worker/retrace.py", "_run_factory", "exec_module"):
        "replay --retrace: the worker of the release under test imports the bundle's script, as the user asked "
        "(it runs where the bundle's XLA program runs, never on the host)",
    ("capture/site/sitecustomize.py", "exec_module", "exec_module"):
        "inside a program run by `reprobundle capture`: runs jax's own loader for the program's `import jax`, "
        "then installs the capture hook",
}
SUBPROCESS_MODULES = {
    "worker/lockstep_compare.py": "a reproducer's `--compare A B`: runs the same reproducer (the script or the zip, by "
                                  "path) as each side, through uv or the Python the user named (argument lists, no "
                                  "shell); it runs only when a person runs the reproducer, never on load",
    "run/execution.py": "waits on the worker worker_launch.py started (its exit, a timeout)",
    "run/worker_launch.py": "runs the worker package by path in the chosen interpreter (argument list, no shell)",
    "run/module_server.py": "runs the worker package by path (`serve`) in a contender's interpreter, as "
                            "execution.py does (argument list, no shell)",
    "run/shared_worker.py": "waits on the `jobs` worker that launch.start_worker started (its exit, a timeout); "
                            "starts nothing itself",
    "envs/manager.py": "runs `uv pip compile` for a dry run of an environment (argument list, no shell)",
    "envs/build.py": "runs uv and the environment's verification (argument lists, no shell, fixed verification "
                        "code)",
    "envs/installed.py": "asks the interpreter --python names for its jax version (argument list, no shell, "
                            "fixed code)",
    "envs/interpreters.py": "probes candidate interpreters and asks uv where its Pythons live (argument lists, no "
                           "shell, fixed probe code)",
    "worker/environment.py": "sysctl for the CPU model on macOS",
    "envs/program.py": "runs uv venv, uv pip install and uv pip freeze for a retrace's environment with the "
                           "program's packages (argument lists, no shell)",
    "envs/platforms.py": "nvidia-smi -L where /proc/driver/nvidia does not list the GPUs (argument list, no shell)",
    "capture/program_launch.py": "runs the program the user gives to `reprobundle capture` (their argument list, no shell)",
    "envs/local_jax.py": "probes the interpreter `--jax PATH` names for its versions (argument list, no shell, fixed "
                        "probe code)",
    "envs/release_facts.py": "runs worker/release_facts.py by path, and `XLA_FLAGS=--help` with fixed code, in a "
                             "release's environment (argument lists, no shell)",
    "envs/jax_commit.py": "runs git on a JAX repository (clone, fetch, log, show, archive: argument lists, no shell; "
                          "nothing from the repository is run but JAX's Python in a worker)",
}
JAX_IMPORTERS = {"capture/export.py": "the only in-process JAX user on the host, with flatten.py",
                 "capture/flatten.py": "the call flattened for export, under export.py",
                 "capture/hook.py": "inside the program `reprobundle capture` runs (or the `reprobundle.capture()` "
                                    "block): sees its jitted calls and exports the matching ones with export.py"}
WORKER = "worker/"  # runs in the replay environment's subprocess: jax and jax.export.deserialize are its job


def _package_sources() -> dict[str, str]:
    return {p.relative_to(PKG).as_posix(): p.read_text() for p in sorted(PKG.rglob("*.py"))}


def test_no_pickle_eval_exec_in_the_package():
    """grep: `pickle`, `eval(`, `exec(` (and marshal/shelve/yaml/os.system/shell=True) appear nowhere except the
    listed, justified places."""
    pattern = re.compile(r"pickle|\beval\(|\bexec\(|marshal|shelve|dill|yaml\.|os\.system|os\.popen|shell=True|"
                         r"__import__\(|\bcompile\(")
    found = []
    for name, text in _package_sources().items():
        for line in text.splitlines():
            for m in pattern.finditer(line):
                if m.group(0) == "compile(" and re.search(r"\bre\.compile\(|\.compile\(", line):
                    continue  # re.compile / lowered.compile(): not Python's compile()
                if not any(name == f and snippet in line for f, snippet in ALLOWED_TEXT_MATCHES):
                    found.append(f"{name}: {line.strip()}")
    assert not found, "\n".join(found)


def test_no_code_execution_routes_in_the_package_ast():
    """The same, by syntax: calls to eval/exec/compile/__import__, pickle-like imports, exec_module and
    deserialize outside the allowed functions, msgpack hooks that could build objects, np.load with pickles,
    subprocesses outside the allowed modules, JAX imported on the host outside capture.py."""
    problems = []
    for name, text in _package_sources().items():
        tree = ast.parse(text, name)
        parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node

        def function_of(node):
            while node in parents:
                node = parents[node]
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return node.name
            return "<module>"

        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for mod in mods:
                    top = mod.split(".")[0]
                    if top in ("pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "joblib",
                               "yaml", "pty", "code", "codeop"):
                        problems.append(f"{name}:{node.lineno} imports {mod}")
                    if top == "jax" and name not in JAX_IMPORTERS and not name.startswith(WORKER):
                        problems.append(f"{name}:{node.lineno} imports {mod} on the host")
                    if top == "subprocess" and name not in SUBPROCESS_MODULES:
                        problems.append(f"{name}:{node.lineno} imports subprocess")
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if isinstance(f, ast.Name) and called in ("eval", "exec", "compile", "__import__", "input", "breakpoint"):
                problems.append(f"{name}:{node.lineno} calls {called}()")
            if called in ("exec_module", "deserialize", "load_module", "run_path", "run_module"):
                if (name, function_of(node), called) not in ALLOWED_CALLS and not (
                        name.startswith(WORKER) and called == "deserialize"):
                    problems.append(f"{name}:{node.lineno} {function_of(node)}() calls {called}")
            if called in ("system", "popen", "execv", "execve", "execvp", "spawnv", "startfile") and \
                    isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "os":
                problems.append(f"{name}:{node.lineno} calls os.{called}")
            kwargs = {k.arg: k.value for k in node.keywords}
            if "shell" in kwargs and not (isinstance(kwargs["shell"], ast.Constant) and kwargs["shell"].value is False):
                problems.append(f"{name}:{node.lineno} passes shell=")
            if called in ("unpackb", "Unpacker", "unpack") and set(kwargs) & {"object_hook", "object_pairs_hook",
                                                                            "ext_hook", "list_hook"}:
                problems.append(f"{name}:{node.lineno} msgpack with an object-building hook")
            if called == "load" and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                    f.value.id in ("np", "numpy"):
                ap = kwargs.get("allow_pickle")
                if not (isinstance(ap, ast.Constant) and ap.value is False):
                    problems.append(f"{name}:{node.lineno} np.load without allow_pickle=False")
    assert not problems, "\n".join(problems)


def test_decoding_runs_no_code(demo, tmp_path):
    """A manifest whose strings are Python, pickles and shell: decoding, loading, verifying and describing it
    stays inside the store and executes nothing (the audit hook sees no exec/compile/pickle/process event)."""
    import pickle  # noqa: S403  (the test builds a hostile payload; the package never imports pickle)

    registry, base = demo
    payload = pickle.dumps(os.system)  # would call os.system when unpickled
    m = _deepcopy(base)
    m["description"] = "__import__('os').system('touch /tmp/pwned-reprobundle')"
    m["labels"] = {"x": "$(touch /tmp/pwned-reprobundle)", "p": payload.decode("latin-1")}
    m["environment"] = {"code": "eval(compile('1', 'x', 'eval'))", "!!python/object": "os.system"}
    m["function"]["fields"]["fun_name"] = "`touch /tmp/pwned-reprobundle`"
    ref = registry.publish(m)
    from reprobundle.render import listing as report

    benign = registry.load("demo", 1)  # warm-up: lazy imports (numpy.ma parses signatures) happen outside the audit
    report.describe_bundle(benign, [])
    report.bundle_data(benign, [])
    with confined(registry.store.root, tmp_path / "cache"):
        bundle = registry.resolve(f"demo@{ref.version}")
        assert registry.verify(bundle) == []
        report.describe_bundle(bundle, [])
        report.bundle_data(bundle, [])
    assert not Path("/tmp/pwned-reprobundle").exists()


UNICODE_DIGITS = ["²", "١", "٣", "𝟙", "①", "¹²"]


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_hlo_artifacts_with_unicode_digits(digit):
    """A bundle's HLO artifact is untrusted text: ids made of non-ASCII digits (str.isdigit() but not int()) in
    metadata and source tables parse without error."""
    from reprobundle.analysis import hlo_diff, hlo_parse

    text = ("HloModule m\n\nENTRY %main (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n"
            f"  ROOT %a = f32[4]{{0}} add(f32[4]{{0}} %p, f32[4]{{0}} %p), metadata={{op_name=\"x\" "
            f"stack_frame_id={digit}}}\n}}\n")
    tables = (f"\nFileNames\n1 \"f.py\"\nFileLocations\n1 file_name_id={digit} line=3\n"
              f"StackFrames\n1 file_location_id={digit}\n")
    for t in (text, text + tables, text.replace(f"stack_frame_id={digit}", "stack_frame_id=1") + tables):
        module = hlo_parse.parse_hlo(t)
        hlo_diff.fusion_summary(module)
        hlo_diff.fusion_diff(t, t)


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_refs_with_unicode_digits(demo, digit):
    """`demo@²` is a tag name (not a version): a clean not-found, never int()'s ValueError."""
    registry, _ = demo
    with pytest.raises(ReproBundleError):
        registry.resolve(f"demo@{digit}")


# ------------------------------------------------------------------------------------------- run records


def _base_run(registry: Registry, bundle) -> dict:
    out = registry.put_blob(b"\1" * 24)
    hlo = registry.put_blob(b"HloModule m\n\nENTRY %main (p: f32[4]) -> f32[4] {\n  ROOT %p = f32[4]{0} parameter(0)\n}\n")
    return {
        "format": mf.RUN_FORMAT, "format_version": mf.RUN_VERSION, "run_id": "20261130T000000-deadbeef",
        "bundle_id": bundle.ref.bundle_id, "bundle": str(bundle.ref), "created": "2026-11-30T00:00:00.000000Z",
        "requested": "0.4.30", "status": "ok", "reason": "", "route": "deserialize",
        "environment": _deepcopy(_GOLDEN_ENVIRONMENT), "outputs": [{"shape": [2, 3], "dtype": "float32", "blob": out}],
        "check": {"ok": True, "bit_identical": True, "max_abs_err": 0.0, "max_rel_err": 0.0, "leaves": []},
        "artifacts": {"hlo_after": {"blob": hlo, "media_type": "text/x-hlo"}},
        "timing": {"warmup": 1, "samples_ns": [100, 110, 120, 130], "compile_s": 0.1},
        "per_op": [{"name": "p", "kind": "parameter", "time_ns": 1.0, "count": 1}],
        "attempts": [{"route": "deserialize", "error": ""}], "duration_s": 1.0,
    }


@settings(max_examples=150 * SCALE, **FUZZ)
@given(data=st.data())
def test_hostile_run_records(demo, tmp_path, data):
    """Run records sit beside bundles in shared stores: mutated ones make `show`, `compare`, `url` and gc fail
    cleanly (or work), never with another exception, and never reach outside the store."""
    from reprobundle import api
    from reprobundle.render import comparison as render

    registry, _ = demo
    bundle = registry.load("demo", 1)
    run = _base_run(registry, bundle)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        path = data.draw(st.sampled_from(list(_walk_paths(run))[1:]), label="path")
        op = data.draw(st.sampled_from(["replace", "replace", "delete", "add"]), label="op")
        target = _get(run, path)
        if op == "replace":
            run = _set(run, path, data.draw(hostile_value, label="value"))
        elif op == "delete":
            del _get(run, path[:-1])[path[-1]]
        elif isinstance(target, dict):
            target[data.draw(hostile_text, label="key")] = data.draw(hostile_value, label="value")
    try:
        raw = msgpack.packb(run, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        assume(False)
    from reprobundle.bundle.digest import hex_of

    registry.store.put(f"runs/{hex_of(bundle.ref.bundle_id)}/20261130T000000-deadbeef.msgpack", raw)
    cache = tmp_path / "cache"
    with confined(registry.store.root, cache):
        runs = only_reprobundle_errors(registry.runs, bundle.ref.bundle_id)
        if runs:
            comparison = only_reprobundle_errors(api.comparison_of, registry, bundle, runs)
            if comparison is not None:
                for fmt in (render.to_text, render.to_markdown, render.to_html):
                    fmt(comparison)
            only_reprobundle_errors(report.describe_runs, bundle, runs)
            only_reprobundle_errors(lambda: [report.run_data(r) for r in runs])
            only_reprobundle_errors(report.describe_bundle, bundle, runs)
            only_reprobundle_errors(report.bundle_data, bundle, runs)
        only_reprobundle_errors(sharing.share_info, "demo@1", store=str(registry.store.root))
        only_reprobundle_errors(registry.gc, dry_run=True)


# ---------------------------------------------------------------------------------- round two (issue #14)
# A store or bundle from someone else, attacked as a reviewer would: a marker from the future, records that do not
# read, files that are not files, sizes that lie, text that talks to the terminal, refs that never end, options
# that are not numbers, killed processes. Each test names the rule it checks (README "Errors", docs/architecture).


def _clean_failure(code: int, out: str, err: str) -> None:
    """One line and a hint, an exit code of reprobundle's own: never a traceback, never "unexpected"."""
    assert code not in (0, 1, 70) and "Traceback" not in err and "unexpected" not in err, (code, out, err)


def _future_store(demo_registry: Registry) -> Path:
    root = demo_registry.store.root
    (root / "reprobundle-store.json").write_text('{"format": "reprobundle-store", "format_version": 99}')
    return root


def test_a_store_of_an_unknown_layout_is_refused_by_every_command(demo, tmp_path):
    """A marker that declares a layout from the future (or is not a marker): every command refuses the store with
    one typed error (StoreLayoutError, exit 6) before it reads or writes anything in it; `gc --delete` deletes
    nothing; a copy into it writes nothing."""
    from cli_runner import cli

    from reprobundle.errors import StoreLayoutError

    registry, _ = demo
    orphan = registry.put_blob(b"an orphan gc would delete")["digest"]
    registry.close()
    other = Registry.open(tmp_path / "other")
    other.publish(make_manifest(other, name="elsewhere"))
    other.close()
    root = _future_store(registry)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    commands = [["ls"], ["ls", "demo"], ["show", "demo"], ["show", "demo", "--json"], ["verify", "demo"],
                ["tag", "demo@1", "good"], ["export", "demo", "-o", str(tmp_path / "x.zip")], ["url", "demo"],
                ["compare", "demo"], ["gc"], ["gc", "--delete", "--grace", "0"], ["copy", "demo", str(tmp_path / "d")],
                ["push", "demo", "--to", str(tmp_path / "d2")], ["replay", "demo", "--repeat", "1"],
                ["show", f"{root}/demo@1"], ["show", "sha256:" + "0" * 8]]
    for argv in commands:
        code, out, err = cli(*argv, store=root)
        assert code == 6 and "layout version 99" in err and "upgrade reprobundle" in err, (argv, code, out, err)
    for argv in (["copy", "elsewhere", str(root)], ["push", "elsewhere", "--to", str(root)],
                 ["pull", f"{tmp_path / 'other'}/elsewhere@1", "--store", str(root)]):
        code, out, err = cli(*argv, store=None if argv[0] == "pull" else tmp_path / "other")
        assert code == 6 and "layout version 99" in err, (argv, code, out, err)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before and registry.store.exists(blob_key(orphan))
    for marker in (b"not json", b'{"format": "something-else", "format_version": 1}', b"[1]", b"{" * 100_000):
        (root / "reprobundle-store.json").write_bytes(marker)
        with pytest.raises(StoreLayoutError):
            Registry.open(root).gc(dry_run=False, grace_s=0)
        code, out, err = cli("ls", store=root)
        assert code == 6 and "not a reprobundle store marker" in err and len(err) < 1000, (code, err)
    (root / "reprobundle-store.json").unlink()
    (root / "reprobundle-store.json").symlink_to("/dev/zero")
    code, out, err = cli("gc", "--delete", "--grace", "0", store=root)
    assert code in (3, 6) and "Traceback" not in err and registry.store.exists(blob_key(orphan)), (code, err)


def test_store_urls_and_paths_that_name_no_store(tmp_path):
    """`--store zip://` and `--store file://` name nothing (a usage error, not a traceback or the current folder);
    a store path that is a regular file is refused, not listed as an empty store."""
    from cli_runner import cli

    for url in ("zip://", "zip://::", "file://", "file:// "):
        code, out, err = cli("ls", store=url)
        assert code == 2 and "names no" in err and "Traceback" not in err, (url, code, err)
    plain = tmp_path / "notes.txt"
    plain.write_text("not a store")
    code, out, err = cli("ls", store=plain)
    assert code == 3 and "is a file, not a folder" in err, (code, out, err)
    code, out, err = cli("gc", "--delete", store=plain)
    assert code == 3 and plain.read_text() == "not a store"


def test_refs_that_never_end_are_cut_and_escaped(demo):
    """Refs of thousands of digits (int()'s digit limit), of megabytes, or with terminal controls: a clean
    not-found or invalid-ref error whose message is short and shows no control character."""
    from cli_runner import cli

    registry, _ = demo
    root = registry.store.root
    for ref in ("demo@" + "0" * 5000, "demo@" + "9" * 5000, "demo@" + "0" * 5000 + "2", "x" * 1_000_000,
                "demo@\x1b[2J\x1b]0;pwned\x07", "de\nmo", "sha256:" + "a" * 5000, "demo@" + "1" * 10):
        code, out, err = cli("show", ref, store=root)
        assert code in (2, 4) and "Traceback" not in err and len(err) < 600, (ref[:20], code, err[:300])
        assert "\x1b" not in err and "\x07" not in err and err.count("\n") <= 2, err
    assert registry.resolve("demo@" + "0" * 5000 + "1").ref.version == 1


def test_terminal_controls_from_a_bundle_never_reach_the_terminal(demo):
    """Escape sequences (clear screen, window title, colours), bidirectional overrides and newlines in a bundle's
    description, labels, function name, static reprs, tags or run records: `show`, `ls`, `verify`, `compare` and
    the error printer write them escaped, on the line they belong to (no forged `error:` line)."""
    from cli_runner import cli

    registry, base = demo
    evil = "\x1b[2J\x1b[H\x1b]0;owned\x07\u202eevil\nerror: forged line\r\x9b31m"
    m = _deepcopy(base)
    m["description"] = evil
    m["labels"] = {"team": evil, evil[:6]: "x"}
    m["function"]["fields"]["fun_name"] = evil
    m["environment"]["jax"] = evil
    ref = registry.publish(m)
    run = _base_run(registry, registry.load("demo", ref.version))
    run.update(requested=evil, status="error", reason=evil)
    registry.put_run(run)
    root = registry.store.root
    (root / "tags/demo").mkdir(parents=True, exist_ok=True)
    (root / "tags/demo/bad").write_bytes(evil.encode()[:60])
    outputs = []
    for argv in (["show", f"demo@{ref.version}"], ["ls"], ["verify", f"demo@{ref.version}"], ["show", "demo@bad"],
                 ["compare", f"demo@{ref.version}"], ["url", f"demo@{ref.version}"]):
        code, out, err = cli(*argv, store=root)
        assert "Traceback" not in err, (argv, err)
        outputs.append((argv, out + err))
    for argv, text in outputs:
        for bad in ("\x1b[2J", "\x1b]", "\x07", "\u202e", "\r", "\x9b"):
            assert bad not in text, (argv, repr(bad), text[:2000])
        if argv[0] != "url":  # its Markdown snippet quotes the description as Markdown (render/sharing.py)
            assert not any(line.startswith("error: forged") for line in text.splitlines()), (argv, text)
    show = outputs[0][1]
    assert "\\x1b[2J" in show and "\\u202eevil\\nerror: forged line" in show


def test_a_deeply_nested_environment_is_a_format_error(demo):
    """An environment nested a thousand levels deep passes msgpack but not the decoder (JSON output would recurse
    past Python's limit): a CorruptBundleError, and `show --json` exits 6."""
    from cli_runner import cli

    registry, base = demo
    m = _deepcopy(base)
    raw = msgpack.packb(m).replace(msgpack.packb(m["environment"]), b"\x81\xa1e" * 1000 + b"\xc0", 1)
    with pytest.raises(CorruptBundleError, match="deeper"):
        mf.decode_manifest(raw)
    registry.store.put("bundles/demo/2.msgpack", raw)
    code, out, err = cli("show", "demo@2", "--json", store=registry.store.root)
    assert code == 6 and "deeper than" in err and "Traceback" not in err


@pytest.mark.parametrize("devices", [True, 7, "cpu", {"kind": "cpu"}, [1, None, {"kind": 5}]])
def test_an_environment_section_of_any_shape_is_shown_and_shared(demo, devices):
    """The environment section is free-form (the schema says only: a map): `devices` of any type, found by a fuzzing
    campaign as a TypeError in `url`, is rendered as what can be read of it."""
    from cli_runner import cli

    registry, base = demo
    m = _deepcopy(base)
    m["version"], m["environment"]["devices"] = 2, devices
    registry.store.put("bundles/demo/2.msgpack", msgpack.packb(m))
    for argv in (["url", "demo@2", "--json"], ["show", "demo@2"]):
        code, out, err = cli(*argv, store=registry.store.root)
        assert code == 0 and "Traceback" not in err, (argv, err)


def test_one_bad_record_never_hides_the_rest_of_the_store(demo, tmp_path):
    """A corrupt manifest, a manifest of a newer reprobundle, a folder no name can have, a corrupt or newer run
    record, a tag that is not a number: `ls`, `show`, `compare` and `gc` work on the rest and name what they
    skipped (a warning with the file); `show` of the bad one itself is a clean error."""
    from cli_runner import cli

    from reprobundle.bundle.digest import hex_of

    registry, base = demo
    for _ in range(2):
        registry.publish(_deepcopy(base))
    bundle = registry.load("demo", 3)
    root = registry.store.root
    good_run = _base_run(registry, bundle)
    registry.put_run(good_run)
    runs = root / "runs" / hex_of(bundle.ref.bundle_id)
    (runs / "20261130T000001-0000bad0.msgpack").write_bytes(b"\x85garbage")
    (runs / "20261130T000002-0000bad1.msgpack").write_bytes(mf.encode({**good_run, "format_version": 99}))
    (root / "bundles/demo/2.msgpack").write_bytes(b"\x93truncated")
    (root / "bundles/other").mkdir()
    (root / "bundles/other/1.msgpack").write_bytes(mf.encode({**base, "name": "other", "format_version": 99}))
    (root / "bundles/Bad Name").mkdir()
    (root / "bundles/Bad Name/1.msgpack").write_bytes(b"")
    (root / "tags/demo").mkdir(parents=True, exist_ok=True)
    (root / "tags/demo/broken").write_bytes(b"not a number")
    registry.close()
    code, out, err = cli("ls", "--json", store=root)
    assert code == 0 and [r["ref"] for r in json.loads(out)] == ["demo@1", "demo@3"], (out, err)
    assert "warning: skipped bundles/demo/2.msgpack" in err and "warning: skipped bundles/other/1.msgpack" in err
    code, out, err = cli("show", "demo@3", store=root)
    assert code == 0 and "runs:         1" in out, (out, err)
    assert "0000bad0.msgpack" in err and "0000bad1.msgpack" in err and "format_version 99" in err
    code, out, err = cli("compare", "demo@3", "--json", store=root)
    assert code == 0 and "0000bad0.msgpack" in err, (code, out, err)
    code, out, err = cli("show", "demo@2", store=root)
    assert code == 6 and "demo@2" in err and "Traceback" not in err
    code, out, err = cli("gc", "--json", "--grace", "0", store=root)
    data = json.loads(out)
    assert code == 0 and {u["key"] for u in data["unreadable"]} >= {"bundles/demo/2.msgpack",
                                                                    "bundles/other/1.msgpack"}
    assert registry.tags("demo") == {} or "broken" not in registry.tags("demo")


def test_records_and_zip_entries_are_read_within_their_limits(demo, tmp_path):
    """Size limits hold while reading: a zip whose manifest entry honestly inflates to 100 MiB (a ratio no zip-bomb
    check flags) is refused by its declared size without inflating; a 100 MiB manifest or run file in a folder is
    refused by its size; a tag is read at most 65 bytes; nothing near those sizes is ever allocated."""
    registry, base = demo
    path = tmp_path / "big.zip"
    rng = random.Random(3)
    block = bytes(rng.getrandbits(8) if i % 48 == 0 else 0 for i in range(1 << 16))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("reprobundle-store.json", b'{"format": "reprobundle-store", "format_version": 1}')
        with zf.open(zipfile.ZipInfo("bundles/big/1.msgpack"), "w", force_zip64=True) as f:
            for _ in range(1600):
                f.write(block)
    info = zipfile.ZipFile(path).getinfo("bundles/big/1.msgpack")
    assert info.file_size == 100 << 20 and info.file_size / info.compress_size < 200  # not a "zip bomb"
    root = registry.store.root
    with open(root / "bundles/demo/7.msgpack", "wb") as f:
        f.truncate(100 << 20)
    (root / "tags/demo").mkdir(parents=True, exist_ok=True)
    with open(root / "tags/demo/huge", "wb") as f:
        f.write(b"1" * (10 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match="larger than"):
            open_ref(str(path))
        with pytest.raises(FormatError, match="larger than"):
            registry.load("demo", 7)
        with pytest.raises(FormatError, match="larger than"):
            registry.resolve("demo@huge")
        assert [b.ref.version for b in registry.iter_bundles("demo")] == [1]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB"


def test_hostile_files_in_a_store_folder(demo, tmp_path):
    """A tag or manifest that is a symlink to /dev/zero, a FIFO, a symlink to /etc/passwd, a socket: every read is
    refused at once (no unbounded read, no hang waiting for a FIFO's writer) with an error that names the key and
    quotes none of the target's content; `verify` lists a blob that is such a file."""
    import socket
    import threading

    from cli_runner import cli

    registry, base = demo
    root = registry.store.root
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n" * 1000)
    (root / "tags/demo").mkdir(parents=True, exist_ok=True)
    (root / "tags/demo/zero").symlink_to("/dev/zero")
    os.mkfifo(root / "tags/demo/fifo")
    (root / "tags/demo/passwd").symlink_to(passwd)
    (root / "bundles/demo/5.msgpack").symlink_to("/dev/zero")
    os.mkfifo(root / "bundles/demo/6.msgpack")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "tags/demo/sock"))
    digest = base["inputs"]["leaves"][0]["blob"]["digest"]
    blob = root / blob_key(digest)
    blob.unlink()
    os.mkfifo(blob)
    results: dict = {}

    def run():
        for argv in (["show", "demo@zero"], ["show", "demo@fifo"], ["show", "demo@passwd"], ["show", "demo@sock"],
                     ["show", "demo@5"], ["show", "demo@6"], ["ls", "--json"], ["verify", "demo@1"],
                     ["gc", "--grace", "0"]):
            results[" ".join(argv)] = cli(*argv, store=root)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    sock.close()
    assert not worker.is_alive(), f"a read hung; done so far: {list(results)}"
    for argv, (code, out, err) in results.items():
        assert "Traceback" not in err and "root:x:0:0" not in out + err and len(err) < 2000, (argv, code, err)
    for argv in ("show demo@zero", "show demo@fifo", "show demo@passwd", "show demo@sock", "show demo@5",
                 "show demo@6"):
        code, out, err = results[argv]
        _clean_failure(code, out, err)
    assert "a FIFO" in results["show demo@fifo"][2] and "symbolic link out of the store" in results[
        "show demo@passwd"][2]
    code, out, err = results["ls --json"]
    assert code == 0 and [r["ref"] for r in json.loads(out)] == ["demo@1"] and "bundles/demo/5.msgpack" in err
    code, out, err = results["verify demo@1"]
    assert code == 6 and digest in out and "a FIFO" in out, (out, err)


@pytest.mark.slow
def test_unreadable_blobs_and_records_as_another_user(demo, tmp_path):
    """Files the user may not read (a store shared by several users; here as `nobody`): `verify` lists the blob
    with the reason; `replay`, `export` and `copy` fail with one line naming it (exit 3 or 6); a manifest or run
    record that cannot be read is skipped by `ls` and `show` with a warning naming it, and `gc` keeps every blob
    rather than guess. No traceback anywhere."""
    import shutil as sh

    from as_nobody import run_as_nobody, shared_dir

    from reprobundle.bundle.digest import hex_of

    registry, base = demo
    with shared_dir() as shared:
        twin, store = shared / "twin", shared / "store"
        other = _deepcopy(base)
        other["name"] = "other"
        registry.publish(other)
        bundle = registry.load("demo", 1)
        registry.put_run(_base_run(registry, bundle))
        registry.close()
        sh.copytree(registry.store.root, twin, symlinks=True)
        sh.copytree(registry.store.root, store, symlinks=True)
        for folder in (twin, store):
            for p in folder.rglob("*"):
                p.chmod(0o755 if p.is_dir() else 0o644)
            folder.chmod(0o755)
        digest = base["inputs"]["leaves"][0]["blob"]["digest"]
        run_key = next((store / "runs" / hex_of(bundle.ref.bundle_id)).iterdir())
        for p in (store / blob_key(digest), store / "bundles/other/1.msgpack", run_key):
            p.chmod(0o600)
        env = {**os.environ, "TMPDIR": str(shared), "REPROBUNDLE_CACHE_DIR": str(shared / "cache"),
               "JAX_PLATFORMS": "cpu", "HOME": str(shared)}
        for folder in (shared / "cache/tmp", shared / "cache/blobs/.tmp"):  # warmed up by root, then used by nobody
            folder.mkdir(parents=True)
            for p in (folder, *folder.parents):
                if str(p).startswith(str(shared)):
                    p.chmod(0o777)

        def commands(s: Path, tag: str) -> list[list[str]]:
            return [["verify", "demo", "--store", s], ["replay", "demo", "--repeat", "1", "--store", s],
                    ["export", "demo", "-o", shared / f"{tag}.zip", "--store", s],
                    ["copy", "demo", shared / f"{tag}-dest", "--store", s], ["ls", "--store", s],
                    ["show", "demo", "--store", s], ["gc", "--grace", "0", "--store", s]]

        results = run_as_nobody([[str(a) for a in c] for c in commands(store, "x")],
                                warmup=[[str(a) for a in c] for c in commands(twin, "w")], env=env)
    verify, replay, export, copy, ls, show, gc = results
    for code, out, err in results:
        assert "Traceback" not in err and "unexpected" not in err, (code, out, err)
    assert verify[0] == 6 and f"blob {digest} is unreadable" in verify[1] and "permission denied" in verify[1]
    assert replay[0] == 3 and "permission denied" in replay[2] and hex_of(digest) in replay[2], replay
    assert export[0] == 6 and digest in export[2] and "permission denied" in export[2], export
    assert copy[0] == 3 and "permission denied" in copy[2], copy
    assert ls[0] == 0 and "demo@1" in ls[1] and "warning: skipped bundles/other/1.msgpack" in ls[2], ls
    assert show[0] == 0 and f"warning: skipped runs/{hex_of(bundle.ref.bundle_id)}/" in show[2], show
    assert gc[0] == 0 and "could not read bundles/other/1.msgpack" in gc[1] and "may reference any" in gc[1], gc


def test_a_zip_holding_two_bundles_names_them(demo, tmp_path):
    """A zip bundle holds one bundle; one holding two is not guessed at: the error names what it holds and how to
    pick one, and `--store X.zip NAME@V` does."""
    from cli_runner import cli

    from reprobundle.store.zip_store import write_zip_store

    registry, base = demo
    other = _deepcopy(base)
    other["name"] = "other"
    registry.publish(other)
    store = registry.store
    keys = ["reprobundle-store.json", *store.list("blobs"), "bundles/demo/1.msgpack", "bundles/other/1.msgpack"]
    path = tmp_path / "two.zip"
    write_zip_store(path, ((k, store, k) for k in keys))
    code, out, err = cli("show", str(path))
    assert code == 2 and "holds 2 bundles (demo@1, other@1)" in err and "--store" in err, err
    code, out, err = cli("show", "other@1", store=path)
    assert code == 0 and "other@1" in out


def test_timeouts_must_be_positive_and_finite(demo, tmp_path):
    """`--timeout nan|inf|-1|0` is a usage error (exit 2) for replay, bisect and pack, before anything runs; pack
    takes --timeout."""
    from cli_runner import cli

    registry, _ = demo
    script = tmp_path / "s.py"
    script.write_text("def make():\n    raise SystemExit('must not run')\n")
    for value in ("nan", "inf", "-inf", "-1", "0"):
        for argv in (["replay", "demo", "--timeout", value], ["bisect", "demo", "--good", "0.4.30", "--bad", "0.5.0",
                                                              "--timeout", value],
                     ["pack", str(script), "--name", "x", "--timeout", value]):
            code, out, err = cli(*argv, store=registry.store.root)
            assert code == 2 and "invalid timeout" in err and "Traceback" not in err, (argv, code, err)
    assert registry.runs(registry.load("demo", 1).ref.bundle_id) == []


def test_latest_is_not_a_tag_name(demo):
    """`NAME@latest` always means the newest version, so a tag named latest could never be reached: refused."""
    from cli_runner import cli

    registry, _ = demo
    code, out, err = cli("tag", "demo@1", "latest", store=registry.store.root)
    assert code == 2 and "reserved" in err
    assert not (registry.store.root / "tags/demo/latest").exists()


def test_a_damaged_zip_replays_into_nothing_and_store_is_honoured(tmp_path, golden_entries, monkeypatch):
    """`replay X.zip` copies the bundle into the store its runs go to: `--store DIR` when given, else the default;
    a zip with a damaged blob is checked whole first, so the failed replay leaves none of its blobs anywhere."""
    from cli_runner import cli

    blob_name = next(n for n, d in golden_entries if n.startswith("blobs/") and len(d) > 64)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(_set_header_fields(_zip_of(golden_entries), blob_name, crc=0xDEADBEEF))
    default = Path(os.environ["REPROBUNDLE_STORE"])
    dest = tmp_path / "dest"
    for store in (None, dest):
        code, out, err = cli("replay", str(bad), "--repeat", "1", *(["--store", str(dest)] if store else []))
        assert code == 6 and blob_name.rsplit("/", 1)[1] in err and "Traceback" not in err, (code, err)
        for folder in (default, dest):
            assert not (folder / "blobs").exists() or not any((folder / "blobs").rglob("*")), folder
    from reprobundle import api

    calls = []
    monkeypatch.setattr(api, "_replay", lambda registry, bundle, versions, *options, **kw: calls.append(registry.url) or [])
    api.replay(str(GOLDEN_ZIP), store=str(dest))
    assert calls == [str(dest)] and Registry.open(dest).versions("golden") == [1]


@pytest.mark.slow
def test_a_killed_pack_leaves_nothing_gc_does_not_remove(tmp_path, monkeypatch):
    """SIGKILL of `reprobundle pack` mid reference run leaves its work folder in $TMPDIR (nothing runs at a SIGKILL),
    locked by nobody: `gc --delete` removes it, and never the folder of a pack still running (its lock is held).
    SIGTERM unwinds the pack: exit 143, its worker killed and its folder removed at once, nothing published. Store
    files get the umask's mode, not 0600."""
    import signal
    import tempfile
    import time

    from cli_runner import cli

    from reprobundle.store.scratch import scratch_dir

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    store = tmp_path / "store"
    script = tmp_path / "tiny.py"
    script.write_text("import jax, jax.numpy as jnp, numpy as np\n\n\ndef make():\n"
                      "    return jax.jit(lambda a: jnp.tanh(a) * 2), (np.ones((4, 4), np.float32),)\n")
    env = {**os.environ, "TMPDIR": str(tmp), "JAX_PLATFORMS": "cpu", "REPROBUNDLE_CACHE_DIR": str(tmp_path / "c")}
    exe = str(Path(sys.executable).with_name("reprobundle"))
    procs = {sig: subprocess.Popen([exe, "pack", str(script), "--name", f"s{int(sig)}", "--repeat", "1000000",
                                    "--warmup", "0", "--no-dump", "--store", str(store)], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for sig in (signal.SIGKILL, signal.SIGTERM)}
    deadline = time.monotonic() + 180
    while len(list(tmp.glob("reprobundle-pack-*/job.msgpack"))) < 2 and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs.values()), [p.communicate() for p in procs.values()]
        time.sleep(0.05)
    for sig, proc in procs.items():
        proc.send_signal(sig)
    _, err = procs[signal.SIGTERM].communicate(timeout=60)
    assert procs[signal.SIGTERM].returncode == 143 and "terminated" in err and "Traceback" not in err, err
    procs[signal.SIGKILL].communicate(timeout=60)
    left = sorted(tmp.glob("reprobundle-pack-*"))
    assert len(left) == 1, left  # the SIGKILLed pack's; the SIGTERMed one removed its own
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))  # work folders follow TMPDIR first (store/scratch.temp_folder)
    with scratch_dir(tmp, "reprobundle-pack-") as running:  # a pack still running: its folder is locked
        code, out, err = cli("gc", "--delete", store=store)
        assert code == 0, err
        assert sorted(tmp.glob("reprobundle-pack-*")) == [running]
    assert not list(tmp.glob("reprobundle-pack-*"))
    assert Registry.open(store).names() == []
    modes = {oct(p.stat().st_mode & 0o777) for p in (store / "blobs").rglob("*") if p.is_file()}
    umask = os.umask(0)
    os.umask(umask)
    assert modes == {oct(0o666 & ~umask)}, modes


def test_store_and_cache_files_take_the_umask(tmp_path):
    """Files the folder store and the blob cache write are created as `open` creates them (0666 less the umask),
    so a store shared by a group stays readable to it (mkstemp's 0600 made it unreadable to the others)."""
    from reprobundle.bundle.cache import BlobCache

    old = os.umask(0o002)
    try:
        registry = Registry.open(tmp_path / "store")
        ref = registry.put_blob(b"shared with my group")
        registry.put_run  # noqa: B018 - the same put path writes records
        registry.store.put("tags/x/y", b"1")
        cache = BlobCache(tmp_path / "cache", 1 << 30)
        cached = cache.fetch(registry.store, ref["digest"])
    finally:
        os.umask(old)
    for p in (registry.store.root / blob_key(ref["digest"]), registry.store.root / "tags/x/y", cached):
        assert p.stat().st_mode & 0o777 == 0o664, (p, oct(p.stat().st_mode))


# ------------------------------------------------------------------------------ secrets on command lines

_SECRET_OPTION_NAMES = ["api-key", "api_key", "apiKey", "token", "auth-token", "password", "passwd", "secret",
                        "client-secret", "db.password", "hf_token", "access-key", "private-key"]
_HARMLESS = st.sampled_from(["--steps", "20", "-v", "--lr=1e-3", "train.py", "--config", "cfg.yaml", "batch=32",
                             "-m", "pkg.main", "--out", "/tmp/run-17"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(_HARMLESS, max_size=5), after=st.lists(_HARMLESS, max_size=5),
       name=st.sampled_from(_SECRET_OPTION_NAMES), dashes=st.sampled_from(["--", "-", ""]),
       spelling=st.sampled_from(["=", " "]),
       secret=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=8, max_size=40))
def test_no_secret_option_value_survives_redact_argv(before, after, name, dashes, spelling, secret):
    """Any secret-named option in any spelling (`--name=V`, `--name V`, `-name V`, `name=V`) among harmless
    arguments: its value never survives redact_argv, and the harmless arguments are kept as they were."""
    from reprobundle.bundle.redaction import REDACTED, redact_argv

    assume(not secret.startswith("-") and "=" not in secret)
    if not dashes:
        spelling = "="  # a bare NAME VALUE pair is two plain words: only NAME=VALUE says the value is NAME's
    option = [f"{dashes}{name}={secret}"] if spelling == "=" else [f"{dashes}{name}", secret]
    argv = ["python", *before, *option, *after]
    out = redact_argv(argv)
    assert secret not in " ".join(out) or secret in " ".join(before + after), (argv, out)
    assert REDACTED in " ".join(out)
    assert out[:len(before) + 1] == argv[:len(before) + 1] and out[len(out) - len(after):] == after or not after
