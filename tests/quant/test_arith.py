"""npuc.quant.arith against exact arithmetic: Python integers and fractions, written here
independently of the implementation."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from npuc.errors import NpucError
from npuc.quant import arith

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


# ------------------------------------------------------------------------ quantize_multiplier


@pytest.mark.parametrize("real", [1.0, 0.5, 0.75, 1e-3, 3.1e-5, 0.999999999, 1.5, 123.25, 2.0**-31, 2.0**30 * 1.7])
def test_quantize_multiplier_round_trip(real):
    m, shift = arith.quantize_multiplier(real)
    assert 2**30 <= m < 2**31 and -31 <= shift <= 31
    # the mantissa is rounded to 31 bits: relative error at most 2^-31
    assert abs(arith.multiplier_value(m, shift) - real) <= real * 2.0**-31


def test_quantize_multiplier_random_round_trip():
    rng = random.Random(0)
    for _ in range(2000):
        real = math.ldexp(rng.uniform(0.5, 1.0), rng.randint(-30, 30))
        m, shift = arith.quantize_multiplier(real)
        exact = Fraction(real) * 2**31 * Fraction(2) ** shift  # the unrounded Q0.31 mantissa
        assert abs(m - exact) <= Fraction(1, 2)
        assert 2**30 <= m < 2**31


def test_quantize_multiplier_edges():
    assert arith.quantize_multiplier(0.0) == (0, 0)
    # a mantissa that rounds up to 2^31 renormalizes
    m, shift = arith.quantize_multiplier(1.0 - 2.0**-40)
    assert (m, shift) == (2**30, -1)
    # too small to normalize: shift 31, denormal multiplier
    m, shift = arith.quantize_multiplier(2.0**-40)
    assert shift == 31 and m == 2**22
    assert arith.quantize_multiplier(2.0**-70) == (0, 31)
    for bad in (-1.0, float("nan"), float("inf"), 2.0**31):
        with pytest.raises(NpucError):
            arith.quantize_multiplier(bad)


# ------------------------------------------------------------------------------ requantize


def big_int_requantize(x: int, m: int, shift: int, zp: int, lo: int = -128, hi: int = 127) -> int:
    """The REQUANT rule with Python integers: saturating left shift, rounding doubling high
    multiply, rounding (half away from zero) right shift, zero point, clamp."""
    left, right = max(-shift, 0), max(shift, 0)
    x = min(max(x * 2**left, I32_MIN), I32_MAX)
    if x == m == I32_MIN:
        high = I32_MAX
    else:  # the doubling high multiply rounds half up (toward +inf), as gemmlowp's nudge does
        high = math.floor(Fraction(x * m, 2**31) + Fraction(1, 2))
    y = round_half_away(Fraction(high, 2**right))
    return min(max(y + zp, lo), hi)


def round_half_away(f: Fraction) -> int:
    n = math.floor(abs(f) + Fraction(1, 2))
    return n if f >= 0 else -n


def test_requantize_matches_big_int_random():
    rng = np.random.default_rng(0)
    for _ in range(200):
        m, shift = arith.quantize_multiplier(float(rng.uniform(1e-6, 4.0)))
        zp = int(rng.integers(-128, 128))
        xs = rng.integers(I32_MIN, I32_MAX, 64, dtype=np.int64)
        xs[:8] = rng.integers(-5000, 5000, 8)
        got = arith.requantize(xs, m, shift, zp)
        want = [big_int_requantize(int(x), m, shift, zp) for x in xs]
        assert got.tolist() == want


@pytest.mark.parametrize("x", [I32_MIN, I32_MIN + 1, -1, 0, 1, I32_MAX, 2**30, -(2**30)])
@pytest.mark.parametrize("m,shift", [(I32_MIN + 2**31, 0), (2**31 - 1, -31), (2**31 - 1, 31), (2**30, 0), (2**30, -3), (1, 31)])
def test_requantize_extremes(x, m, shift):
    for zp, lo, hi in ((0, -128, 127), (-128, -128, 127), (5, 5, 100)):
        assert int(arith.requantize(np.array([x]), m, shift, zp, lo, hi)[0]) == big_int_requantize(x, m, shift, zp, lo, hi)


def test_requantize_per_channel_broadcasts():
    acc = np.arange(-600, 600, 100, dtype=np.int64).reshape(2, 6)
    pairs = [arith.quantize_multiplier(r) for r in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)]
    m = np.array([p[0] for p in pairs])
    s = np.array([p[1] for p in pairs])
    got = arith.requantize(acc, m, s, 3)
    want = [[big_int_requantize(int(acc[i, j]), *pairs[j], 3) for j in range(6)] for i in range(2)]
    assert got.tolist() == want


# ------------------------------------------------------------------------ quantize/dequantize


def test_quantize_tensor_is_pytorchs():
    """Bit for bit the quantize op of converted PT2E programs."""
    import torchao.quantization.pt2e  # noqa: F401  (registers the quantized_decomposed ops)

    x = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3
    x[:4] = torch.tensor([0.25, 0.75, -0.25, 1e9])
    for scale, zp in ((0.5, 0), (0.0123, -7), (0.1, 127), (0.021138958632946014, -16)):
        want = torch.ops.quantized_decomposed.quantize_per_tensor(x, scale, zp, -128, 127, torch.int8)
        assert torch.equal(arith.quantize_tensor(x, scale, zp), want)
    # round half to even
    assert arith.quantize_tensor(torch.tensor([0.25, 0.75, -0.25]), 0.5, 0).tolist() == [0, 2, 0]


def test_dequantize_round_trip():
    q = torch.arange(-128, 128, dtype=torch.int8)
    x = arith.dequantize_tensor(q, 0.037, 11)
    assert torch.equal(arith.quantize_tensor(x, 0.037, 11), q)
    w = torch.randint(-127, 128, (3, 4), dtype=torch.int8)
    d = arith.dequantize_per_channel(w, (0.1, 0.2, 0.3), (0, 0, 0), 0)
    assert torch.allclose(d, w.float() * torch.tensor([[0.1], [0.2], [0.3]]))


# ------------------------------------------------------------------------------------ qadd


def exact_add(a: int, b: int, qa, qb, qo) -> Fraction:
    (sa, za), (sb, zb), (so, zo) = qa, qb, qo
    return (Fraction(sa) * (a - za) + Fraction(sb) * (b - zb)) / Fraction(so) + zo


def _clamp(v, lo=-128, hi=127):
    return min(max(v, lo), hi)


def _scales(rng: random.Random, ratio_bits: int):
    """Input/output scales whose ratios lie within 2^-ratio_bits .. 2^ratio_bits."""
    so = math.ldexp(rng.uniform(0.5, 1.0), rng.randint(-12, 2))
    sa = so * 2.0 ** rng.uniform(-ratio_bits, ratio_bits)
    sb = so * 2.0 ** rng.uniform(-ratio_bits, ratio_bits)
    return sa, sb, so


def test_qadd_within_one_step_of_exact():
    rng = random.Random(1)
    for _ in range(300):
        sa, sb, so = _scales(rng, 8)
        qa, qb, qo = (sa, rng.randint(-128, 127)), (sb, rng.randint(-128, 127)), (so, rng.randint(-128, 127))
        plan = arith.plan_qadd(qa, qb, qo)
        a = np.array([rng.randint(-128, 127) for _ in range(64)] + [-128, 127, -128, 127])
        b = np.array([rng.randint(-128, 127) for _ in range(64)] + [-128, 127, 127, -128])
        got = arith.run_qadd(a, b, plan)
        for x, y, g in zip(a.tolist(), b.tolist(), got.tolist()):
            want = exact_add(x, y, qa, qb, qo)
            assert abs(g - _clamp(want)) <= 1, (qa, qb, qo, x, y, g, float(want))


def test_qadd_steps_never_leave_int32():
    """Every intermediate of the integer sequence, for the extreme int8 inputs and any zero
    points, stays far inside int32 (the bound of plan_qadd's docstring)."""
    rng = random.Random(2)
    for _ in range(300):
        sa, sb, so = _scales(rng, 16)
        za, zb = rng.randint(-128, 127), rng.randint(-128, 127)
        plan = arith.plan_qadd((sa, za), (sb, zb), (so, 0))
        assert max(plan.a_factor, plan.b_factor) == 2**arith.ADD_FACTOR_BITS
        assert plan.a_factor < 2**24 and plan.b_factor < 2**24  # exact fp32 immediates
        for a in (-128, 127):
            for b in (-128, 127):
                pa, pb = (a - za) * plan.a_factor, (b - zb) * plan.b_factor
                assert abs(pa) < 2**29 and abs(pb) < 2**29 and abs(pa + pb) < 2**30


def test_qadd_same_scales_is_exact_sum():
    plan = arith.plan_qadd((0.1, 0), (0.1, 0), (0.1, 0))
    a = np.arange(-60, 60)
    assert arith.run_qadd(a, a[::-1], plan).tolist() == (a + a[::-1]).tolist()


def test_qadd_clamp_range():
    plan = arith.plan_qadd((0.1, 0), (0.1, 0), (0.1, -10), qmin=-10, qmax=50)
    got = arith.run_qadd(np.array([-100, 0, 100]), np.array([0, 0, 0]), plan)
    assert got.tolist() == [-10, -10, 50]


# ------------------------------------------------------------------------------------ qmul


def test_qmul_within_one_step_of_exact():
    rng = random.Random(3)
    for _ in range(300):
        sa, sb, so = _scales(rng, 6)
        so = so * sa * 30  # products reach the output range
        qa, qb, qo = (sa, rng.randint(-128, 127)), (sb, rng.randint(-128, 127)), (so, rng.randint(-128, 127))
        plan = arith.plan_qmul(qa, qb, qo)
        a = np.array([rng.randint(-128, 127) for _ in range(32)] + [-128, 127])
        b = np.array([rng.randint(-128, 127) for _ in range(32)] + [127, -128])
        got = arith.run_qmul(a, b, plan)
        for x, y, g in zip(a.tolist(), b.tolist(), got.tolist()):
            want = Fraction(sa) * (x - qa[1]) * Fraction(sb) * (y - qb[1]) / Fraction(so) + qo[1]
            assert abs(g - _clamp(want)) <= 1
            assert abs((x - qa[1]) * (y - qb[1])) <= 255 * 255  # the int32 product step


# ------------------------------------------------------------------------------- averages


def test_average_within_one_step_of_exact():
    rng = random.Random(4)
    for _ in range(200):
        sx = math.ldexp(rng.uniform(0.5, 1), rng.randint(-10, 0))
        so = sx * 2.0 ** rng.uniform(-3, 3)
        zx, zo = rng.randint(-128, 127), rng.randint(-128, 127)
        count = rng.choice([1, 3, 4, 9, 49, 196, 3136])
        values = [rng.randint(-128, 127) for _ in range(count)]
        s = sum(v - zx for v in values)
        got = int(arith.run_average(np.array([s]), np.array([count]), (sx, zx), (so, zo))[0])
        want = Fraction(sx) * s / count / Fraction(so) + zo
        assert abs(got - _clamp(want)) <= 1


def test_average_counts_pick_their_multiplier():
    sums = np.array([40, 40, 40])
    got = arith.run_average(sums, np.array([4, 2, 8]), (1.0, 0), (1.0, 0))
    assert got.tolist() == [10, 20, 5]


# ----------------------------------------------------------------------------------- tables


def test_lut_table_of_sigmoid():
    si, zi, so, zo = 0.05, 3, 1 / 256, -128
    table = arith.lut_table(torch.sigmoid, (si, zi), (so, zo))
    assert len(table) == 256
    for j in range(256):
        x = (j - 128 - zi) * si
        y = 1 / (1 + math.exp(-x))
        assert table[j] == _clamp(round(y / so) + zo)  # Python's round is half to even
    assert list(table) == sorted(table)


def test_identity_table_requantizes():
    table = arith.lut_table(lambda t: t, (0.1, 0), (0.2, 5))
    x = np.arange(-128, 128)
    got = arith.run_lut(x, table)
    want = [_clamp(round(v * 0.1 / 0.2) + 5) for v in x.tolist()]
    assert got.tolist() == want


def test_folded_bias_matches_centered_sum():
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (4, 3, 3, 3))
    b = rng.integers(-1000, 1000, 4)
    x = rng.integers(-128, 128, (3, 3, 3))
    zx = -17
    folded = arith.folded_bias(w, b, zx)
    for o in range(4):
        assert int((x * w[o]).sum() + folded[o]) == int(((x - zx) * w[o]).sum() + b[o])
