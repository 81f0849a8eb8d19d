"""Commands that move bundles between stores: push, pull, copy, url, gc, cache. The library loads inside each
command (only what it uses): loading this module must cost nothing beyond typer (tests/test_startup.py)."""

from __future__ import annotations

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


def _transfer_progress(as_json: bool, label: str):
    if as_json:
        return None
    from ..render.sharing import byte_progress

    return byte_progress(label, lambda line: typer.echo(line, err=True))


JobsOpt = typer.Option(None, "--jobs", min=1, help="Parallel blob transfers (default 8; GCS uses its own pool).")
NoRunsOpt = typer.Option(False, "--no-runs", help="Copy the bundle only, not its run records (the replay history).")


@app.command("push")
def push_cmd(ref: str, to: str = typer.Option(..., "--to", help="Destination store: gs://BUCKET/PREFIX, a folder..."),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle and its runs to another store, sending only the blobs it lacks."""
    from .. import api
    from ..render.sharing import transfer_text

    result = api.push(ref, to, store=store, progress=_transfer_progress(as_json, f"push {ref}"), jobs=jobs,
                      runs=not no_runs)
    emit(as_json, result.data(), transfer_text(result, "pushed"))


@app.command("pull")
def pull_cmd(url: str = typer.Argument(..., help="STORE_URL/NAME[@VERSION], e.g. gs://bucket/prefix/name@3, or a .zip"),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle (and its runs) from another store into the current one."""
    from .. import api
    from ..render.sharing import transfer_text

    result = api.pull(url, store=store, progress=_transfer_progress(as_json, f"pull {url}"), jobs=jobs,
                      runs=not no_runs)
    emit(as_json, result.data(), transfer_text(result, "pulled"))


@app.command("copy")
def copy_cmd(src_ref: str = typer.Argument(..., metavar="SRC_REF"),
             dest_url: str = typer.Argument(..., metavar="DEST_URL", help="Destination store URL or folder."),
             jobs: Optional[int] = JobsOpt, no_runs: bool = NoRunsOpt, store: Optional[str] = StoreOpt,
             as_json: bool = JsonOpt) -> None:
    """Copy a bundle and its runs between any two stores (a .zip may be the source)."""
    from .. import api
    from ..render.sharing import transfer_text

    result = api.copy(src_ref, dest_url, store=store, progress=_transfer_progress(as_json, f"copy {src_ref}"),
                      jobs=jobs, runs=not no_runs)
    emit(as_json, result.data(), transfer_text(result, "copied"))


@app.command("url")
def url_cmd(ref: str,
            jax_versions: List[str] = typer.Option([], "--jax", help="Versions for the replay command (repeatable; "
                                                                     "default: captured + those of recorded runs)."),
            store: Optional[str] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """The bundle's URLs and a Markdown snippet for a bug report, with the command that replays it."""
    from ..bundle import sharing
    from ..render.sharing import share_text, with_snippet

    # api.share_info's two calls, made here so that `url` does not load the whole library to start
    info = with_snippet(sharing.share_info(ref, store=store, jax_versions=jax_versions))
    emit(as_json, info, share_text(info))  # a store only this machine reads: the snippet itself says so


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
    from .. import api

    data = api.gc(store, delete=delete, grace_s=grace_s)
    emit(as_json, data, gc_text(data))


@app.command("cache")
def cache_cmd(clear: bool = typer.Option(False, "--clear", help="Empty the cache."), as_json: bool = JsonOpt) -> None:
    """Size of the local cache of blobs read from remote stores (or --clear it)."""
    from ..bundle import sharing
    from ..render.sharing import cache_text

    data = sharing.cache_clear() if clear else sharing.cache_info()  # as api's, without loading the whole library
    emit(as_json, data, cache_text(data))

