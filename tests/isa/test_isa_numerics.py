"""The NPU's integer arithmetic against an independent pure-Python statement of the rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npuc.isa import DType, UnOp
from npuc.isa.numerics import rounding_divide_by_pot, requantize, srdhm, to_dtype, unary, wrap_int32

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def ref_requant(x: int, m: int, shift: int, zp: int, lo: int, hi: int) -> int:
    """gemmlowp/TFLite requantization with Python integers."""
    left, right = max(-shift, 0), max(shift, 0)
    x = max(I32_MIN, min(I32_MAX, x << left))
    if x == m == I32_MIN:
        y = I32_MAX
    else:
        v = x * m + ((1 << 30) if x * m >= 0 else 1 - (1 << 30))
        y = abs(v) >> 31
        y = y if v >= 0 else -y  # division truncating toward zero
    mask = (1 << right) - 1
    rem, thr = y & mask, (mask >> 1) + (1 if y < 0 else 0)
    y = (y >> right) + (1 if rem > thr else 0)
    return max(lo, min(hi, y + zp))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(I32_MIN, I32_MAX), min_size=1, max_size=16),
    st.integers(0, I32_MAX),
    st.integers(-31, 31),
    st.integers(-128, 127),
)
def test_requantize_matches_reference(xs, m, shift, zp):
    got = requantize(np.array(xs, np.int32), np.int64(m), np.int64(shift), zp, -128, 127)
    want = [ref_requant(x, m, shift, zp, -128, 127) for x in xs]
    assert got.tolist() == want


def test_requant_known_values():
    half = 1 << 30  # multiplier 0.5
    xs = np.array([5, -5, 6, -6, 7, 255, -255, I32_MAX, I32_MIN], np.int32)
    # x * 0.5 rounded (ties up), then / 2 rounded half away from zero: the scheme rounds twice,
    # so 5 -> 2.5 -> 3 -> 1.5 -> 2, while -5 -> -2.5 -> -2 -> -1.
    assert requantize(xs, half, 1, 0, -128, 127).tolist() == [2, -1, 2, -2, 2, 64, -64, 127, -128]
    # ReLU fused by qmin = zero point; negative shift = left shift.
    assert requantize(np.array([-3, 3], np.int32), half, -2, 10, 10, 127).tolist() == [10, 16]


def test_srdhm_and_rdbpot_corners():
    a = np.array([I32_MIN, I32_MIN, 1 << 30, -(1 << 30)], np.int64)
    b = np.array([I32_MIN, I32_MAX, 1 << 30, 1 << 30], np.int64)
    assert srdhm(a, b).tolist() == [I32_MAX, -I32_MAX, 1 << 29, -(1 << 29)]
    x = np.array([5, -5, 4, -4, 3, -3], np.int64)
    assert rounding_divide_by_pot(x, np.int64(1)).tolist() == [3, -3, 2, -2, 2, -2]


def test_saturation_rounding_and_wrap():
    assert to_dtype(np.array([300, -300, 5], np.int64), DType.int8).tolist() == [127, -128, 5]
    assert to_dtype(np.array([2.5, 3.5, -2.5, np.nan, np.inf, -np.inf], np.float32), DType.int8).tolist() == [2, 4, -2, 0, 127, -128]
    assert to_dtype(np.array([70000.0], np.float32), DType.fp16)[0] == np.inf
    assert wrap_int32(np.array([I32_MAX + 1, I32_MIN - 1], np.int64)).tolist() == [I32_MIN, I32_MAX]


@pytest.mark.parametrize(
    "op,fn",
    [
        (UnOp.exp, np.exp),
        (UnOp.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
        (UnOp.tanh, np.tanh),
        (UnOp.silu, lambda x: x / (1 + np.exp(-x))),
        (UnOp.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
        (UnOp.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
        (UnOp.gelu_tanh, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))),
    ],
)
def test_float_activations(op, fn):
    x = np.linspace(-6, 6, 97, dtype=np.float32)
    np.testing.assert_allclose(unary(op, x, 0.0, 0.0), fn(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_gelu_erf_against_math():
    import math

    x = np.linspace(-5, 5, 41, dtype=np.float32)
    want = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(float)]
    np.testing.assert_allclose(unary(UnOp.gelu, x, 0.0, 0.0), want, atol=2e-6)
