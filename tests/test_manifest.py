import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifests import assert_schema_valid, make_manifest

from reprobundle.bundle import manifest as mf
from reprobundle.bundle.registry import Registry
from reprobundle.errors import (
    CorruptBundleError,
    FormatError,
    InvalidNameError,
    UnsupportedFormatVersionError,
)
from reprobundle.store import open_store


@pytest.fixture
def base():
    import uuid

    registry = Registry(open_store(f"memory://m-{uuid.uuid4().hex}"))
    m = make_manifest(registry)
    m["version"] = 1
    return m


def test_roundtrip_is_canonical(base):
    data = mf.encode_manifest(base)
    assert mf.decode_manifest(data) == base
    shuffled = dict(reversed(list(base.items())))
    assert mf.encode_manifest(shuffled) == data
    assert_schema_valid(mf.decode_manifest(data))


def test_newer_format_version_asks_to_upgrade(base):
    data = mf.encode({**base, "format_version": mf.MANIFEST_VERSION + 1})
    with pytest.raises(UnsupportedFormatVersionError, match=f"reads up to {mf.MANIFEST_VERSION}") as e:
        mf.decode_manifest(data)
    assert "upgrade reprobundle" in e.value.hint


@pytest.mark.parametrize("mutate,match", [
    (lambda m: m.pop("inputs"), "manifest: missing field 'inputs'"),
    (lambda m: m.update(extra=1), "manifest: unknown field 'extra'"),
    (lambda m: m["inputs"]["leaves"][0].update(dtype="float33"), r"manifest\.inputs\.leaves\[0\]\.dtype: unknown dtype"),
    (lambda m: m["inputs"]["leaves"][0]["blob"].update(digest="md5:00"),
     r"manifest\.inputs\.leaves\[0\]\.blob\.digest: not a sha256 digest"),
    (lambda m: m["inputs"]["leaves"][0].update(synthetic={"distribution": "normal", "seed": 1}),
     r"manifest\.inputs\.leaves\[0\]: a leaf has exactly one"),
    (lambda m: m["inputs"]["leaves"][0].update(shape=[-1]), r"manifest\.inputs\.leaves\[0\]\.shape\[0\]: must be >= 0"),
    (lambda m: m.update(name="../x"), "manifest.name: invalid bundle name"),
    (lambda m: m.update(format="zip"), "format"),
    (lambda m: m["inputs"]["leaves"].append(m["inputs"]["leaves"][0]), "2 leaves for 1"),
    (lambda m: m["function"].update(kind="pickle"), "manifest.function.kind: unknown kind"),
    (lambda m: m.update(version=True), "manifest.version: expected int, got bool"),
    (lambda m: m["function"]["fields"]["in_avals"][0].update(shape=[""]), r"in_avals\[0\]\.shape\[0\]"),
    (lambda m: m["function"].update(in_tree={"kind": "leaf", "children": [{"kind": "nope"}]}),
     r"manifest\.function\.in_tree\.children\[0\]\.kind: unknown kind"),
])
def test_strict_validation(base, mutate, match):
    """The schema is what refuses: every violation is one line naming its path."""
    mutate(base)
    with pytest.raises(FormatError, match=match) as e:
        mf.decode_manifest(mf.encode(base))
    assert "\n" not in e.value.message and len(e.value.message) < 200


def test_the_schema_knows_the_dtypes_the_worker_knows():
    import json

    from reprobundle.bundle.schema import SCHEMA_DIR
    from reprobundle.worker.dtypes import DTYPE_NAMES

    for name in ("manifest-v2", "run-v2", "run-v3", "run-v4"):
        schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
        assert set(schema["$defs"]["dtype"]["enum"]) == set(DTYPE_NAMES), name


def test_hostile_tree_depth_is_refused_before_validation(base):
    tree = {"kind": "leaf"}
    for _ in range(5000):
        tree = {"kind": "tuple", "children": [tree]}
    base["function"]["in_tree"] = tree
    with pytest.raises(FormatError, match="deeper than"):
        mf.validate_manifest(base)


def test_not_msgpack():
    with pytest.raises(CorruptBundleError, match="not valid msgpack"):
        mf.decode_manifest(b"\xc1garbage")
    with pytest.raises(CorruptBundleError, match="not a map"):
        mf.decode_manifest(msgpack.packb([1, 2]))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused_both_ways(base, value):
    base["environment"] = {"nested": [{"x": value}]}
    with pytest.raises(CorruptBundleError, match="non-finite"):
        mf.decode_manifest(msgpack.packb(base, use_bin_type=True))
    with pytest.raises(FormatError, match="non-finite"):
        mf.encode_manifest(base)


def test_bytes_values_refused(base):
    base["description"] = b"bytes"
    with pytest.raises(CorruptBundleError):
        mf.decode_manifest(msgpack.packb(base, use_bin_type=True))


def test_names_and_tags():
    for good in ["a", "attention-v2", "x.y_z", "0abc"]:
        mf.check_name(good)
    for bad in ["", "A", "-a", "a/b", "a@b", "a b", "x" * 101, ".."]:
        with pytest.raises(InvalidNameError):
            mf.check_name(bad)
    mf.check_tag("good")
    for bad in ["1", "", "a/b"]:
        with pytest.raises(InvalidNameError):
            mf.check_tag(bad)


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_labels = st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), _text, max_size=5)
_shapes = st.lists(st.integers(0, 2**40), max_size=6)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(description=_text, labels=_labels, shape=_shapes, samples=st.lists(st.integers(0, 2**62), max_size=50),
       env=st.dictionaries(_text, st.one_of(_text, st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False), st.none()), max_size=8))
def test_roundtrip_property(base, description, labels, shape, samples, env):
    base.update(description=description, labels=labels, environment=env)
    base["inputs"]["leaves"][0]["shape"] = shape
    base["reference"]["timing"]["samples_ns"] = samples
    data = mf.encode_manifest(base)
    decoded = mf.decode_manifest(data)
    assert decoded == base
    assert mf.encode_manifest(decoded) == data
    assert_schema_valid(decoded)


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decoder_on_corrupted_bytes_raises_only_format_errors(base, data):
    raw = bytearray(mf.encode_manifest(base))
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        if op == "flip" and raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
        elif op == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        else:
            raw.insert(data.draw(st.integers(0, len(raw))), data.draw(st.integers(0, 255)))
    try:
        decoded = mf.decode_manifest(bytes(raw))
    except FormatError:
        return
    assert_schema_valid(decoded)  # whatever survived corruption is still a valid manifest


@pytest.mark.parametrize("golden", ["v1-run-tanh-matmul", "v2-run-tanh-matmul", "v3-run-pytree-notes",
                                    "v4-run-contender"])
def test_a_run_record_read_again_is_the_same_record_with_objects_of_its_own(golden):
    """decode_run remembers what it decoded and checked (an investigation reads every run again at every step):
    the same bytes again give an equal record, upgraded from its format as the first time, that a caller may
    change without changing what the next read gets."""
    from pathlib import Path

    data = (Path(__file__).parent / "golden" / f"{golden}.msgpack").read_bytes()
    first, again = mf.decode_run(data), mf.decode_run(data)
    assert first == again and first is not again and first["format_version"] == mf.RUN_VERSION
    again["environment"]["jax"] = "changed"
    again["status"] = "changed"
    third = mf.decode_run(data)
    assert third == first and third["status"] != "changed"
    with pytest.raises(CorruptBundleError):  # bytes never checked are checked
        mf.decode_run(data[:-3])
