"""Verified, parallel blob downloads from any store, and the process-wide counters of what was read."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import BlobNotFoundError, CorruptBlobError, NotFoundError
from ..store import Store
from .digest import blob_key, digest_file, hex_of

DEFAULT_JOBS = 8  # parallel transfers on stores without batch methods


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


def count_download(nbytes: int, blobs: int = 1) -> None:
    with _STATS_LOCK:
        STATS.blobs_downloaded += blobs
        STATS.bytes_downloaded += nbytes


def count_cache_hit(n: int = 1) -> None:
    with _STATS_LOCK:
        STATS.cache_hits += n


def sha256_of_file(path: Path) -> str:
    return digest_file(path)[0]


def corrupt_blob(digest: str, where: str) -> CorruptBlobError:
    return CorruptBlobError(f"blob {digest} from {where} is corrupt: its content does not hash to its name",
                            hint="nothing was written for it; restore the source by pushing from an intact copy")


def missing_blob(digest: str, where: str) -> BlobNotFoundError:
    return BlobNotFoundError(f"blob {digest} is missing from {where}",
                             hint="the source store is incomplete; push the bundle again from a complete copy")


def pool_map(fn, items: Sequence, jobs: int) -> list:
    if len(items) <= 1 or jobs <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(jobs, len(items))) as pool:
        return list(pool.map(fn, items))  # the first failure is raised


def _digest_in_message(digests: Iterable[str], message: str) -> str | None:
    for d in digests:
        if hex_of(d) in message:
            return d
    return None


def download_verified(store: Store, refs: Sequence[Mapping[str, Any]], folder: Path, *, jobs: int = DEFAULT_JOBS,
                      on_bytes: Callable[[int], None] | None = None) -> dict[str, Path]:
    """Download blobs of `store` into `folder` (one file per digest, named by its hex) and check each hash.

    BlobNotFoundError / CorruptBlobError name the first bad blob; files of blobs that fail are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {r["digest"]: folder / hex_of(r["digest"]) for r in refs}
    digests = list(paths)
    hashed: dict[str, str] = {}  # what the store hashed while writing (one pass); the rest is hashed from the files
    try:
        store.get_many([(blob_key(d), paths[d]) for d in digests], progress=on_bytes, sha256=hashed)
    except NotFoundError as e:
        bad = _digest_in_message(digests, e.message)
        if bad is None:
            raise
        raise missing_blob(bad, store.url) from None
    count_download(sum(paths[d].stat().st_size for d in digests), len(digests))

    def check(d: str) -> str | None:
        written = hashed.get(blob_key(d))
        return None if (hex_of(d) == written if written is not None else sha256_of_file(paths[d]) == d) else d

    corrupt = [d for d in pool_map(check, digests, jobs) if d]
    if corrupt:
        for d in corrupt:
            paths[d].unlink(missing_ok=True)
        raise corrupt_blob(corrupt[0], store.url)
    return paths
