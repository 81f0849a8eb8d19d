"""The Python API: what the CLI and users call. Each function resolves stores and refs, then delegates."""

from __future__ import annotations

import importlib.util
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .bundle.registry import Bundle, BundleRef, Registry, open_ref
from .capture.export import export_function, load_exported
from .capture.pack import pack as _pack
from .errors import ReproBundleError, ScriptError, UsageError
from .run.execution import Timing, dtype_of
from .run.replay import replay as _replay
from .run.schedule import DEFAULT_STEPS

DEFAULT_FACTORY = "make"


def open_registry(store: str | os.PathLike | None = None) -> Registry:
    """The registry at `store` (a URL or path); None means $REPROBUNDLE_STORE or the default local folder."""
    return Registry.open(store)


def resolve(ref: str, store: str | None = None) -> tuple[Registry, Bundle]:
    """Resolve a ref (NAME, NAME@3, NAME@TAG, sha256:PREFIX, a store URL ending in /NAME@3, or a .zip path)."""
    return open_ref(ref, store)


def _timing(warmup: int, repeat: int, rounds: int | None = None) -> Timing:
    if warmup < 0 or repeat < 1 or (rounds is not None and not 1 <= rounds <= repeat):
        raise UsageError(f"invalid timing: warmup={warmup}, repeat={repeat}, rounds={rounds}",
                         hint="use warmup >= 0, repeat >= 1 and 1 <= rounds <= repeat")
    return Timing(warmup=warmup, repeat=repeat, rounds=rounds)


def pack(fn: Callable, *args: Any, name: str, store: str | None = None, kwargs: dict | None = None,
         static: Sequence[int | str] = (), synthetic_inputs: bool = False, seed: int = 0, description: str = "",
         labels: dict[str, str] | None = None, source: str | None = None, warmup: int = 5, repeat: int = 50,
         dump: bool = True, profile: bool = True) -> BundleRef:
    """Capture `fn(*args, **kwargs)` with jax.export, run it once as the reference, and publish a bundle.

    `fn` is any function JAX can jit (a plain function, a `jax.jit`, `nnx.jit` or `eqx.filter_jit` object) or a
    `jax.export.Exported` (symbolic shapes included, with concrete arguments). The arguments are any pytrees:
    array leaves are the bundle's inputs, other leaves (and the arguments `static` names, by index or name) are
    baked into the export and recorded. Returns the new bundle's reference (name, version, bundle id, URL).
    """
    exported, leaves = export_function(fn, args, kwargs, static)
    return _pack(open_registry(store), exported, None if synthetic_inputs else leaves, name=name,
                 synthetic=synthetic_inputs, seed=seed, description=description, labels=labels, source=source,
                 timing=_timing(warmup, repeat), dump=dump, profile=profile)


