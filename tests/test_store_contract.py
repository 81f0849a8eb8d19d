"""The store contract: every backend passes the same tests."""

import multiprocessing
import re
import uuid
import zipfile

import pytest

from reprobundle.errors import (
    AlreadyExistsError,
    NotFoundError,
    ReadOnlyStoreError,
    StoreError,
    UsageError,
)
from reprobundle.store import open_store
from reprobundle.store.local import LocalStore
from reprobundle.store.zip_store import ZipStore, write_zip_store


def _race_create_only(url, key, token, queue):
    store = open_store(url)
    try:
        store.put(key, token.encode(), create_only=True)
        queue.put(("won", token))
    except AlreadyExistsError:
        queue.put(("lost", token))


class StoreContract:
    """Subclasses provide a `store` fixture with a fresh, empty, writable store."""

    cross_process = True

    def test_put_get_roundtrip(self, store):
        store.put("a/b/c", b"hello")
        assert store.get("a/b/c") == b"hello"
        assert store.exists("a/b/c")
        assert store.size("a/b/c") == 5

    def test_overwrite(self, store):
        store.put("k", b"one")
        store.put("k", b"two")
        assert store.get("k") == b"two"

    def test_missing_key(self, store):
        with pytest.raises(NotFoundError):
            store.get("nope/none")
        with pytest.raises(NotFoundError):
            store.size("nope/none")
        assert not store.exists("nope/none")

    def test_create_only(self, store):
        store.put("once", b"1", create_only=True)
        with pytest.raises(AlreadyExistsError):
            store.put("once", b"2", create_only=True)
        assert store.get("once") == b"1"

    def test_list_sorted_under_prefix(self, store):
        for k in ["x/2", "x/1", "x/sub/3", "y/1"]:
            store.put(k, k.encode())
        assert list(store.list("x")) == ["x/1", "x/2", "x/sub/3"]
        assert list(store.list("missing")) == []
        assert set(store.list()) >= {"x/1", "x/2", "x/sub/3", "y/1"}

    def test_delete(self, store):
        store.put("d", b"1")
        store.delete("d")
        assert not store.exists("d")
        store.delete("d")  # idempotent

    def test_streams_and_files(self, store, tmp_path):
        data = bytes(range(256)) * 40000
        src = tmp_path / "src.bin"
        src.write_bytes(data)
        store.put_file("big/file", src)
        with store.open_read("big/file") as f:
            assert f.read() == data
        store.get_file("big/file", tmp_path / "out" / "copy.bin")
        assert (tmp_path / "out" / "copy.bin").read_bytes() == data

    def test_staged_values_and_moved_files(self, store, tmp_path):
        """stage: invisible until published, then like put (create_only included); discarded leaves nothing.
        put_many(move=True): stored, and the caller's files are gone."""
        before = list(store.list())
        staged = store.stage(b"staged bytes")
        if staged is not None:
            with staged:
                assert list(store.list()) == before
                staged.publish("st/one")
            assert store.get("st/one") == b"staged bytes"
            with store.stage(b"other") as again, pytest.raises(AlreadyExistsError):
                again.publish("st/one", create_only=True)
            with store.stage(b"dropped"):
                pass
            assert list(store.list()) == sorted([*before, "st/one"]) and store.get("st/one") == b"staged bytes"
        folder = store.staging_folder() or tmp_path
        folder.mkdir(parents=True, exist_ok=True)
        files = [folder / f"moved-{i}" for i in range(3)]
        for i, f in enumerate(files):
            f.write_bytes(b"m" * i)
        store.put_many([(f"mv/{i}", f) for i, f in enumerate(files)], move=True)
        assert [store.get(f"mv/{i}") for i in range(3)] == [b"", b"m", b"mm"]
        assert not any(f.exists() for f in files)

    def test_empty_value(self, store):
        store.put("empty", b"")
        assert store.get("empty") == b""
        assert store.size("empty") == 0

    @pytest.mark.parametrize("key", ["../escape", "/abs", "a//b", "a/./b", "a/../b", "sp ace", "", "a/", "ü"])
    def test_unsafe_keys_rejected(self, store, key):
        with pytest.raises(UsageError):
            store.put(key, b"x")
        with pytest.raises(UsageError):
            store.get(key)

    def test_create_only_race_across_processes(self, store):
        if not self.cross_process:
            pytest.skip("in-process backend")
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        key = f"race/{uuid.uuid4().hex}"
        procs = [ctx.Process(target=_race_create_only, args=(store.url, key, f"p{i}", queue)) for i in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        outcomes = [queue.get(timeout=5) for _ in procs]
        winners = [t for o, t in outcomes if o == "won"]
        assert len(winners) == 1
        assert store.get(key).decode() == winners[0]


class TestLocalStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        return LocalStore(tmp_path / "local")

    def test_no_temp_files_visible(self, store):
        store.put("a", b"1")
        assert list(store.list()) == ["a"]

    def test_unwritable_root(self, tmp_path):
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        with pytest.raises(StoreError):
            LocalStore(blocker / "store").put("a", b"1")


class TestMemoryStore(StoreContract):
    cross_process = False

    @pytest.fixture
    def store(self):
        return open_store(f"memory://contract-{uuid.uuid4().hex}")


class TestGCSStore(StoreContract):
    """Against a real GCS JSON-API server on localhost (tests/gcs_server.py)."""

    @pytest.fixture
    def store(self, gcs_store_url):
        return open_store(gcs_store_url)


def _zip_of(tmp_path, entries: dict[str, bytes]) -> ZipStore:
    src = LocalStore(tmp_path / "zipsrc")
    for k, v in entries.items():
        src.put(k, v)
    path = tmp_path / "bundle.zip"
    write_zip_store(path, ((k, src, k) for k in entries))
    return ZipStore(path)


class TestZipStore:
    """A zip store is read-only: the read half of the contract, plus its own failure modes."""

    def test_read_contract(self, tmp_path):
        store = _zip_of(tmp_path, {"x/1": b"one", "x/2": b"two", "y/1": b"", "big": bytes(range(256)) * 5000})
        assert store.get("x/1") == b"one"
        assert store.size("big") == 256 * 5000
        assert list(store.list("x")) == ["x/1", "x/2"]
        assert store.exists("y/1") and not store.exists("y/2")
        with pytest.raises(NotFoundError):
            store.get("x/3")
        with store.open_read("big") as f:
            assert f.read() == bytes(range(256)) * 5000
        with pytest.raises(ReadOnlyStoreError):
            store.put("z", b"1")

    def test_open_store_routes_zip(self, tmp_path):
        store = _zip_of(tmp_path, {"a": b"1"})
        assert isinstance(open_store(str(store.path)), ZipStore)
        assert open_store(f"zip://::{store.path}").get("a") == b"1"

    def test_truncated_zip(self, tmp_path):
        store = _zip_of(tmp_path, {"a": b"1" * 1000})
        data = store.path.read_bytes()
        store.path.write_bytes(data[: len(data) // 2])
        with pytest.raises(StoreError, match="truncated or corrupt|not a readable zip"):
            ZipStore(store.path)

    @pytest.mark.parametrize("name", ["../../etc/evil", ""])  # "": found by fuzzing, zipfile's is_dir() fails on it
    def test_unsafe_entry_name_refused(self, tmp_path, name):
        path = tmp_path / "evil.zip"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(zipfile.ZipInfo(name), b"x")
        with pytest.raises(StoreError, match="unsafe name"):
            ZipStore(path)

    def test_zip_bomb_refused(self, tmp_path):
        path = tmp_path / "bomb.zip"
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("blobs/x", b"\0" * (64 << 20))
        with pytest.raises(StoreError, match="zip bomb"):
            ZipStore(path)

    def test_missing_file(self, tmp_path):
        with pytest.raises(NotFoundError):
            ZipStore(tmp_path / "none.zip")


def test_open_store_rejects_unknown_scheme():
    with pytest.raises(UsageError, match="unsupported store URL"):
        open_store("ftp://host/x")


HOSTILE = {  # key under the store -> what a reader must say (StoreError text), for the entries _hostile_folder makes
    "hostile/link-out": "symbolic link out of the store",
    "hostile/zero": "a character device",
    "hostile/fifo": "a FIFO",
    "hostile/loop": "cannot read",
    "hostile/socket": "cannot read|a socket",
    "hostile/dirlink/secret.txt": "symbolic link out of the store",
}


def _hostile_folder(root, outside) -> None:
    """What a store folder from someone else may hold beside real values: symlinks out of the store (to a file, to
    a device, to a folder), a FIFO, a socket, a symlink loop, a folder where a value would be; and a symlink to a
    value inside the store, which is fine."""
    import os
    import socket

    (root / "hostile").mkdir(parents=True)
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("root:x:0:0:precious\n")
    (root / "hostile/link-out").symlink_to(outside / "secret.txt")
    (root / "hostile/zero").symlink_to("/dev/zero")
    os.mkfifo(root / "hostile/fifo")
    (root / "hostile/loop").symlink_to(root / "hostile/loop")
    (root / "hostile/dir").mkdir()
    (root / "hostile/dirlink").symlink_to(outside, target_is_directory=True)
    (root / "hostile/plain").write_bytes(b"plain")
    (root / "hostile/inside").symlink_to(root / "hostile/plain")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "hostile/socket"))
    sock.close()


def _within(seconds: float, fn):
    """fn() in a thread; fails the test if it has not returned in time (a read waiting on a FIFO hangs)."""
    import threading

    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} did not return within {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


class TestHostileLocalStore(StoreContract):
    """The whole contract on a folder that already holds hostile entries (a store from someone else), then what
    reading those entries must do: refuse at once with a StoreError naming the key, never follow a symlink out of
    the store, never wait on a FIFO, never read a device, never quote a target's content."""

    @pytest.fixture
    def store(self, tmp_path):
        _hostile_folder(tmp_path / "hostile-store", tmp_path / "outside")
        return LocalStore(tmp_path / "hostile-store")

    @pytest.mark.parametrize("key", sorted(HOSTILE))
    def test_hostile_entries_are_refused_at_once(self, store, key):
        for op in (lambda: store.get(key), lambda: store.get_bounded(key, 100), lambda: store.open_read(key).read(),
                   lambda: store.size(key)):
            with pytest.raises(StoreError) as e:
                _within(60, op)
            assert key in e.value.message and re.search(HOSTILE[key], e.value.message), e.value.message
            assert "precious" not in e.value.message
        assert not _within(60, lambda: store.exists(key))
        assert _within(60, lambda: store.local_path(key)) is None

    def test_folders_links_inside_and_listing(self, store, tmp_path):
        with pytest.raises(NotFoundError):
            store.get("hostile/dir")
        assert store.get("hostile/inside") == b"plain" and store.local_path("hostile/inside") is not None
        listed = set(store.list("hostile"))
        assert {"hostile/link-out", "hostile/fifo", "hostile/plain"} <= listed
        assert not any(k.startswith("hostile/dirlink/") for k in listed)  # a symlinked folder is not followed
        store.delete("hostile/link-out")
        assert not (store.root / "hostile/link-out").is_symlink()
        assert (tmp_path / "outside/secret.txt").read_text().startswith("root:")  # the link went, not its target

    def test_reads_are_bounded_by_size(self, store):
        from reprobundle.errors import FormatError

        with open(store.root / "hostile/big", "wb") as f:
            f.truncate(1 << 30)  # sparse: 1 GiB that costs nothing to make
        import tracemalloc

        tracemalloc.start()
        try:
            with pytest.raises(FormatError, match="larger than"):
                store.get_bounded("hostile/big", 64 << 10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20

    def test_unreadable_values_as_another_user(self, tmp_path):
        """A value the user may not read (here as `nobody`): StorePermissionError (a StoreError), not a
        PermissionError traceback; `ls` of a store whose manifest it cannot read warns and goes on."""
        import json
        import os
        import shutil

        from as_nobody import run_as_nobody, shared_dir

        with shared_dir() as shared:
            store = LocalStore(shared / "store")
            store.put("reprobundle-store.json", b'{"format": "reprobundle-store", "format_version": 1}')
            store.put("bundles/x/1.msgpack", b"secret manifest")
            shutil.copytree(store.root, shared / "twin")
            for p in [shared / "store", *(shared / "store").rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)
            (shared / "store/bundles/x/1.msgpack").chmod(0o600)
            env = {**os.environ, "TMPDIR": str(shared), "REPROBUNDLE_CACHE_DIR": str(shared / "cache"),
                   "HOME": str(shared)}
            (code, out, err), = run_as_nobody([["ls", "--json", "--store", str(shared / "store")]],
                                              warmup=[["ls", "--json", "--store", str(shared / "twin")]], env=env)
        assert code == 0 and json.loads(out) == [], (code, out, err)
        assert "warning: skipped bundles/x/1.msgpack" in err and "permission denied" in err, err


# ------------------------------------------------------------------ internal folders that are not the real folder


def _snapshot(folder):
    """Every file under `folder` (following nothing) -> (bytes, mtime): what must survive untouched."""
    import os

    out = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, folder)] = (open(p, "rb").read(), os.lstat(p).st_mtime)
    return out


