"""The Python API: what the CLI and users call. Each function resolves stores and refs, then delegates."""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..analysis.stored_runs import select_runs
from ..bundle.model import run_label
from ..bundle.registry import Bundle, BundleRef, Registry, split_store_ref
from ..capture.export import export_function, load_exported
from ..capture.files import load_npz as load_npz  # re-exported: the inputs of pack --inputs
from ..capture.files import read_user_file
from ..capture.pack import pack as _pack
from ..capture.pack_options import PackOptions
from ..config import DEFAULT_WARMUP, REFERENCE_REPEAT
from ..envs.env_config import EnvConfig
from ..errors import UsageError
from ..logs import Status
from ..run.compare import comparison_of
from ..run.contenders import contenders_from
from ..run.execution import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S  # re-exported: the CLI's default
from ..run.replay import replay as _replay
from ..run.replay_options import ReplayOptions, check_timing, replay_options
from ..run.replay_options import parse_pin as parse_pin  # re-exported: --pin's parser
from ..run.schedule import DEFAULT_STEPS as DEFAULT_STEPS  # re-exported: the CLI's default
from .commits import COMMIT_OPTIONS as COMMIT_OPTIONS
from .commits import bisect_commits as bisect_commits
from .environments import add_commit_environment as add_commit_environment
from .environments import add_environments as add_environments

# the investigations (isolate, minimize, bisect, explain) and what they share with this module: re-exported here
from .investigations import BISECT_OPTIONS as BISECT_OPTIONS
from .investigations import EXPLAIN_OPTIONS as EXPLAIN_OPTIONS
from .investigations import ISOLATE_OPTIONS as ISOLATE_OPTIONS
from .investigations import bisect as bisect
from .investigations import explain as explain
from .investigations import investigate as investigate
from .investigations import isolate as isolate
from .investigations import minimize as minimize
from .resolve import changes as changes
from .resolve import environment_manager as environment_manager
from .resolve import releases_of, resolve


def open_registry(store: str | os.PathLike | None = None) -> Registry:
    """The registry at `store` (a URL or path); None means $REPROBUNDLE_STORE or the default local folder."""
    return Registry.open(store)


def pack(fn: Callable, *args: Any, name: str, store: str | None = None, kwargs: dict | None = None,
         static: Sequence[int | str] = (), source: str | None = None, progress: Callable[[str], None] | None = None,
         platforms: Sequence[str] | str | None = None, program=None, script: str | None = None,
         options: PackOptions | None = None, **settings: Any) -> BundleRef:
    """Capture `fn(*args, **kwargs)` with jax.export, run it once as the reference, and publish a bundle.

    `fn` is any function JAX can jit (a plain function, a `jax.jit`, `nnx.jit` or `eqx.filter_jit` object) or a
    `jax.export.Exported` (symbolic shapes included, with concrete arguments). The arguments are any pytrees:
    array leaves are the bundle's inputs, other leaves (and the arguments `static` names, by index or name) are
    baked into the export and recorded. Returns the new bundle's reference (name, version, bundle id, URL).
    `platforms` ("cuda,cpu" or a list): lower one artifact for each, on any machine; the reference runs on the first
    accelerator of them this process's jax has, else the CPU (default: the default backend's platform).
    `progress` gets a line as each phase starts (export, inputs, reference run, publish). `script` ("train.py:make",
    default factory `make`): the program a replay can retrace (`replay --retrace`), a script whose factory returns
    this call as `(fn, args)` or `(fn, args, kwargs)`; its source, its local modules and its packages are stored,
    nothing of it runs here (capture/script.py). `program` (capture/source.py's Program): the same, already collected.

    How: `options` (capture/pack_options.py's PackOptions), or `settings` naming its fields: description, labels,
    synthetic_inputs, seed, warmup, repeat (the reference run's timing), dump, profile, timeout_s (bounds the
    reference run's worker).
    """
    pack_options = _pack_options(options, settings, name=name, store=store)
    if script is not None:
        from ..capture.script import script_program

        if program is not None:
            raise UsageError("pack takes script or program, not both")
        program = script_program(script, static)
    if progress:
        progress(Status("exporting the function with jax.export", "export"))
    exported, leaves = export_function(fn, args, kwargs, static, platforms)
    return _pack(open_registry(store), exported, None if pack_options.synthetic_inputs else leaves, pack_options,
                 source=source, progress=progress, program=program)


