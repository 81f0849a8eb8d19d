"""Moving bundles between stores, and the local read-through cache of blobs from remote stores.

Copying a bundle (push, pull, copy all come here):
- Blobs the destination already holds are not sent again (one batched existence check).
- Blobs move in parallel: `get_many`/`put_many`/`exists_many` where a store has them (GCS), a thread pool otherwise.
  They go through a local staging folder in batches of at most BATCH_BYTES, so disk use stays bounded.
- Every blob is verified against its sha256 before it is written to the destination (downloaded copies and local
  source files alike): a corrupt source is a CorruptBlobError naming the blob, and nothing is published.
- The manifest is written last and create-only: at the source's version number when that is free at the
  destination, else at the next free one (Registry.publish). A manifest identical to one already there (same
  version, or another version with the same content) is not published again.

The cache (`BlobCache`): blobs of non-local stores (gs://) read for a replay are kept under
`<cache dir>/blobs/sha256/<2 hex>/<64 hex>`, verified on the way in and on every use, with a size limit
(REPROBUNDLE_CACHE_MAX_BYTES, default 20 GiB) enforced by evicting the least recently used blobs. A cache is shared
by processes: files appear by rename, so readers never see a partial blob.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..config import cache_dir
from ..errors import (
    AlreadyExistsError,
    BlobNotFoundError,
    CorruptBlobError,
    NotFoundError,
    ReadOnlyStoreError,
    UsageError,
)
from ..render.text import human_bytes
from ..store.base import COPY_CHUNK, Store
from . import manifest as mf
from .digest import check_digest, hex_of
from .registry import Bundle, BundleRef, Registry, blob_key

CACHE_MAX_ENV = "REPROBUNDLE_CACHE_MAX_BYTES"
DEFAULT_CACHE_MAX_BYTES = 20 << 30
DEFAULT_JOBS = 8  # parallel transfers on stores without batch methods
BATCH_BYTES = 1 << 30  # staged at most at a time while copying
MANIFEST_SCAN_LIMIT = 200  # versions of a name checked for an identical manifest before publishing a new one

# (bytes done, bytes total): called from I/O threads, under a lock; keep it cheap.
Progress = Callable[[int, int], None]


@dataclass
class TransferStats:
    """Process-wide counters of what was read from stores into local files (for reports and tests)."""

    blobs_downloaded: int = 0
    bytes_downloaded: int = 0
    cache_hits: int = 0

    def snapshot(self) -> "TransferStats":
        with _STATS_LOCK:
            return TransferStats(**asdict(self))


STATS = TransferStats()
_STATS_LOCK = threading.Lock()


def _count_download(nbytes: int, blobs: int = 1) -> None:
    with _STATS_LOCK:
        STATS.blobs_downloaded += blobs
        STATS.bytes_downloaded += nbytes


def _count_hit(n: int = 1) -> None:
    with _STATS_LOCK:
        STATS.cache_hits += n


class _Meter:
    """Bytes done of a known total, reported to a Progress callback; thread-safe."""

    def __init__(self, total: int, callback: Progress | None) -> None:
        self.total, self.done, self.callback = total, 0, callback
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.done = min(self.done + n, self.total)
            if self.callback:
                self.callback(self.done, self.total)


def _is_batch_store(store: Store) -> bool:
    return all(callable(getattr(store, m, None)) for m in ("get_many", "put_many", "exists_many"))


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(COPY_CHUNK):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def _corrupt(digest: str, where: str) -> CorruptBlobError:
    return CorruptBlobError(f"blob {digest} from {where} is corrupt: its content does not hash to its name",
                            hint="nothing was written for it; restore the source by pushing from an intact copy")


def _missing(digest: str, where: str) -> BlobNotFoundError:
    return BlobNotFoundError(f"blob {digest} is missing from {where}",
                             hint="the source store is incomplete; push the bundle again from a complete copy")


def _pool_map(fn, items: Sequence, jobs: int) -> list:
    if len(items) <= 1 or jobs <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(jobs, len(items))) as pool:
        return list(pool.map(fn, items))  # the first failure is raised


def _digest_in_message(digests: Iterable[str], message: str) -> str | None:
    for d in digests:
        if hex_of(d) in message:
            return d
    return None


def download_verified(store: Store, refs: Sequence[dict], folder: Path, *, jobs: int = DEFAULT_JOBS,
                      on_bytes: Callable[[int], None] | None = None) -> dict[str, Path]:
    """Download blobs of `store` into `folder` (one file per digest, named by its hex) and check each hash.

    BlobNotFoundError / CorruptBlobError name the first bad blob; files of blobs that fail are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {r["digest"]: folder / hex_of(r["digest"]) for r in refs}
    digests = list(paths)
    try:
        if _is_batch_store(store):
            store.get_many([(blob_key(d), paths[d]) for d in digests], progress=on_bytes)
        else:
            def one(d: str) -> None:
                store.get_file(blob_key(d), paths[d])
                if on_bytes:
                    on_bytes(paths[d].stat().st_size)

            _pool_map(one, digests, jobs)
    except NotFoundError as e:
        bad = _digest_in_message(digests, e.message)
        if bad is None:
            raise
        raise _missing(bad, store.url) from None
    _count_download(sum(paths[d].stat().st_size for d in digests), len(digests))

    def check(d: str) -> str | None:
        return None if _sha256_file(paths[d]) == d else d

    bad = [d for d in _pool_map(check, digests, jobs) if d]
    if bad:
        for d in bad:
            paths[d].unlink(missing_ok=True)
        raise _corrupt(bad[0], store.url)
    return paths


