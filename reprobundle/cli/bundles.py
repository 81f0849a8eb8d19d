"""Commands on bundles: pack, capture, ls, show, verify, tag, export. The library loads inside each command (only
what it uses): loading this module must cost nothing beyond typer (tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..config import DEFAULT_TIMEOUT_S, DEFAULT_WARMUP, REFERENCE_REPEAT
from ..errors import (
    FormatError,
    ReplayError,
    UsageError,
)
from .common import (
    JsonOpt,
    StoreOpt,
    app,
    emit,
    parse_labels,
    progress_sink,
)


@app.command()
def pack(
    script: Optional[str] = typer.Argument(None, help="SCRIPT.py[:FACTORY]; FACTORY() returns (fn, args) or "
                                                      "(fn, args, kwargs); default factory: make"),
    name: str = typer.Option(..., "--name", help="Bundle name."),
    exported: Optional[Path] = typer.Option(None, "--exported", help="A serialized jax.export artifact."),
    stablehlo: Optional[Path] = typer.Option(None, "--stablehlo", help="A StableHLO module (MLIR text); its @main "
                                                                      "is called with the inputs in order."),
    inputs: Optional[Path] = typer.Option(None, "--inputs", help=".npz of the flat input arrays, in order "
                                                                "(numpy.savez(path, *arrays)); with --exported or --stablehlo."),
    synthetic_inputs: bool = typer.Option(False, "--synthetic-inputs",
                                          help="Store shape, dtype and seed instead of the data."),
    seed: int = typer.Option(0, "--seed", help="Seed of synthetic inputs."),
    description: str = typer.Option("", "--description"),
    label: List[str] = typer.Option([], "--label", help="KEY=VALUE, repeatable."),
    warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(REFERENCE_REPEAT, "--repeat", help="Timed calls of the reference run."),
    no_dump: bool = typer.Option(False, "--no-dump", help="Leave out the XLA dump folder."),
    no_profile: bool = typer.Option(False, "--no-profile", help="No profiler trace in the reference run."),
    jax_version: Optional[str] = typer.Option(None, "--jax", help="With --exported: read the artifact and make the "
                                                                 "reference on this JAX release (its own environment)."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work the reference run's worker gets before it is killed."),
    platforms: Optional[str] = typer.Option(None, "--platforms", help="Lower for these platforms, comma-separated "
                                                                     "(cpu, cuda, rocm, tpu; any machine can), e.g. "
                                                                     "cuda,cpu: replays then run on either. Default: "
                                                                     "this machine's."),
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Capture a function into a new bundle version."""
    from ..bundle import manifest as mf

    mf.check_name(name)  # before any work (loading the library included): a bad name is refused at once
    from .. import api
    from ..render import listing as report

    options = dict(name=name, store=store, synthetic_inputs=synthetic_inputs, seed=seed, description=description,
                   labels=parse_labels(label), warmup=warmup, repeat=repeat, dump=not no_dump, profile=not no_profile,
                   timeout_s=timeout, progress=progress_sink())
    if platforms is not None:
        options["platforms"] = platforms
        if jax_version:
            raise UsageError("--platforms does not go with --jax", hint="the artifact's platforms are fixed already")
    sources = [x for x in (script, exported, stablehlo) if x is not None]
    if len(sources) != 1:
        raise UsageError("give exactly one of SCRIPT.py[:FACTORY], --exported FILE, --stablehlo FILE")
    if jax_version and exported is None:
        raise UsageError("--jax goes with --exported", hint="a script or module is exported by the installed JAX")
    if exported is not None:
        ref = api.pack_exported(exported, inputs, jax_version=jax_version, **options)
    elif stablehlo is not None:
        ref = api.pack_stablehlo(stablehlo, inputs, **options)
    else:
        assert script is not None  # exactly one source was given
        if inputs is not None:
            raise UsageError("--inputs goes with --exported or --stablehlo",
                             hint="a script's factory returns its own arguments")
        ref = api.pack_script(script, **options)
    emit(as_json, report.ref_data(ref), f"packed {ref}  {ref.bundle_id}\n{ref.url}")


