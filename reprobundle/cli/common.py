"""What the commands share: the app, its common options, output (JSON or text), progress, report files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ..text import clean_values, terminal_text

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Capture a JAX computation once; replay it on any JAX version and see what changed.")

StoreOpt = typer.Option(None, "--store", envvar="REPROBUNDLE_STORE",
                        help="Store URL or folder (default: a local folder under the user data directory).")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


def _print_version(asked: bool) -> None:
    if asked:
        from .. import __version__

        typer.echo(f"reprobundle {__version__}")
        raise typer.Exit()


@app.callback()
def _options(verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                         help="Log what reprobundle decides (retries, fallbacks, cache); -vv: debug. "
                                              "Or set REPROBUNDLE_LOG=info|debug."),
             version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                          help="Print reprobundle's version and exit.")) -> None:
    from ..logs import configure

    configure(verbose)


_SINKS: list = []  # live progress displays, closed before any output and when the command ends


def close_progress() -> None:
    while _SINKS:
        _SINKS.pop().close()


def emit(as_json: bool, data, human: str) -> None:
    close_progress()
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        typer.echo(terminal_text(human))  # the net under render/'s per-value escaping: no terminal controls


UNCUT_PROGRESS_WIDTH = 4000  # a progress line's bound where nothing needs it to fit a width


def progress_sink():
    """Progress on stderr: phase, elapsed time and ETA; live (rich) on a terminal, plain lines elsewhere. In every
    mode, --json included (stdout holds the JSON alone), as uv and gh do: a long bisection must not look hung."""
    from ..render.progress import Progress, is_terminal

    columns, _ = terminal(sys.stderr)
    # a file or a pipe (a log, CI) gets each line whole: only a terminal's lines are cut to fit its width
    sink = Progress(sys.stderr, width=columns if is_terminal(sys.stderr) else UNCUT_PROGRESS_WIDTH)
    _SINKS.append(sink)
    return sink


def terminal(stream=None) -> tuple[int, bool]:
    """(columns, colour) for text on `stream` (stdout): 100 columns unless a terminal is wider; colour on a
    terminal unless NO_COLOR is set or TERM is dumb."""
    import shutil

    stream = stream or sys.stdout
    from ..render.progress import is_terminal

    tty = is_terminal(stream)
    width = max(100, shutil.get_terminal_size((100, 24)).columns) if tty else 100
    color = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    return width, color


def comparison_text(comparison: dict) -> str:
    from ..render import comparison as comparison_render

    width, color = terminal()
    # its values come from bundles and run records: each one line, escaped (text.clean_values)
    return comparison_render.to_text(clean_values(comparison), width=width, color=color)


def without_samples(comparison: dict | None) -> dict | None:
    from ..render.spent import without_samples as drop

    return drop(comparison)


def spent_table(ledger: dict | None) -> str:
    """Where the command's wall time went, as a table after its answer, when -v asked for it (else nothing)."""
    from ..logs import verbose

    if not ledger or not verbose():
        return ""
    from ..render.spent import spent_text

    return "\n\nwhere the time went:\n" + spent_text(ledger)


def parse_labels(items: List[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"invalid label {item!r}", hint="labels are KEY=VALUE")
        labels[key] = value
    return labels



RoundsOpt = typer.Option(None, "--rounds", help="Rounds of fresh worker processes, the versions timed in "
                                               "alternation in each (default for several versions: as many as "
                                               "settle the verdicts, 3 to 32; one version: 1).")
ReportOpt = typer.Option(None, "--report", help="Write a Markdown report (pastes into a GitHub issue).")
HtmlOpt = typer.Option(None, "--html", help="Write an HTML page with a chart of the timings.")
BaselineOpt = typer.Option(None, "--baseline", help="Version the others are compared with "
                                                    "(default: the first that ran; 'reference' for the packing run).")



def write_files(data: dict, files) -> None:
    """Each (path, render) of `files` whose path is given: render(data) written there, and said on stderr."""
    close_progress()
    for path, render in files:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(data))
            typer.echo(f"wrote {path}", err=True)


def write_reports(comparison: dict, report_path: Optional[Path], html_path: Optional[Path],
                   ref: Optional[str] = None, store: Optional[str] = None) -> None:
    from .. import api
    from ..render import comparison as comparison_render

    write_files(comparison, ((report_path, comparison_render.to_markdown), (html_path, comparison_render.to_html)))
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
def _use_index(index: str | None) -> str | None:
    if index:
        from ..envs.package_index import use_index

        use_index(index=index)
    return index


def _use_links(links: list[str]) -> list[str]:
    if links:
        from ..envs.package_index import use_index

        use_index(links=links)
    return links


ReleaseIndexOpt = typer.Option(None, "--index-url", callback=_use_index,
                               help="The package index releases come from: a URL (a mirror of PyPI) or a simple "
                                    "index in a folder (PATH or file://); default $REPROBUNDLE_INDEX_URL, else uv's "
                                    "UV_DEFAULT_INDEX/UV_INDEX_URL, else PyPI.")
FindLinksOpt = typer.Option([], "--find-links", callback=_use_links,
                            help="A folder of wheels that releases and their environments may also come from "
                                 "(repeatable; default $REPROBUNDLE_FIND_LINKS).")
RayOpt = typer.Option(None, "--ray", envvar="RAY_ADDRESS",
                      help="Run the replays on this Ray cluster (auto, HOST:6379, ray://HOST:10001; default "
                           "$RAY_ADDRESS), one task per bundle, each holding a whole node; needs the ray extra of "
                           "reprobundle.")
JobsOpt = typer.Option(None, "--jobs", help="Test this many releases at once in a bisection by outputs or bits "
                                            "(untimed probes; timed ones run one at a time). Default: one per CPU "
                                            "but one, within the memory free; one on a TPU, which admits one "
                                            "process at a time.")
FreshWorkersOpt = typer.Option(False, "--fresh-workers", help="Give each bundle a worker process of its own per "
                                                           "version and round (by default the bundles measured "
                                                           "together share one per version and round); slower, for "
                                                           "comparison.")
SamplesOpt = typer.Option(False, "--samples", help="--json keeps every raw timing sample (by default only their "
                                                   "summaries, intervals and counts).")
VariantOpt = typer.Option([], "--variant", help="JAX:NAME=VALUE[;...]: a release under settings as one more contender "
                                                "(XLA_FLAGS=..., jax_* config options, environment variables).")
RetraceOpt = typer.Option(False, "--retrace", help="Run the bundle's program (its script's factory) in each "
                                                   "version's environment and lower it there, instead of the stored "
                                                   "program (replay: same as --mode retrace).")
PinOpt = typer.Option(None, "--pin", help="Run every version's worker on these CPUs (2, 0-3, 0,2 or auto: the last "
                                          "CPU, alone) with as many XLA threads: steadier timings, less realistic "
                                          "(a change that needs more threads is not seen).")