# ------------------------------------------------------------------------------------------------ copying


@dataclass
class TransferResult:
    """What a copy did. `outcome`: 'kept' (published at the source's version), 'renumbered' (that version was
    taken at the destination: published at the next free one), or 'present' (an identical manifest was there)."""

    source: BundleRef
    ref: BundleRef
    outcome: str
    blobs_total: int
    blobs_sent: int
    blobs_skipped: int
    bytes_sent: int  # blob bytes written plus the manifest's, when one was written
    bytes_skipped: int
    seconds: float

    def data(self) -> dict:
        return {
            "source": self.source.url, "source_ref": str(self.source), "ref": str(self.ref), "url": self.ref.url,
            "name": self.ref.name, "version": self.ref.version, "bundle_id": self.ref.bundle_id,
            "outcome": self.outcome, "version_kept": self.ref.version == self.source.version,
            "blobs_total": self.blobs_total, "blobs_sent": self.blobs_sent, "blobs_skipped": self.blobs_skipped,
            "bytes_sent": self.bytes_sent, "bytes_skipped": self.bytes_skipped, "seconds": round(self.seconds, 3),
        }


def _existing_keys(store: Store, keys: list[str], jobs: int) -> set[str]:
    if not keys:
        return set()
    if _is_batch_store(store):
        return set(store.exists_many(keys))
    flags = _pool_map(store.exists, keys, jobs)
    return {k for k, f in zip(keys, flags) if f}


def _batches(refs: list[dict], limit: int) -> list[list[dict]]:
    out: list[list[dict]] = []
    size = 0
    for r in sorted(refs, key=lambda r: r["digest"]):
        if not out or size + r["size"] > limit:
            out.append([])
            size = 0
        out[-1].append(r)
        size += r["size"]
    return out


def _stage(source: Store, batch: list[dict], folder: Path, meter: _Meter, jobs: int) -> dict[str, Path]:
    """Verified local files for a batch of source blobs: in place for a folder store, else downloaded."""
    staged: dict[str, Path] = {}
    remote = []
    for r in batch:
        local = source.local_path(blob_key(r["digest"]))
        if local is not None:
            staged[r["digest"]] = local
        else:
            remote.append(r)

    def check_local(d: str) -> str | None:
        return None if _sha256_file(staged[d]) == d else d

    bad = [d for d in _pool_map(check_local, list(staged), jobs) if d]
    if bad:
        raise _corrupt(bad[0], source.url)
    if remote:
        staged.update(download_verified(source, remote, folder, jobs=jobs, on_bytes=meter.add))
    return staged


def _upload(dest: Store, batch: list[dict], staged: dict[str, Path], meter: _Meter, jobs: int) -> None:
    if _is_batch_store(dest):
        dest.put_many([(blob_key(r["digest"]), staged[r["digest"]]) for r in batch], progress=meter.add)
        return

    def one(r: dict) -> None:
        try:
            dest.put_file(blob_key(r["digest"]), staged[r["digest"]], create_only=True)
        except AlreadyExistsError:
            pass  # a concurrent writer stored the same content
        meter.add(r["size"])

    _pool_map(one, batch, jobs)


def _without_version(m: dict) -> dict:
    return {k: v for k, v in m.items() if k != "version"}