def load_npz(path: str | Path, expected: Sequence[dict] | None = None) -> list[np.ndarray]:
    """Input leaves from an .npz: keys arr_0..arr_N-1 (np.savez(*leaves)) in numeric order, else file order.

    Arrays saved from ml_dtypes types (bfloat16...) come back as raw void data; they are reinterpreted as the
    expected dtype when the item size matches.
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = list(npz.files)
            if keys and all(k.startswith("arr_") and k[4:].isdigit() for k in keys):
                keys.sort(key=lambda k: int(k[4:]))
            leaves = [npz[k] for k in keys]
    except FileNotFoundError:
        raise UsageError(f"inputs file {path} does not exist") from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise UsageError(f"cannot read inputs from {path}: {e}",
                         hint="save the inputs with numpy.savez(path, *leaves), without object arrays") from None
    if expected:
        for i, (leaf, aval) in enumerate(zip(leaves, expected)):
            want = dtype_of(aval["dtype"])
            if leaf.dtype.kind == "V" and leaf.dtype.itemsize == want.itemsize:
                leaves[i] = leaf.view(want)
    return leaves


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read the {what} {path}: {e.strerror}") from None


def _pack_loaded(fn, inputs, *, store, synthetic_inputs, warmup, repeat, **options) -> BundleRef:
    leaves = None
    if not synthetic_inputs:
        if inputs is None:
            raise UsageError("no inputs given", hint="pass --inputs FILE.npz or --synthetic-inputs")
        leaves = load_npz(inputs, fn.fields["in_avals"]) if isinstance(inputs, (str, Path)) else list(inputs)
    return _pack(open_registry(store), fn, leaves, synthetic=synthetic_inputs, timing=_timing(warmup, repeat),
                 **options)


def pack_exported(exported: bytes | str | Path, inputs: str | Path | Sequence[np.ndarray] | None = None, *,
                  name: str, store: str | None = None, synthetic_inputs: bool = False, seed: int = 0,
                  description: str = "", labels: dict[str, str] | None = None, warmup: int = 5, repeat: int = 50,
                  dump: bool = True, profile: bool = True, jax_version: str | None = None,
                  python: str | None = None) -> BundleRef:
    """Package a `jax.export` artifact someone already serialized (bytes or a file) with its inputs.

    With `jax_version`, the artifact is read and the reference made by that JAX release, in its environment,
    so the bundle is exactly what that release produces; the host's JAX never reads the artifact.
    """
    data = bytes(exported) if isinstance(exported, (bytes, bytearray)) else _read(exported, "exported artifact")
    if jax_version and jax_version != "installed":
        from .capture.pack import pack_serialized_in

        if synthetic_inputs or inputs is None:
            raise UsageError("packing on another JAX version needs real inputs", hint="pass --inputs FILE.npz")
        leaves = load_npz(inputs) if isinstance(inputs, (str, Path)) else list(inputs)
        env = environment_manager(python=python).ensure(jax_version)
        return pack_serialized_in(open_registry(store), data, leaves, python=str(env.python_executable), name=name,
                                  description=description, labels=labels, timing=_timing(warmup, repeat), dump=dump,
                                  profile=profile)
    return _pack_loaded(load_exported(data), inputs, name=name, store=store, synthetic_inputs=synthetic_inputs,
                        seed=seed, description=description, labels=labels, warmup=warmup, repeat=repeat, dump=dump,
                        profile=profile)


def pack_stablehlo(module: str | Path, inputs: str | Path | Sequence[np.ndarray] | None = None, *, name: str,
                   store: str | None = None, synthetic_inputs: bool = False, seed: int = 0, description: str = "",
                   labels: dict[str, str] | None = None, warmup: int = 5, repeat: int = 50, dump: bool = True,
                   profile: bool = True) -> BundleRef:
    """Package a raw StableHLO module (MLIR text, such as an IR dump's module.mlir) with its inputs.

    The module's public @main is called with the inputs as its arguments, in order (the .npz keys arr_0, arr_1,
    ... as numpy.savez(path, *arrays) writes them), on one device, without effects.
    """
    from .capture.export import load_stablehlo, stablehlo_signature

    text = _read(module, "StableHLO module").decode("utf-8", "replace")
    if not synthetic_inputs and inputs is not None:  # a module with dynamic dimensions takes the inputs' sizes
        in_avals = stablehlo_signature(text)[0]
        inputs = load_npz(inputs, in_avals) if isinstance(inputs, (str, Path)) else list(inputs)
    shapes = None if synthetic_inputs or inputs is None else [np.shape(x) for x in inputs]
    return _pack_loaded(load_stablehlo(text, shapes), inputs, name=name, store=store, synthetic_inputs=synthetic_inputs,
                        seed=seed, description=description, labels=labels, warmup=warmup, repeat=repeat, dump=dump,
                        profile=profile, source=text)


def load_factory(script: str) -> tuple[Path, str, Callable]:
    """`path/to/script.py[:FACTORY]` -> (path, source text, factory). Runs the script: the user asked for it."""
    path_text, _, factory_name = script.partition(":")
    factory_name = factory_name or DEFAULT_FACTORY
    path = Path(path_text)
    if not path.is_file():
        raise ScriptError(f"script {path} does not exist")
    source = path.read_text()
    spec = importlib.util.spec_from_file_location(f"_reprobundle_script_{abs(hash(str(path.absolute())))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.absolute()))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ScriptError(f"running {path} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.pop(0)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ScriptError(f"{path} has no function {factory_name}()",
                          hint=f"define {factory_name}() returning (fn, args) or (fn, args, kwargs), "
                               f"or name another one with {path}:FACTORY")
    return path, source, factory


def pack_script(script: str, *, name: str, store: str | None = None, **options) -> BundleRef:
    """Pack what a script's factory returns: `(fn, args)` or `(fn, args, kwargs)`."""
    path, source, factory = load_factory(script)
    try:
        made = factory()
    except ReproBundleError:
        raise
    except Exception as e:
        raise ScriptError(f"{path}:{factory.__name__}() failed: {type(e).__name__}: {e}") from e
    if not (isinstance(made, tuple) and len(made) in (2, 3) and callable(made[0])):
        raise ScriptError(f"{path}:{factory.__name__}() must return (fn, args) or (fn, args, kwargs)")
    fn, args, kwargs = (*made, {}) if len(made) == 2 else made
    if not isinstance(args, (tuple, list)):
        args = (args,)
    return pack(fn, *args, name=name, store=store, kwargs=kwargs, source=source, **options)


