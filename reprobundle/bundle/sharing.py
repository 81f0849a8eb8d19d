"""Sharing bundles: push / pull / copy between stores, shareable URLs and a bug-report snippet, garbage collection,
the blob cache, and the size advice for exported zips. The CLI calls these (through api) and prints what they return.
"""

from __future__ import annotations

import shlex
import statistics
from typing import Sequence

from ..errors import UsageError
from ..store import is_zip_url
from ..store.local import LocalStore
from ..store.zip_store import ZipStore
from . import transfer
from .blobs import pool_map
from .cache import BlobCache
from .registry import Bundle, Registry, open_ref, split_store_ref

# ------------------------------------------------------------------------------------------ push/pull/copy


def open_destination(url: str) -> Registry:
    """The registry a bundle is copied into; a .zip is not a destination (`export` writes those)."""
    if not url:
        raise UsageError("no destination store given", hint="give a folder, file://, gs://BUCKET/PREFIX or memory://")
    if is_zip_url(str(url)):
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


def bundle_url(registry: Registry, bundle: Bundle) -> str:
    """A URL that names this bundle version wherever reprobundle runs and can reach the store."""
    store = registry.store
    if isinstance(store, ZipStore):
        return store.url
    if isinstance(store, LocalStore):
        return f"file://{store.url.rstrip('/')}/{bundle.ref.name}@{bundle.ref.version}"
    return bundle.ref.url


def _object_urls(registry: Registry, key: str) -> dict:
    """https URLs of one stored object, where its store has them (a bucket: download and console pages)."""
    return registry.store.object_urls(key)


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
    samples = (m["reference"].get("timing") or {}).get("samples_ns") or []
    fields = m["function"]["fields"]
    devices = sorted({_text(d.get("kind") or d.get("platform")) or "?" for d in env.get("devices") or []
                      if isinstance(d, dict)})
    shareable = registry.store.capabilities.shareable
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
        "reference_median_ns": float(statistics.median(samples)) if samples else float("nan"),
        "reference_n": len(samples),
        "jax_versions": versions,
        "replay_command": command,
    }
    if not shareable:
        info["note"] = ("this bundle is in a store only this machine can read; share it with "
                        "`reprobundle push REF --to gs://BUCKET/PREFIX` (or `reprobundle export`) first")
    return info


def gc(store: str | None = None, *, delete: bool = False) -> dict:
    """Blobs that no manifest or run references, with their sizes; removed only with delete=True."""
    registry = Registry.open(store)
    if delete:
        registry.store.check_writable()
    keys = registry.gc(dry_run=True)
    sizes = dict(zip(keys, pool_map(registry.store.size, keys, 16)))
    if delete:  # also with no dead blob: it clears the stale temp files of killed writers
        keys = registry.gc(dry_run=False)  # derived again right before deleting: what is referenced by now stays
    blobs = [{"key": k, "digest": "sha256:" + k.rsplit("/", 1)[-1], "bytes": sizes.get(k, 0)} for k in keys]
    return {"store": registry.url, "dry_run": not delete, "blobs": blobs, "count": len(blobs),
            "bytes": sum(b["bytes"] for b in blobs)}


def cache_info() -> dict:
    u = BlobCache.default().usage()
    return {"root": u.root, "blobs": u.blobs, "bytes": u.bytes, "max_bytes": u.max_bytes}


def cache_clear() -> dict:
    u = BlobCache.default().clear()
    return {"root": u.root, "removed_blobs": u.blobs, "removed_bytes": u.bytes}