def _pack_options(options: PackOptions | None, settings: dict[str, Any], **named: Any) -> PackOptions:
    """The checked PackOptions of a Python API call: `options`, or the keyword `settings`; `named` (name, store)
    the call's own arguments."""
    if options is not None and settings:
        raise UsageError(f"give options or settings, not both ({', '.join(sorted(settings))})")
    return PackOptions.of(options, **named, **settings).checked()


def _pack_loaded(fn, inputs, options: PackOptions, *, source: str | None = None,
                 progress: Callable[[str], None] | None = None) -> BundleRef:
    leaves = None
    if not options.synthetic_inputs:
        if inputs is None:
            raise UsageError("no inputs given", hint="pass --inputs FILE.npz or --synthetic-inputs")
        leaves = load_npz(inputs, fn.fields["in_avals"]) if isinstance(inputs, (str, Path)) else list(inputs)
    return _pack(open_registry(options.store), fn, leaves, options, source=source, progress=progress)


def pack_exported(exported: bytes | str | Path, inputs: str | Path | Sequence[np.ndarray] | None = None, *,
                  name: str, store: str | None = None, jax_version: str | None = None, python: str | None = None,
                  progress: Callable[[str], None] | None = None, platforms: Sequence[str] | str | None = None,
                  options: PackOptions | None = None, **settings: Any) -> BundleRef:
    """Package a `jax.export` artifact someone already serialized (bytes or a file) with its inputs. `options` or
    `settings`: as pack's.

    With `jax_version`, the artifact is read and the reference made by that JAX release, in its environment,
    so the bundle is exactly what that release produces; the host's JAX never reads the artifact.
    """
    pack_options = _pack_options(options, settings, name=name, store=store)
    data = bytes(exported) if isinstance(exported, (bytes, bytearray)) else read_user_file(exported, "exported artifact")
    if jax_version and jax_version != "installed":
        from ..capture.pack import pack_serialized_in

        if pack_options.synthetic_inputs or inputs is None:
            raise UsageError("packing on another JAX version needs real inputs", hint="pass --inputs FILE.npz")
        leaves = load_npz(inputs) if isinstance(inputs, (str, Path)) else list(inputs)
        env = environment_manager(EnvConfig.of(python=python)).ensure(jax_version, progress=progress)
        return pack_serialized_in(open_registry(store), data, leaves, pack_options,
                                  python=str(env.python_executable), progress=progress)
    loaded = load_exported(data)
    if platforms is not None:
        from ..capture.export import lowering_platforms

        if lowering_platforms(platforms) != tuple(loaded.fields["platforms"]):
            raise UsageError(f"this artifact was exported for {','.join(loaded.fields['platforms'])}: "
                             "--platforms cannot change that",
                             hint="export it again with jax.export.export(f, platforms=(...)), or drop --platforms")
    return _pack_loaded(loaded, inputs, pack_options, progress=progress)


def pack_stablehlo(module: str | Path, inputs: str | Path | Sequence[np.ndarray] | None = None, *, name: str,
                   store: str | None = None, progress: Callable[[str], None] | None = None,
                   platforms: Sequence[str] | str | None = None, options: PackOptions | None = None,
                   **settings: Any) -> BundleRef:
    """Package a raw StableHLO module (MLIR text, such as an IR dump's module.mlir) with its inputs. `options` or
    `settings`: as pack's.

    The module's public @main is called with the inputs as its arguments, in order (the .npz keys arr_0, arr_1,
    ... as numpy.savez(path, *arrays) writes them), on one device, without effects.
    """
    from ..capture.export import load_stablehlo, lowering_platforms, stablehlo_signature

    pack_options = _pack_options(options, settings, name=name, store=store)
    platform = None
    if platforms is not None:  # the one platform the module is for
        names = lowering_platforms(platforms) or ()
        if len(names) != 1:
            raise UsageError("a StableHLO module is for one platform", hint="give one: --platforms cuda")
        platform = names[0]

    text = read_user_file(module, "StableHLO module").decode("utf-8", "replace")
    shapes = None
    if not pack_options.synthetic_inputs and inputs is not None:  # dynamic dimensions take the inputs' sizes
        in_avals = stablehlo_signature(text)[0]
        arrays = load_npz(inputs, in_avals) if isinstance(inputs, (str, Path)) else list(inputs)
        inputs, shapes = arrays, [np.shape(x) for x in arrays]
    return _pack_loaded(load_stablehlo(text, shapes, platform), inputs, pack_options, source=text, progress=progress)


