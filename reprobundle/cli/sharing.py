"""Commands that move bundles between stores and into bug reports: push, pull, copy, url, script, issue, gc,
cache. The library loads inside each command (only what it uses): loading this module must cost nothing beyond
typer (tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ..text import clean
from .common import (
    JsonOpt,
    StoreOpt,
    app,
    emit,
)


def _transfer_progress(label: str):
    from ..render.sharing import byte_progress

    return byte_progress(label, lambda line: typer.echo(line, err=True))


JobsOpt = typer.Option(None, "--jobs", min=1, help="Parallel blob transfers (default 8; GCS uses its own pool).")
NoRunsOpt = typer.Option(False, "--no-runs", help="Copy the bundle only, not its run records (the replay history).")


@app.command("push")
def push_cmd(ref: str, to: str = typer.Option(..., "--to", help="Destination store: gs://BUCKET/PREFIX, a folder..."),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle and its runs to another store, sending only the blobs it lacks."""
    from ..bundle import sharing
    from ..render.sharing import transfer_text

    # as api's, without loading the whole library: a transfer needs no JAX, numpy or run/ (tests/test_startup.py)
    result = sharing.push(ref, to, store=store, progress=_transfer_progress(f"push {ref}"), jobs=jobs,
                      runs=not no_runs)
    emit(as_json, result.data(), transfer_text(result, "pushed"))


