import multiprocessing
import os

import pytest
from manifests import assert_schema_valid, make_manifest

from reprobundle.bundle.registry import Registry, blob_key, open_ref, split_store_ref
from reprobundle.bundle.transfer import copy_bundle
from reprobundle.errors import (
    BlobNotFoundError,
    BundleNotFoundError,
    CorruptBlobError,
    InvalidRefError,
    UnsupportedFormatVersionError,
    UsageError,
)
from reprobundle.store.local import LocalStore


@pytest.fixture
def registry(store_dir):
    return Registry.open(store_dir)


def test_blobs_are_stored_once(registry, store_dir):
    a = registry.put_blob(b"same bytes")
    b = registry.put_blob(b"same bytes")
    assert a == b
    assert len(list(registry.store.list("blobs"))) == 1
    assert registry.get_blob(a) == b"same bytes"


def test_publish_versions_and_resolve(registry):
    m = make_manifest(registry)
    r1 = registry.publish(m)
    r2 = registry.publish(m)
    assert (r1.version, r2.version) == (1, 2)
    assert r1.bundle_id != r2.bundle_id
    assert registry.resolve("demo").ref == r2
    assert registry.resolve("demo@1").ref == r1
    assert registry.resolve(r1.bundle_id[:14]).ref == r1
    registry.tag("demo", 1, "good")
    assert registry.resolve("demo@good").ref == r1
    assert r1.url.endswith("/demo@1")
    assert_schema_valid(registry.resolve("demo@1").manifest)


@pytest.mark.parametrize("ref,error", [
    ("nope", BundleNotFoundError), ("demo@9", BundleNotFoundError), ("demo@missing", BundleNotFoundError),
    ("Bad Name", InvalidRefError), ("sha256:zz", InvalidRefError), ("sha256:ffff", BundleNotFoundError),
])
def test_bad_refs(registry, ref, error):
    registry.publish(make_manifest(registry))
    with pytest.raises(error):
        registry.resolve(ref)


def test_publish_refuses_missing_blobs(registry):
    m = make_manifest(registry)
    registry.store.delete(blob_key(m["inputs"]["leaves"][0]["blob"]["digest"]))
    with pytest.raises(BlobNotFoundError):
        registry.publish(m)
    assert registry.versions("demo") == []


def test_verify_names_corrupted_blob(registry):
    ref = registry.publish(make_manifest(registry))
    bundle = registry.resolve(str(ref))
    assert registry.verify(bundle) == []
    digest = bundle.manifest["inputs"]["leaves"][0]["blob"]["digest"]
    path = registry.store.root / blob_key(digest)
    data = bytearray(path.read_bytes())
    data[3] ^= 0x40
    path.write_bytes(bytes(data))
    problems = registry.verify(bundle)
    assert problems == [f"blob {digest} is corrupt (content hash differs)"]
    with pytest.raises(CorruptBlobError, match=digest):
        registry.get_blob(digest)


def _publish_many(url, n, queue):
    registry = Registry.open(url)
    for _ in range(n):
        queue.put(registry.publish(make_manifest(registry)).version)