def pack_script(script: str, *, name: str, store: str | None = None, static: Sequence[int | str] = (),
                progress: Callable[[str], None] | None = None, platforms: Sequence[str] | str | None = None,
                options: PackOptions | None = None, **settings: Any) -> BundleRef:
    """Pack what a script's factory returns: `(fn, args)` or `(fn, args, kwargs)`, with the program (the script, the
    local modules it imports, its packages: capture/source.py) so that a replay can retrace it. `options` or
    `settings`: as pack's."""
    from ..capture.export import keep_host_off_device
    from ..capture.script import call_factory, split_script
    from ..capture.source import collect_program

    pack_options = _pack_options(options, settings, name=name, store=store)  # checked before the script runs
    # This process never needs a GPU's memory held: the reference run is another process, which does.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # nor a TPU's chip, which one process at a time may hold: it lowers for the chip, the worker runs there.
    kept_off = keep_host_off_device()
    if kept_off and platforms is None:
        platforms = list(kept_off)
    if progress:
        progress(Status(f"running {script} to build the call", "script"))
    from ..capture.guard import user_code

    with user_code(f"the script {script}"):  # its sys.exit or os._exit is a ScriptError, not pack's exit
        source, fn, args, kwargs = call_factory(script)
        program = collect_program(*split_script(script), static or ())
        return pack(fn, *args, name=name, store=store, kwargs=kwargs, static=static, source=source, program=program,
                    progress=progress, platforms=platforms, options=pack_options)


def capture_program(command: Sequence[str], *, match: str | None = None, call: int | None = None,
                    top: int | None = None, all_signatures: bool = False, listing: bool = False,
                    name: str | None = None, store: str | None = None, description: str = "",
                    labels: dict[str, str] | None = None,
                    warmup: int = DEFAULT_WARMUP, repeat: int = REFERENCE_REPEAT, dump: bool = True,
                    profile: bool = True, progress: Callable[[str], None] | None = None, jax: str | None = None,
                    env_dir: str | None = None):
    """Run an unmodified program (`["python", "train.py", ...]`) and list or pack the jitted computations it runs.

    `jax` ("0.7.2"): the program runs in the environment of that release instead, with the third-party packages its
    script imports (those installed here, resolved compatible with that jax), so its bundles are traced by it.

    `listing`: time every call and capture nothing. Otherwise the functions whose name matches `match` (a regular
    expression), or the `top` K most expensive ones, are packed at their `call`-th call (per signature; default:
    the first call after the one that compiled, or the only call) into `store`. Returns a CaptureResult
    (computations, captures with their refs, failures, the program's exit code).
    """
    from ..capture.program_launch import capture_program as _capture_program
    from ..capture.staging import CaptureOptions

    check_timing(warmup, repeat)
    if name is not None:
        from ..bundle import manifest as mf

        mf.check_name(name)
    options = CaptureOptions(match=match, call=call, top=top, all_signatures=all_signatures, listing=listing)
    pack_options = PackOptions.of(store=store, name=name, description=description, labels=labels, warmup=warmup,
                                  repeat=repeat, dump=dump, profile=profile)
    command = list(command)
    if jax is not None:
        command = _in_release(command, jax, env_dir, progress)
    return _capture_program(command, options.check(), pack_options, progress=progress)