def environment_manager(env_dir: str | None = None, *, python: str | None = None):
    """The cache of per-version JAX environments ($REPROBUNDLE_ENV_DIR or the user cache by default)."""
    from .run.envs import EnvironmentManager

    return EnvironmentManager(Path(env_dir) if env_dir else None, python=python)


@dataclass(frozen=True)
class ReplayResult:
    """The bundle that was replayed and one run record per requested version, in order."""

    registry: Registry
    bundle: Bundle
    runs: list[dict]

    @property
    def run(self) -> dict:
        return self.runs[0]


def replay(ref: str, versions: Sequence[str] = ("installed",), *, store: str | None = None, warmup: int = 5,
           repeat: int = DEFAULT_STEPS, rounds: int | None = None, timeout_s: float = 1800.0, dump: bool = True,
           profile: bool = True, python: str | None = None, env_dir: str | None = None,
           progress: Callable[[str], None] | None = None,
           memory_limit_bytes: int | None = None, shapes: dict[str, int] | Sequence[str] | None = None) -> ReplayResult:
    """Replay a bundle on each JAX version; the run records are also stored in the registry beside the bundle.

    A bundle in a read-only store (a .zip) is first copied into the default local store, where its runs go.
    `shapes` ({"b": 16} or ["b=16"]) replays a shape-polymorphic bundle at other sizes, on synthetic inputs.
    """
    from .bundle.dims import parse_bindings

    shapes = parse_bindings(shapes)
    from .bundle.transfer import copy_bundle, prefetch

    registry, bundle = resolve(ref, store)
    if registry.store.read_only:
        local = open_registry(None)
        copied = copy_bundle(registry, bundle, local).ref
        registry, bundle = local, local.load(copied.name, copied.version)

    prefetch(registry, bundle, progress)  # a remote store's blobs come into the local cache at once, in parallel
    env_manager = None
    if any(v != "installed" for v in versions) or python:
        env_manager = environment_manager(env_dir, python=python)
    runs = _replay(registry, bundle, versions, timing=_timing(warmup, repeat, rounds), timeout_s=timeout_s, dump=dump,
                   profile=profile, python=python, env_manager=env_manager, progress=progress,
                   memory_limit_bytes=memory_limit_bytes, shapes=shapes)
    return ReplayResult(registry, bundle, runs)


def comparison_of(registry: Registry, bundle: Bundle, runs: Sequence[dict], baseline: str | None = None) -> dict:
    """The multi-version comparison of `runs` (see comparison.build_comparison), loading their HLO and outputs."""
    from .analysis.comparison import REFERENCE, build_comparison
    from .run.replay import leaf_array, reference_arrays

    def hlo_text(artifacts: dict) -> str | None:
        art = artifacts.get("hlo_after")
        return registry.get_blob(art["blob"]).decode("utf-8", "replace") if art else None

    def arrays(leaves: list[dict]) -> list[np.ndarray]:
        return [leaf_array(registry.get_blob(l["blob"]), l) for l in leaves]

    hlo_texts = {REFERENCE: hlo_text(bundle.manifest["artifacts"])}
    outputs = {REFERENCE: reference_arrays(registry, bundle)}
    for run in runs:
        hlo_texts[run["requested"]] = hlo_text(run["artifacts"])
        outputs[run["requested"]] = arrays(run["outputs"])
    try:
        return build_comparison(bundle.manifest, list(runs), baseline, hlo_texts=hlo_texts, outputs=outputs)
    except ValueError as e:
        raise UsageError(str(e), hint="--baseline names one of the replayed versions, or 'reference'") from None