def _aged_outside(outside, names):
    """A user's folder with old files, some named like what reprobundle deletes (temp files, leases, blobs)."""
    import os
    import time

    outside.mkdir(parents=True, exist_ok=True)
    old = time.time() - 3 * 86400
    for name in names:
        (outside / name).write_bytes(b"precious " + name.encode())
        os.utime(outside / name, (old, old))


def _linked_store(tmp_path, folder: str, how: str):
    """A store holding a bundle, an orphan blob, a tag and a run, whose internal `folder` is replaced by `how`:
    `link` a symbolic link to a user's folder holding what was there plus aged files of the user's, `file` a file."""
    import os
    import shutil
    import time

    from manifests import make_manifest, make_run_record

    from reprobundle.bundle.digest import hex_of
    from reprobundle.bundle.registry import Registry

    root = tmp_path / "store"
    registry = Registry.open(root)
    manifest = make_manifest(registry)
    ref = registry.publish(manifest)
    orphan = registry.put_blob(b"an orphan blob")["digest"]
    registry.tag("demo", ref.version, "good")
    registry.put_run(make_run_record(ref.bundle_id))
    registry.close()
    old = time.time() - 3 * 86400
    for dirpath, _, files in os.walk(root):  # everything aged past any grace period
        for f in files:
            os.utime(os.path.join(dirpath, f), (old, old))
    folder = folder.replace("<xx>", hex_of(orphan)[:2]).replace("<run>", hex_of(ref.bundle_id))
    target = root / folder
    outside = tmp_path / "users-folder"
    if target.exists():
        shutil.move(str(target), str(outside))
    _aged_outside(outside, ["thesis.tex", "put-0123456789ab", "lease-0123456789abcdef", hex_of(orphan)])
    target.parent.mkdir(parents=True, exist_ok=True)
    if how == "link":
        target.symlink_to(outside, target_is_directory=True)
    else:
        target.write_bytes(b"not a folder")
    return root, outside, folder, ref.bundle_id