def test_concurrent_publish_gives_distinct_versions(store_dir):
    Registry.open(store_dir).put_blob(b"init")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_publish_many, args=(str(store_dir), 5, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    versions = [queue.get(timeout=120) for _ in range(20)]
    for p in procs:
        p.join(30)
    assert sorted(versions) == list(range(1, 21))
    assert Registry.open(store_dir).versions("demo") == list(range(1, 21))


def test_gc_removes_only_unreferenced(registry):
    ref = registry.publish(make_manifest(registry))
    orphan = registry.put_blob(b"left behind by a killed pack")
    dead = registry.gc(dry_run=True, grace_s=0)
    assert dead == [blob_key(orphan["digest"])]
    assert registry.store.exists(blob_key(orphan["digest"]))
    registry.gc(dry_run=False, grace_s=0)
    assert not registry.store.exists(blob_key(orphan["digest"]))
    assert registry.verify(registry.resolve(str(ref))) == []


def test_gc_grace_period_keeps_recent_blobs(registry, monkeypatch):
    """An unreferenced blob is deleted only once unused for the grace period (default 24 h, REPROBUNDLE_GC_GRACE):
    a running writer's unpublished blobs are young; reusing a blob (put_blob of the same bytes) makes it young again."""
    orphan = registry.put_blob(b"written by a pack that is still running")
    registry.close()  # its lease would keep the blob too (see the next test): here the grace period alone
    key = blob_key(orphan["digest"])
    report = Registry.open(registry.url).collect(delete=True)
    assert report.deleted == [] and report.kept_recent == [key] and report.grace_s == 24 * 3600
    old = os.path.getmtime(registry.store.root / key) - 7200
    os.utime(registry.store.root / key, (old, old))
    monkeypatch.setenv("REPROBUNDLE_GC_GRACE", "1h")
    assert Registry.open(registry.url).gc(dry_run=True) == [key]
    registry.put_blob(b"written by a pack that is still running")  # reused by another pack: touched
    registry.close()
    assert Registry.open(registry.url).gc(dry_run=False) == []
    assert registry.store.exists(blob_key(orphan["digest"]))
    os.utime(registry.store.root / key, (old, old))
    assert Registry.open(registry.url).gc(dry_run=False) == [key]
    assert not registry.store.exists(blob_key(orphan["digest"]))
    monkeypatch.setenv("REPROBUNDLE_GC_GRACE", "soon")
    with pytest.raises(UsageError, match="REPROBUNDLE_GC_GRACE"):
        registry.gc()


def test_gc_keeps_what_a_running_writer_holds(registry):
    """A registry that wrote or reused blobs holds them (a lease: a locked file in the store's .tmp) until it is
    closed: gc, even with --grace 0, keeps them; once the writer is gone (closed, or killed: the kernel drops the
    lock) they are collected, and the dead lease file with them."""
    blob = registry.put_blob(b"not yet published")
    key = blob_key(blob["digest"])
    leases = list((registry.store.root / ".tmp").glob("lease-*"))
    assert len(leases) == 1 and key in leases[0].read_text()
    report = Registry.open(registry.url).collect(delete=True, grace_s=0)
    assert report.kept_leased == [key] and report.deleted == [] and registry.store.exists(key)
    assert registry.gc(dry_run=True, grace_s=0) == [key]  # its own lease does not stop the writer's own gc
    registry.close()
    assert not list((registry.store.root / ".tmp").glob("lease-*"))
    assert Registry.open(registry.url).gc(dry_run=False, grace_s=0) == [key]


def test_gc_never_ends_a_lease_or_work_folder_being_created(registry, tmp_path):
    """Class: gc's sweep meeting a writer between creating its lease (or a work folder's lock file) and locking it
    (seen: 8 concurrent packs beside a gc loop, one pack's lease deleted under it). What is being created carries a
    staging name that gc judges by age alone: a fresh one stays; one a killed writer left an hour ago goes; a lease
    or work folder under its final name that nobody holds goes, one that a live writer holds stays."""
    from reprobundle.store.scratch import LOCK_FILE, STAGING_SUFFIX, scratch_dir, sweep

    tmp = registry.store.root / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    fresh, old, dead = tmp / f"lease-aa{STAGING_SUFFIX}", tmp / f"lease-bb{STAGING_SUFFIX}", tmp / "lease-cc"
    for path in (fresh, old, dead):
        path.write_text("")
    os.utime(old, (0, 0))
    registry.put_blob(b"held by this writer")
    live = [p for p in tmp.glob("lease-*") if p not in (fresh, old, dead)]
    assert len(live) == 1 and not live[0].name.endswith(STAGING_SUFFIX)
    Registry.open(registry.url).gc(dry_run=False, grace_s=0)
    assert fresh.exists() and live[0].exists() and not old.exists() and not dead.exists()
    with scratch_dir(tmp_path, "work-") as work:
        assert [p.name for p in work.iterdir()] == [LOCK_FILE]  # locked under its final name only
        stale = tmp_path / "work-killed"
        stale.mkdir()
        (stale / (LOCK_FILE + STAGING_SUFFIX)).write_text("")  # killed between creating and locking: no lock yet
        assert sweep(tmp_path, stale_s=None) == 0 and work.exists() and stale.exists()


def test_export_zip_roundtrip(registry, tmp_path):
    ref = registry.publish(make_manifest(registry))
    path = registry.export_zip(registry.resolve(str(ref)), tmp_path / "b.zip")
    zreg, bundle = open_ref(str(path))
    assert bundle.ref.bundle_id == ref.bundle_id
    assert zreg.verify(bundle) == []
    copy = Registry.open(tmp_path / "other")
    copied = copy_bundle(zreg, bundle, copy).ref
    assert copied.bundle_id == ref.bundle_id
    assert copy.verify(copy.resolve("demo")) == []


def test_not_a_store(tmp_path):
    folder = tmp_path / "random"
    folder.mkdir()
    (folder / "file.txt").write_text("user data")
    from reprobundle.errors import StoreLayoutError

    with pytest.raises(StoreLayoutError, match="not a reprobundle store"):
        Registry.open(folder).put_blob(b"x")
    assert sorted(os.listdir(folder)) == ["file.txt"]


def test_store_from_the_future(registry, store_dir):
    registry.put_blob(b"x")
    (store_dir / "reprobundle-store.json").write_text('{"format": "reprobundle-store", "format_version": 99}')
    with pytest.raises(UnsupportedFormatVersionError):
        Registry.open(store_dir).put_blob(b"y")


def test_split_store_ref():
    assert split_store_ref("gs://b/p/q/name@3") == ("gs://b/p/q", "name@3")
    assert split_store_ref("name@3") == (None, "name@3")
    assert split_store_ref("x/bundle.zip") == ("x/bundle.zip", "")
    with pytest.raises(InvalidRefError):
        split_store_ref("gs://bucket")


class _InterruptedStore(LocalStore):
    """A real folder store where Ctrl-C arrives at the `at`-th write or delete (as a signal would)."""

    def __init__(self, root, at: int) -> None:
        super().__init__(root)
        self.left = at

    def _tick(self):
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt

    def put(self, key, data, *, create_only=False):
        self._tick()
        super().put(key, data, create_only=create_only)

    def delete(self, key):
        self._tick()
        super().delete(key)


@pytest.mark.parametrize("at", [1, 2, 3, 4, 5, 6, 7])
def test_an_interrupted_group_of_runs_is_never_a_result(tmp_path, at):
    """Class: a replay's runs (two bundles, two versions each: one group) stored by put_runs and interrupted at every
    write: after the pending marks, after some runs, after all runs but before the marks go. `runs` shows either
    the whole group (the storing finished) or none of it, never half; a later complete group is shown whole."""
    from manifests import make_manifest, make_run_record

    from reprobundle.bundle.registry import Registry

    setup = Registry.open(tmp_path / "store")
    a = setup.publish(make_manifest(setup, name="a"))
    b = setup.publish(make_manifest(setup, name="b", payload=b"other"))
    setup.close()
    group = [make_run_record(ref.bundle_id, f"r{i}-{ref.name}", group="g1") for ref in (a, b) for i in range(2)]
    registry = Registry(_InterruptedStore(tmp_path / "store", at))
    try:
        registry.put_runs(group)
        finished = True
    except KeyboardInterrupt:
        finished = False
    reader = Registry.open(tmp_path / "store")
    for ref in (a, b):
        shown = [r["run_id"] for r in reader.runs(ref.bundle_id)]
        assert shown == ([f"r0-{ref.name}", f"r1-{ref.name}"] if finished else []), (at, shown)
    reader.put_runs([make_run_record(ref.bundle_id, f"s{i}-{ref.name}", group="g2") for ref in (a, b)
                     for i in range(2)])
    for ref in (a, b):
        assert {r["group"] for r in reader.runs(ref.bundle_id)} == ({"g1", "g2"} if finished else {"g2"})
    assert not list((tmp_path / "store").rglob("g2.pending"))


def test_a_misspelt_bundle_name_is_one_error_that_says_what_it_may_have_meant(small_store_template, tmp_path):
    """The typed error names the close names of the store (difflib), whatever selector followed the name; a
    name close to none gets no guess; a missing version of a name that exists is not a misspelling."""
    from cli_runner import cli
    from small_bundle import copy_of

    from reprobundle.errors import BundleNotFoundError

    store = copy_of(small_store_template, tmp_path / "store")
    registry = Registry.open(store)
    for ref in ("smal", "smll@1", "smal@latest", "samll@sometag"):
        with pytest.raises(BundleNotFoundError) as raised:
            registry.resolve(ref)
        assert raised.value.message.startswith(("no bundle named 'smal'", "no bundle smll@1", "no bundle samll@",
                                                "no tag")), raised.value.message
        assert "did you mean 'small'?" in raised.value.hint, (ref, raised.value.hint)
    with pytest.raises(BundleNotFoundError) as raised:
        registry.resolve("zzzzzz")
    assert "did you mean" not in raised.value.hint
    with pytest.raises(BundleNotFoundError) as raised:
        registry.resolve("small@9")
    assert "small@9" in raised.value.message and "did you mean" not in raised.value.hint
    code, out, err = cli("show", "smal", store=store)
    assert code != 0 and "did you mean 'small'?" in err and "Traceback" not in err, err
    # a short name one character off: "t1" for "tl" (half of it matches, under difflib's usual 0.6); "ab" no guess
    registry.publish(make_manifest(registry, name="tl"))
    for typo, meant in (("t1", "did you mean 'tl'?"), ("ab", None)):
        with pytest.raises(BundleNotFoundError) as raised:
            registry.resolve(typo)
        assert (meant in raised.value.hint) if meant else "did you mean" not in raised.value.hint, raised.value.hint