def _in_release(command: list[str], version: str, env_dir: str | None, progress) -> list[str]:
    """`python prog.py ...` with the interpreter of jax `version`'s environment (plus the packages prog.py imports)."""
    from ..capture.script import DEFAULT_FACTORY
    from ..capture.source import collect_program
    from ..envs.program import program_environment, undeclared_export_needs

    if not command or not (Path(command[0]).name.startswith("python") or command[0] == sys.executable):
        raise UsageError("capture --jax runs the program with another interpreter, so it must start with python",
                         hint="reprobundle capture --jax 0.7.2 -- python train.py")
    script = next((Path(a) for a in command[1:] if a.endswith(".py") and Path(a).is_file()), None)
    packages = collect_program(script, DEFAULT_FACTORY).packages if script is not None else {}
    manager = environment_manager(EnvConfig.of(env_dir))
    say = progress and (lambda line: progress(Status(line, "environment")))
    base = manager.ensure(version, progress=say)
    python = base.python_executable
    packages = {**packages, **undeclared_export_needs(base)}
    if packages:
        python = program_environment(base, manager.root, packages, say=say).python_executable
    return [str(python), *command[1:]]


@dataclass(frozen=True)
class ReplayResult:
    """The bundle that was replayed and one run record per requested version, in order."""

    registry: Registry
    bundle: Bundle
    runs: list[dict]
    origin: tuple[Registry, Bundle] | None = None  # where the ref resolved (a zip, an https store), if not `registry`
    replay_args: tuple[str, ...] = ()  # the non-default timing options, as the replay command's flags

    @property
    def run(self) -> dict:
        return self.runs[0]


def replay(ref: str, versions: Sequence[str] = ("installed",), *, store: str | None = None,
           options: ReplayOptions | None = None, python: str | None = None, env_dir: str | None = None,
           progress: Callable[[str], None] | None = None, index_url: str | None = None, mode: str = "frozen",
           variants: Sequence[str] = (), **settings: Any) -> ReplayResult:
    """Replay a bundle on each JAX version; the run records are also stored in the registry beside the bundle.

    A version is a release, "installed", "latest", a nightly ("nightly:2025-10-03", "0.8.0.dev20251003", from
    `index_url`, else $REPROBUNDLE_NIGHTLY_INDEX, else JAX's nightly index) or the path of a Python interpreter or
    environment whose JAX is used as it is (see envs/manager.py).

    `variants` ("0.8.0:XLA_FLAGS=--xla_disable_hlo_passes=fusion-wrapper") add contenders: a release under settings
    applied to its workers only, timed in the same rounds (run/contenders.py).

    How: `options` (a ReplayOptions), or `settings` naming its fields: warmup, repeat, rounds, timeout_s, dump,
    profile, memory_limit_bytes, shapes, platform, pin, max_time_s (run/replay_options.py holds their defaults).
    Several versions are timed in as many rounds as settle their verdicts (at most 32) unless `rounds` fixes them;
    `max_time_s` bounds that timing. `pin` ("1", "0-3", "auto" for the last CPU this process may use, or CPU ids)
    runs every version's worker on those CPUs with as many XLA threads: steadier, less realistic timings.

    A bundle in a read-only store (a .zip) is first copied (checked whole first) into `store` when the ref names
    its own store (`replay X.zip --store DIR`), else into the default local store; its runs go there.
    `shapes` ({"b": 16} or ["b=16"]) replays a shape-polymorphic bundle at other sizes, on synthetic inputs.
    `platform` ("cpu", "cuda", "cuda12", "cuda13", "rocm", "tpu"): where every version runs (default: the bundle's
    first accelerator platform this machine has, else the CPU; see envs/platforms.py).
    `mode`: "frozen" replays the stored program; "retrace" runs the bundle's program (its script's factory) in each
    version's environment and lowers it there; "both" times a frozen and a retraced contender per version. A retrace
    environment holds the program's third-party packages resolved compatible with that jax, unless the option
    `retrace_packages` (["flax==0.10.4"]) pins them.
    """
    contenders = [c for v in versions for c in contenders_from([v], (), mode)] + contenders_from((), variants, mode)
    from ..bundle.transfer import copy_bundle, prefetch

    options = replay_options(options, settings)
    from ..envs.versions import check_jax_requests  # before anything runs: no error run for a version that cannot be

    env = EnvConfig.of(env_dir, python, index_url)
    check_jax_requests(versions, releases_of(env))
    registry, bundle = resolve(ref, store)
    origin = (registry, bundle)
    if registry.store.read_only:
        if progress:
            progress(Status(f"copying {bundle.ref} from {registry.url} into the local store", "fetch"))
        local = open_registry(store if store is not None and split_store_ref(ref)[0] is not None else None)
        copied = copy_bundle(registry, bundle, local).ref
        registry, bundle = local, local.load(copied.name, copied.version)

    prefetch(registry, bundle, progress and (lambda line: progress(Status(line, "fetch"))))
    runs = _replay(registry, bundle, contenders, options=options, env_manager=environment_manager(env),
                   progress=progress)
    index_args = ("--index-url", index_url) if index_url else ()
    return ReplayResult(registry, bundle, runs, origin=origin,
                        replay_args=(*options.args(max_time=False), *index_args))


