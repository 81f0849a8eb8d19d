"""Moving bundles between stores (the read-through cache of remote blobs is cache.py).

Copying a bundle (push, pull, copy all come here):
- Blobs the destination already holds are not sent again (one batched existence check).
- Blobs move in parallel: `get_many`/`put_many`/`exists_many` where a store has them (GCS), a thread pool otherwise.
  They go through a local staging folder in batches of at most BATCH_BYTES, so disk use stays bounded. A folder
  store stages in its own temp folder: a downloaded blob, hashed as it is written (GCS), is then linked into place,
  so pulling writes each byte once.
- Every blob is verified against its sha256 before it is written to the destination (downloaded copies and local
  source files alike): a corrupt source is a CorruptBlobError naming the blob, and nothing is published.
- The manifest is written last and create-only: at the source's version number when that is free at the
  destination, else at the next free one (Registry.publish). A manifest identical to one already there (same
  version, or another version with the same content) is not published again.
- Run records follow with the blobs they name, then the answer records, each without its seal (copy_runs): an
  answer a copy brings is foreign at the destination (bundle/answer_seal.py), whoever sealed it at the source.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config import cache_dir
from ..errors import (
    AlreadyExistsError,
    CorruptBlobError,
    ReadOnlyStoreError,
    StoreError,
    UsageError,
)
from ..store import Store
from ..store.safe_folders import make_inside
from ..store.scratch import scratch_dir
from . import manifest as mf
from .blobs import (
    DEFAULT_JOBS,
    corrupt_blob,
    download_verified,
    pool_map,
    sha256_of_file,
)
from .digest import blob_key, hex_of
from .model import Blob
from .registry import Bundle, BundleRef, Registry

BATCH_BYTES = 1 << 30  # staged at most at a time while copying
MANIFEST_SCAN_LIMIT = 200  # versions of a name checked for an identical manifest before publishing a new one

# (bytes done, bytes total): called from I/O threads, under a lock; keep it cheap.
Progress = Callable[[int, int], None]


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
    runs_copied: int = 0  # run records copied with the bundle (push/pull/copy without --no-runs)
    answers_copied: int = 0  # answer records copied with the runs, each foreign at the destination (unsealed)
    runs_present: int = 0  # run records the destination already held

    def data(self) -> dict:
        return {
            "source": self.source.url, "source_ref": str(self.source), "ref": str(self.ref), "url": self.ref.url,
            "name": self.ref.name, "version": self.ref.version, "bundle_id": self.ref.bundle_id,
            "outcome": self.outcome, "version_kept": self.ref.version == self.source.version,
            "blobs_total": self.blobs_total, "blobs_sent": self.blobs_sent, "blobs_skipped": self.blobs_skipped,
            "bytes_sent": self.bytes_sent, "bytes_skipped": self.bytes_skipped, "seconds": round(self.seconds, 3),
            "runs_copied": self.runs_copied, "runs_present": self.runs_present, "answers_copied": self.answers_copied,
        }


def _existing_keys(store: Store, keys: list[str], jobs: int) -> set[str]:
    if not keys:
        return set()
    return set(store.exists_many(keys))


def _batches(refs: list[Blob], limit: int) -> list[list[Blob]]:
    out: list[list[Blob]] = []
    size = 0
    for r in sorted(refs, key=lambda r: r["digest"]):
        if not out or size + r["size"] > limit:
            out.append([])
            size = 0
        out[-1].append(r)
        size += r["size"]
    return out


def _stage(source: Store, batch: list[Blob], folder: Path, meter: _Meter, jobs: int) -> dict[str, Path]:
    """Verified local files for a batch of source blobs: in place for a folder store, else downloaded into
    `folder` (those are the caller's to move)."""
    staged: dict[str, Path] = {}
    remote = []
    for r in batch:
        local = source.local_path(blob_key(r["digest"]))
        if local is not None:
            staged[r["digest"]] = local
        else:
            remote.append(r)

    def check_local(d: str) -> str | None:
        try:
            return None if sha256_of_file(staged[d]) == d else d
        except OSError as e:
            raise StoreError(f"cannot read blob {d} in {source.url}: {e.strerror}") from None

    bad = [d for d in pool_map(check_local, list(staged), jobs) if d]
    if bad:
        raise corrupt_blob(bad[0], source.url)
    if remote:
        staged.update(download_verified(source, remote, folder, jobs=jobs, on_bytes=meter.add))
    return staged


def _upload(dest: Store, batch: list[Blob], staged: dict[str, Path], folder: Path, meter: _Meter) -> None:
    """Store the staged files at `dest`: those downloaded into `folder` are moved (a folder store links them into
    place: no second write), the source's own files are copied."""
    items = [(blob_key(r["digest"]), staged[r["digest"]]) for r in batch]
    for move in (True, False):
        chosen = [(key, path) for key, path in items if (path.parent == folder) == move]
        if chosen:
            dest.put_many(chosen, progress=meter.add, move=move)


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
    return make_inside(cache_dir(), "tmp")


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
    dest.check_marker(create=True)
    refs = mf.blob_refs(bundle.manifest)
    if source.store.read_only and source.store.capabilities.local:
        # a zip: checked whole first, so a damaged one leaves nothing at the destination (a remote read-only store,
        # https://, is not read twice: each blob it sends is verified on the way, and present ones are not sent)
        problems = source.verify(bundle)
        if problems:
            raise CorruptBlobError(f"cannot copy {bundle.ref} from {source.url}: {problems[0]}",
                                   hint="the zip is damaged; download or export it again")
    dest.hold([blob_key(r["digest"]) for r in refs])  # before looking: gc keeps what a running copy holds
    missing, missing_bytes = _copy_blobs(source.store, dest.store, refs, progress, jobs)
    _confirm_blobs(source.store, dest, refs, jobs)
    ref, outcome, manifest_bytes = _place_manifest(dest, bundle)
    return TransferResult(
        source=bundle.ref, ref=ref, outcome=outcome, blobs_total=len(refs), blobs_sent=len(missing),
        blobs_skipped=len(refs) - len(missing), bytes_sent=missing_bytes + manifest_bytes,
        bytes_skipped=sum(r["size"] for r in refs) - missing_bytes, seconds=time.monotonic() - started,
    )


def _copy_blobs(source: Store, dest: Store, refs: list[Blob], progress: Progress | None,
                jobs: int) -> tuple[list[Blob], int]:
    """Copy the blobs of `refs` that `dest` lacks, verified, in parallel batches; (those copied, their bytes)."""
    present = _existing_keys(dest, [blob_key(r["digest"]) for r in refs], jobs)
    missing = [r for r in refs if blob_key(r["digest"]) not in present]
    missing_bytes = sum(r["size"] for r in missing)
    # Bytes to move: the upload of each missing blob, plus its download when the source is not a local folder.
    download_bytes = sum(r["size"] for r in missing if source.local_path(blob_key(r["digest"])) is None)
    meter = _Meter(missing_bytes + download_bytes, progress)
    if missing:
        # staged on the destination's own disk where it has one, so what is downloaded is written once
        with scratch_dir(dest.staging_folder() or _staging_root(), "transfer-") as tmp:
            for i, batch in enumerate(_batches(missing, BATCH_BYTES)):
                folder = Path(tmp) / str(i)
                staged = _stage(source, batch, folder, meter, jobs)
                _upload(dest, batch, staged, folder, meter)
                shutil.rmtree(folder, ignore_errors=True)
    return missing, missing_bytes


def _confirm_blobs(source: Store, dest: Registry, refs: list[Blob], jobs: int) -> None:
    """Right before a record names them: every blob is at the destination, touched (a grace period counts from
    now). One a gc removed meanwhile (a store without leases, a copy longer than the grace period) is sent again."""
    keys = {blob_key(r["digest"]): r for r in refs}
    for _ in range(3):
        if type(dest.store).touch is Store.touch:  # cannot refresh a time: one batched existence check
            there = dest.store.exists_many(list(keys))
        else:
            there = {k for k, ok in zip(keys, pool_map(dest.store.touch, list(keys), jobs)) if ok}
        gone = [r for k, r in keys.items() if k not in there]
        if not gone:
            return
        _copy_blobs(source, dest.store, gone, None, jobs)
    raise StoreError(f"blobs keep disappearing from {dest.url} while they are copied there",
                     hint="is a `reprobundle gc --grace 0` running on it? let the copy finish first")


def copy_runs(source: Registry, bundle: Bundle, dest: Registry, result: TransferResult, *,
              progress: Progress | None = None, jobs: int | None = None) -> TransferResult:
    """Copy the run records of `bundle` (and the blobs they name) after `copy_bundle` put it at `result.ref`, so the
    destination shows its history, then its answer records (what investigations answered from those runs), each
    without its seal: foreign at the destination (bundle/answer_seal.py), shown there, never reused or reported,
    whatever it claims. A record the destination holds is left alone (ids are unique); when the bundle was
    renumbered there, the copies name the new version and id. Sources that cannot list (a zip, an https store)
    have none to copy. Returns `result` with runs_copied, runs_present and answers_copied set."""
    if not source.store.capabilities.writable and not source.store.capabilities.shareable:
        return result  # a zip: it holds no runs
    try:
        runs = source.runs(bundle.ref.bundle_id)
        answers = [record for record, _ in source.answer_records(bundle.ref.bundle_id)]
    except UsageError:
        return result  # a store that cannot list
    _copy_run_records(source, runs, bundle, dest, result, progress, jobs)
    for answer in answers:
        if result.ref.bundle_id != bundle.ref.bundle_id:
            answer = {**answer, "bundle_id": result.ref.bundle_id, "bundle": str(result.ref)}
        result.answers_copied += dest.put_copied_answer(answer)
    return result


def _copy_run_records(source: Registry, runs: list[dict], bundle: Bundle, dest: Registry, result: TransferResult,
                      progress: Progress | None, jobs: int | None) -> TransferResult:
    prefix = f"runs/{hex_of(result.ref.bundle_id)}"
    there = set(dest.store.list(prefix))
    todo = []
    for run in runs:
        key = f"{prefix}/{run['run_id']}.msgpack"
        if key in there:
            result.runs_present += 1
            continue
        if result.ref.bundle_id != bundle.ref.bundle_id:
            run = {**run, "bundle_id": result.ref.bundle_id, "bundle": str(result.ref)}
        todo.append((key, run))
    if not todo:
        return result
    refs = list({r["digest"]: r for _, run in todo for r in mf.blob_refs(run)}.values())
    dest.hold([blob_key(r["digest"]) for r in refs])
    missing, missing_bytes = _copy_blobs(source.store, dest.store, refs, progress, max(1, jobs or DEFAULT_JOBS))
    _confirm_blobs(source.store, dest, refs, max(1, jobs or DEFAULT_JOBS))
    result.blobs_sent += len(missing)
    result.bytes_sent += missing_bytes
    for key, run in todo:
        data = mf.encode_run(run)
        try:
            dest.store.put(key, data, create_only=True)
        except AlreadyExistsError:
            result.runs_present += 1
            continue
        result.runs_copied += 1
        result.bytes_sent += len(data)
    return result


def replay_blob_refs(manifest: dict) -> list[Blob]:
    """The blobs a replay reads: the function, the stored inputs and the reference outputs (not the artifacts)."""
    return mf.blob_refs({"function": manifest["function"], "inputs": manifest["inputs"],
                         "outputs": manifest["reference"]["outputs"]})


def prefetch(registry: Registry, bundle: Bundle, progress: Callable[[str], None] | None = None) -> None:
    """Bring the blobs a replay needs into the registry's cache at once (in parallel); no-op without a cache."""
    cache = getattr(registry, "blob_cache", None)
    if cache is not None:
        cache.fetch_many(registry.store, [r["digest"] for r in replay_blob_refs(bundle.manifest)], progress=progress)
