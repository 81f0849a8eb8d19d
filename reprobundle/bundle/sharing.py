"""Sharing bundles: push / pull / copy between stores, shareable URLs and a bug-report snippet, garbage collection,
the blob cache, and the size advice for exported zips. The CLI calls these (through api) and prints what they return.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import statistics
import sys
from typing import Sequence

from ..config import default_store_url, settings
from ..errors import ReproBundleError, UsageError
from ..store import is_zip_url
from . import collection, transfer
from .cache import BlobCache
from .registry import Bundle, Registry, open_ref, split_store_ref


def store_args(registry: Registry) -> list[str]:
    """`--store URL` where the bundle is not in the default store (or a zip: its path is the ref)."""
    if registry.store.capabilities.single_file or os.path.abspath(registry.url) == os.path.abspath(default_store_url()):
        return []
    return ["--store", registry.url]


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
         jobs: int | None = None, runs: bool = True) -> transfer.TransferResult:
    """Copy the bundle `src_ref` (resolved in `store` unless it is a URL or .zip) into the store at `dest_url`, and
    its run records too unless `runs` is False."""
    source, bundle = open_ref(src_ref, store)
    dest = open_destination(dest_url)
    result = transfer.copy_bundle(source, bundle, dest, progress=progress, jobs=jobs)
    return transfer.copy_runs(source, bundle, dest, result, progress=progress, jobs=jobs) if runs else result


def push(ref: str, to: str, *, store: str | None = None, progress: transfer.Progress | None = None,
         jobs: int | None = None, runs: bool = True) -> transfer.TransferResult:
    """Copy a bundle of the current store (`store`, else $REPROBUNDLE_STORE or the default) to the store `to`, with
    its runs (so a shared registry shows the history) unless `runs` is False."""
    return copy(ref, to, store=store, progress=progress, jobs=jobs, runs=runs)


def pull(url: str, *, store: str | None = None, progress: transfer.Progress | None = None,
         jobs: int | None = None, runs: bool = True) -> transfer.TransferResult:
    """Copy the bundle at `url` (gs://BUCKET/PREFIX/NAME@V, a .zip, ...) into the current store, with its runs."""
    store_url, _ = split_store_ref(url)
    if store_url is None:
        raise UsageError(f"{url!r} is not a bundle URL",
                         hint="pull takes STORE_URL/NAME[@VERSION] (e.g. gs://bucket/prefix/name@3) or a .zip")
    source, bundle = open_ref(url)
    dest = Registry.open(store)
    result = transfer.copy_bundle(source, bundle, dest, progress=progress, jobs=jobs)
    return transfer.copy_runs(source, bundle, dest, result, progress=progress, jobs=jobs) if runs else result


def bundle_url(registry: Registry, bundle: Bundle) -> str:
    """A URL that names this bundle version wherever reprobundle runs and can reach the store (and that every
    command takes back as a ref)."""
    store = registry.store
    if store.capabilities.single_file:
        return store.url
    if store.capabilities.folder:
        return f"file://{store.url.rstrip('/')}/{bundle.ref.name}@{bundle.ref.version}"
    return bundle.ref.url


def _object_urls(registry: Registry, key: str) -> dict:
    """https URLs of one stored object, where its store has them (a bucket: download and console pages)."""
    return registry.store.object_urls(key)


def default_replay_versions(registry: Registry, bundle: Bundle) -> list[str]:
    """The two releases of the latest stored answer (a bisection's last good and first bad, an explanation's
    baseline and candidate): the replay that shows what it found. Without one, the JAX it was captured with, then
    the other versions its recorded runs used (newest runs last). A zip holds no runs or answers: those of its copy
    in the default local store (where `replay NAME.zip` puts them) count."""
    answered, _ = answer_replay(_recorded(registry, bundle, "answers"))
    if answered:
        return answered
    captured = _text(bundle.manifest.get("environment", {}).get("jax"))
    versions = [captured] if captured else []
    for run in _recorded(registry, bundle, "runs"):
        v = _text((run.get("environment") or {}).get("jax"))
        if v and v not in versions:
            versions.append(v)
    return versions[:4] or ["installed"]


_RELEASE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+:_-]{0,63}$")  # 0.4.38, 0.5.0.dev20240101, nightly:2025-10-03