@app.command(context_settings={"allow_interspersed_args": False})
def capture(
    command: Optional[List[str]] = typer.Argument(None, metavar="-- PROGRAM [ARGS]...",
                                                  help="The program, unmodified, e.g. -- python train.py --steps 20."),
    listing: bool = typer.Option(False, "--list", help="List every jitted computation the program ran (calls, "
                                                       "compile and run times, measured with block_until_ready "
                                                       "after each call), and capture nothing."),
    match: Optional[str] = typer.Option(None, "--match", help="Capture the jitted functions whose qualified or jit "
                                                              "name matches this regular expression."),
    call: Optional[int] = typer.Option(None, "--call", help="Capture at this call of the function, counted per "
                                                            "signature (1: the call that compiled it). Default: the "
                                                            "first call after that one, or the only call."),
    top: Optional[int] = typer.Option(None, "--top", help="Capture the K computations that took the most run time "
                                                          "(every call is then timed with block_until_ready)."),
    all_signatures: bool = typer.Option(False, "--all-signatures", help="Capture each distinct signature of a "
                                                                        "matching function, not only its first."),
    name: Optional[str] = typer.Option(None, "--name", help="Bundle name (a prefix when several are captured; "
                                                            "default: the function's name)."),
    description: str = typer.Option("", "--description"),
    label: List[str] = typer.Option([], "--label", help="KEY=VALUE, repeatable."),
    warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(REFERENCE_REPEAT, "--repeat", help="Timed calls of each bundle's reference run."),
    no_dump: bool = typer.Option(False, "--no-dump", help="Leave out the XLA dump folder."),
    no_profile: bool = typer.Option(False, "--no-profile", help="No profiler trace in the reference run."),
    store: Optional[str] = StoreOpt,
    jax_version: Optional[str] = typer.Option(None, "--jax", help="Run the program in the environment of this JAX "
                                                                 "release (with the packages it imports, resolved "
                                                                 "compatible with it) and capture there."),
    as_json: bool = JsonOpt,
) -> None:
    """Run a program unmodified; list its jitted computations, or pack the matching ones with their real inputs."""
    from .. import api
    from ..errors import NotFoundError
    from ..render import capture as capture_render

    result = api.capture_program(command or [], match=match, call=call, top=top, all_signatures=all_signatures,
                                 listing=listing, name=name, store=store, description=description,
                                 labels=parse_labels(label), warmup=warmup, repeat=repeat, dump=not no_dump,
                                 profile=not no_profile, progress=progress_sink(), jax=jax_version)
    human = (capture_render.listing_text(result, limit=top) if listing else capture_render.capture_text(result))
    emit(as_json, capture_render.capture_data(result), human)
    if result.exit_code:
        raise typer.Exit(result.exit_code)  # the program's own exit code, passed through
    if not listing and not result.captures:
        if result.failures:
            raise typer.Exit(ReplayError.exit_code)  # every capture failed
        raise NotFoundError("no jitted computation matched" + (f" --match {match!r}" if match else ""),
                            hint="reprobundle capture --list -- PROGRAM shows the names of those it ran")


@app.command("ls")
def ls(name: Optional[str] = typer.Argument(None), store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """List bundles (all names, or the versions of NAME)."""
    from ..bundle import manifest as mf
    from ..bundle.registry import Registry
    from ..render import listing as report

    registry = Registry.open(store)  # as api.open_registry, without loading the whole library
    if name:
        mf.check_name(name)
    rows = [report.bundle_row(b) for b in registry.iter_bundles(name)]
    emit(as_json, rows, report.bundle_table(rows) if rows else f"no bundles in {registry.url}")


@app.command()
def show(ref: str, store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Describe a bundle: function, inputs, reference timing, environment, artifacts."""
    from ..bundle.registry import open_ref
    from ..render import listing as report

    registry, bundle = open_ref(ref, store)  # as api.resolve, without loading the whole library
    runs = [] if registry.store.read_only else registry.runs(bundle.ref.bundle_id)
    answers = [] if registry.store.read_only else registry.answer_records(bundle.ref.bundle_id)
    emit(as_json, report.bundle_data(bundle, runs, answers), report.describe_bundle(bundle, runs, answers))


@app.command()
def verify(ref: str, store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Re-hash every blob of a bundle."""
    from ..bundle.registry import open_ref

    registry, bundle = open_ref(ref, store)
    problems = registry.verify(bundle)
    emit(as_json, {"bundle": str(bundle.ref), "ok": not problems, "problems": problems},
          "\n".join(problems) if problems else f"{bundle.ref}: all blobs intact")
    if problems:
        raise typer.Exit(FormatError.exit_code)


@app.command()
def tag(ref: str, tag_name: str = typer.Argument(..., metavar="TAG"), store: Optional[str] = StoreOpt,
        as_json: bool = JsonOpt) -> None:
    """Point TAG at a bundle version (NAME@TAG then resolves to it)."""
    from ..bundle.registry import open_ref

    registry, bundle = open_ref(ref, store)
    registry.tag(bundle.ref.name, bundle.ref.version, tag_name)
    emit(as_json, {"tag": f"{bundle.ref.name}@{tag_name}", "version": bundle.ref.version},
          f"{bundle.ref.name}@{tag_name} -> {bundle.ref}")


@app.command()
def export(ref: str, output: Path = typer.Option(..., "-o", "--output", help="The .zip file to write."),
           store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Write a bundle as a single .zip file (replayable as is: `python NAME.zip` judges what its stored answer
    found)."""
    from ..bundle.registry import open_ref
    from ..investigate.report.reproducer_zip import export_reproducer_zip
    from ..render import listing as report
    from ..render.sharing import export_size_warning

    registry, bundle = open_ref(ref, store)
    path = export_reproducer_zip(registry, bundle, output)
    size = path.stat().st_size

    warning = export_size_warning(bundle, size)  # too big for a GitHub attachment: still written, says how to fit
    if warning:
        typer.echo(warning, err=True)
    emit(as_json, {"bundle": str(bundle.ref), "path": str(path), "bytes": size, "warning": warning},
          f"wrote {path} ({report.human_bytes(size)})")


