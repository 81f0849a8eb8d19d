"""The command line: parse, call the library, render. Errors become one line and an exit code."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import List, Optional

import typer

from . import api
from .bundle import manifest as mf
from .config import settings
from .errors import (
    EXIT_BUG,
    EXIT_INTERRUPTED,
    EXIT_NOT_OK,
    EXIT_TERMINATED,
    FormatError,
    ReplayError,
    ReproBundleError,
    UsageError,
    clean,
    clean_values,
    is_no_space,
    no_space_error,
    terminal_text,
)
from .logs import quiet_unraisable
from .render import text as report

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Capture a JAX computation once; replay it on any JAX version and see what changed.")

StoreOpt = typer.Option(None, "--store", envvar="REPROBUNDLE_STORE",
                        help="Store URL or folder (default: a local folder under the user data directory).")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


@app.callback()
def _options(verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                         help="Log what reprobundle decides (retries, fallbacks, cache); -vv: debug. "
                                              "Or set REPROBUNDLE_LOG=info|debug.")) -> None:
    from .logs import configure

    configure(verbose)


_SINKS: list = []  # live progress displays, closed before any output and when the command ends


def _close_progress() -> None:
    while _SINKS:
        _SINKS.pop().close()


def _emit(as_json: bool, data, human: str) -> None:
    _close_progress()
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        typer.echo(terminal_text(human))  # the net under render/'s per-value escaping: no terminal controls


def _progress(as_json: bool):
    """Progress on stderr: phase, elapsed time and ETA; live (rich) on a terminal, plain lines elsewhere."""
    if as_json:
        return None
    from .render.progress import Progress

    sink = Progress(sys.stderr, width=_terminal(sys.stderr)[0])
    _SINKS.append(sink)
    return sink


def _terminal(stream=None) -> tuple[int, bool]:
    """(columns, colour) for text on `stream` (stdout): 100 columns unless a terminal is wider; colour on a
    terminal unless NO_COLOR is set or TERM is dumb."""
    import shutil

    stream = stream or sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    width = max(100, shutil.get_terminal_size((100, 24)).columns) if tty else 100
    color = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    return width, color


def _comparison_text(comparison: dict) -> str:
    from .render import comparison as comparison_render

    width, color = _terminal()
    # its values come from bundles and run records: each one line, escaped (errors.clean_values)
    return comparison_render.to_text(clean_values(comparison), width=width, color=color)


def _labels(items: List[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"invalid label {item!r}", hint="labels are KEY=VALUE")
        labels[key] = value
    return labels


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
    warmup: int = typer.Option(api.DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(api.REFERENCE_REPEAT, "--repeat", help="Timed calls of the reference run."),
    no_dump: bool = typer.Option(False, "--no-dump", help="Leave out the XLA dump folder."),
    jax_version: Optional[str] = typer.Option(None, "--jax", help="With --exported: read the artifact and make the "
                                                                 "reference on this JAX release (its own environment)."),
    timeout: float = typer.Option(api.DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work the reference run's worker gets before it is killed."),
    platforms: Optional[str] = typer.Option(None, "--platforms", help="Lower for these platforms, comma-separated "
                                                                     "(cpu, cuda, rocm, tpu; any machine can), e.g. "
                                                                     "cuda,cpu: replays then run on either. Default: "
                                                                     "this machine's."),
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Capture a function into a new bundle version."""
    mf.check_name(name)  # before any work: a bad name is refused at once
    options = dict(name=name, store=store, synthetic_inputs=synthetic_inputs, seed=seed, description=description,
                   labels=_labels(label), warmup=warmup, repeat=repeat, dump=not no_dump, timeout_s=timeout,
                   progress=_progress(as_json))
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
    _emit(as_json, report.ref_data(ref), f"packed {ref}  {ref.bundle_id}\n{ref.url}")


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
    warmup: int = typer.Option(api.DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(api.REFERENCE_REPEAT, "--repeat", help="Timed calls of each bundle's reference run."),
    no_dump: bool = typer.Option(False, "--no-dump", help="Leave out the XLA dump folder."),
    no_profile: bool = typer.Option(False, "--no-profile", help="No profiler trace in the reference run."),
    store: Optional[str] = StoreOpt,
    jax_version: Optional[str] = typer.Option(None, "--jax", help="Run the program in the environment of this JAX "
                                                                 "release (with the packages it imports, resolved "
                                                                 "compatible with it) and capture there."),
    as_json: bool = JsonOpt,
) -> None:
    """Run a program unmodified; list its jitted computations, or pack the matching ones with their real inputs."""
    from .errors import NotFoundError
    from .render import capture as capture_render

    result = api.capture_program(command or [], match=match, call=call, top=top, all_signatures=all_signatures,
                                 listing=listing, name=name, store=store, description=description,
                                 labels=_labels(label), warmup=warmup, repeat=repeat, dump=not no_dump,
                                 profile=not no_profile, progress=_progress(as_json), jax=jax_version)
    human = (capture_render.listing_text(result, limit=top) if listing else capture_render.capture_text(result))
    _emit(as_json, capture_render.capture_data(result), human)
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
    registry = api.open_registry(store)
    if name:
        mf.check_name(name)
    rows = [report.bundle_row(b) for b in registry.iter_bundles(name)]
    _emit(as_json, rows, report.bundle_table(rows) if rows else f"no bundles in {registry.url}")