def answer_replay(answers: Sequence[dict]) -> tuple[list[str], bool]:
    """The replay that shows what the latest bisection or explanation among `answers` (stored answer records,
    oldest first; a commit bisection or a minimization names no pair of releases) found: its two releases (a
    bisection's last good and first bad, an explanation's baseline and candidate, their labels' JAX without a mode
    or settings) and whether it found it retraced; ([], False) when it names none that reads as a release (a record
    is a stranger's data)."""
    pairs = [r for r in answers if r.get("kind") in ("bisection", "explanation")]
    if not pairs:
        return [], False
    a = pairs[-1].get("answer")
    a = a if isinstance(a, dict) else {}
    if pairs[-1].get("kind") == "explanation":
        named = [str(a.get(k) or "").split(" ", 1)[0] for k in ("baseline", "candidate")]
    else:
        named = [str(a.get(k) or "") for k in ("last_good", "first_bad")]
    if not all(_RELEASE.match(v) for v in named) or named[0] == named[1]:
        return [], False
    return named, a.get("mode") == "retrace"


def answered_pair(registry: Registry, bundle: Bundle) -> list[str]:
    """The two releases of the bundle's latest stored answer (its last good, then its first bad; [] without one):
    the baseline and candidate that explain and minimize take when none is named, so that outputs and times are
    judged against the last good release, never the one the bundle was packed on."""
    return answer_replay(_recorded(registry, bundle, "answers"))[0]


def _recorded(registry: Registry, bundle: Bundle, what: str) -> list[dict]:
    """The bundle's stored `what` ("runs" or "answers"); a read-only store's (a zip's): its copy's in the default
    local store."""
    try:
        source = Registry.open(None) if registry.store.read_only else registry
        return getattr(source, what)(bundle.ref.bundle_id)
    except ReproBundleError:
        if not registry.store.read_only:
            raise
        return []


def _text(value) -> str | None:
    """An environment value as text: the environment map is free-form data from the bundle, of any type."""
    return value if value is None or isinstance(value, str) else str(value)


def _leaf(leaf: dict) -> str:
    text = f"{leaf['dtype']}{list(leaf['shape'])}"
    if "synthetic" in leaf:
        text += f" (synthetic {leaf['synthetic']['distribution']})"
    return text


INSTALL_ENV = "REPROBUNDLE_INSTALL"