INTERNAL_FOLDERS = [".tmp", "blobs", "blobs/sha256", "blobs/sha256/<xx>", "bundles", "bundles/demo", "runs",
                    "runs/<run>", "tags", "tags/demo"]


@pytest.mark.parametrize("folder", INTERNAL_FOLDERS)
def test_gc_and_writers_never_go_through_a_linked_internal_folder(tmp_path, folder):
    """Class: a store from someone else whose internal folder (any of those gc, cleanup or a writer walks or deletes
    in) is a symbolic link to a user's folder. `gc --delete --grace 0` and every writer (blobs, manifests, tags,
    runs) leave the user's files as they were, byte for byte and time for time; whatever is refused is refused with
    StoreError naming the folder (exit 3 from the CLI), never a traceback."""
    from cli_runner import cli
    from manifests import make_manifest, make_run_record

    from reprobundle.bundle.registry import Registry
    from reprobundle.errors import StoreFolderError

    root, outside, name, bundle_id = _linked_store(tmp_path, folder, "link")
    before = _snapshot(outside)
    for dry in ((), ("--delete",)):  # even a dry run refuses: what it would list could be the user's files
        code, out, err = cli("gc", *dry, "--grace", "0", store=root)
        assert code == 3 and name in err and "symbolic link" in err, (code, out, err)
        assert "Traceback" not in err and "unexpected" not in err, err
    assert _snapshot(outside) == before

    registry = Registry.open(root)
    writes = [lambda: registry.put_blob(b"new blob for the writer test"),
              lambda: registry.publish(make_manifest(registry, payload=b"module 2")),
              lambda: registry.tag("demo", 1, "other"),
              lambda: registry.put_run(make_run_record(bundle_id, "r2"))]
    for write in writes:
        try:
            write()
        except StoreFolderError as e:
            assert name.split("/")[0] in e.message and "symbolic link" in e.message, e.message
        except StoreError as e:  # a read through the link is refused as before (the blob folder is outside)
            assert "symbolic link" in e.message, e.message
        assert {k: v for k, v in _snapshot(outside).items() if k in before} == before
        assert set(_snapshot(outside)) == set(before), "a writer wrote into the user's folder"
    registry.close()


