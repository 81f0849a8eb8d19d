"""The registry: bundles, blobs, tags and runs laid out in a store (see docs/architecture.md, "Store layout").

Publishing writes every blob first and the manifest last, create-only, so a crash leaves no visible half
bundle; versions are allocated by racing create-only writes, so concurrent packs of one name all succeed with
distinct versions. Blobs are verified against their digest whenever they are read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from ..errors import (
    AlreadyExistsError,
    BlobNotFoundError,
    BundleNotFoundError,
    CorruptBlobError,
    CorruptBundleError,
    FormatError,
    InvalidNameError,
    InvalidRefError,
    NotFoundError,
    ReproBundleError,
    StoreError,
    StoreLayoutError,
)
from ..store import COPY_CHUNK, Store, open_store
from ..store.base import Lease, make_temp_file
from ..store.zip_store import write_zip_store
from ..text import clean, did_you_mean, first_line, quoted
from . import answer_seal
from . import manifest as mf
from .digest import blob_key, check_digest, digest_bytes, digest_file, digest_stream, hex_of
from .redaction import redact_environment

if TYPE_CHECKING:
    from .zip_expectation import ZipExpectation

log = logging.getLogger(__name__)

MARKER_KEY = "reprobundle-store.json"
MAX_MARKER_BYTES = 64 << 10
MAX_TAG_BYTES = 64  # a version number
PENDING_SUFFIX = ".pending"  # runs/<bundle>/<group>.pending: a replay's group being stored (see put_runs)
HASH_WHILE_WRITING_BYTES = 1 << 20  # smaller blobs are hashed first: a value stored already is then not written
_VERSION_KEY_RE = re.compile(r"^([1-9][0-9]{0,8})\.msgpack$")
_PUBLISH_ATTEMPTS = 1000


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class BundleRef:
    """A published bundle: where it is and what it is."""

    store_url: str
    name: str
    version: int
    bundle_id: str

    @property
    def url(self) -> str:
        if self.store_url.lower().endswith(".zip"):
            return self.store_url  # a zip bundle holds one bundle: its path is its URL
        return f"{self.store_url.rstrip('/')}/{self.name}@{self.version}"

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Bundle:
    ref: BundleRef
    manifest: dict
    manifest_bytes: bytes


class Registry:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._marker_checked = False
        self._marker_absent = False  # checked for reading: no marker, so no bundles (a write checks again)
        self.lease_in_use: Lease | None = None  # this registry's hold on the keys it writes (see `hold`)
        self._run_digest_cache: dict[str, str] = {}  # run record key -> its sha256 as stored (put_answer, answers)
        # Blobs of remote stores (gs://) are read through the persistent local cache (cache.BlobCache).
        self.blob_cache = _default_blob_cache(store)

    @classmethod
    def open(cls, url: str | os.PathLike | None = None) -> "Registry":
        return cls(open_store(url))

    @property
    def url(self) -> str:
        return self.store.url

    def hold(self, keys) -> None:
        """Hold store keys this registry is about to write or reference (a lease where the store has them, see
        bundle/collection.py): call before checking whether they exist. Held until `close`."""
        if self.lease_in_use is None:
            self.lease_in_use = self.store.lease()
        self.lease_in_use.add(keys)

    def close(self) -> None:
        """Drop this registry's lease (its writes are published, or abandoned to gc)."""
        if self.lease_in_use is not None:
            self.lease_in_use.close()
            self.lease_in_use = None

    # ----------------------------------------------------------------------------------------- marker
    def check_marker(self, *, create: bool) -> None:
        """Every read and write starts here: a store whose marker declares an unknown layout is a
        StoreLayoutError before anything else of it is read or written."""
        if self._marker_checked or (self._marker_absent and not create):
            return
        raw: bytes | None = None
        try:
            raw = self._read_marker()
        except NotFoundError:
            raw = self._marker_of_unmarked_store(create)
            if raw is None:
                self._marker_absent = True
                return  # an empty or absent store simply holds no bundles
        self._check_marker_layout(raw)
        self._marker_checked = True
        self._marker_absent = False

    def _marker_of_unmarked_store(self, create: bool) -> bytes | None:
        """The marker of a store that had none at the first read: a concurrent writer's, or the one written now
        (`create`); None for an empty store not to be created. Called while handling that NotFoundError."""
        if self.store.read_only:
            raise CorruptBundleError(
                f"{self.store.url} is not a reprobundle bundle: it has no {MARKER_KEY}",
                hint="the file is truncated or corrupt, or was not written by `reprobundle export`",
            ) from None
        raw: bytes | None = None
        if not self.store.is_empty():
            try:  # a concurrent writer may have just created the store: it writes the marker before anything
                raw = self._read_marker()
            except NotFoundError:
                raise StoreLayoutError(
                    f"{self.store.url} is not empty and is not a reprobundle store (it has no {MARKER_KEY})",
                    hint="point --store at an empty folder or an existing reprobundle store",
                ) from None
        elif not create:
            return None
        if raw is None:
            new_marker = json.dumps({"format": mf.STORE_FORMAT, "format_version": mf.STORE_VERSION}).encode()
            try:
                self.store.put(MARKER_KEY, new_marker, create_only=True)
            except AlreadyExistsError:
                pass
            raw = self._read_marker()
        return raw

    def _check_marker_layout(self, raw: bytes | None) -> None:
        """A StoreLayoutError unless `raw` is a reprobundle store marker of a layout this version knows."""
        try:
            marker = json.loads(raw or b"")
            ok = marker.get("format") == mf.STORE_FORMAT and isinstance(marker.get("format_version"), int)
        except (ValueError, AttributeError, RecursionError):
            ok = False
        if not ok:
            raise StoreLayoutError(f"{self.store.url}/{MARKER_KEY} is not a reprobundle store marker",
                                   hint="this is not a reprobundle store (or a damaged one): nothing in it is used")
        if marker["format_version"] > mf.STORE_VERSION:
            raise StoreLayoutError(
                f"the store {self.store.url} has layout version {marker['format_version']}; "
                f"this reprobundle knows up to {mf.STORE_VERSION}",
                hint="upgrade reprobundle",
            )

    def _read_marker(self) -> bytes:
        try:
            return self.store.get_bounded(MARKER_KEY, MAX_MARKER_BYTES)
        except FormatError:  # larger than any marker
            raise StoreLayoutError(f"{self.store.url}/{MARKER_KEY} is not a reprobundle store marker") from None

    # ------------------------------------------------------------------------------------------ blobs
    def put_blob(self, data: bytes | memoryview) -> dict:
        """Store bytes once by content; returns the manifest blob reference. A large value is hashed while the store
        writes it (on another thread: hashlib and file writes release the GIL), where the store can stage it."""
        self.check_marker(create=True)
        size = memoryview(data).nbytes
        staged = None
        if size >= HASH_WHILE_WRITING_BYTES:
            with ThreadPoolExecutor(1) as pool:
                hashing = pool.submit(digest_bytes, data)
                staged = self.store.stage(data)
                digest = hashing.result()
        else:
            digest = digest_bytes(data)
        key = blob_key(digest)
        with staged or contextlib.nullcontext():
            self.hold([key])
            if not self.store.touch(key):  # stored already: touched, so gc's grace period counts from now
                try:
                    if staged:
                        staged.publish(key, create_only=True)
                    else:
                        self.store.put(key, data, create_only=True)
                except AlreadyExistsError:
                    pass  # a concurrent writer stored the same content
        return {"digest": digest, "size": size}

    def put_blob_file(self, path: str | Path) -> dict:
        self.check_marker(create=True)
        digest, size = digest_file(path)
        key = blob_key(digest)
        self.hold([key])
        if not self.store.touch(key):
            try:
                self.store.put_file(key, path, create_only=True)
            except AlreadyExistsError:
                pass
        return {"digest": digest, "size": size}

    def get_blob(self, ref: dict | str) -> bytes:
        digest = ref["digest"] if isinstance(ref, dict) else ref
        self.check_marker(create=False)
        if self.blob_cache is not None:
            return self.blob_cache.fetch(self.store, digest).read_bytes()
        try:
            data = self.store.get(blob_key(digest))
        except NotFoundError:
            raise self._missing(digest) from None
        if digest_bytes(data) != digest:
            raise self._corrupt(digest)
        return data

    def blob_file(self, ref: dict | str, cache_dir: Path) -> Path:
        """A verified local file holding the blob: in place for a folder store, from the persistent blob cache for a
        remote store (see `_default_blob_cache`), else copied into cache_dir."""
        digest = check_digest(ref["digest"] if isinstance(ref, dict) else ref)
        key = blob_key(digest)
        self.check_marker(create=False)
        local = self.store.local_path(key)
        if local is not None:
            try:
                got = digest_file(local)[0]
            except OSError as e:
                raise StoreError(f"cannot read blob {digest} in {self.store.url}: {e.strerror}") from None
            if got != digest:
                raise self._corrupt(digest)
            return local
        if self.blob_cache is not None:
            return self.blob_cache.fetch(self.store, digest)
        target = Path(cache_dir) / hex_of(digest)
        if target.is_file() and digest_file(target)[0] == digest:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = make_temp_file(target.parent, ".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    src = self.store.open_read(key)
                except NotFoundError:
                    raise self._missing(digest) from None
                with src:
                    got, _ = digest_stream(src, out)
            if got != digest:
                raise self._corrupt(digest)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target

    def verify_blob(self, digest: str) -> str | None:
        """None if the blob is present and intact, else a one-line problem (missing, corrupt, or unreadable and
        why: permission denied, not a regular file, a symbolic link out of the store...)."""
        key = blob_key(digest)
        self.check_marker(create=False)
        try:
            with self.store.open_read(key) as f:
                got, _ = digest_stream(f)
        except NotFoundError:
            return f"blob {digest} is missing"
        except FormatError as e:  # the store itself cannot read it back (a damaged zip entry)
            return f"blob {digest} is corrupt ({first_line(e.message, 300)})"
        except ReproBundleError as e:
            return f"blob {digest} is unreadable ({first_line(e.message, 300)})"
        except OSError as e:
            return f"blob {digest} is unreadable ({clean(e.strerror or e, 100)})"
        return None if got == digest else f"blob {digest} is corrupt (content hash differs)"

    def _missing(self, digest: str) -> BlobNotFoundError:
        return BlobNotFoundError(f"blob {digest} is missing from {self.store.url}",
                                 hint="the store is incomplete; push the bundle again from a complete copy")

    def _corrupt(self, digest: str) -> CorruptBlobError:
        return CorruptBlobError(f"blob {digest} in {self.store.url} is corrupt: its content does not hash to its name",
                                hint="restore it by pushing the bundle again from an intact copy")

    # -------------------------------------------------------------------------------------- bundles
    def names(self) -> list[str]:
        """The bundle names of the store (a folder under bundles/ that no name can have is skipped, with a
        warning)."""
        self.check_marker(create=False)
        found = set()
        for name in {k.split("/")[1] for k in self.store.list("bundles") if k.count("/") == 2}:
            if mf.NAME_RE.fullmatch(name):
                found.add(name)
            else:
                log.warning("skipped bundles/%s in %s: not a bundle name", clean(name, 80), self.store.url)
        return sorted(found)

    def versions(self, name: str) -> list[int]:
        mf.check_name(name)
        self.check_marker(create=False)
        found = []
        for key in self.store.list(f"bundles/{name}"):
            m = _VERSION_KEY_RE.fullmatch(key.rsplit("/", 1)[-1])
            if m:
                found.append(int(m.group(1)))
        return sorted(found)

    def publish(self, manifest: dict) -> BundleRef:
        """Publish a manifest whose blobs are already stored, under the next free version of its name."""
        self.check_marker(create=True)
        name = mf.check_name(manifest["name"])
        keys = [blob_key(b["digest"]) for b in mf.blob_refs(manifest)]
        self.hold(keys)
        for key in keys:  # touched: a long pack's first blobs are as young as its manifest for gc's grace period
            if not self.store.touch(key):
                raise BlobNotFoundError(f"cannot publish {name}: blob sha256:{key.rsplit('/', 1)[-1]} was not "
                                        "stored first")
        existing = self.versions(name)
        version = (existing[-1] if existing else 0) + 1
        for _ in range(_PUBLISH_ATTEMPTS):
            data = mf.encode_manifest({**manifest, "version": version})
            try:
                self.store.put(f"bundles/{name}/{version}.msgpack", data, create_only=True)
            except AlreadyExistsError:
                log.info("%s@%d was published meanwhile by another writer; trying %d", name, version, version + 1)
                version += 1
                continue
            return BundleRef(self.store.url, name, version, mf.bundle_id(data))
        raise StoreError(f"could not allocate a version for {name} after {_PUBLISH_ATTEMPTS} attempts")

    def load(self, name: str, version: int) -> Bundle:
        key = f"bundles/{mf.check_name(name)}/{version}.msgpack"
        self.check_marker(create=False)
        try:
            data = self.store.get_bounded(key, mf.MAX_MANIFEST_BYTES)
        except NotFoundError:
            raise BundleNotFoundError(f"no bundle {name}@{version} in {self.store.url}",
                                      hint=f"`reprobundle ls {name}` lists its versions") from None
        try:
            m = mf.decode_manifest(data)
        except FormatError as e:
            e.message = f"{name}@{version}: {e.message}"
            raise
        if m["name"] != name or m["version"] != version:
            raise FormatError(f"{key} claims to be {m['name']}@{m['version']}")
        # dict(): callers read the manifest as a plain map, not yet as the typed model (bundle/model.py)
        return Bundle(BundleRef(self.store.url, name, version, mf.bundle_id(data)), dict(m), data)

    def resolve(self, ref: str) -> Bundle:
        """`name`, `name@3`, `name@tag`, `sha256:<prefix>`; or '' / None for the single bundle of a zip store."""
        if not ref:
            return self._resolve_single_bundle()
        if ref.startswith("sha256:"):
            return self._resolve_digest(ref)
        name, _, selector = ref.partition("@")
        try:
            mf.check_name(name)
        except InvalidNameError:
            raise InvalidRefError(f"invalid ref {quoted(ref)}",
                                  hint="refs look like NAME, NAME@VERSION, NAME@TAG, sha256:PREFIX or a .zip path") from None
        if not selector or selector == "latest":
            versions = self.versions(name)
            if not versions:
                raise self._no_bundle_named(name)
            return self.load(name, versions[-1])
        try:
            if selector.isascii() and selector.isdigit():  # int() refuses some unicode digits (²)
                return self.load(name, self._version_number(name, selector))
            return self.load(name, self.tag_version(name, selector))
        except BundleNotFoundError as e:
            if not self._listed_versions(name, e):  # the name itself is the mistake: with what it may have meant
                raise self._no_bundle_named(name, e.message) from None
            raise

    def _listed_versions(self, name: str, error: BundleNotFoundError) -> list[int]:
        """The versions of `name`; where the store cannot be listed (an http one), `error` as it was."""
        try:
            return self.versions(name)
        except ReproBundleError:
            raise error from None

    def _no_bundle_named(self, name: str, message: str | None = None) -> BundleNotFoundError:
        """The error for a name this store has no bundle of (`message`, or "no bundle named NAME"), its hint naming
        the store's names it may be a misspelling of."""
        try:
            known = [n for n in self.names() if n != name]
        except ReproBundleError:  # a store that cannot be listed (an http one): the error without the suggestion
            known = []
        # a name of 2-3 characters with one wrong ("t1" for "tl") matches only half of it: difflib's 0.6 misses it
        meant = did_you_mean(name, known, cutoff=0.6 if len(name) > 3 else 0.5)
        meant += " " if meant else ""
        return BundleNotFoundError(message or f"no bundle named {name!r} in {self.store.url}",
                                   hint=f"{meant}`reprobundle ls --store {shlex.quote(self.store.url)}` lists the "
                                        "bundles in this store")

    def _resolve_single_bundle(self) -> Bundle:
        """The ref '' or None: the one bundle of a zip store, else an InvalidRefError that asks for a name."""
        self.check_marker(create=False)
        names = [n for n in self.names() if self.versions(n)]
        if self.store.capabilities.single_file and len(names) == 1:
            return self.load(names[0], self.versions(names[0])[-1])
        if self.store.capabilities.single_file and names:
            shown = ", ".join(f"{n}@{self.versions(n)[-1]}" for n in names[:5])
            shown += ", ..." if len(names) > 5 else ""
            raise InvalidRefError(f"{self.store.url} holds {len(names)} bundles ({shown}); name one",
                                  hint=f"give the bundle with the zip as the store: NAME@VERSION --store "
                                       f"{self.store.url}")
        raise InvalidRefError("no bundle named", hint="name a bundle: NAME, NAME@VERSION, NAME@TAG or sha256:PREFIX")

    def _version_number(self, name: str, selector: str) -> int:
        """The version an all-ASCII-digit selector names (`3`, `007`); BundleNotFoundError for 0 or over 9 digits."""
        digits = selector.lstrip("0")
        if not digits or len(digits) > 9:  # versions are 1..999999999; int() refuses thousands of digits
            raise BundleNotFoundError(f"no bundle {name}@{clean(selector, 20)} in {self.store.url}",
                                      hint=f"`reprobundle ls {name}` lists its versions")
        return int(digits)

    def _resolve_digest(self, ref: str) -> Bundle:
        prefix = ref.split(":", 1)[1]
        if not re.fullmatch(r"[0-9a-f]{4,64}", prefix):
            raise InvalidRefError(f"invalid digest ref {quoted(ref)}",
                                  hint="use sha256: and at least 4 lowercase hex digits")
        matches = [b for b in self.iter_bundles() if hex_of(b.ref.bundle_id).startswith(prefix)]
        if not matches:
            raise BundleNotFoundError(f"no bundle with id {ref} in {self.store.url}")
        if len(matches) > 1:
            raise InvalidRefError(f"{ref} is ambiguous: {', '.join(str(b.ref) for b in matches[:5])}",
                                  hint="give more digits of the id")
        return matches[0]

    def iter_bundles(self, name: str | None = None) -> Iterator[Bundle]:
        """Every bundle (of `name`); a manifest that cannot be read is skipped with a warning naming it, so one
        bad record does not hide the rest of the store."""
        for n in [name] if name else self.names():
            for v in self.versions(n):
                try:
                    bundle = self.load(n, v)
                except (FormatError, StoreError) as e:
                    log.warning("skipped bundles/%s/%d.msgpack: %s", n, v, first_line(e.message, 200))
                    continue
                yield bundle

    # ----------------------------------------------------------------------------------------- tags
    def tag(self, name: str, version: int, tag: str) -> None:
        """Point `name@tag` at `version`, over the value read just before (Store.put_if): of two `tag`s at once from
        the same value one moves the tag and the other raises AlreadyExistsError saying where it points now (never
        a silent overwrite). A tag whose value cannot be read (damaged, too large) is written over."""
        mf.check_tag(tag)
        self.check_marker(create=True)
        self.load(name, version)
        key = f"tags/{name}/{tag}"
        value = str(version).encode()
        try:
            before: bytes | None = self.store.get_bounded(key, MAX_TAG_BYTES)
        except NotFoundError:
            before = None
        except (FormatError, StoreError):
            self.store.put(key, value)
            return
        if self.store.put_if(key, value, expected=before, max_bytes=MAX_TAG_BYTES):
            return
        now = self.tag_version(name, tag)
        if now != version:
            raise AlreadyExistsError(
                f"{name}@{tag} now points at {name}@{now}: another `tag` moved it at the same moment, so "
                f"{name}@{version} was not tagged",
                hint=f"run `reprobundle tag {name}@{version} {tag}` again to point it at {name}@{version}")

    def tag_version(self, name: str, tag: str) -> int:
        mf.check_tag(tag)
        self.check_marker(create=False)
        try:
            raw = self.store.get_bounded(f"tags/{name}/{tag}", MAX_TAG_BYTES).decode("ascii", "replace").strip()
        except NotFoundError:
            raise BundleNotFoundError(f"no tag {tag!r} on {name} in {self.store.url}") from None
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
            raise FormatError(f"tag {name}@{tag} holds {quoted(raw, 20)}, not a version number")
        return int(raw)

    def tags(self, name: str) -> dict[str, int]:
        """The tags of `name`; one that cannot be read is skipped with a warning naming it."""
        found = {}
        for key in self.store.list(f"tags/{mf.check_name(name)}"):
            tag = key.rsplit("/", 1)[-1]
            try:
                found[tag] = self.tag_version(name, tag)
            except ReproBundleError as e:
                log.warning("skipped %s: %s", key, first_line(e.message, 200))
        return found

    # ----------------------------------------------------------------------------------------- runs
    def put_run(self, run: dict) -> str:
        """Store a run record; its environment is redacted once more on the way in (whatever a producer added to
        it after its own redaction, such as the conditions of a measurement, is judged by the same rules)."""
        self.check_marker(create=True)
        run = {**run, "environment": redact_environment(run.get("environment") or {})}
        run_id, data = run["run_id"], mf.encode_run(run)
        key = f"runs/{hex_of(run['bundle_id'])}/{run_id}.msgpack"
        self.store.put(key, data, create_only=True)
        self._run_digest_cache[key] = digest_bytes(data)
        return run_id

    def put_runs(self, runs: Sequence[dict]) -> list[str]:
        """Store the runs of one replay as a group that is a result only once all of it is stored: a pending mark
        (`runs/<bundle>/<group>.pending`, per bundle) goes first and is deleted after the last record, and `runs`
        leaves out the runs of a group still marked. An interrupted replay (Ctrl-C, a kill, a full disk) so never
        leaves half a group shown as a result; its records stay, unlisted, and name their blobs for gc."""
        runs = list(runs)
        groups = sorted({f"runs/{hex_of(r['bundle_id'])}/{r['group']}{PENDING_SUFFIX}" for r in runs
                         if isinstance(r.get("group"), str)})
        if runs:
            self.check_marker(create=True)
        for mark in groups:
            self.store.put(mark, b"", create_only=False)
        ids = [self.put_run(run) for run in runs]
        for mark in groups:
            self.store.delete(mark)
        return ids

    def runs(self, bundle_id: str) -> list[dict]:
        """The bundle's run records, oldest first; one that cannot be read is skipped with a warning naming it, and
        the runs of a group whose storing never finished (see `put_runs`) are left out."""
        self.check_marker(create=False)
        out: list[dict] = []
        keys = list(self.store.list(f"runs/{hex_of(bundle_id)}"))
        pending = {k.rsplit("/", 1)[-1][:-len(PENDING_SUFFIX)] for k in keys if k.endswith(PENDING_SUFFIX)}
        for key in keys:
            if key.endswith(".msgpack"):
                try:
                    out.append(dict(mf.decode_run(self.store.get_bounded(key, mf.MAX_MANIFEST_BYTES))))
                except NotFoundError:
                    continue
                except (FormatError, StoreError) as e:
                    log.warning("skipped %s: %s", key, first_line(e.message, 200))
        if pending:
            log.info("left out the runs of unfinished replays: %s", ", ".join(sorted(pending)))
            out = [r for r in out if r.get("group") not in pending]
        return sorted(out, key=lambda r: r["created"])

    # ---------------------------------------------------------------------------------------- answers
    def put_answer(self, answer: dict, *, runs_of: str | None = None) -> str:
        """Store an answer record (bundle/manifest.validate_answer) beside the bundle's runs, sealed as this store's
        own (bundle/answer_seal.py): the run records it names (the runs of `runs_of`, default its own bundle; a
        minimization's are its piece's) by their sha256 as stored here (null: none is), then the whole record under
        this machine's key. Written once (one put of the whole record: a reader sees all of it or nothing)."""
        self.check_marker(create=True)
        folder = f"runs/{hex_of(runs_of or answer['bundle_id'])}"
        runs = self._run_digests([f"{folder}/{run_id}.msgpack" for run_id in answer.get("runs") or []])
        record = answer_seal.sealed(answer, runs, answer_seal.sealing_key())
        self.store.put(answer_key(answer["bundle_id"], answer["answer_id"]), mf.encode_answer(record),
                       create_only=True)
        return answer["answer_id"]

    def put_copied_answer(self, answer: dict) -> bool:
        """Store a record another store holds, as it is but for its seal, which a copy never carries: foreign here
        (answer_seal.py), shown, never reused or reported. False where this store holds that record already."""
        self.check_marker(create=True)
        try:
            self.store.put(answer_key(answer["bundle_id"], answer["answer_id"]),
                           mf.encode_answer(answer_seal.unsealed(answer)), create_only=True)
        except AlreadyExistsError:
            return False
        return True

    def answers(self, bundle_id: str) -> list[dict]:
        """The bundle's own answer records (answer_seal.py: sealed here, every run they rest on still as sealed),
        oldest first: the only ones reused or reported. The others are `answer_records`'."""
        return [record for record, foreign in self.answer_records(bundle_id) if foreign is None]

    def answer_records(self, bundle_id: str) -> list[tuple[dict, str | None]]:
        """Every answer record stored beside the bundle, each with why it is foreign (None: this store's own),
        oldest first (own ones by this machine's clock; a foreign one's `created` is whatever its writer put); one
        that cannot be read is skipped with a warning naming it."""
        self.check_marker(create=False)
        records = []
        for key in self.store.list(f"answers/{hex_of(bundle_id)}"):
            if not key.endswith(".msgpack"):
                continue
            try:
                records.append(mf.decode_answer(self.store.get_bounded(key, mf.MAX_MANIFEST_BYTES)))
            except NotFoundError:
                continue
            except (FormatError, StoreError) as e:
                log.warning("skipped %s: %s", key, first_line(e.message, 200))
        machine_key = answer_seal.machine_key() if any(answer_seal.SEAL in r for r in records) else None
        judged = [(r, "stored under another bundle" if r["bundle_id"] != bundle_id else
                   answer_seal.seal_problem(r, machine_key)) for r in records]
        digests = self._run_digests([k for r, why in judged if why is None for k in answer_seal.sealed_runs(r)])
        judged = [(r, why or answer_seal.run_problem(r, digests)) for r, why in judged]
        return sorted(judged, key=lambda j: (j[0]["created"], j[0]["answer_id"]))

    def _run_digests(self, keys: Sequence[str]) -> dict[str, str | None]:
        """Each run record's sha256 as stored now (None: not there, or unreadable); read once per registry (run
        records are create-only), several at a time."""
        def digest(key: str) -> str | None:
            try:
                return digest_bytes(self.store.get_bounded(key, mf.MAX_MANIFEST_BYTES))
            except NotFoundError:
                return None
            except StoreError as e:
                log.warning("cannot read %s: %s", key, first_line(e.message, 200))
                return None

        todo = sorted({k for k in keys if k not in self._run_digest_cache})
        if todo:
            with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
                for key, found in zip(todo, pool.map(digest, todo)):
                    if found is not None:
                        self._run_digest_cache[key] = found
        return {k: self._run_digest_cache.get(k) for k in keys}

    @staticmethod
    def new_run_id() -> str:
        return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]

    # ------------------------------------------------------------------------------------- checking
    def verify(self, bundle: Bundle) -> list[str]:
        """Re-hash every blob the bundle names; returns the problems (empty when intact)."""
        problems = []
        for ref in mf.blob_refs(bundle.manifest):
            problem = self.verify_blob(ref["digest"])
            if problem is None:
                try:
                    if self.store.size(blob_key(ref["digest"])) != ref["size"]:
                        problem = f"blob {ref['digest']} has the wrong size"
                except ReproBundleError as e:  # gone or changed since it was read
                    problem = f"blob {ref['digest']} is unreadable ({first_line(e.message, 300)})"
            if problem:
                problems.append(problem)
        return problems

    def gc(self, *, dry_run: bool = True, grace_s: float | None = None) -> list[str]:
        """The keys of the unreferenced blobs gc deletes (deleted unless dry_run); see `collect`."""
        return self.collect(delete=not dry_run, grace_s=grace_s).deleted

    def collect(self, *, delete: bool, grace_s: float | None = None):
        """Garbage collection with its whole report (bundle/collection.py): blobs no record references, no running
        writer holds and unused for `grace_s` seconds (None: $REPROBUNDLE_GC_GRACE or 24 h) are deleted; records
        it could not read are named. With `delete`, also removes what killed writers left in a folder store's
        `.tmp` (old temp files, dead leases)."""
        from ..config import gc_grace_s
        from .collection import collect

        return collect(self, delete=delete, grace_s=gc_grace_s() if grace_s is None else grace_s)

    # ---------------------------------------------------------------------------------------- export
    def export_zip(self, bundle: Bundle, path: str | Path, *, runner: bool = True,
                   expectation: "ZipExpectation | None" = None) -> Path:
        """Write the bundle as a single-file store (same layout) at `path`, atomically. With `runner`, the zip also
        replays itself with nothing but JAX installed: `python NAME.zip` (see worker/standalone.py); with
        `expectation` (bundle/zip_expectation.py, built from a stored answer above this layer) it judges what the
        investigation found: its record as `reproducer.json`, the expected outputs' blobs in the store layout."""
        problems = self.verify(bundle)
        if problems:
            raise CorruptBlobError(f"cannot export {bundle.ref}: {problems[0]}")
        named = {str(ref["digest"]) for ref in mf.blob_refs(bundle.manifest)}

        def entries():
            yield MARKER_KEY, self.store, MARKER_KEY
            for ref in mf.blob_refs(bundle.manifest):
                key = blob_key(ref["digest"])
                yield key, self.store, key
            for digest in sorted(set(expectation.blobs if expectation is not None else ()) - named):
                yield blob_key(digest), expectation.source, blob_key(digest)  # type: ignore[union-attr]
            key = f"bundles/{bundle.ref.name}/{bundle.ref.version}.msgpack"
            yield key, self.store, key

        from ..worker.standalone import runner_files
        from .zip_expectation import record_entry

        extra = runner_files() + ([record_entry(expectation)] if expectation is not None else []) if runner else []
        write_zip_store(path, entries(), extra)
        return Path(path)