def install_line() -> str | None:
    """How a reader with nothing installs this reprobundle, when that is known: $REPROBUNDLE_INSTALL, else what pip
    recorded when it installed this copy (a git URL and commit, or a wheel URL; an index install means the version
    is published there). None for a copy installed from a local folder, which no one else can reach."""
    override = settings().install
    if override:
        return override
    # Installed copies only: metadata in site-packages (a source tree's egg-info says nothing of where it came from).
    installed = [p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    dist = next(iter(importlib.metadata.distributions(name="reprobundle", path=installed)), None)
    if dist is None:
        return None
    raw = dist.read_text("direct_url.json")
    if not raw:  # installed from an index (an installer left its name), or metadata of a source tree: unknown
        return f"pip install reprobundle=={dist.version}" if dist.read_text("INSTALLER") else None
    try:
        direct = json.loads(raw)
    except ValueError:
        return None
    url = str(direct.get("url") or "")
    if not url.startswith(("https://", "http://")):
        return None
    vcs = direct.get("vcs_info")
    if isinstance(vcs, dict):
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        return f'pip install "reprobundle @ {vcs.get("vcs", "git")}+{url}' + (f"@{commit}" if commit else "") + '"'
    return f'pip install "reprobundle @ {url}"'


def public_https_url(url: str) -> str | None:
    """The public https form of a gs:// URL (what a reader without credentials fetches, if the bucket is public)."""
    if url.startswith(("gs://", "gcs://")):
        return "https://storage.googleapis.com/" + url.split("://", 1)[1]
    return None


def standalone_lines(zip_name: str, versions: Sequence[str], download: str | None = None) -> list[str]:
    """Shell lines that replay a zip with nothing but Python: one environment per JAX version."""
    lines = [f"curl -LO {shlex.quote(download)}"] if download else []
    for v in [v for v in versions if v and v != "installed"][:3] or ["installed"]:
        if v == "installed":
            lines += ["pip install jax msgpack flatbuffers", f"python {shlex.quote(zip_name)}"]
            continue
        env = f"jax-{v}"
        lines += [f"python3 -m venv {env} && {env}/bin/pip install -q jax=={v} msgpack flatbuffers",
                  f"{env}/bin/python {shlex.quote(zip_name)}"]
    return lines


def reproduce_info(registry: Registry, bundle: Bundle, versions: Sequence[str], *,
                   extra_args: Sequence[str] = (), context: str = "report") -> dict:
    """What a Reproduce block says: where the bundle is (a bucket URL and its https form, an https zip, or a zip to
    attach), the exact `reprobundle replay ... --jax A --jax B` (relative to the attached zip), an install line,
    and for zips the commands that replay them with nothing but Python; `warning` when the store is not shareable.
    `versions` are concrete JAX versions (not "installed", which means something else on the reader's machine);
    `context`: "report" (the command made the report it is in) or "snippet" (`url`)."""
    store = registry.store
    name, version = bundle.ref.name, bundle.ref.version
    rep: dict = {"bundle": str(bundle.ref), "versions": list(versions), "install": install_line(), "context": context,
                 "shareable": store.capabilities.shareable, "attach": None, "export_command": None,
                 "https_url": None, "warning": None, "standalone": None}
    if store.capabilities.single_file:
        if "://" in store.url:  # a zip fetched from an https URL
            zip_name = store.url.rstrip("/").rsplit("/", 1)[-1]
            rep.update(kind="https-zip", url=store.url,
                       standalone=standalone_lines(zip_name, versions, download=store.url))
        else:
            zip_name = os.path.basename(store.url)
            rep.update(kind="zip", url=zip_name, attach=zip_name, standalone=standalone_lines(zip_name, versions))
    elif store.capabilities.shareable:
        rep.update(kind="store", url=bundle.ref.url, https_url=public_https_url(bundle.ref.url))
    else:
        zip_name = f"{name}-{version}.zip"
        export = f"reprobundle export {name}@{version} -o {zip_name}"
        if os.path.abspath(registry.url) != os.path.abspath(default_store_url()):
            export += f" --store {shlex.quote(registry.url)}"
        rep.update(kind="local", url=zip_name, attach=zip_name, export_command=export,
                   standalone=standalone_lines(zip_name, versions),
                   warning=f"{bundle.ref} is in a store only this machine can read ({registry.url}): attach the "
                           f"zip below, or push it to a bucket (`reprobundle push {bundle.ref} --to "
                           "gs://BUCKET/PREFIX`) and take `reprobundle url` from there")
    rep["command"] = ("reprobundle replay " + shlex.quote(rep["url"])
                      + "".join(f" --jax {shlex.quote(v)}" for v in versions)
                      + "".join(f" {shlex.quote(a)}" for a in extra_args))
    return rep


def share_info(ref: str, *, store: str | None = None, jax_versions: Sequence[str] = ()) -> dict:
    """Where a bundle is (store URL, https URL of its manifest) and a Markdown snippet for a bug report."""
    registry, bundle = open_ref(ref, store)
    m = bundle.manifest
    url = bundle_url(registry, bundle)
    key = f"bundles/{bundle.ref.name}/{bundle.ref.version}.msgpack"
    answered, retraced = answer_replay(_recorded(registry, bundle, "answers"))
    versions = _snippet_versions(registry, bundle, jax_versions)
    retrace = ["--retrace"] if retraced and versions == answered else []  # as the answer found it
    rep = reproduce_info(registry, bundle, versions, context="snippet", extra_args=retrace)
    env = m.get("environment") or {}
    samples = (m["reference"].get("timing") or {}).get("samples_ns") or []
    fields = m["function"]["fields"]
    info = {
        "bundle": str(bundle.ref),
        "bundle_id": bundle.ref.bundle_id,
        "store": registry.url,
        "url": url,
        "manifest_key": key,
        **_object_urls(registry, key),
        "shareable": rep["shareable"],
        "function": fields.get("fun_name"),
        "description": m.get("description", ""),
        "inputs": [_leaf(l) for l in m["inputs"]["leaves"]],
        "outputs": [_leaf(o) for o in m["reference"]["outputs"]],
        "environment": {k: _text(env.get(k)) for k in ("jax", "jaxlib", "python", "platform", "platform_version",
                                                        "os", "machine", "cpu_model")} | {"devices": _device_kinds(env)},
        "reference_median_ns": float(statistics.median(samples)) if samples else float("nan"),
        "reference_n": len(samples),
        "jax_versions": versions,
        "replay_command": rep["command"],
        "reproduce": rep,
    }
    if rep["warning"]:
        info["note"] = rep["warning"]
    return info


def _snippet_versions(registry: Registry, bundle, jax_versions: Sequence[str]) -> list[str]:
    """The versions the snippet replays: those given, else the defaults; `installed` named as the captured jax."""
    versions = list(jax_versions) or default_replay_versions(registry, bundle)
    captured = _text((bundle.manifest.get("environment") or {}).get("jax"))
    return [captured if v == "installed" and captured else v for v in versions]


def _device_kinds(env: dict) -> list[str]:
    listed = env.get("devices")  # the environment section is free-form: whatever the stranger's file says
    return sorted({_text(d.get("kind") or d.get("platform")) or "?"
                   for d in (listed if isinstance(listed, list) else []) if isinstance(d, dict)})


def gc(store: str | None = None, *, delete: bool = False, grace_s: float | None = None) -> dict:
    """Blobs that no manifest or run references, no running writer holds and nobody used for the grace period
    (`grace_s`; None: $REPROBUNDLE_GC_GRACE or 24 h), with their sizes; removed only with delete=True. Also says
    what it kept and why, and which records it could not read (see bundle/collection.py)."""
    registry = Registry.open(store)
    report = registry.collect(delete=delete, grace_s=grace_s)
    if delete:  # and what killed reprobundle processes left on this machine
        report.temp_removed += collection.sweep_scratch()
    blobs = [{"key": k, "digest": "sha256:" + k.rsplit("/", 1)[-1], "bytes": report.sizes.get(k, 0)}
             for k in report.deleted]
    return {"store": registry.url, "dry_run": not delete, "blobs": blobs, "count": len(blobs),
            "bytes": sum(b["bytes"] for b in blobs), "grace_s": report.grace_s,
            "kept": {"recent": len(report.kept_recent), "unknown_age": len(report.kept_unknown_age),
                     "leased": len(report.kept_leased), "unaccounted": len(report.kept_unaccounted)},
            "unreadable": [{"key": k, "reason": why} for k, why in report.unreadable],
            "temp_removed": report.temp_removed}


def cache_info() -> dict:
    u = BlobCache.default().usage()
    return {"root": u.root, "blobs": u.blobs, "bytes": u.bytes, "max_bytes": u.max_bytes}


def cache_clear() -> dict:
    """Empty the blob cache, and the downloads of https zips beside it (<cache>/http)."""
    import shutil

    from ..config import cache_dir
    from ..store.safe_folders import inside

    u = BlobCache.default().clear()
    downloads = inside(cache_dir(), "http")
    nbytes = sum(p.stat().st_size for p in downloads.glob("*") if p.is_file()) if downloads.is_dir() else 0
    shutil.rmtree(downloads, ignore_errors=True)
    return {"root": u.root, "removed_blobs": u.blobs, "removed_bytes": u.bytes + nbytes}


