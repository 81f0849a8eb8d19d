"""Output checks that scale with the data (analysis/verdict.py): XLA's float rounding, at any magnitude, is `ok`; a
real change of numerics still fails; a mismatch names its worst element by index and key path."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from reprobundle.analysis.verdict import check_leaf, check_outputs
from reprobundle.run.replay import _mismatch_reason
from reprobundle.worker.synthetic import synthetic_array, synthetic_spec
from reprobundle.worker.tolerance import SCALED_ULPS, scaled_atol

HEADS = 8


def attention(x, wq, wk, wv, wo, xp=jnp):
    """examples/attention.py, for jax.numpy or numpy."""
    batch, seq, model = x.shape
    head_dim = model // HEADS

    def split(t):
        return t.reshape(batch, seq, HEADS, head_dim).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    scores = xp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(head_dim)
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = xp.exp(scores)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    out = xp.einsum("bhqk,bhkd->bhqd", probs, v).transpose(0, 2, 1, 3).reshape(batch, seq, model)
    return out @ wo


@pytest.fixture(scope="module")
def synthetic():
    """`pack --synthetic-inputs` data for the attention layer (standard normal, unscaled: outputs reach ~10^3),
    XLA's float32 result and the exact result (float64) rounded to float32."""
    shapes = [(2, 256, 512)] + [(512, 512)] * 4
    args = [synthetic_array(s, np.dtype(np.float32), synthetic_spec("float32", i)) for i, s in enumerate(shapes)]
    xla = np.asarray(jax.jit(attention)(*args))
    exact = attention(*[a.astype(np.float64) for a in args], xp=np).astype(np.float32)
    return args, xla, exact


def test_float32_rounding_at_a_large_magnitude_is_ok(synthetic):
    """The case of the issue: the old fixed atol (1e-5 + 1e-4 |ref|) flagged thousands of elements near zero of an
    output reaching ~10^3; their error is float32 rounding, in proportion to the terms summed."""
    _, xla, exact = synthetic
    leaf = check_leaf(exact, xla)
    assert leaf["ok"], leaf
    assert leaf["scale"] > 500 and leaf["max_abs_err"] > 1e-3  # far beyond a fixed atol, ...
    assert np.count_nonzero(np.abs(exact - xla) > 1e-5 + 1e-4 * np.abs(exact)) > 100  # ... which flagged many
    assert leaf["atol_scaled"] == scaled_atol("float32", leaf["scale"])
    assert leaf["max_abs_err"] < leaf["atol_scaled"] / 2  # with room to spare


def test_real_numeric_changes_fail(synthetic):
    args, xla, exact = synthetic
    # a dot done in bfloat16: the inputs rounded, the rest float32
    rounded = [np.asarray(jnp.asarray(a, jnp.bfloat16).astype(jnp.float32)) for a in args]
    low = np.asarray(jax.jit(attention)(*rounded))
    assert not check_leaf(exact, low)["ok"]
    # one element wrong by a thousandth of the output's magnitude, or of another sign
    for change in (lambda y: y.flat.__setitem__(7, y.flat[7] + 1e-3 * np.abs(y).max()),
                   lambda y: y.flat.__setitem__(7, -y.flat[7] if abs(y.flat[7]) > 1 else 5.0)):
        wrong = xla.copy()
        change(wrong)
        leaf = check_leaf(exact, wrong)
        assert not leaf["ok"] and leaf["mismatched"] == 1
        assert leaf["worst"]["index"] == list(np.unravel_index(7, xla.shape))
    # the softmax scale dropped
    unscaled = np.asarray(jax.jit(lambda *a: attention(*a) * 1.01)(*args))
    assert not check_leaf(exact, unscaled)["ok"]


def test_bfloat16_rounding_is_ok_and_a_change_is_not():
    rng = np.random.default_rng(0)
    model = 256
    args = [rng.standard_normal((2, 64, model))] + [rng.standard_normal((model, model)) / math.sqrt(model)
                                                     for _ in range(4)]
    exact = attention(*args, xp=np).astype(ml_dtypes.bfloat16)
    xla = np.asarray(jax.jit(attention)(*[jnp.asarray(a, jnp.bfloat16) for a in args]))
    assert xla.dtype == exact.dtype and not np.array_equal(xla, exact)
    assert check_leaf(exact, xla)["ok"]
    shifted = (exact.astype(np.float32) + 0.1 * np.abs(exact.astype(np.float32)).max()).astype(ml_dtypes.bfloat16)
    assert not check_leaf(exact, shifted)["ok"]


def test_scaled_atol_is_ulps_of_the_largest_value():
    assert scaled_atol("float32", 3000.0) == SCALED_ULPS["float32"] * 2.0 ** (11 - 23)  # 3000 is in [2^11, 2^12)
    assert scaled_atol("float64", 1.0) == 4096 * 2.0 ** -52
    assert scaled_atol("bfloat16", 1.5) == 4 * 2.0 ** -7
    assert scaled_atol("float8_e4m3fn", 1.0) == 2.0 ** -3
    assert scaled_atol("int32", 1e6) == 0.0 and scaled_atol("float32", 0.0) == 0.0
    assert scaled_atol("float32", math.inf) == 0.0


def test_integers_still_match_exactly_and_nan_inf_are_handled():
    assert not check_leaf(np.arange(5, dtype=np.int32), np.array([0, 1, 2, 3, 5], np.int32))["ok"]
    nan = np.array([np.nan, 1.0, np.inf], np.float32)
    assert check_leaf(nan, nan.copy())["ok"]
    leaf = check_leaf(nan, np.array([np.nan, 1.0, 2.0], np.float32))
    assert not leaf["ok"] and leaf["scale"] == 1.0 and leaf["worst"]["index"] == [2]
    assert leaf["worst"]["expected"] == "inf" and leaf["worst"]["actual"] == "2"
    zero = check_leaf(np.float32(0.0).reshape(()), np.float32(1e-3).reshape(()))
    assert not zero["ok"] and zero["worst"]["index"] == []  # a scalar leaf: an empty index


def test_the_check_names_the_worst_element_and_its_key_path():
    ref = [np.zeros((2, 3), np.float32), np.full((4,), 1000.0, np.float32)]
    act = [ref[0].copy(), ref[1].copy()]
    act[0][1, 2] = 5e-3  # over tolerance: near zero, and the leaf's magnitude is 0
    act[1][3] += 0.01  # within: 1000's scaled atol is 0.49
    names = ["out['a']", "out['b']['c']"]
    check = check_outputs(ref, act, names)
    assert not check["ok"] and check["leaves"][1]["ok"]
    assert check["worst"]["path"] == "out['a']" and check["worst"]["leaf"] == 0 and check["worst"]["index"] == [1, 2]
    reason = _mismatch_reason(check, names)
    assert reason.startswith("out['a']: 1 elements outside tolerance; worst at out['a'][1, 2]: expected 0, got 0.005")
    assert check_outputs(ref, [r.copy() for r in ref])["ok"] and "worst" not in check_outputs(ref, ref)