def _same_bundle_at(dest: Registry, bundle: Bundle) -> BundleRef | None:
    """A version at `dest` holding this bundle: the same manifest bytes at its version, or the same content."""
    name, version = bundle.ref.name, bundle.ref.version
    versions = dest.versions(name)
    if version in versions:
        there = dest.load(name, version)
        if there.ref.bundle_id == bundle.ref.bundle_id:
            return there.ref
    want = _without_version(bundle.manifest)
    for v in sorted((v for v in versions if v != version), reverse=True)[:MANIFEST_SCAN_LIMIT]:
        there = dest.load(name, v)
        if _without_version(there.manifest) == want:
            return there.ref
    return None


def _place_manifest(dest: Registry, bundle: Bundle) -> tuple[BundleRef, str, int]:
    """Write the manifest create-only, keeping the version if free; (ref, outcome, bytes written)."""
    name, version = bundle.ref.name, bundle.ref.version
    try:
        dest.store.put(f"bundles/{name}/{version}.msgpack", bundle.manifest_bytes, create_only=True)
        return BundleRef(dest.url, name, version, bundle.ref.bundle_id), "kept", len(bundle.manifest_bytes)
    except AlreadyExistsError:
        pass
    same = _same_bundle_at(dest, bundle)
    if same is not None:
        return same, "present", 0
    ref = dest.publish(bundle.manifest)
    return ref, "renumbered", len(mf.encode_manifest({**bundle.manifest, "version": ref.version}))


def _staging_root() -> Path:
    root = cache_dir() / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    return root


def copy_bundle(source: Registry, bundle: Bundle, dest: Registry, *, progress: Progress | None = None,
                jobs: int | None = None) -> TransferResult:
    """Copy `bundle` (of `source`) into `dest`: missing blobs in parallel and verified, the manifest last."""
    started = time.monotonic()
    jobs = max(1, jobs or DEFAULT_JOBS)
    if dest.store.read_only:
        raise ReadOnlyStoreError(f"cannot copy into {dest.url}: the store is read-only",
                                 hint="a .zip bundle is written whole by `reprobundle export`")
    if dest.url == source.url:
        raise UsageError(f"{bundle.ref} is already in {dest.url}", hint="give another destination store")
    dest._check_marker(create=True)
    refs = mf.blob_refs(bundle.manifest)
    present = _existing_keys(dest.store, [blob_key(r["digest"]) for r in refs], jobs)
    missing = [r for r in refs if blob_key(r["digest"]) not in present]
    missing_bytes = sum(r["size"] for r in missing)
    # Bytes to move: the upload of each missing blob, plus its download when the source is not a local folder.
    download_bytes = sum(r["size"] for r in missing if source.store.local_path(blob_key(r["digest"])) is None)
    meter = _Meter(missing_bytes + download_bytes, progress)
    if missing:
        with tempfile.TemporaryDirectory(prefix="transfer-", dir=_staging_root()) as tmp:
            for i, batch in enumerate(_batches(missing, BATCH_BYTES)):
                folder = Path(tmp) / str(i)
                staged = _stage(source.store, batch, folder, meter, jobs)
                _upload(dest.store, batch, staged, meter, jobs)
                shutil.rmtree(folder, ignore_errors=True)
    ref, outcome, manifest_bytes = _place_manifest(dest, bundle)
    return TransferResult(
        source=bundle.ref, ref=ref, outcome=outcome, blobs_total=len(refs), blobs_sent=len(missing),
        blobs_skipped=len(refs) - len(missing), bytes_sent=missing_bytes + manifest_bytes,
        bytes_skipped=sum(r["size"] for r in refs) - missing_bytes, seconds=time.monotonic() - started,
    )


# --------------------------------------------------------------------------------------------------- cache


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'20G', '512MiB', '1.5g', '1000000' -> bytes (K/M/G/T are powers of 1024)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise UsageError(f"{CACHE_MAX_ENV}={text!r} is not a size", hint="write bytes, or a number with K, M, G or T")
    scale = 1024 ** ("kmgt".index(m.group(2).lower()) + 1) if m.group(2) else 1
    return int(float(m.group(1)) * scale)


def cache_max_bytes() -> int:
    raw = os.environ.get(CACHE_MAX_ENV, "").strip()
    return parse_size(raw) if raw else DEFAULT_CACHE_MAX_BYTES


@dataclass
class CacheUsage:
    root: str
    blobs: int
    bytes: int
    max_bytes: int