@app.command("pull")
def pull_cmd(url: str = typer.Argument(..., help="STORE_URL/NAME[@VERSION], e.g. gs://bucket/prefix/name@3, or a .zip"),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle (and its runs) from another store into the current one."""
    from ..bundle import sharing
    from ..render.sharing import transfer_text

    result = sharing.pull(url, store=store, progress=_transfer_progress(f"pull {url}"), jobs=jobs,
                      runs=not no_runs)
    emit(as_json, result.data(), transfer_text(result, "pulled"))


@app.command("copy")
def copy_cmd(src_ref: str = typer.Argument(..., metavar="SRC_REF"),
             dest_url: str = typer.Argument(..., metavar="DEST_URL", help="Destination store URL or folder."),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle and its runs between any two stores (a .zip may be the source)."""
    from ..bundle import sharing
    from ..render.sharing import transfer_text

    result = sharing.copy(src_ref, dest_url, store=store, progress=_transfer_progress(f"copy {src_ref}"),
                      jobs=jobs, runs=not no_runs)
    emit(as_json, result.data(), transfer_text(result, "copied"))


@app.command("url")
def url_cmd(ref: str,
            jax_versions: List[str] = typer.Option([], "--jax", help=(
                "Versions for the replay command (repeatable; default: the latest stored answer's last good and "
                "first bad release, else captured + those of recorded runs).")),
            store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """The bundle's URLs and a Markdown snippet for a bug report, with the command that replays it."""
    from ..bundle import sharing
    from ..render.sharing import share_text, with_snippet

    # api.share_info's two calls, made here so that `url` does not load the whole library to start
    info = with_snippet(sharing.share_info(ref, store=store, jax_versions=jax_versions))
    emit(as_json, info, share_text(info))  # a store only this machine reads: the snippet itself says so


@app.command("script")
def script_cmd(ref: str,
               out: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the script to this file "
                                                  "(default: print it)."),
               hlo: Optional[Path] = typer.Option(None, "--hlo", metavar="DIR", help="Write the HLO before and after "
                                                  "XLA's passes into DIR and print the run_hlo_module line, for XLA's "
                                                  "tracker."),
               store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """A standalone Python reproducer that runs with only jax and numpy (exit 0 as the reference, 1 the
    difference, 3 could not run); refused past 64 KiB (export the zip then)."""
    from ..bundle.frozen_script import write_hlo
    from ..investigate.report.script_plan import write_script

    if hlo is not None:
        data = write_hlo(ref, hlo, store=store)
        files = "\n".join(f"  {path}" for path in data["files"].values())
        emit(as_json, data, f"{clean(data['bundle'])}: HLO written\n{files}\n\nIn {clean(str(hlo))}:\n"
                            f"  {clean(data['command'], None)}")
        if out is None:
            return
    data = write_script(ref, out, store=store)
    if out is None:
        emit(as_json, data, data["script"])
        return
    emit(as_json, {k: v for k, v in data.items() if k != "script"},
         f"{clean(data['bundle'])}: wrote {clean(str(out))} ({data['bytes'] / 1024:.1f} KiB); run it with python "
         f"{clean(str(out))} (needs only jax and numpy)")


@app.command("issue")
def issue_cmd(ref: str,
              tracker: Optional[str] = typer.Option(None, "--tracker", help="jax or xla: the form of the report "
                                                    "(default: xla for a piece minimize reduced, else jax)."),
              open_url: bool = typer.Option(False, "--open", help="Print the tracker's new-issue URL with the title "
                                            "filled in (nothing is sent)."),
              out: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the body to this file."),
              run_id: Optional[str] = typer.Option(None, "--run", metavar="RUN_ID", help="Report the stored replay "
                                                   "holding this run (default: the latest that timed releases "
                                                   "together)."),
              attach: Optional[Path] = typer.Option(None, "--attach", metavar="DIR", help="Write the bundle's zip "
                                                    "into DIR, to attach to the issue (the body then says it is)."),
              jax_repo: Optional[str] = typer.Option(None, "--jax-repo", metavar="PATH|URL", help="A JAX git "
                                                     "repository whose release notes say whether a changed default "
                                                     "was intended (default: the clone bisect-commits keeps in the cache)."),
              store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """A Markdown issue body ready to paste: the measured difference, the replay it comes from, the reproducer
    script, each compared release's environment, the program, the bundle's Reproduce block."""
    from ..bundle.frozen_script import write_text
    from ..investigate.report.issue_facts import issue_data
    from ..render.issue import before_posting, issue_markdown, issue_text

    data = issue_data(ref, store=store, tracker=tracker, run_id=run_id, attach=attach, jax_repo=jax_repo)
    body = issue_markdown(data)
    if out is not None:
        write_text(out, body)
    if open_url or out is not None:
        todo = before_posting(data)
        lines = [f"Title: {clean(data['title'])}"] + ([f"Body: {clean(str(out))}"] if out is not None else []) \
            + ([clean(todo, 600)] if todo else [])
        lines += [f"Open: {data['open_url']}"] if open_url else []
        emit(as_json, {**data, "body": body}, "\n".join(lines))
        return
    emit(as_json, {**data, "body": body}, issue_text(data))


@app.command("gc")
def gc_cmd(delete: bool = typer.Option(False, "--delete", help="Remove them (default: only list them)."),
           grace: Optional[str] = typer.Option(None, "--grace", help="Keep blobs used more recently than this "
                                               "(90s, 30m, 6h, 2d; 0: any age). Default: $REPROBUNDLE_GC_GRACE or "
                                               "24h, so a pack or push still running keeps what it wrote."),
           store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """List (or remove) blobs that no bundle or run references (and no running pack, replay or push holds)."""
    from ..render.sharing import gc_text
    from ..units import parse_duration

    try:
        grace_s = None if grace is None else parse_duration(grace)
    except ValueError:
        raise UsageError(f"--grace {clean(grace, 40)} is not a duration",
                         hint="write seconds, or a number with s, m, h or d (e.g. 6h)") from None
    from ..bundle import sharing

    data = sharing.gc(store, delete=delete, grace_s=grace_s)  # as api's, without loading the whole library
    emit(as_json, data, gc_text(data))


@app.command("cache")
def cache_cmd(clear: bool = typer.Option(False, "--clear", help="Empty the cache."), as_json: bool = JsonOpt) -> None:
    """Size of the local cache of blobs read from remote stores (or --clear it)."""
    from ..bundle import sharing
    from ..render.sharing import cache_text

    data = sharing.cache_clear() if clear else sharing.cache_info()  # as api's, without loading the whole library
    emit(as_json, data, cache_text(data))

