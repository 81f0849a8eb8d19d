"""The registry: bundles, blobs, tags and runs laid out in a store (see shared/DESIGN.md, "Store layout").

Publishing writes every blob first and the manifest last, create-only, so a crash leaves no visible half
bundle; versions are allocated by racing create-only writes, so concurrent packs of one name all succeed with
distinct versions. Blobs are verified against their digest whenever they are read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from ..errors import (
    AlreadyExistsError,
    BlobNotFoundError,
    BundleNotFoundError,
    CorruptBlobError,
    CorruptBundleError,
    FormatError,
    InvalidRefError,
    NotFoundError,
    StoreError,
)
from ..store import COPY_CHUNK, Store, open_store
from ..store.local import LocalStore
from ..store.zip_store import ZipStore, write_zip_store
from . import manifest as mf
from .digest import blob_key, check_digest, digest_bytes, digest_file, hex_of

MARKER_KEY = "reprobundle-store.json"
_VERSION_KEY_RE = re.compile(r"^([1-9][0-9]{0,8})\.msgpack$")
_PUBLISH_ATTEMPTS = 1000


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        # Blobs of remote stores (gs://) are read through the persistent local cache (cache.BlobCache).
        self.blob_cache = _default_blob_cache(store)

    @classmethod
    def open(cls, url: str | os.PathLike | None = None) -> "Registry":
        return cls(open_store(url))

    @property
    def url(self) -> str:
        return self.store.url

    # ----------------------------------------------------------------------------------------- marker
    def check_marker(self, *, create: bool) -> None:
        if self._marker_checked:
            return
        try:
            raw = self.store.get(MARKER_KEY)
        except NotFoundError:
            if self.store.read_only:
                raise CorruptBundleError(
                    f"{self.store.url} is not a reprobundle bundle: it has no {MARKER_KEY}",
                    hint="the file is truncated or corrupt, or was not written by `reprobundle export`",
                ) from None
            if not create:
                return  # an empty or absent store simply holds no bundles
            if any(True for _ in self.store.list()):
                try:  # a concurrent writer may have just created the store: it writes the marker before anything
                    raw = self.store.get(MARKER_KEY)
                except NotFoundError:
                    raise StoreError(
                        f"{self.store.url} is not empty and is not a reprobundle store",
                        hint="point --store at an empty folder or an existing reprobundle store",
                    ) from None
            else:
                marker = json.dumps({"format": mf.STORE_FORMAT, "format_version": mf.STORE_VERSION}).encode()
                try:
                    self.store.put(MARKER_KEY, marker, create_only=True)
                except AlreadyExistsError:
                    pass
                raw = self.store.get(MARKER_KEY)
        try:
            marker = json.loads(raw)
            ok = marker.get("format") == mf.STORE_FORMAT and isinstance(marker.get("format_version"), int)
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise FormatError(f"{self.store.url}/{MARKER_KEY} is not a reprobundle store marker")
        if marker["format_version"] > mf.STORE_VERSION:
            raise mf.UnsupportedFormatVersionError(
                f"the store {self.store.url} has layout version {marker['format_version']}; "
                f"this reprobundle knows up to {mf.STORE_VERSION}",
                hint="upgrade reprobundle",
            )
        self._marker_checked = True

    # ------------------------------------------------------------------------------------------ blobs
    def has_blob(self, digest: str) -> bool:
        return self.store.exists(blob_key(digest))

    def put_blob(self, data: bytes | memoryview) -> dict:
        """Store bytes once by content; returns the manifest blob reference."""
        self.check_marker(create=True)
        digest = digest_bytes(data)
        key = blob_key(digest)
        if not self.store.exists(key):
            try:
                self.store.put(key, data, create_only=True)
            except AlreadyExistsError:
                pass  # a concurrent writer stored the same content
        return {"digest": digest, "size": memoryview(data).nbytes}

    def put_blob_file(self, path: str | Path) -> dict:
        self.check_marker(create=True)
        digest, size = digest_file(path)
        key = blob_key(digest)
        if not self.store.exists(key):
            try:
                self.store.put_file(key, path, create_only=True)
            except AlreadyExistsError:
                pass
        return {"digest": digest, "size": size}

    def get_blob(self, ref: dict | str) -> bytes:
        digest = ref["digest"] if isinstance(ref, dict) else ref
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
        local = self.store.local_path(key)
        if local is not None:
            if digest_file(local)[0] != digest:
                raise self._corrupt(digest)
            return local
        if self.blob_cache is not None:
            return self.blob_cache.fetch(self.store, digest)
        target = Path(cache_dir) / hex_of(digest)
        if target.is_file() and digest_file(target)[0] == digest:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        h = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    src = self.store.open_read(key)
                except NotFoundError:
                    raise self._missing(digest) from None
                with src:
                    while chunk := src.read(COPY_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
            if f"sha256:{h.hexdigest()}" != digest:
                raise self._corrupt(digest)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target

    def verify_blob(self, digest: str) -> str | None:
        """None if the blob is present and intact, else a one-line problem."""
        key = blob_key(digest)
        try:
            with self.store.open_read(key) as f:
                h = hashlib.sha256()
                while chunk := f.read(COPY_CHUNK):
                    h.update(chunk)
        except NotFoundError:
            return f"blob {digest} is missing"
        except FormatError as e:  # the store itself cannot read it back (a damaged zip entry)
            return f"blob {digest} is corrupt ({e.message})"
        return None if f"sha256:{h.hexdigest()}" == digest else f"blob {digest} is corrupt (content hash differs)"

    def _missing(self, digest: str) -> BlobNotFoundError:
        return BlobNotFoundError(f"blob {digest} is missing from {self.store.url}",
                                 hint="the store is incomplete; push the bundle again from a complete copy")

    def _corrupt(self, digest: str) -> CorruptBlobError:
        return CorruptBlobError(f"blob {digest} in {self.store.url} is corrupt: its content does not hash to its name",
                                hint="restore it by pushing the bundle again from an intact copy")

    # -------------------------------------------------------------------------------------- bundles
    def names(self) -> list[str]:
        return sorted({k.split("/")[1] for k in self.store.list("bundles") if k.count("/") == 2})

    def versions(self, name: str) -> list[int]:
        mf.check_name(name)
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
        for digest in (b["digest"] for b in mf.blob_refs(manifest)):
            if not self.has_blob(digest):
                raise BlobNotFoundError(f"cannot publish {name}: blob {digest} was not stored first")
        existing = self.versions(name)
        version = (existing[-1] if existing else 0) + 1
        for _ in range(_PUBLISH_ATTEMPTS):
            data = mf.encode_manifest({**manifest, "version": version})
            try:
                self.store.put(f"bundles/{name}/{version}.msgpack", data, create_only=True)
            except AlreadyExistsError:
                version += 1
                continue
            return BundleRef(self.store.url, name, version, mf.bundle_id(data))
        raise StoreError(f"could not allocate a version for {name} after {_PUBLISH_ATTEMPTS} attempts")

    def load(self, name: str, version: int) -> Bundle:
        key = f"bundles/{mf.check_name(name)}/{version}.msgpack"
        try:
            data = self.store.get(key)
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
        return Bundle(BundleRef(self.store.url, name, version, mf.bundle_id(data)), m, data)

    def resolve(self, ref: str) -> Bundle:
        """`name`, `name@3`, `name@tag`, `sha256:<prefix>`; or '' / None for the single bundle of a zip store."""
        if not ref:
            self.check_marker(create=False)
            names = self.names()
            if isinstance(self.store, ZipStore) and len(names) == 1:
                return self.load(names[0], self.versions(names[0])[-1])
            raise InvalidRefError("no bundle named", hint="name a bundle: NAME, NAME@VERSION, NAME@TAG or sha256:PREFIX")
        if ref.startswith("sha256:"):
            return self._resolve_digest(ref)
        name, _, selector = ref.partition("@")
        try:
            mf.check_name(name)
        except mf.InvalidNameError:
            raise InvalidRefError(f"invalid ref {ref!r}",
                                  hint="refs look like NAME, NAME@VERSION, NAME@TAG, sha256:PREFIX or a .zip path") from None
        if not selector or selector == "latest":
            versions = self.versions(name)
            if not versions:
                raise BundleNotFoundError(f"no bundle named {name!r} in {self.store.url}",
                                          hint="`reprobundle ls` lists the bundles in this store")
            return self.load(name, versions[-1])
        if selector.isascii() and selector.isdigit():  # int() refuses some unicode digits (²)
            return self.load(name, int(selector))
        return self.load(name, self.tag_version(name, selector))

    def _resolve_digest(self, ref: str) -> Bundle:
        prefix = ref.split(":", 1)[1]
        if not re.fullmatch(r"[0-9a-f]{4,64}", prefix):
            raise InvalidRefError(f"invalid digest ref {ref!r}", hint="use sha256: and at least 4 lowercase hex digits")
        matches = [b for b in self.iter_bundles() if hex_of(b.ref.bundle_id).startswith(prefix)]
        if not matches:
            raise BundleNotFoundError(f"no bundle with id {ref} in {self.store.url}")
        if len(matches) > 1:
            raise InvalidRefError(f"{ref} is ambiguous: {', '.join(str(b.ref) for b in matches[:5])}",
                                  hint="give more digits of the id")
        return matches[0]

    def iter_bundles(self, name: str | None = None) -> Iterator[Bundle]:
        for n in [name] if name else self.names():
            for v in self.versions(n):
                yield self.load(n, v)

    # ----------------------------------------------------------------------------------------- tags
    def tag(self, name: str, version: int, tag: str) -> None:
        mf.check_tag(tag)
        self.load(name, version)
        self.store.put(f"tags/{name}/{tag}", str(version).encode())

    def tag_version(self, name: str, tag: str) -> int:
        mf.check_tag(tag)
        try:
            raw = self.store.get(f"tags/{name}/{tag}").decode("ascii", "replace").strip()
        except NotFoundError:
            raise BundleNotFoundError(f"no tag {tag!r} on {name} in {self.store.url}") from None
        if not raw.isdigit():
            raise FormatError(f"tag {name}@{tag} holds {raw!r}, not a version number")
        return int(raw)

    def tags(self, name: str) -> dict[str, int]:
        return {k.rsplit("/", 1)[-1]: self.tag_version(name, k.rsplit("/", 1)[-1])
                for k in self.store.list(f"tags/{mf.check_name(name)}")}

    # ----------------------------------------------------------------------------------------- runs
    def put_run(self, run: dict) -> str:
        self.check_marker(create=True)
        run_id = run["run_id"]
        self.store.put(f"runs/{hex_of(run['bundle_id'])}/{run_id}.msgpack", mf.encode_run(run), create_only=True)
        return run_id

    def runs(self, bundle_id: str) -> list[dict]:
        out = []
        for key in self.store.list(f"runs/{hex_of(bundle_id)}"):
            if key.endswith(".msgpack"):
                out.append(mf.decode_run(self.store.get(key)))
        return sorted(out, key=lambda r: r["created"])

    @staticmethod
    def new_run_id() -> str:
        return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]

    # ------------------------------------------------------------------------------------- checking
    def verify(self, bundle: Bundle) -> list[str]:
        """Re-hash every blob the bundle names; returns the problems (empty when intact)."""
        problems = []
        for ref in mf.blob_refs(bundle.manifest):
            problem = self.verify_blob(ref["digest"])
            if problem is None and self.store.size(blob_key(ref["digest"])) != ref["size"]:
                problem = f"blob {ref['digest']} has the wrong size"
            if problem:
                problems.append(problem)
        return problems

    def gc(self, *, dry_run: bool = True) -> list[str]:
        """Blobs that no manifest or run references (deleted unless dry_run). Also clears stale temp files."""
        live: set[str] = set()
        for b in self.iter_bundles():
            live.update(r["digest"] for r in mf.blob_refs(b.manifest))
        for key in self.store.list("runs"):
            if key.endswith(".msgpack"):
                try:
                    live.update(r["digest"] for r in mf.blob_refs(mf.decode_run(self.store.get(key))))
                except mf.UnsupportedFormatVersionError:
                    raise  # a newer reprobundle's run: its blobs are unknown here, so nothing can be deleted safely
                except FormatError:
                    continue
        dead = [k for k in self.store.list("blobs") if f"sha256:{k.rsplit('/', 1)[-1]}" not in live]
        if not dry_run:
            for key in dead:
                self.store.delete(key)
            if isinstance(self.store, LocalStore):
                self.store.remove_stale_temp_files()
        return dead

    # ---------------------------------------------------------------------------------------- export
    def export_zip(self, bundle: Bundle, path: str | Path, *, include_runs: bool = False) -> Path:
        """Write the bundle as a single-file store (same layout) at `path`, atomically."""
        problems = self.verify(bundle)
        if problems:
            raise CorruptBlobError(f"cannot export {bundle.ref}: {problems[0]}")

        def entries():
            yield MARKER_KEY, self.store, MARKER_KEY
            for ref in mf.blob_refs(bundle.manifest):
                key = blob_key(ref["digest"])
                yield key, self.store, key
            key = f"bundles/{bundle.ref.name}/{bundle.ref.version}.msgpack"
            yield key, self.store, key

        write_zip_store(path, entries())
        return Path(path)


def _default_blob_cache(store: Store):
    """The persistent blob cache for stores that are neither local folders, zips nor in this process's memory."""
    if store.capabilities.local:
        return None
    from .cache import BlobCache

    return BlobCache.default()