class BlobCache:
    """Content-addressed, verified, size-bounded (LRU by modification time, refreshed on use) local copies of
    blobs. Blobs fetched through one instance are pinned for its lifetime: it never evicts what it handed out, and
    hashes each cached file once (on download, or on its first use from an earlier process)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._pinned: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def default(cls) -> "BlobCache":
        return cls(cache_dir() / "blobs", cache_max_bytes())

    def path_of(self, digest: str) -> Path:
        h = hex_of(digest)
        return self.root / "sha256" / h[:2] / h

    def _hit(self, digest: str) -> Path | None:
        path = self.path_of(digest)
        if not path.is_file():
            return None
        with self._lock:
            checked = digest in self._pinned  # verified (or downloaded and verified) by this instance already
        if not checked and _sha256_file(path) != digest:  # a damaged cache entry: drop it and fetch again
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # most recently used
        except FileNotFoundError:  # evicted by another process meanwhile
            return None
        with self._lock:
            self._pinned.add(digest)
        _count_hit()
        return path

    def fetch(self, store: Store, digest: str) -> Path:
        """A verified local file holding the blob, downloaded from `store` on a miss."""
        return self.fetch_many(store, [check_digest(digest)])[digest]

    def fetch_many(self, store: Store, digests: Iterable[str], *, jobs: int = DEFAULT_JOBS,
                   progress: Callable[[str], None] | None = None) -> dict[str, Path]:
        """Verified local files for the blobs; misses are downloaded in parallel, then the cache is trimmed."""
        found: dict[str, Path] = {}
        misses = []
        for d in dict.fromkeys(check_digest(d) for d in digests):
            hit = self._hit(d)
            if hit is not None:
                found[d] = hit
            else:
                misses.append(d)
        if not misses:
            return found
        tmp_root = self.root / ".tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
            started = time.monotonic()
            refs = [{"digest": d} for d in misses]
            got = download_verified(store, refs, Path(tmp), jobs=jobs)
            nbytes = 0
            for d, p in got.items():
                nbytes += p.stat().st_size
                final = self.path_of(d)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(p, final)
                found[d] = final
            with self._lock:
                self._pinned.update(got)  # verified, and not to be evicted while this instance hands them out
            if progress:
                progress(f"fetched {len(got)} blob(s), {human_bytes(nbytes)} from {store.url} into the cache "
                         f"in {time.monotonic() - started:.1f} s")
        self.trim()
        return found

    def _entries(self) -> list[tuple[float, int, Path]]:
        out = []
        base = self.root / "sha256"
        if not base.is_dir():
            return out
        for sub in base.iterdir():
            if not sub.is_dir():
                continue
            for p in sub.iterdir():
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                if p.name.startswith("."):
                    continue
                out.append((st.st_mtime, st.st_size, p))
        return out

    def trim(self) -> list[Path]:
        """Evict least recently used blobs (never pinned ones) until the cache fits its limit."""
        entries = self._entries()
        total = sum(size for _, size, _ in entries)
        removed = []
        if total <= self.max_bytes:
            return removed
        with self._lock:
            pinned = {hex_of(d) for d in self._pinned}
        for _, size, path in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if path.name in pinned:
                continue
            path.unlink(missing_ok=True)
            total -= size
            removed.append(path)
        return removed

    def usage(self) -> CacheUsage:
        entries = self._entries()
        return CacheUsage(str(self.root), len(entries), sum(size for _, size, _ in entries), self.max_bytes)

    def clear(self) -> CacheUsage:
        """Empty the cache; returns what was removed."""
        before = self.usage()
        for _, _, path in self._entries():
            path.unlink(missing_ok=True)
        shutil.rmtree(self.root / ".tmp", ignore_errors=True)
        return before


def replay_blob_refs(manifest: dict) -> list[dict]:
    """The blobs a replay reads: the function, the stored inputs and the reference outputs (not the artifacts)."""
    return mf.blob_refs({"function": manifest["function"], "inputs": manifest["inputs"],
                         "outputs": manifest["reference"]["outputs"]})


def prefetch(registry: Registry, bundle: Bundle, progress: Callable[[str], None] | None = None) -> None:
    """Bring the blobs a replay needs into the registry's cache at once (in parallel); no-op without a cache."""
    cache = getattr(registry, "blob_cache", None)
    if cache is not None:
        cache.fetch_many(registry.store, [r["digest"] for r in replay_blob_refs(bundle.manifest)], progress=progress)
