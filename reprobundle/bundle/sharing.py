"""Sharing bundles: push / pull / copy between stores, shareable URLs and a bug-report snippet, garbage collection,
the blob cache, and the size advice for exported zips. The CLI calls these (through api) and prints what they return.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import quote

from ..analysis.verdict import TimingSummary
from ..errors import UsageError
from ..render.text import human_bytes, human_ns
from ..store.base import LocalStore, ZipStore, _is_zip_url
from . import transfer
from .registry import Bundle, Registry, open_ref, split_store_ref

GITHUB_ATTACHMENT_LIMIT = 25_000_000  # bytes; GitHub refuses larger issue attachments ("25 MB")
GCS_ENDPOINT = "https://storage.googleapis.com"
GCS_CONSOLE = "https://console.cloud.google.com/storage/browser"


# ------------------------------------------------------------------------------------------ push/pull/copy


def open_destination(url: str) -> Registry:
    """The registry a bundle is copied into; a .zip is not a destination (`export` writes those)."""
    if not url:
        raise UsageError("no destination store given", hint="give a folder, file://, gs://BUCKET/PREFIX or memory://")
    if _is_zip_url(str(url)):
        raise UsageError(f"cannot copy into the .zip {url}",
                         hint="write a single-file bundle with `reprobundle export REF -o FILE.zip`")
    return Registry.open(url)


def copy(src_ref: str, dest_url: str, *, store: str | None = None, progress: transfer.Progress | None = None,
         jobs: int | None = None) -> transfer.TransferResult:
    """Copy the bundle `src_ref` (resolved in `store` unless it is a URL or .zip) into the store at `dest_url`."""
    source, bundle = open_ref(src_ref, store)
    return transfer.copy_bundle(source, bundle, open_destination(dest_url), progress=progress, jobs=jobs)


def push(ref: str, to: str, *, store: str | None = None, progress: transfer.Progress | None = None,
         jobs: int | None = None) -> transfer.TransferResult:
    """Copy a bundle of the current store (`store`, else $REPROBUNDLE_STORE or the default) to the store `to`."""
    return copy(ref, to, store=store, progress=progress, jobs=jobs)


def pull(url: str, *, store: str | None = None, progress: transfer.Progress | None = None,
         jobs: int | None = None) -> transfer.TransferResult:
    """Copy the bundle at `url` (gs://BUCKET/PREFIX/NAME@V, a .zip, ...) into the current store."""
    store_url, _ = split_store_ref(url)
    if store_url is None:
        raise UsageError(f"{url!r} is not a bundle URL",
                         hint="pull takes STORE_URL/NAME[@VERSION] (e.g. gs://bucket/prefix/name@3) or a .zip")
    source, bundle = open_ref(url)
    dest = Registry.open(store)
    return transfer.copy_bundle(source, bundle, dest, progress=progress, jobs=jobs)


def transfer_text(result: transfer.TransferResult, verb: str = "copied") -> str:
    d = result.data()
    if result.outcome == "present":
        head = f"{result.source} is already in {result.ref.store_url} as {result.ref}: nothing published"
    elif result.outcome == "kept":
        head = f"{verb} {result.source} to {result.ref.store_url} as {result.ref} (version kept)"
    else:
        head = (f"{verb} {result.source} to {result.ref.store_url} as {result.ref} "
                f"(version {result.source.version} is taken there)")
    what = f"{d['blobs_sent']} blobs" + (" and the manifest" if result.outcome != "present" else "")
    return (f"{head}\n"
            f"  sent {human_bytes(d['bytes_sent'])} ({what}), skipped {d['blobs_skipped']} blobs "
            f"({human_bytes(d['bytes_skipped'])}) already there, in {d['seconds']:.1f} s\n"
            f"  {result.ref.url}")


# ------------------------------------------------------------------------------------------------- url


def bundle_url(registry: Registry, bundle: Bundle) -> str:
    """A URL that names this bundle version wherever reprobundle runs and can reach the store."""
    store = registry.store
    if isinstance(store, ZipStore):
        return store.url
    if isinstance(store, LocalStore):
        return f"file://{store.url.rstrip('/')}/{bundle.ref.name}@{bundle.ref.version}"
    return bundle.ref.url


def _object_urls(registry: Registry, key: str) -> dict:
    """https URLs of one stored object: the JSON/XML API download URL and, on GCS, the Cloud console page."""
    store = registry.store
    if hasattr(store, "bucket") and hasattr(store, "endpoint"):  # GCSStore
        name = f"{store.prefix}/{key}" if store.prefix else key
        endpoint = store.endpoint.rstrip("/")
        if endpoint != GCS_ENDPOINT:  # an emulator or private endpoint: its JSON-API download URL
            return {"https_url": f"{endpoint}/storage/v1/b/{store.bucket}/o/{quote(name, safe='')}?alt=media"}
        return {"https_url": f"{endpoint}/{store.bucket}/{quote(name)}",
                "console_url": f"{GCS_CONSOLE}/_details/{store.bucket}/{quote(name)}"}
    if isinstance(store, LocalStore):
        return {"https_url": None, "file_url": (Path(store.url) / key).as_uri()}
    return {"https_url": None}


def default_replay_versions(registry: Registry, bundle: Bundle) -> list[str]:
    """The JAX it was captured with, then the other versions its recorded runs used (newest runs last)."""
    captured = _text(bundle.manifest.get("environment", {}).get("jax"))
    versions = [captured] if captured else []
    if not registry.store.read_only:
        for run in registry.runs(bundle.ref.bundle_id):
            v = _text((run.get("environment") or {}).get("jax"))
            if v and v not in versions:
                versions.append(v)
    return versions[:4] or ["installed"]


def _text(value) -> str | None:
    """An environment value as text: the environment map is free-form data from the bundle, of any type."""
    return value if value is None or isinstance(value, str) else str(value)


def _leaf(leaf: dict) -> str:
    text = f"{leaf['dtype']}{list(leaf['shape'])}"
    if "synthetic" in leaf:
        text += f" (synthetic {leaf['synthetic']['distribution']})"
    return text


def share_info(ref: str, *, store: str | None = None, jax_versions: Sequence[str] = ()) -> dict:
    """Where a bundle is (store URL, https URL of its manifest) and a Markdown snippet for a bug report."""
    registry, bundle = open_ref(ref, store)
    m = bundle.manifest
    url = bundle_url(registry, bundle)
    key = f"bundles/{bundle.ref.name}/{bundle.ref.version}.msgpack"
    versions = list(jax_versions) or default_replay_versions(registry, bundle)
    command = "reprobundle replay " + shlex.quote(url) + "".join(f" --jax {shlex.quote(v)}" for v in versions)
    env = m.get("environment") or {}
    timing = TimingSummary.of((m["reference"].get("timing") or {}).get("samples_ns") or [])
    fields = m["function"]["fields"]
    devices = sorted({_text(d.get("kind") or d.get("platform")) or "?" for d in env.get("devices") or []
                      if isinstance(d, dict)})
    shareable = not isinstance(registry.store, (LocalStore, ZipStore)) and not registry.url.startswith("memory://")
    info = {
        "bundle": str(bundle.ref),
        "bundle_id": bundle.ref.bundle_id,
        "store": registry.url,
        "url": url,
        "manifest_key": key,
        **_object_urls(registry, key),
        "shareable": shareable,
        "function": fields.get("fun_name"),
        "description": m.get("description", ""),
        "inputs": [_leaf(l) for l in m["inputs"]["leaves"]],
        "outputs": [_leaf(o) for o in m["reference"]["outputs"]],
        "environment": {k: _text(env.get(k)) for k in ("jax", "jaxlib", "python", "platform", "platform_version",
                                                        "os", "machine", "cpu_model")} | {"devices": devices},
        "reference_median_ns": timing.median_ns,
        "reference_n": timing.n,
        "jax_versions": versions,
        "replay_command": command,
    }
    if not shareable:
        info["note"] = ("this bundle is in a store only this machine can read; share it with "
                        "`reprobundle push REF --to gs://BUCKET/PREFIX` (or `reprobundle export`) first")
    info["markdown"] = markdown_snippet(info)
    return info


def markdown_snippet(info: dict) -> str:
    env = info["environment"]
    where = f"`{info['url']}`"
    if info.get("https_url"):
        where += f" ([manifest]({info['https_url']}))"
    captured = ", ".join(filter(None, [
        f"jax {env.get('jax') or '?'}", f"jaxlib {env.get('jaxlib') or '?'}", f"Python {env.get('python') or '?'}",
        f"backend {env.get('platform') or '?'}" + (f" ({', '.join(env['devices'])})" if env.get("devices") else ""),
        env.get("os"), env.get("cpu_model"),
    ]))
    median = info["reference_median_ns"]
    lines = [f"**Reproducer:** reprobundle bundle `{info['bundle']}` (id `{info['bundle_id'][:19]}`)", ""]
    if info["description"]:
        lines += [f"> {info['description']}", ""]
    lines += [
        f"- **Function:** `{info['function']}`",
        "- **Inputs:** " + (", ".join(f"`{i}`" for i in info["inputs"]) or "none"),
        "- **Outputs:** " + (", ".join(f"`{o}`" for o in info["outputs"]) or "none"),
        f"- **Captured on:** {captured}",
        f"- **Reference time:** median {human_ns(median)} over {info['reference_n']} calls",
        f"- **Bundle:** {where}",
        "",
        "Replay it (`pip install reprobundle`):",
        "",
        "```sh",
        info["replay_command"],
        "```",
    ]
    return "\n".join(lines)


def share_text(info: dict) -> str:
    lines = [f"{info['bundle']}  {info['bundle_id']}", f"  url:      {info['url']}"]
    if info.get("https_url"):
        lines.append(f"  https:    {info['https_url']}")
    if info.get("console_url"):
        lines.append(f"  console:  {info['console_url']}")
    if info.get("file_url"):
        lines.append(f"  file:     {info['file_url']}")
    lines += [f"  replay:   {info['replay_command']}", "", info["markdown"]]
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------- gc


def gc(store: str | None = None, *, delete: bool = False) -> dict:
    """Blobs that no manifest or run references, with their sizes; removed only with delete=True."""
    registry = Registry.open(store)
    if delete:
        registry.store._check_writable()
    keys = registry.gc(dry_run=True)
    sizes = dict(zip(keys, transfer._pool_map(registry.store.size, keys, 16)))
    if delete:  # also with no dead blob: it clears the stale temp files of killed writers
        keys = registry.gc(dry_run=False)  # derived again right before deleting: what is referenced by now stays
    blobs = [{"key": k, "digest": "sha256:" + k.rsplit("/", 1)[-1], "bytes": sizes.get(k, 0)} for k in keys]
    return {"store": registry.url, "dry_run": not delete, "blobs": blobs, "count": len(blobs),
            "bytes": sum(b["bytes"] for b in blobs)}


def gc_text(data: dict) -> str:
    lines = [f"  {b['digest']}  {human_bytes(b['bytes'])}" for b in data["blobs"][:50]]
    if data["count"] > 50:
        lines.append(f"  ... and {data['count'] - 50} more")
    total = f"{data['count']} unreferenced blobs ({human_bytes(data['bytes'])}) in {data['store']}"
    if data["dry_run"]:
        tail = f"would remove {total}" + ("; rerun with --delete to remove them" if data["count"] else "")
    else:
        tail = f"removed {total}"
    return "\n".join(lines + [tail])


# ----------------------------------------------------------------------------------------------- cache


def cache_info() -> dict:
    u = transfer.BlobCache.default().usage()
    return {"root": u.root, "blobs": u.blobs, "bytes": u.bytes, "max_bytes": u.max_bytes}


def cache_clear() -> dict:
    u = transfer.BlobCache.default().clear()
    return {"root": u.root, "removed_blobs": u.blobs, "removed_bytes": u.bytes}


def cache_text(data: dict) -> str:
    if "removed_blobs" in data:
        return f"removed {data['removed_blobs']} blobs ({human_bytes(data['removed_bytes'])}) from {data['root']}"
    return (f"{data['root']}: {data['blobs']} blobs, {human_bytes(data['bytes'])} of "
            f"{human_bytes(data['max_bytes'])} ({transfer.CACHE_MAX_ENV})")


# ---------------------------------------------------------------------------------------------- export


def export_size_warning(bundle: Bundle, size: int, limit: int = GITHUB_ATTACHMENT_LIMIT) -> str | None:
    """A warning when an exported zip is too big to attach to a GitHub issue, with what would make it fit."""
    if size <= limit:
        return None
    m = bundle.manifest
    inputs = sum(l["blob"]["size"] for l in m["inputs"]["leaves"] if "blob" in l)
    dump = (m.get("artifacts") or {}).get("xla_dump")
    ways = []
    if inputs:
        ways.append(f"pack with --synthetic-inputs (the stored inputs are {human_bytes(inputs)})")
    if dump:
        ways.append(f"pack with --no-dump (the XLA dump folder is {human_bytes(dump['blob']['size'])})")
    ways.append("or share it through a store instead: `reprobundle push REF --to gs://BUCKET/PREFIX`, then "
                "`reprobundle url`")
    return (f"warning: the zip is {human_bytes(size)}, over GitHub's 25 MB attachment limit; to fit: "
            + "; ".join(ways))


# ------------------------------------------------------------------------------------------- rendering


def byte_progress(label: str, echo: Callable[[str], None], *, every_s: float = 1.0) -> transfer.Progress:
    """A plain-text progress line (at most one per `every_s` seconds, and the last one) for transfer.copy_bundle."""
    import time

    state = {"last": 0.0, "shown_done": False}

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if (now - state["last"] < every_s and not finished) or (finished and state["shown_done"]):
            return
        state["last"] = now
        state["shown_done"] = finished
        pct = 100.0 * done / total if total else 100.0
        echo(f"{label}: {human_bytes(done)} / {human_bytes(total)} ({pct:.0f}%)")

    return show