def split_store_ref(text: str) -> tuple[str | None, str]:
    """Split a user ref into (store URL or None, ref within the store).

    `gs://b/p/name@3` -> ("gs://b/p", "name@3"); `bundle.zip` -> ("bundle.zip", ""); `name@3` -> (None, "name@3").
    """
    if text.lower().endswith(".zip") or text.startswith("zip://"):
        return text, ""
    if "://" in text:
        scheme, rest = text.split("://", 1)
        if "/" not in rest.strip("/"):
            raise InvalidRefError(f"{text!r} names a store but no bundle", hint="append /NAME or /NAME@VERSION")
        base, _, ref = rest.rstrip("/").rpartition("/")
        return f"{scheme}://{base}", ref
    return None, text


def open_ref(text: str, store: str | None = None) -> tuple[Registry, Bundle]:
    store_url, ref = split_store_ref(text)
    registry = Registry.open(store_url if store_url is not None else store)
    if isinstance(registry.store, ZipStore) and not ref:
        return registry, registry.resolve("")
    return registry, registry.resolve(ref)


def copy_tree_to_zip_blob(folder: Path) -> bytes:
    """Deterministic zip (sorted names, fixed timestamps) of a folder's files, for folder artifacts."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file():
                info = zipfile.ZipInfo(str(p.relative_to(folder)), date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(p, "rb") as src, zf.open(info, "w") as dst:
                    shutil.copyfileobj(src, dst, COPY_CHUNK)
    return buf.getvalue()