def replay_sizes(ref: str, versions: Sequence[str], shapes: Sequence[str], *, baseline: str | None = None,
                 options: ReplayOptions | None = None, **replay_kwargs: Any) -> dict:
    """One paired replay per size in `shapes` (`["seq=128,256"]`): {"bundle", "baseline", "sizes": [...]}."""
    from dataclasses import fields

    from ..bundle.dims import parse_size_lists
    from ..render.sizes import size_rows

    names = {f.name for f in fields(ReplayOptions)}
    settings = {k: v for k, v in replay_kwargs.items() if k in names}
    kwargs = {k: v for k, v in replay_kwargs.items() if k not in names}
    base_options = replay_options(options, settings)
    sizes: list[dict[str, Any]] = []
    base = baseline
    for bindings in parse_size_lists(shapes):
        result = replay(ref, versions, options=replace(base_options, shapes=bindings), **kwargs)
        comparison = replay_comparison(result, base)
        base = comparison["baseline"]
        sizes.append({"shape": ", ".join(f"{k}={v}" for k, v in sorted(bindings.items())), "bindings": bindings,
                      "comparison": comparison, "rows": size_rows(comparison)})
    return {"bundle": sizes[0]["comparison"]["bundle"] if sizes else ref, "baseline": base, "sizes": sizes}


def replay_comparison(result: ReplayResult, baseline: str | None = None) -> dict:
    """The comparison of a replay's runs, with the Reproduce block: where the bundle is (the zip or store the ref
    named) and the exact command that replays it on the same versions with the same timing options."""
    return comparison_of(result.registry, result.bundle, result.runs, baseline, origin=result.origin,
                         replay_args=result.replay_args)


def write_attachment(comparison: dict, folder: str | Path, ref: str, store: str | None = None) -> Path | None:
    """The zip a report's Reproduce block asks to attach (a bundle of a local store, or the zip `ref` named),
    exported from `ref` into `folder` unless it is there already; None when the bundle is reachable by URL."""
    rep = comparison.get("reproduce") or {}
    if not rep.get("attach"):
        return None
    path = Path(folder) / rep["attach"]
    if not path.exists():
        from ..investigate.report.reproducer_zip import export_reproducer_zip

        registry, bundle = resolve(ref, store)
        export_reproducer_zip(registry, bundle, path)
    return path


def compare(ref: str, versions: Sequence[str] | None = None, *, store: str | None = None,
            baseline: str | None = None) -> dict:
    """Compare the stored runs of a bundle. It prefers runs timed together: the latest replay that holds every
    requested version (default: the latest replay of several versions), else the latest run of each version, shown
    as not comparable. The comparison says which runs it used ("runs_used", "selection")."""
    registry, bundle = resolve(ref, store)
    stored = registry.runs(bundle.ref.bundle_id)  # oldest first
    if not stored:
        raise UsageError(f"{bundle.ref} has no stored runs", hint=f"reprobundle replay {bundle.ref} --jax VERSION")
    chosen, selection = select_runs(stored, list(versions) if versions else None)
    missing = [v for v in versions or [] if not any(run_label(r) == v for r in chosen)]
    if missing:
        import re

        from ..text import did_you_mean

        # a label of a version that has stored runs, misspelled ('0.5.0-retraced'): the labels of that version
        version = re.split(r"[\s\[-]", missing[0].strip(), maxsplit=1)[0]
        labels = list(dict.fromkeys(run_label(r) for r in stored if run_label(r).split(" ")[0] == version))
        hint = did_you_mean(missing[0], labels, n=2, cutoff=0.5) or \
            f"replay it first: reprobundle replay {bundle.ref} --jax {missing[0]}"
        raise UsageError(f"no stored run of {bundle.ref} on jax {', '.join(missing)}", hint=hint)
    comparison = comparison_of(registry, bundle, chosen, baseline)
    comparison["selection"] = selection
    return comparison


