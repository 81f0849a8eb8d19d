"""The command line: parse, call the library, render. Errors become one line and an exit code."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import List, Optional

import typer

from . import api
from .bundle import manifest as mf
from .errors import ReproBundleError, UsageError
from .render import text as report

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Capture a JAX computation once; replay it on any JAX version and see what changed.")

StoreOpt = typer.Option(None, "--store", envvar="REPROBUNDLE_STORE",
                        help="Store URL or folder (default: a local folder under the user data directory).")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


def _emit(as_json: bool, data, human: str) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        typer.echo(human)


def _progress(as_json: bool):
    if as_json:
        return None
    return lambda line: typer.echo(line, err=True)


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
    warmup: int = typer.Option(5, "--warmup"),
    repeat: int = typer.Option(50, "--repeat", help="Timed calls of the reference run."),
    no_dump: bool = typer.Option(False, "--no-dump", help="Leave out the XLA dump folder."),
    jax_version: Optional[str] = typer.Option(None, "--jax", help="With --exported: read the artifact and make the "
                                                                 "reference on this JAX release (its own environment)."),
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Capture a function into a new bundle version."""
    options = dict(name=name, store=store, synthetic_inputs=synthetic_inputs, seed=seed, description=description,
                   labels=_labels(label), warmup=warmup, repeat=repeat, dump=not no_dump)
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
        if inputs is not None:
            raise UsageError("--inputs goes with --exported or --stablehlo",
                             hint="a script's factory returns its own arguments")
        ref = api.pack_script(script, **options)
    _emit(as_json, report.ref_data(ref), f"packed {ref}  {ref.bundle_id}\n{ref.url}")


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
        raise typer.Exit(6)


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
                                               "alternation in each (default: 8 for several versions, else 1).")
ReportOpt = typer.Option(None, "--report", help="Write a Markdown report (pastes into a GitHub issue).")
HtmlOpt = typer.Option(None, "--html", help="Write an HTML page with a chart of the timings.")
BaselineOpt = typer.Option(None, "--baseline", help="Version the others are compared with "
                                                    "(default: the first that ran; 'reference' for the packing run).")


def _write_reports(comparison: dict, report_path: Optional[Path], html_path: Optional[Path]) -> None:
    from .render import comparison as comparison_render

    for path, render in ((report_path, comparison_render.to_markdown), (html_path, comparison_render.to_html)):
        if path is not None:
            path.write_text(render(comparison))
            typer.echo(f"wrote {path}", err=True)