def _default_blob_cache(store: Store):
    """The persistent blob cache for stores that are neither local folders, zips nor in this process's memory."""
    if store.capabilities.local:
        return None
    from .cache import BlobCache

    return BlobCache.default()


def answer_key(bundle_id: str, answer_id: str) -> str:
    return f"answers/{hex_of(bundle_id)}/{answer_id}.msgpack"


def split_store_ref(text: str) -> tuple[str | None, str]:
    """Split a user ref into (store URL or None, ref within the store).

    `gs://b/p/name@3` -> ("gs://b/p", "name@3"); `bundle.zip` -> ("bundle.zip", ""); `name@3` -> (None, "name@3");
    a path to a bundle in a store folder, as reprobundle prints it (`/data/store/name@3`), -> ("/data/store",
    "name@3").
    """
    if text.lower().endswith(".zip") or text.startswith("zip://"):
        return text, ""
    if "://" in text:
        scheme, rest = text.split("://", 1)
        if "/" not in rest.strip("/"):
            raise InvalidRefError(f"{text!r} names a store but no bundle", hint="append /NAME or /NAME@VERSION")
        base, _, ref = rest.rstrip("/").rpartition("/")
        return f"{scheme}://{base}", ref
    if "/" in text.rstrip("/") or (os.sep != "/" and os.sep in text):
        base, _, ref = text.rstrip("/").replace(os.sep, "/").rpartition("/")
        if ref and (Path(base or "/") / MARKER_KEY).is_file():
            return base or "/", ref
    return None, text


def open_ref(text: str, store: str | None = None) -> tuple[Registry, Bundle]:
    store_url, ref = split_store_ref(text)
    registry = Registry.open(store_url if store_url is not None else store)
    if registry.store.capabilities.single_file and not ref:
        return registry, registry.resolve("")
    return registry, registry.resolve(ref)


def copy_tree_to_zip_blob(folder: Path, transform=None) -> bytes:
    """Deterministic zip (sorted names, fixed timestamps) of a folder's files, for folder artifacts. `transform`
    (bytes -> bytes) is applied to every file's content and name first (the redaction of an XLA dump)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file():
                name = str(p.relative_to(folder))
                if transform is not None:
                    name = transform(name.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                if transform is not None:
                    zf.writestr(info, transform(p.read_bytes()))
                    continue
                with open(p, "rb") as src, zf.open(info, "w") as dst:
                    shutil.copyfileobj(src, dst, COPY_CHUNK)
    return buf.getvalue()