@pytest.mark.parametrize("folder", [".tmp", "blobs/sha256", "bundles", "tags/demo"])
def test_an_internal_path_that_is_a_file_is_refused_by_name(tmp_path, folder):
    from cli_runner import cli

    root, _, name, _ = _linked_store(tmp_path, folder, "file")
    code, out, err = cli("gc", "--delete", "--grace", "0", store=root)
    assert code in (0, 3) and "Traceback" not in err and "unexpected" not in err, (code, out, err)
    code, out, err = cli("tag", "demo@1", "again", store=root)
    assert "Traceback" not in err and "unexpected" not in err, (code, out, err)


@pytest.mark.parametrize("folder", ["tmp", "http", "blobs", "blobs/.tmp", "blobs/sha256", "blobs/sha256/ab"])
def test_cache_cleanup_never_goes_through_a_linked_folder(tmp_path, monkeypatch, folder):
    """The same class in the cache: gc's sweep of dead work folders and `cache --clear` refuse a cache folder that
    is a symbolic link, naming it, and leave the user's files as they were."""
    from cli_runner import cli

    cache = tmp_path / "cache"
    monkeypatch.setenv("REPROBUNDLE_CACHE_DIR", str(cache))
    outside = tmp_path / "users-folder"
    _aged_outside(outside, ["thesis.tex", "transfer-abc", "fetch-abc", "ab" * 32])
    (outside / "fetch-dead").mkdir()
    (outside / "fetch-dead" / "notes.txt").write_text("mine")
    target = cache / folder
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(outside, target_is_directory=True)
    before = _snapshot(outside)
    for argv in (["gc", "--delete", "--grace", "0"], ["cache", "--clear"], ["cache"]):
        code, out, err = cli(*argv, store=tmp_path / "store") if argv[0] == "gc" else cli(*argv)
        assert code in (0, 3) and "Traceback" not in err and "unexpected" not in err, (argv, code, out, err)
        if code == 3:
            assert "symbolic link" in err and folder.split("/")[0] in err, err
        assert _snapshot(outside) == before, argv
