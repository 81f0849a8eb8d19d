"""Garbage collection: the blobs of a store that no manifest or run record references, deleted safely.

A blob is deleted only when all of these hold:
- no record references it. Records gc cannot read are reported; one that still decodes as a msgpack map (a newer
  format, a schema violation) keeps every `sha256:` digest it mentions anywhere; one whose bytes cannot be read or
  decoded at all (truncated, garbage, unreadable) may name any blob, so nothing is deleted while it is there.
- no running writer holds it. A pack, replay or push holds the keys it writes or reuses before its manifest or run
  record names them: on a folder store by a lease (a locked file in `.tmp`, see store/scratch.py), which gc reads
  under a gate that keeps writers from taking new keys while it deletes.
- it is older than the grace period (REPROBUNDLE_GC_GRACE, `gc --grace`; default 24 h): what a writer wrote or
  found already stored is touched, so the grace period counts from its last use. On backends without leases this
  is what protects a running writer; a blob whose age the backend cannot tell is kept while there is a grace period.
Records published while gc runs are read again under the gate before anything is deleted, so a writer that
published and dropped its lease meanwhile is seen by its manifest.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..config import cache_dir
from ..errors import NotFoundError, ReproBundleError
from ..store.safe_folders import inside
from ..store.scratch import sweep, temp_folder
from ..text import first_line
from . import manifest as mf
from .blobs import pool_map

log = logging.getLogger(__name__)

_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_DIGEST_BYTES_RE = re.compile(rb"sha256:[0-9a-f]{64}")
# in the temp folder (capture/, run/, investigate/)
SCRATCH_PREFIXES = ("reprobundle-pack-", "reprobundle-replay-", "reprobundle-isolate-")


@dataclass
class GcReport:
    """What one gc found and did. Blob lists hold store keys (`blobs/sha256/ab/<hex>`)."""

    store: str
    dry_run: bool
    grace_s: float
    deleted: list[str] = field(default_factory=list)  # removed (a dry run: would be removed)
    sizes: dict[str, int] = field(default_factory=dict)  # bytes of the blobs in `deleted`
    kept_recent: list[str] = field(default_factory=list)  # unreferenced, but used within the grace period
    kept_unknown_age: list[str] = field(default_factory=list)  # unreferenced, of an age the backend cannot tell
    kept_leased: list[str] = field(default_factory=list)  # unreferenced, held by a running writer
    kept_unaccounted: list[str] = field(default_factory=list)  # unreferenced, kept because of unreadable records
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # records gc could not read: (key, why)
    temp_removed: int = 0


@dataclass
class _Records:
    live: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    opaque: bool = False  # a record whose references cannot be known


def _record_keys(store) -> list[str]:
    return [k for prefix in ("bundles", "runs") for k in store.list(prefix) if k.endswith(".msgpack")]


def _digests_in(obj: Any) -> set[str]:
    """Every digest string anywhere in a decoded map (keys included)."""
    found: set[str] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found.update(_DIGEST_RE.findall(item))
    return found


def _read_records(store, keys: Iterable[str], records: _Records) -> None:
    for key in keys:
        if key in records.seen:
            continue
        records.seen.add(key)
        try:
            data = store.get_bounded(key, mf.MAX_MANIFEST_BYTES)
        except NotFoundError:
            continue  # removed meanwhile
        except ReproBundleError as e:
            records.unreadable.append((key, first_line(e.message, 160)))
            records.opaque = True
            continue
        decode = mf.decode_manifest if key.startswith("bundles/") else mf.decode_run
        try:
            records.live.update(r["digest"] for r in mf.blob_refs(decode(data)))
            continue
        except ReproBundleError as e:
            records.unreadable.append((key, first_line(e.message, 160)))
        try:  # a map still: a newer format or a schema violation; keep whatever it names
            records.live.update(_digests_in(mf.decode_map(data, key)))
        except ReproBundleError:  # not even that: it may have named any blob
            records.live.update(d.decode() for d in _DIGEST_BYTES_RE.findall(data))
            records.opaque = True


def _digest_of(key: str) -> str:
    return "sha256:" + key.rsplit("/", 1)[-1]


def collect(registry, *, delete: bool, grace_s: float, now: float | None = None) -> GcReport:
    """Find (and with `delete`, remove) the unreferenced blobs of `registry`'s store; see the module docstring."""
    registry.check_marker(create=False)
    store = registry.store
    store.check_folders()  # nothing is walked or deleted through a link (a store may come from someone else)
    if delete:
        store.check_writable()
    report = GcReport(store=store.url, dry_run=not delete, grace_s=grace_s)
    records = _Records()
    _read_records(store, _record_keys(store), records)
    candidates = [k for k in store.list("blobs") if _digest_of(k) not in records.live]
    cutoff = None if grace_s <= 0 else (time.time() if now is None else now) - grace_s
    with store.collecting(exclude=getattr(registry, "lease_in_use", None)) as leased:
        _read_records(store, _record_keys(store), records)  # published since the first look
        deletable = _deletable(candidates, records, leased, cutoff, store, report)
        report.unreadable = records.unreadable
        report.sizes = dict(zip(deletable, pool_map(_size_or_zero(store), deletable, 16)))
        if delete:
            report.deleted = [k for k in deletable if store.delete_if_stale(k, cutoff)]
            report.sizes = {k: report.sizes[k] for k in report.deleted}
        else:
            report.deleted = deletable
    for key, why in records.unreadable:  # the report names them (the gc command prints them as warnings)
        log.info("gc could not read %s (%s)", key, why)
    if delete:
        report.temp_removed = store.remove_stale_temp_files()
    return report


def _deletable(candidates: list[str], records: _Records, leased, cutoff: float | None, store,
               report: GcReport) -> list[str]:
    """The candidates still unreferenced that may go; each kept one is listed in the report with why."""
    deletable = []
    for key in candidates:
        if _digest_of(key) in records.live:
            continue
        why = _kept_because(key, leased, cutoff, store, records.opaque)
        if why is None:
            deletable.append(key)
        else:
            getattr(report, f"kept_{why}").append(key)
    return deletable


def _kept_because(key: str, leased, cutoff: float | None, store, opaque: bool) -> str | None:
    """Why an unreferenced blob stays (the suffix of a GcReport kept_ list), or None: it may go."""
    if key in leased:
        return "leased"
    if cutoff is not None:
        when = store.modified(key)
        if when is None:
            return "unknown_age"
        if when >= cutoff:
            return "recent"
    if opaque:
        return "unaccounted"
    return None


def _size_or_zero(store):
    def size(key: str) -> int:
        try:
            return store.size(key)
        except ReproBundleError:
            return 0

    return size


def sweep_scratch() -> int:
    """Remove this machine's scratch folders whose process is gone (killed, even by SIGKILL): the work folders of
    pack and replay in the temp folder (only those with a free lock: the temp folder is shared with other
    programs), transfer staging and cache downloads in the cache folder. The `gc` command runs it."""
    removed = sweep(temp_folder(), prefixes=SCRATCH_PREFIXES, stale_s=None)
    removed += sweep(inside(cache_dir(), "tmp"), prefixes=("transfer-",))
    removed += sweep(inside(cache_dir(), "blobs/.tmp"), prefixes=("fetch-",))
    return removed
