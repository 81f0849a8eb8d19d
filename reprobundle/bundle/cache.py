"""The local read-through cache of blobs from remote stores (gs://).

Blobs read for a replay are kept under `<cache dir>/blobs/sha256/<2 hex>/<64 hex>`, verified on the way in and on
every use, with a size limit (REPROBUNDLE_CACHE_MAX_BYTES, default 20 GiB) enforced by evicting the least recently
used blobs. A cache is shared by processes: files appear by rename, so readers never see a partial blob.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..config import cache_dir, settings
from ..errors import UsageError
from ..store import Store
from ..store.safe_folders import inside, make_inside
from ..store.scratch import scratch_dir, sweep
from ..units import human_bytes
from .blobs import DEFAULT_JOBS, count_cache_hit, download_verified, sha256_of_file
from .digest import check_digest, hex_of

log = logging.getLogger(__name__)

CACHE_MAX_ENV = "REPROBUNDLE_CACHE_MAX_BYTES"
DEFAULT_CACHE_MAX_BYTES = 20 << 30


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'20G', '512MiB', '1.5g', '1000000' -> bytes (K/M/G/T are powers of 1024)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise UsageError(f"{CACHE_MAX_ENV}={text!r} is not a size", hint="write bytes, or a number with K, M, G or T")
    scale = 1024 ** ("kmgt".index(m.group(2).lower()) + 1) if m.group(2) else 1
    return int(float(m.group(1)) * scale)


def cache_max_bytes() -> int:
    raw = settings().cache_max_bytes
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
        return cls(inside(cache_dir(), "blobs"), cache_max_bytes())

    def path_of(self, digest: str) -> Path:
        h = hex_of(digest)
        return self.root / "sha256" / h[:2] / h

    def _hit(self, digest: str) -> Path | None:
        path = self.path_of(digest)
        if not path.is_file():
            return None
        with self._lock:
            checked = digest in self._pinned  # verified (or downloaded and verified) by this instance already
        if not checked and sha256_of_file(path) != digest:  # a damaged cache entry: drop it and fetch again
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # most recently used
        except FileNotFoundError:  # evicted by another process meanwhile
            return None
        with self._lock:
            self._pinned.add(digest)
        count_cache_hit()
        log.debug("cache hit: %s", digest)
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
        with scratch_dir(make_inside(self.root, ".tmp"), "fetch-") as tmp:  # a killed fetch's folder is swept by gc
            started = time.monotonic()
            refs = [{"digest": d} for d in misses]
            got = download_verified(store, refs, Path(tmp), jobs=jobs)
            nbytes = 0
            for d, p in got.items():
                nbytes += p.stat().st_size
                final = self.path_of(d)
                make_inside(self.root, final.parent)
                os.replace(p, final)
                found[d] = final
            with self._lock:
                self._pinned.update(got)  # verified, and not to be evicted while this instance hands them out
            log.info("fetched %d blob(s), %s from %s into the cache %s", len(got), human_bytes(nbytes), store.url,
                     self.root)
            if progress:
                progress(f"fetched {len(got)} blob(s), {human_bytes(nbytes)} from {store.url} into the cache "
                         f"in {time.monotonic() - started:.1f} s")
        self.trim()
        return found

    def _entries(self) -> list[tuple[float, int, Path]]:
        out: list[tuple[float, int, Path]] = []
        base = inside(self.root, "sha256")  # trim and clear delete what this finds: never through a link
        if not base.is_dir():
            return out
        for sub in base.iterdir():
            if not sub.is_dir():
                continue
            inside(self.root, sub)
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
        removed: list[Path] = []
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
        sweep(inside(self.root, ".tmp"))  # what killed fetches left; a running fetch keeps its folder
        return before