@app.command()
def replay(
    ref: str,
    jax_versions: List[str] = typer.Option([], "--jax", help="JAX version to replay on (repeatable); "
                                                            "'installed' is this interpreter's JAX (default)."),
    warmup: int = typer.Option(5, "--warmup"),
    repeat: int = typer.Option(api.DEFAULT_STEPS, "--repeat",
                               help="Timed steps per version, over all rounds (a step is one call, or a batch of "
                                    "calls lasting ~50 ms for fast functions)."),
    rounds: Optional[int] = RoundsOpt,
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds of work per worker process before it is "
                                                            "killed."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter for new environments."),
    no_profile: bool = typer.Option(False, "--no-profile"),
    baseline: Optional[str] = BaselineOpt,
    report_path: Optional[Path] = ReportOpt,
    html_path: Optional[Path] = HtmlOpt,
    store: Optional[str] = StoreOpt,
    shapes: List[str] = typer.Option([], "--shape", help="NAME=SIZE: run a shape-polymorphic bundle at another "
                                                          "size, on synthetic inputs (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Rerun a bundle on one or more JAX versions and compare them."""
    from .render import comparison as comparison_render

    result = api.replay(ref, jax_versions or ["installed"], store=store, warmup=warmup, repeat=repeat, rounds=rounds,
                        timeout_s=timeout, python=python, profile=not no_profile, progress=_progress(as_json),
                        shapes=shapes)
    multi = len(result.runs) > 1
    comparison = None
    if multi or report_path or html_path or baseline:
        comparison = api.comparison_of(result.registry, result.bundle, result.runs, baseline)
        _write_reports(comparison, report_path, html_path)
    data = {"runs": [report.run_data(r) for r in result.runs], "comparison": comparison}
    human = report.describe_runs(result.bundle, result.runs)
    if multi:
        human += "\n\n" + comparison_render.to_text(comparison)
    _emit(as_json, data, human)
    if any(r["status"] != "ok" for r in result.runs):
        raise typer.Exit(9)


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
    """Compare the stored runs of a bundle across JAX versions."""
    from .render import comparison as comparison_render

    comparison = api.compare(ref, jax_versions or None, store=store, baseline=baseline)
    _write_reports(comparison, report_path, html_path)
    _emit(as_json, comparison, comparison_render.to_text(comparison))


@app.command("bisect")
def bisect_cmd(
    ref: str,
    good: str = typer.Option(..., "--good", help="A JAX version where the bundle is fine."),
    bad: str = typer.Option(..., "--bad", help="A later JAX version where it regressed."),
    warmup: int = typer.Option(5, "--warmup"),
    repeat: int = typer.Option(api.DEFAULT_STEPS, "--repeat", help="Timed steps per tested version, over all rounds."),
    rounds: Optional[int] = RoundsOpt,
    timeout: float = typer.Option(1800.0, "--timeout"),
    python: Optional[str] = typer.Option(None, "--python"),
    report_path: Optional[Path] = ReportOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Binary-search the released JAX versions between --good and --bad for the first bad one."""
    from .render import comparison as comparison_render

    result, comparison = api.bisect(ref, good, bad, store=store, warmup=warmup, repeat=repeat, rounds=rounds,
                                    timeout_s=timeout,
                                    python=python, progress=_progress(as_json))
    if comparison is not None:
        _write_reports(comparison, report_path, None)
    data = {"good": result.good, "bad": result.bad, "criterion": result.criterion, "first_bad": result.first_bad,
            "last_good": result.last_good, "classes": result.classes, "evidence": result.evidence,
            "comparison": comparison}
    human = (f"first bad release: jax {result.first_bad} (last good: {result.last_good}; "
             f"judged by {result.criterion})\n"
             + "\n".join(f"  {v}: {c}: {result.evidence.get(v, '')}" for v, c in result.classes.items()))
    if comparison is not None:
        human += "\n\n" + comparison_render.to_text(comparison)
    _emit(as_json, data, human)


@app.command()
def envs(
    remove: Optional[str] = typer.Option(None, "--remove", help="Remove the environment of this JAX version."),
    remove_all: bool = typer.Option(False, "--remove-all", help="Remove every cached environment."),
    as_json: bool = JsonOpt,
) -> None:
    """List (or remove) the cached per-version JAX environments."""
    manager = api.environment_manager()
    if remove or remove_all:
        gone = manager.remove(None if remove_all else remove)
        _emit(as_json, [report.env_data(e) for e in gone],
              "\n".join(f"removed jax {e.jax_version} (Python {e.python_version})" for e in gone) or "nothing removed")
        return
    found = manager.list()
    _emit(as_json, [report.env_data(e) for e in found],
          report.env_table(found) if found else f"no environments under {manager.root}")


# -- sharing: push / pull / copy / url / gc / cache ---------------------------------------------------------------


def _transfer_progress(as_json: bool, label: str):
    if as_json:
        return None
    from .render.sharing import byte_progress

    return byte_progress(label, lambda line: typer.echo(line, err=True))


JobsOpt = typer.Option(None, "--jobs", min=1, help="Parallel blob transfers (default 8; GCS uses its own pool).")


@app.command("push")
def push_cmd(ref: str, to: str = typer.Option(..., "--to", help="Destination store: gs://BUCKET/PREFIX, a folder..."),
             jobs: Optional[int] = JobsOpt, store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Copy a bundle to another store, sending only the blobs it lacks."""
    from .render.sharing import transfer_text

    result = api.push(ref, to, store=store, progress=_transfer_progress(as_json, f"push {ref}"), jobs=jobs)
    _emit(as_json, result.data(), transfer_text(result, "pushed"))


@app.command("pull")
def pull_cmd(url: str = typer.Argument(..., help="STORE_URL/NAME[@VERSION], e.g. gs://bucket/prefix/name@3, or a .zip"),
             jobs: Optional[int] = JobsOpt, store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Copy a bundle from another store into the current one."""
    from .render.sharing import transfer_text

    result = api.pull(url, store=store, progress=_transfer_progress(as_json, f"pull {url}"), jobs=jobs)
    _emit(as_json, result.data(), transfer_text(result, "pulled"))


@app.command("copy")
def copy_cmd(src_ref: str = typer.Argument(..., metavar="SRC_REF"),
             dest_url: str = typer.Argument(..., metavar="DEST_URL", help="Destination store URL or folder."),
             jobs: Optional[int] = JobsOpt, store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Copy a bundle between any two stores (a .zip may be the source)."""
    from .render.sharing import transfer_text

    result = api.copy(src_ref, dest_url, store=store, progress=_transfer_progress(as_json, f"copy {src_ref}"),
                      jobs=jobs)
    _emit(as_json, result.data(), transfer_text(result, "copied"))


@app.command("url")
def url_cmd(ref: str,
            jax_versions: List[str] = typer.Option([], "--jax", help="Versions for the replay command (repeatable; "
                                                                     "default: captured + those of recorded runs)."),
            store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """The bundle's URLs and a Markdown snippet for a bug report, with the command that replays it."""
    from .render.sharing import share_text

    info = api.share_info(ref, store=store, jax_versions=jax_versions)
    if info.get("note") and not as_json:
        typer.echo(f"note: {info['note']}", err=True)
    _emit(as_json, info, share_text(info))


@app.command("gc")
def gc_cmd(delete: bool = typer.Option(False, "--delete", help="Remove them (default: only list them)."),
           store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """List (or remove) blobs that no bundle or run references."""
    from .render.sharing import gc_text

    data = api.gc(store, delete=delete)
    _emit(as_json, data, gc_text(data))


@app.command("cache")
def cache_cmd(clear: bool = typer.Option(False, "--clear", help="Empty the cache."), as_json: bool = JsonOpt) -> None:
    """Size of the local cache of blobs read from remote stores (or --clear it)."""
    from .render.sharing import cache_text

    data = api.clear_cache() if clear else api.cache_info()
    _emit(as_json, data, cache_text(data))


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: runs the app and maps reprobundle errors to one line and an exit code."""
    debug = os.environ.get("REPROBUNDLE_DEBUG") == "1"
    try:
        code = app(args=argv, prog_name="reprobundle", standalone_mode=False)
        return code if isinstance(code, int) else 0  # click returns typer.Exit codes in this mode
    except ReproBundleError as e:
        if debug:
            traceback.print_exc()
        typer.echo(f"error: {e.message}", err=True)
        if e.hint:
            typer.echo(f"hint: {e.hint}", err=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130
    except typer.Abort:
        return 1
    except Exception as e:  # usage errors (typer >= 0.29 bundles click: TyperException is their base) and bugs
        if isinstance(e, typer.TyperException) and hasattr(e, "format_message"):
            typer.echo(f"error: {e.format_message()}", err=True)
            typer.echo("hint: reprobundle --help lists the commands; reprobundle COMMAND --help their options", err=True)
            return getattr(e, "exit_code", 2)
        if debug:
            traceback.print_exc()
        typer.echo(f"error: unexpected {type(e).__name__}: {e}", err=True)
        typer.echo("hint: this is a bug in reprobundle; rerun with REPROBUNDLE_DEBUG=1 and report the traceback",
                   err=True)
        return 70


def run() -> None:
    sys.exit(main())