@app.command()
def show(ref: str, store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Describe a bundle: function, inputs, reference timing, environment, artifacts."""
    registry, bundle = api.resolve(ref, store)
    runs = [] if registry.store.read_only else registry.runs(bundle.ref.bundle_id)
    _emit(as_json, report.bundle_data(bundle, runs), report.describe_bundle(bundle, runs))


@app.command()
def verify(ref: str, store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Re-hash every blob of a bundle."""
    registry, bundle = api.resolve(ref, store)
    problems = registry.verify(bundle)
    _emit(as_json, {"bundle": str(bundle.ref), "ok": not problems, "problems": problems},
          "\n".join(problems) if problems else f"{bundle.ref}: all blobs intact")
    if problems:
        raise typer.Exit(FormatError.exit_code)


@app.command()
def tag(ref: str, tag_name: str = typer.Argument(..., metavar="TAG"), store: Optional[str] = StoreOpt,
        as_json: bool = JsonOpt) -> None:
    """Point TAG at a bundle version (NAME@TAG then resolves to it)."""
    registry, bundle = api.resolve(ref, store)
    registry.tag(bundle.ref.name, bundle.ref.version, tag_name)
    _emit(as_json, {"tag": f"{bundle.ref.name}@{tag_name}", "version": bundle.ref.version},
          f"{bundle.ref.name}@{tag_name} -> {bundle.ref}")


@app.command()
def export(ref: str, output: Path = typer.Option(..., "-o", "--output", help="The .zip file to write."),
           store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Write a bundle as a single .zip file (replayable as is)."""
    registry, bundle = api.resolve(ref, store)
    path = registry.export_zip(bundle, output)
    size = path.stat().st_size
    from .render.sharing import export_size_warning

    warning = export_size_warning(bundle, size)  # too big for a GitHub attachment: still written, says how to fit
    if warning:
        typer.echo(warning, err=True)
    _emit(as_json, {"bundle": str(bundle.ref), "path": str(path), "bytes": size, "warning": warning},
          f"wrote {path} ({report.human_bytes(size)})")


RoundsOpt = typer.Option(None, "--rounds", help="Rounds of fresh worker processes, the versions timed in "
                                               "alternation in each (default for several versions: as many as "
                                               "settle the verdicts, 3 to 32; one version: 1).")
ReportOpt = typer.Option(None, "--report", help="Write a Markdown report (pastes into a GitHub issue).")
HtmlOpt = typer.Option(None, "--html", help="Write an HTML page with a chart of the timings.")
BaselineOpt = typer.Option(None, "--baseline", help="Version the others are compared with "
                                                    "(default: the first that ran; 'reference' for the packing run).")


def _write_files(data: dict, files) -> None:
    """Each (path, render) of `files` whose path is given: render(data) written there, and said on stderr."""
    _close_progress()
    for path, render in files:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(data))
            typer.echo(f"wrote {path}", err=True)


def _write_reports(comparison: dict, report_path: Optional[Path], html_path: Optional[Path],
                   ref: Optional[str] = None, store: Optional[str] = None) -> None:
    from .render import comparison as comparison_render

    _write_files(comparison, ((report_path, comparison_render.to_markdown), (html_path, comparison_render.to_html)))
    written = report_path or html_path
    if written is not None and ref is not None:  # the zip the Reproduce block asks to attach, beside the report
        attachment = api.write_attachment(comparison, written.parent, ref, store)
        if attachment is not None:
            typer.echo(f"wrote {attachment}\n  attach it to the issue with the report; `python {attachment.name}` "
                       "replays it with nothing but JAX", err=True)


PlatformOpt = typer.Option(None, "--platform", help="Run on this platform: cpu, cuda (cuda12, cuda13), rocm, tpu "
                                                  "(default: the bundle's first accelerator platform this machine "
                                                  "has, else cpu).")


MaxTimeOpt = typer.Option(None, "--max-time", help="Seconds the timing of several versions may take: rounds stop "
                                                  "there even if a verdict is not settled (default: up to 32 rounds).")
IndexOpt = typer.Option(None, "--index-url", help="PEP 503 index of JAX nightlies (default: "
                                                  "$REPROBUNDLE_NIGHTLY_INDEX, else JAX's nightly index); releases "
                                                  "come from it too (a mirror of PyPI).")
RayOpt = typer.Option(None, "--ray", envvar="RAY_ADDRESS",
                      help="Run the replays on this Ray cluster (auto, HOST:6379, ray://HOST:10001; default "
                           "$RAY_ADDRESS), one task per bundle, each holding a whole node; needs the ray extra of "
                           "reprobundle.")
VariantOpt = typer.Option([], "--variant", help="JAX:NAME=VALUE[;...]: a release under settings as one more contender "
                                                "(XLA_FLAGS=..., jax_* config options, environment variables).")
RetraceOpt = typer.Option(False, "--retrace", help="Run the bundle's program (its script's factory) in each "
                                                   "version's environment and lower it there, instead of the stored "
                                                   "program (replay: same as --mode retrace).")
PinOpt = typer.Option(None, "--pin", help="Run every version's worker on these CPUs (2, 0-3, 0,2 or auto: the last "
                                          "CPU, alone) with as many XLA threads: steadier timings, less realistic "
                                          "(a change that needs more threads is not seen).")


@app.command()
def replay(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="JAX to replay on (repeatable): a release, 'installed' "
                                                            "(this interpreter's, the default), 'latest', a nightly "
                                                            "(nightly:2025-10-03 or 0.8.0.dev20251003), or the path "
                                                            "of a Python interpreter or environment, used as it is."),
    warmup: int = typer.Option(api.DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(api.DEFAULT_STEPS, "--repeat",
                               help="Timed steps per version over 8 rounds, so repeat/8 a round (all rounds with "
                                    "--rounds); a step is one call, or a batch of calls lasting ~50 ms."),
    rounds: Optional[int] = RoundsOpt,
    timeout: float = typer.Option(api.DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    no_profile: bool = typer.Option(False, "--no-profile"),
    baseline: Optional[str] = BaselineOpt,
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    shapes: List[str] = typer.Option([], "--shape", help="NAME=SIZE: run a shape-polymorphic bundle at another "
                                                          "size, on synthetic inputs (repeatable)."),
    platform: Optional[str] = PlatformOpt,
    max_time: Optional[float] = MaxTimeOpt,
    pin: Optional[str] = PinOpt,
    variants: List[str] = VariantOpt,
    retrace: bool = RetraceOpt,
    mode: str = typer.Option("frozen", "--mode", help="frozen (the stored program), retrace, or both (per version "
                                                      "a frozen and a retraced contender, timed together)."),
    retrace_package: List[str] = typer.Option([], "--retrace-package", help="NAME==VERSION: the release of one of "
                                                                           "the program's packages a retrace installs "
                                                                           "(default: resolved with each jax)."),
    index_url: Optional[str] = IndexOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Rerun a bundle on one or more JAX versions and compare them."""
    from .bundle.dims import several_sizes

    sizes = several_sizes(shapes)  # --shape seq=128,256,512: one replay per size, a table and a chart by size
    options = api.ReplayOptions.of(warmup=warmup, repeat=repeat, rounds=rounds, timeout_s=timeout,
                                   profile=not no_profile, shapes=None if sizes else shapes, platform=platform,
                                   max_time_s=max_time, pin=pin, retrace_packages=tuple(retrace_package))
    versions = jax_versions or ([] if variants else ["installed"])
    mode = "retrace" if retrace and mode == "frozen" else mode
    if sizes:
        _replay_sizes(ref, versions, shapes, baseline, report_path, html_path, as_json, options=options,
                      variants=variants, store=store, python=python, progress=_progress(as_json),
                      index_url=index_url, mode=mode)
        return
    result = api.replay(ref, versions, store=store, options=options, python=python, progress=_progress(as_json),
                        variants=variants, index_url=index_url, mode=mode)
    multi = len(result.runs) > 1
    comparison = None
    if multi or report_path or html_path or baseline:
        comparison = api.replay_comparison(result, baseline)
        _write_reports(comparison, report_path, html_path, ref, store)
    data = {"runs": [report.run_data(r) for r in result.runs], "comparison": comparison}
    # Several versions: the comparison says everything, headlines first; one version: the run against the pack.
    human = _comparison_text(comparison) if comparison is not None and multi else \
        report.describe_runs(result.bundle, result.runs)
    _emit(as_json, data, human)
    if any(r["status"] != "ok" for r in result.runs):
        raise typer.Exit(EXIT_NOT_OK)


def _replay_sizes(ref: str, versions: List[str], shapes: List[str], baseline: Optional[str],
                  report_path: Optional[Path], html_path: Optional[Path], as_json: bool, **options) -> None:
    from .render import sizes as sizes_render

    data = api.replay_sizes(ref, versions, shapes, baseline=baseline, **options)
    _write_files(data, ((report_path, sizes_render.to_markdown), (html_path, sizes_render.to_html)))
    _emit(as_json, sizes_render.sizes_data(data), sizes_render.to_text(clean_values(sizes_render.sizes_data(data))))
    if any(r["status"] != "ok" for size in data["sizes"] for r in size["rows"]):
        raise typer.Exit(9)


@app.command()
def explain(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="The baseline version, then the candidate (twice)."),
    warmup: int = typer.Option(2, "--warmup"),
    repeat: int = typer.Option(api.DEFAULT_STEPS, "--repeat", help="Steps per 8 rounds, as replay's."),
    rounds: Optional[int] = RoundsOpt,
    max_time: float = typer.Option(240.0, "--max-time", help="Seconds explain may take, the evidence compile "
                                                             "included (its timing gets at least 30 s)."),
    timeout: float = typer.Option(api.DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    platform: Optional[str] = PlatformOpt,
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Why the candidate differs: passes, experiments on it timed with both, a workaround if one restores it."""
    from .render import explain as explain_render

    result = api.explain(ref, jax_versions, store=store, warmup=warmup, repeat=repeat, rounds=rounds,
                         max_time_s=max_time, timeout_s=timeout, platform=platform, python=python,
                         progress=_progress(as_json))
    _write_files(result, ((report_path, explain_render.to_markdown), (html_path, explain_render.to_html)))
    data = explain_render.explain_data(result)
    _emit(as_json, data, explain_render.to_text(clean_values(data)))


@app.command()
def isolate(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="The baseline version, then the candidate (twice)."),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the bundle the piece that moved most becomes "
                                                            "(default: NAME-piece-K)."),
    pieces: int = typer.Option(8, "--pieces", help="At most this many pieces."),
    warmup: int = typer.Option(api.ISOLATE_OPTIONS.warmup, "--warmup"),
    repeat: int = typer.Option(api.DEFAULT_STEPS, "--repeat", help="Steps per 8 rounds, as replay's."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the timing of all pieces may take."),
    pin: Optional[str] = PinOpt,
    timeout: float = typer.Option(api.DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Split a bundle into pieces, time each alone on two versions and pack the one that moved as a small bundle."""
    from .render.isolate import isolation_data, isolation_text

    options = api.ReplayOptions.of(api.ISOLATE_OPTIONS, warmup=warmup, repeat=repeat, max_time_s=max_time, pin=pin,
                                   timeout_s=timeout)
    result = api.isolate(ref, jax_versions, store=store, name=name, max_pieces=pieces, options=options, python=python,
                         progress=_progress(as_json))
    _emit(as_json, isolation_data(result), isolation_text(result))


@app.command()
def compare(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="Versions to compare (default: every stored run)."),
    baseline: Optional[str] = BaselineOpt,
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Compare the stored runs of a bundle across JAX versions (preferring the latest replay timed together)."""
    comparison = api.compare(ref, jax_versions or None, store=store, baseline=baseline)
    _write_reports(comparison, report_path, html_path, ref, store)
    _emit(as_json, comparison, _comparison_text(comparison))


@app.command("bisect")
def bisect_cmd(
    ref: str,
    good: str = typer.Option(..., "--good", help="A JAX version where the bundle is fine (with --nightly: a release "
                                                 "or a nightly, nightly:2025-09-20)."),
    bad: str = typer.Option(..., "--bad", help="A later JAX version where it regressed."),
    nightly: bool = typer.Option(False, "--nightly", help="Search the nightlies between --good and --bad by date, "
                                                          "down to the commits of the last good and first bad."),
    index_url: Optional[str] = IndexOpt,
    warmup: int = typer.Option(api.DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(api.DEFAULT_STEPS, "--repeat", help="Timed steps per tested version, over all rounds."),
    rounds: Optional[int] = RoundsOpt,
    timeout: float = typer.Option(api.DEFAULT_TIMEOUT_S, "--timeout"),
    python: Optional[str] = typer.Option(None, "--python"),
    report_path: Optional[Path] = ReportOpt,
    store: Optional[str] = StoreOpt,
    platform: Optional[str] = PlatformOpt,
    ray: Optional[str] = RayOpt,
    retrace: bool = RetraceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Binary-search the released JAX versions (or, with --nightly, the nightlies) between --good and --bad for the
    first bad one."""
    options = api.ReplayOptions.of(api.BISECT_OPTIONS, warmup=warmup, repeat=repeat, rounds=rounds, timeout_s=timeout,
                                   platform=platform)
    result, comparison = api.bisect(ref, good, bad, store=store, options=options, python=python,
                                    progress=_progress(as_json), ray_address=ray, nightly=nightly, index_url=index_url,
                                    mode="retrace" if retrace else "frozen")
    if comparison is not None:
        _write_reports(comparison, report_path, None, ref, store)
    data = {"good": result.good, "bad": result.bad, "criterion": result.criterion, "first_bad": result.first_bad,
            "last_good": result.last_good, "classes": result.classes, "evidence": result.evidence,
            "nightly": result.nightly, "comparison": comparison}
    what = "nightly" if result.nightly else "release"
    human = (f"first bad {what}: jax {result.first_bad} (last good: {result.last_good}; "
             f"judged by {result.criterion})\n"
             + "\n".join(f"  {v}: {c}: {result.evidence.get(v, '')}" for v, c in result.classes.items()))
    if result.nightly:
        human += "\n" + report.nightly_text(result.nightly)
    if comparison is not None:
        human += "\n\n" + _comparison_text(comparison)
    _emit(as_json, data, human)


@app.command()
def sweep(
    selection: Optional[List[str]] = typer.Argument(None, metavar="[SELECTION]...",
                                                    help="Refs (NAME, NAME@3, NAME@TAG, sha256:PREFIX) or name globs "
                                                         "('attn*', quoted; the newest version of each name unless "
                                                         "one is given). Default: every bundle."),
    baseline: str = typer.Option("", "--baseline", help="The JAX version the candidates are compared with "
                                                        "(default with --versions: the first of the range)."),
    candidate: List[str] = typer.Option([], "--candidate", help="A JAX version under test (repeatable: all are "
                                                                "timed together with the baseline)."),
    releases: Optional[str] = typer.Option(None, "--versions", help="Every release from A to B as candidates "
                                                                    "(A..B, e.g. 0.7.2..0.9.2)."),
    label: List[str] = typer.Option([], "--label", help="Only bundles with this KEY=VALUE label (repeatable)."),
    rerun: bool = typer.Option(False, "--rerun", help="Replay every bundle, even those with a stored replay of both "
                                                      "versions with the same timing options."),
    ray: Optional[str] = RayOpt,
    warmup: int = typer.Option(api.DEFAULT_WARMUP, "--warmup"),
    repeat: int = typer.Option(api.DEFAULT_STEPS, "--repeat", help="Timed steps per version and bundle, as replay's."),
    rounds: Optional[int] = RoundsOpt,
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Seconds the timing of each bundle may take."),
    pin: Optional[str] = PinOpt,
    platform: Optional[str] = PlatformOpt,
    timeout: float = typer.Option(api.DEFAULT_TIMEOUT_S, "--timeout",
                                  help="Seconds of work per worker process before it is killed."),
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    retrace: bool = RetraceOpt,
    index_url: Optional[str] = IndexOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay many bundles on a baseline and one or more candidate versions, timed together: one table, worst first.

    Exit 0 when every bundle ran with matching outputs (whatever the verdicts), 9 when one mismatched or failed."""
    from .render import sweep as sweep_render

    options = api.ReplayOptions.of(warmup=warmup, repeat=repeat, rounds=rounds, max_time_s=max_time, pin=pin,
                                   platform=platform, timeout_s=timeout)
    data = api.sweep(selection or [], baseline, candidate, store=store, releases=releases, labels=_labels(label),
                     rerun=rerun, ray_address=ray, options=options, progress=_progress(as_json),
                     index_url=index_url, mode="retrace" if retrace else "frozen")
    data = clean_values(data)  # from bundles and run records: each value one line, escaped
    _write_files(data, ((report_path, sweep_render.to_markdown), (html_path, sweep_render.to_html)))
    _emit(as_json, sweep_render.sweep_data(data), sweep_render.to_text(data, width=_terminal()[0]))
    if data["counts"]["failed"] or data["counts"]["mismatch"]:
        raise typer.Exit(EXIT_NOT_OK)


@app.command()
def history(
    selection: Optional[List[str]] = typer.Argument(None, metavar="[SELECTION]...",
                                                    help="Refs or name globs, as sweep's. Default: every bundle."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="The release compared with (default: oldest)."),
    label: List[str] = typer.Option([], "--label", help="Only bundles with this KEY=VALUE label (repeatable)."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write one offline page (reports beside it)."),
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The registry across releases, from the stored runs only: bundles x releases, each cell the ratio to the
    baseline with its verdict where they were timed together."""
    from .render import history as history_render

    data = clean_values(api.history(selection or [], store=store, labels=_labels(label), baseline=baseline))
    if html_path is not None:
        links = api.history_reports(data, html_path.parent / f"{html_path.stem}-reports", store=store)
        _write_files(data, ((html_path, lambda d: history_render.to_html(d, links)),))
    _emit(as_json, history_render.history_data(data), history_render.to_text(data, *_terminal()))


@app.command()
def envs(
    remove: Optional[str] = typer.Option(None, "--remove", help="Remove the environment of this JAX version."),
    remove_all: bool = typer.Option(False, "--remove-all", help="Remove every cached environment."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Only the environments of this platform or "
                                                                   "build (cpu, cuda, cuda12, cuda13, rocm, tpu)."),
    as_json: bool = JsonOpt,
) -> None:
    """List (or remove) the cached per-version JAX environments (one per release and platform build)."""
    manager = api.environment_manager()
    if remove or remove_all:
        gone = manager.remove(None if remove_all else remove, platform=platform)
        _emit(as_json, [report.env_data(e) for e in gone],
              "\n".join(f"removed jax {e.jax_version} {e.build} (Python {e.python_version})" for e in gone)
              or "nothing removed")
        return
    found = manager.list()
    if platform:
        found = [e for e in found if platform in (e.platform, e.build)]
    _emit(as_json, [report.env_data(e) for e in found],
          report.env_table(found) if found else f"no environments under {manager.root}")


# -- sharing: push / pull / copy / url / gc / cache ---------------------------------------------------------------


def _transfer_progress(as_json: bool, label: str):
    if as_json:
        return None
    from .render.sharing import byte_progress

    return byte_progress(label, lambda line: typer.echo(line, err=True))


JobsOpt = typer.Option(None, "--jobs", min=1, help="Parallel blob transfers (default 8; GCS uses its own pool).")
NoRunsOpt = typer.Option(False, "--no-runs", help="Copy the bundle only, not its run records (the replay history).")


@app.command("push")
def push_cmd(ref: str, to: str = typer.Option(..., "--to", help="Destination store: gs://BUCKET/PREFIX, a folder..."),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle and its runs to another store, sending only the blobs it lacks."""
    from .render.sharing import transfer_text

    result = api.push(ref, to, store=store, progress=_transfer_progress(as_json, f"push {ref}"), jobs=jobs,
                      runs=not no_runs)
    _emit(as_json, result.data(), transfer_text(result, "pushed"))


@app.command("pull")
def pull_cmd(url: str = typer.Argument(..., help="STORE_URL/NAME[@VERSION], e.g. gs://bucket/prefix/name@3, or a .zip"),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle (and its runs) from another store into the current one."""
    from .render.sharing import transfer_text

    result = api.pull(url, store=store, progress=_transfer_progress(as_json, f"pull {url}"), jobs=jobs,
                      runs=not no_runs)
    _emit(as_json, result.data(), transfer_text(result, "pulled"))


@app.command("copy")
def copy_cmd(src_ref: str = typer.Argument(..., metavar="SRC_REF"),
             dest_url: str = typer.Argument(..., metavar="DEST_URL", help="Destination store URL or folder."),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle and its runs between any two stores (a .zip may be the source)."""
    from .render.sharing import transfer_text

    result = api.copy(src_ref, dest_url, store=store, progress=_transfer_progress(as_json, f"copy {src_ref}"),
                      jobs=jobs, runs=not no_runs)
    _emit(as_json, result.data(), transfer_text(result, "copied"))


@app.command("url")
def url_cmd(ref: str,
            jax_versions: List[str] = typer.Option([], "--jax", help="Versions for the replay command (repeatable; "
                                                                     "default: captured + those of recorded runs)."),
            store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """The bundle's URLs and a Markdown snippet for a bug report, with the command that replays it."""
    from .render.sharing import share_text

    info = api.share_info(ref, store=store, jax_versions=jax_versions)
    _emit(as_json, info, share_text(info))  # a store only this machine reads: the snippet itself says so


@app.command("gc")
def gc_cmd(delete: bool = typer.Option(False, "--delete", help="Remove them (default: only list them)."),
           grace: Optional[str] = typer.Option(None, "--grace", help="Keep blobs used more recently than this "
                                               "(90s, 30m, 6h, 2d; 0: any age). Default: $REPROBUNDLE_GC_GRACE or "
                                               "24h, so a pack or push still running keeps what it wrote."),
           store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """List (or remove) blobs that no bundle or run references (and no running pack, replay or push holds)."""
    from .render.sharing import gc_text
    from .units import parse_duration

    try:
        grace_s = None if grace is None else parse_duration(grace)
    except ValueError:
        raise UsageError(f"--grace {clean(grace, 40)} is not a duration",
                         hint="write seconds, or a number with s, m, h or d (e.g. 6h)") from None
    data = api.gc(store, delete=delete, grace_s=grace_s)
    _emit(as_json, data, gc_text(data))


@app.command("cache")
def cache_cmd(clear: bool = typer.Option(False, "--clear", help="Empty the cache."), as_json: bool = JsonOpt) -> None:
    """Size of the local cache of blobs read from remote stores (or --clear it)."""
    from .render.sharing import cache_text

    data = api.clear_cache() if clear else api.cache_info()
    _emit(as_json, data, cache_text(data))


class Interrupted(Exception):
    """Ctrl-C during a command, carried past the CLI framework to `main`, which says so: typer turns a
    KeyboardInterrupt into a silent exit 130 in some versions and into Abort (exit 1) in others."""


def _guard(callback):
    @functools.wraps(callback)
    def guarded(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted() from None

    guarded.reprobundle_guarded = True  # type: ignore[attr-defined]
    return guarded


def _guard_commands() -> None:
    """Every registered command (whoever added it) turns Ctrl-C into Interrupted; idempotent."""
    for info in app.registered_commands:
        if info.callback is not None and not getattr(info.callback, "reprobundle_guarded", False):
            info.callback = _guard(info.callback)


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: runs the app and maps every outcome to one line and an exit code, never a traceback unless
    REPROBUNDLE_DEBUG=1: reprobundle's errors their own codes, Ctrl-C "interrupted" and 130, a bug 70."""
    from .errors import exception_line

    debug = settings().debug == "1"
    _guard_commands()
    previous_sigterm = _catch_sigterm()
    previous_unraisable = sys.unraisablehook
    if not debug:
        sys.unraisablehook = quiet_unraisable
    from .store.scratch import install_exit_watchdog  # a signal ends the command within seconds, even in C code

    stop_watchdog = install_exit_watchdog(lambda signum: "interrupted" if signum == signal.SIGINT else "terminated")
    try:
        code = app(args=argv, prog_name="reprobundle", standalone_mode=False)
        return code if isinstance(code, int) else 0  # click returns typer.Exit codes in this mode
    except ReproBundleError as e:
        _close_progress()
        if debug:
            traceback.print_exc()
        typer.echo(f"error: {clean(e.message, 2000)}", err=True)  # one line: what a store holds is escaped, cut
        if e.hint:
            typer.echo(f"hint: {clean(e.hint, 1000)}", err=True)
        return e.exit_code
    except Terminated:
        _close_progress()
        typer.echo("terminated", err=True)
        return EXIT_TERMINATED
    except typer.Exit as e:
        return e.exit_code
    except (KeyboardInterrupt, Interrupted):
        _close_progress()
        typer.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except typer.Abort:
        return 1
    except Exception as e:  # usage errors (typer >= 0.29 bundles click: TyperException is their base) and bugs
        _close_progress()
        if is_no_space(e):  # a full disk met where no folder was named: still not a bug
            full = no_space_error(e)  # type: ignore[arg-type]
            typer.echo(f"error: {clean(full.message, 2000)}\nhint: {full.hint}", err=True)
            return full.exit_code
        if isinstance(e, typer.TyperException) and hasattr(e, "format_message"):
            typer.echo(f"error: {clean(e.format_message(), 2000)}", err=True)
            typer.echo("hint: reprobundle --help lists the commands; reprobundle COMMAND --help their options", err=True)
            return getattr(e, "exit_code", 2)
        if debug:
            traceback.print_exc()
        typer.echo(f"error: unexpected {exception_line(e)}", err=True)
        typer.echo("hint: this is a bug in reprobundle; rerun with REPROBUNDLE_DEBUG=1 and report the traceback",
                   err=True)
        return EXIT_BUG
    finally:
        _close_progress()
        sys.unraisablehook = previous_unraisable
        if stop_watchdog is not None:
            stop_watchdog()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


class Terminated(BaseException):
    """SIGTERM during a command: raised where the command is, so it unwinds like Ctrl-C does (its temporary folders
    and worker processes go with it) instead of dying on the spot; `main` says so and exits 143."""


def _catch_sigterm():
    """Turn SIGTERM into Terminated while the CLI runs (main thread only); returns the handler to put back."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise Terminated()

    try:
        return signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):
        return None


def run() -> None:
    sys.exit(main())