def compare_bundles(ref_a: str, ref_b: str, versions: Sequence[str] = (), *, store: str | None = None,
                    replay: bool = False, options: ReplayOptions | None = None, python: str | None = None,
                    env_dir: str | None = None, progress: Callable[[str], None] | None = None,
                    **settings: Any) -> dict:
    """Two bundles of one program, each traced by its own release (`capture --jax 0.7.2`, then `--jax 0.8.0`): the
    lowering diff between their StableHLO and their timings side by side (analysis/bundle_pair.py).

    With `replay`, both are first replayed frozen on `versions` (default: the release that traced each) in one
    interleaved measurement, so each row gets a paired verdict: on one release the difference is JAX's lowering
    alone (the same XLA compiles both), and each on the release that traced it is the whole upgrade. Their runs are
    stored like any replay's (both bundles must be in one writable store). `options` or `settings`: replay's."""
    from ..analysis.bundle_pair import compare_pair
    from ..run.compare import pair_side

    registry, a = resolve(ref_a, store)
    registry_b, b = resolve(ref_b, store)
    if a.ref.bundle_id == b.ref.bundle_id:
        raise UsageError(f"{ref_a} and {ref_b} are the same bundle", hint="compare two captures of one program")
    if replay:
        if registry_b.url != registry.url or registry.store.read_only:
            raise UsageError(f"compare --replay times {ref_a} and {ref_b} together, so they must be in one writable "
                             "store", hint=f"pull them into it first: reprobundle pull {ref_b}")
        _replay_pair(registry, a, b, versions, replay_options(options, settings), EnvConfig.of(env_dir, python),
                     progress)
    return compare_pair(pair_side(registry, a), pair_side(registry_b, b))


def _replay_pair(registry: Registry, a: Bundle, b: Bundle, versions: Sequence[str], options: ReplayOptions,
                 env: EnvConfig, progress) -> None:
    from importlib.metadata import PackageNotFoundError, version

    from ..analysis.bundle_pair import traced_by
    from ..bundle.transfer import prefetch
    from ..run.replay import replay_pair

    try:
        here = version("jax")
    except PackageNotFoundError:
        here = None
    traced = [traced_by(x.manifest) for x in (a, b)]
    # the release this interpreter has is replayed here, as `installed`, rather than in an environment made for it
    wanted = list(dict.fromkeys(versions or ["installed" if v == here else v for v in traced if v != "?"]))
    if not wanted:
        raise UsageError("neither bundle says which release traced it", hint="name the releases: --jax 0.7.2 --jax 0.8.0")
    from ..envs.versions import check_jax_requests  # before anything runs: a typo is one error, not a failed row

    check_jax_requests(wanted, releases_of(env))
    for bundle in (a, b):
        prefetch(registry, bundle, progress and (lambda line: progress(Status(line, "fetch"))))
    replay_pair(registry, [a, b], contenders_from(wanted, (), "frozen"), options, env_manager=environment_manager(env),
                progress=progress)