def compare(ref: str, versions: Sequence[str] | None = None, *, store: str | None = None,
            baseline: str | None = None) -> dict:
    """Compare the stored runs of a bundle: the latest run of each requested version (default: every version)."""
    registry, bundle = resolve(ref, store)
    latest: dict[str, dict] = {}
    for run in registry.runs(bundle.ref.bundle_id):  # oldest first, so later runs win
        latest[run["requested"]] = run
    wanted = list(versions) if versions else list(latest)
    missing = [v for v in wanted if v not in latest]
    if missing:
        raise UsageError(f"no stored run of {bundle.ref} on jax {', '.join(missing)}",
                         hint=f"replay it first: reprobundle replay {bundle.ref} --jax {missing[0]}")
    if not wanted:
        raise UsageError(f"{bundle.ref} has no stored runs", hint=f"reprobundle replay {bundle.ref} --jax VERSION")
    return comparison_of(registry, bundle, [latest[v] for v in wanted], baseline)


def bisect(ref: str, good: str, bad: str, *, store: str | None = None, warmup: int = 5,
           repeat: int = DEFAULT_STEPS,
           rounds: int | None = None, timeout_s: float = 1800.0, python: str | None = None,
           env_dir: str | None = None, progress: Callable[[str], None] | None = None):
    """Find the first released JAX version between `good` and `bad` where the bundle regressed."""
    from .run.bisection import bisect as _bisect
    from .run.replay import replay as _replay

    registry, bundle = resolve(ref, store)
    manager = environment_manager(env_dir, python=python)
    timing = _timing(warmup, repeat, rounds)

    def replay_together(versions: Sequence[str]) -> list[dict]:
        return _replay(registry, bundle, versions, timing=timing, timeout_s=timeout_s, dump=False, profile=True,
                       env_manager=manager, progress=progress, store_runs=not registry.store.read_only)

    result = _bisect(manager.available_versions(), good, bad, replay_together, progress=progress)
    tested = [result.runs[v] for v in sorted(result.runs, key=lambda v: [int(p) for p in v.split(".") if p.isdigit()])]
    comparison = comparison_of(registry, bundle, tested, baseline=good)
    return result, comparison


# ------------------------------------------------------------------------------------------------------ sharing


def push(ref: str, to: str, *, store: str | None = None, progress: Callable[[int, int], None] | None = None,
         jobs: int | None = None):
    """Copy a bundle of `store` to the store at `to` (sending only the blobs it lacks); a TransferResult."""
    from .bundle import sharing

    return sharing.push(ref, to, store=store, progress=progress, jobs=jobs)


def pull(url: str, *, store: str | None = None, progress: Callable[[int, int], None] | None = None,
         jobs: int | None = None):
    """Copy the bundle at `url` (gs://BUCKET/PREFIX/NAME@V, a .zip...) into `store`; a TransferResult."""
    from .bundle import sharing

    return sharing.pull(url, store=store, progress=progress, jobs=jobs)


def copy(src_ref: str, dest_url: str, *, store: str | None = None,
         progress: Callable[[int, int], None] | None = None, jobs: int | None = None):
    """Copy a bundle between any two stores (a .zip may be the source); a TransferResult."""
    from .bundle import sharing

    return sharing.copy(src_ref, dest_url, store=store, progress=progress, jobs=jobs)


def share_info(ref: str, *, store: str | None = None, jax_versions: Sequence[str] = ()) -> dict:
    """URLs of a bundle and a Markdown snippet for a bug report (with the command that replays it)."""
    from .bundle import sharing
    from .render.sharing import markdown_snippet

    info = sharing.share_info(ref, store=store, jax_versions=jax_versions)
    return {**info, "markdown": markdown_snippet(info)}


def gc(store: str | None = None, *, delete: bool = False) -> dict:
    """Unreferenced blobs of a store and their bytes; deleted only with delete=True."""
    from .bundle import sharing

    return sharing.gc(store, delete=delete)


def cache_info() -> dict:
    """Where the local cache of remote blobs is, how many blobs and bytes it holds, and its limit."""
    from .bundle import sharing

    return sharing.cache_info()


def clear_cache() -> dict:
    from .bundle import sharing

    return sharing.cache_clear()