def sweep(selection: Sequence[str] = (), baseline: str = "", candidate: str | Sequence[str] = "", *,
          store: str | None = None, releases: str | None = None,
          labels: dict[str, str] | None = None, rerun: bool = False, executor=None, ray_address: str | None = None,
          options: ReplayOptions | None = None, env_dir: str | None = None, python: str | None = None,
          progress: Callable[[str], None] | None = None, index_url: str | None = None, mode: str = "frozen",
          **settings: Any) -> dict:
    """Replay every selected bundle of a registry on `baseline` and `candidate` timed together (replay's paired
    rounds and adaptive budget), storing the runs there, and sum them up. `candidate` may be several versions, or
    `releases` ("0.7.2..0.9.2") every release in a range: each bundle is then timed on the baseline and all of them
    together, and its result has a verdict per candidate (`candidates`; the top-level verdict is the worst one's). `options` or
    `settings`: replay's (warmup, repeat, rounds, max_time_s, pin, platform, timeout_s).

    `selection`: refs and name globs (`attn*`; the newest version of each name unless one is given; nothing: every
    bundle), kept to those carrying every `labels` key=value. A bundle that already has a replay of both versions
    with the same timing options is not replayed again unless `rerun` (see fleet/sweep.py's resume rule): its stored
    result is shown, marked "stored". The tasks run on `executor`, by default the local one (one after another in
    this process) or, with `ray_address`, a Ray cluster (the reprobundle[ray] extra).

    Returns plain data: {"format", "version", "store", "baseline", "candidate", "jax" (the two as concrete
    versions: "installed" is this host's), "executor", "options", "rerun", "results": one per bundle in selection
    order (fleet/executor.py's TaskResult keys, plus "reproduce": the Reproduce block), "counts": {"total", "slower",
    "faster", "same", "unjudged", "mismatch", "failed", "stored"}}."""
    from ..bundle.bundle_selection import select_bundles
    from ..fleet import sweep as sweeping
    from ..fleet.connect import executor_for
    from ..fleet.executor import LocalExecutor, ReplayTask, TaskResult
    from ..render.sweep import outcome_text
    from ..run.spent import Ledger

    baseline, candidates = sweeping.sweep_versions(baseline, candidate, releases,
                                                   lambda: environment_manager().available_versions())
    options = replay_options(options, settings)
    registry = open_registry(store)
    if registry.store.read_only:
        raise UsageError(f"{registry.url} is read-only: a sweep stores its runs in the registry it replays",
                         hint="copy the bundles into a writable store first (reprobundle pull / copy)")
    bundles = select_bundles(registry, list(selection), labels)
    executor = executor or executor_for(ray_address)
    if mode not in ("frozen", "retrace"):
        raise UsageError(f"a sweep runs one mode at a time, not {mode!r}", hint="use --retrace or leave it out")
    versions = (baseline, *candidates)
    env = EnvConfig.of(env_dir, python, index_url)
    from ..envs.versions import check_jax_requests  # before anything runs: a typo is one error, not N failed rows

    check_jax_requests(versions, releases_of(env))
    template = ReplayTask(registry.url, "", versions, options.for_sweep(), env, mode)
    fn, fn_many = sweeping.run_replay_task, sweeping.run_replay_tasks
    if isinstance(executor, LocalExecutor) and progress is not None:
        def inner(line: str) -> None:  # the replay's own lines, without its round counts (the ETA is the sweep's)
            progress(Status(str(line), getattr(line, "phase", "") or "replay"))

        fn = functools.partial(sweeping.run_replay_task, progress=inner)
        fn_many = functools.partial(sweeping.run_replay_tasks, progress=inner)

    def report(done: int, total: int, result: TaskResult | None) -> None:
        if progress is None:
            return
        if result is None:
            stored = len(bundles) - total
            progress(Status(f"replaying {total} bundle(s) on jax {', '.join(versions[:-1])} and {versions[-1]} "
                            f"({executor.name} "
                            f"executor)" + (f"; {stored} stored from an earlier sweep" if stored else ""),
                            "sweep", 0, total))
        elif result["stored"]:
            progress(Status(f"{result['ref']}: {outcome_text(result)} (stored)", "sweep"))
        else:
            progress(Status(f"{result['ref']}: {outcome_text(result)}", "sweep", done, total))

    ledger = Ledger()
    results = sweeping.sweep(registry, bundles, template, executor=executor, rerun=rerun, fn=fn, fn_many=fn_many,
                             progress=report)
    out = sweeping.sweep_report(registry, bundles, results, template, executor_name=executor.name,
                                rerun=rerun, extra_args=options.args() + (["--index-url", index_url] if index_url else [])
                                + (["--mode", mode] if mode != "frozen" else []))
    for result in results:  # each task replayed now is a probe; a stored one cost nothing
        if not result["stored"]:
            ledger.record(result["ref"], result["versions"], result["wall_s"], result.get("spent") or {})
    out["spent"] = ledger.as_dict()
    return out


def history(selection: Sequence[str] = (), *, store: str | None = None, labels: dict[str, str] | None = None,
            baseline: str | None = None) -> dict:
    """The registry over time from its stored runs only (analysis/history.py): the selected bundles (as sweep's)
    x the releases their runs were made on, each cell against `baseline` (default: the oldest). Plain data."""
    from ..analysis.history import build_history
    from ..bundle.bundle_selection import select_bundles

    registry = open_registry(store)
    bundles = select_bundles(registry, list(selection), labels)
    identities = [({"ref": str(b.ref), "name": b.ref.name, "version": b.ref.version, "bundle_id": b.ref.bundle_id},
                   registry.runs(b.ref.bundle_id)) for b in bundles]
    try:
        data = build_history(identities, baseline)
    except ValueError as e:
        raise UsageError(str(e), hint="--baseline names a release some stored run was made on") from None
    return {**data, "store": registry.url}


def history_reports(data: dict, folder: str | Path, *, store: str | None = None) -> dict[tuple[str, str], str]:
    """Each cell of `data` timed with the baseline: its replay's report (HTML) written under `folder`; returns the
    files by (bundle id, column), relative to `folder`'s parent, for the page's links (render/history.py)."""
    from ..render.history import cell_reports

    return cell_reports(open_registry(store or data.get("store")), data, Path(folder))


# ------------------------------------------------------------------------------------------------------ sharing


def push(ref: str, to: str, *, store: str | None = None, progress: Callable[[int, int], None] | None = None,
         jobs: int | None = None, runs: bool = True):
    """Copy a bundle of `store` to the store at `to` (sending only the blobs it lacks), with its run records unless
    `runs` is False (so a shared registry shows the history); a TransferResult."""
    from ..bundle import sharing

    return sharing.push(ref, to, store=store, progress=progress, jobs=jobs, runs=runs)


def pull(url: str, *, store: str | None = None, progress: Callable[[int, int], None] | None = None,
         jobs: int | None = None, runs: bool = True):
    """Copy the bundle at `url` (gs://BUCKET/PREFIX/NAME@V, https://..., a .zip...) into `store`, with its run
    records unless `runs` is False; a TransferResult."""
    from ..bundle import sharing

    return sharing.pull(url, store=store, progress=progress, jobs=jobs, runs=runs)


def copy(src_ref: str, dest_url: str, *, store: str | None = None,
         progress: Callable[[int, int], None] | None = None, jobs: int | None = None, runs: bool = True):
    """Copy a bundle between any two stores (a .zip may be the source), with its runs; a TransferResult."""
    from ..bundle import sharing

    return sharing.copy(src_ref, dest_url, store=store, progress=progress, jobs=jobs, runs=runs)


def share_info(ref: str, *, store: str | None = None, jax_versions: Sequence[str] = ()) -> dict:
    """URLs of a bundle and a Markdown snippet for a bug report (with the command that replays it)."""
    from ..bundle import sharing
    from ..render.sharing import with_snippet

    return with_snippet(sharing.share_info(ref, store=store, jax_versions=jax_versions))


def gc(store: str | None = None, *, delete: bool = False, grace_s: float | None = None) -> dict:
    """Unreferenced blobs of a store and their bytes; deleted only with delete=True, and only once unused for the
    grace period (`grace_s` seconds; None: $REPROBUNDLE_GC_GRACE or 24 h) and held by no running writer."""
    from ..bundle import sharing

    return sharing.gc(store, delete=delete, grace_s=grace_s)


def cache_info() -> dict:
    """Where the local cache of remote blobs is, how many blobs and bytes it holds, and its limit."""
    from ..bundle import sharing

    return sharing.cache_info()


def clear_cache() -> dict:
    from ..bundle import sharing

    return sharing.cache_clear()



