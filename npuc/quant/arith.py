"""The integer arithmetic of int8 quantization, defined once.

Everything that turns real scales into the integers an int8 kernel loads, and every integer
algorithm a quantized op runs, lives here.  The reference semantics of the quantized graph ops
(:mod:`npuc.ir.ops.quantized`) call these functions, and so does the backend when it computes
the constants its kernels load, so the reference and the NPU agree by construction.

Conventions: a real value ``r`` and its int8 code ``q`` are linked by ``r = scale * (q - zp)``.
Integer arrays are NumPy ``int64`` while an algorithm runs; every step that stands for an NPU
instruction saturates to int32 as the vector unit does (:func:`sat32`), and the bounds stated
with each algorithm show that no saturation ever happens for int8 inputs.

Requantization (int32 -> int8 by a Q0.31 multiplier and a shift) is the ISA's ``REQUANT``:
:func:`requantize` is :func:`npuc.isa.numerics.requantize`, the function the simulator runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from npuc.errors import NpucError
from npuc.isa import numerics

QMIN, QMAX = -128, 127
INT32_MIN, INT32_MAX = numerics.INT32_MIN, numerics.INT32_MAX

# qadd scales both operands to a common unit of (larger input scale) / 2^ADD_FACTOR_BITS.
ADD_FACTOR_BITS = 20


# ------------------------------------------------------------------------------- multipliers


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``(multiplier, shift)`` with ``real ~= multiplier / 2^31 * 2^-shift`` (TFLite's scheme).

    ``multiplier`` is a Q0.31 fraction in [2^30, 2^31), the mantissa of ``math.frexp(real)``
    rounded half away from zero; ``shift`` lies in [-31, 31] (positive: divide).  ``real = 0``
    gives (0, 0).  A real below 2^-32 cannot be normalized with a shift of at most 31: it keeps
    ``shift = 31`` and a smaller (denormal) multiplier, the nearest value representable.  A real
    of 2^31 or more, negative, or not finite is refused.
    """
    if not math.isfinite(real) or real < 0:
        raise NpucError(f"requantization multiplier {real} must be a finite, non-negative real number")
    if real == 0:
        return 0, 0
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2^exponent, mantissa in [0.5, 1)
    q = _round_half_away(mantissa * (1 << 31))
    if q == 1 << 31:
        q, exponent = q // 2, exponent + 1
    shift = -exponent
    if shift < -31:
        raise NpucError(
            f"requantization multiplier {real} is too large (at most 2^31): the scales of this op "
            "are out of the range the NPU's REQUANT covers"
        )
    if shift > 31:
        return _round_half_away(math.ldexp(real, 62)), 31
    return q, shift


def _round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def multiplier_value(multiplier: int, shift: int) -> float:
    """The real number a ``(multiplier, shift)`` pair stands for (exact in float64)."""
    return math.ldexp(multiplier, -31 - shift)


def requantize(
    acc: np.ndarray,
    multiplier: int | np.ndarray,
    shift: int | np.ndarray,
    zero_point: int,
    qmin: int = QMIN,
    qmax: int = QMAX,
) -> np.ndarray:
    """int32 -> int8 by the ISA's REQUANT (per tensor, or per channel when the multiplier and
    shift are arrays broadcasting against ``acc``).  Returns an int8 array."""
    return numerics.requantize(np.asarray(acc, dtype=np.int64), multiplier, shift, zero_point, qmin, qmax)


def sat32(x: np.ndarray) -> np.ndarray:
    """Saturate to int32 (what the vector unit does after each integer step), as int64."""
    return np.clip(np.asarray(x, dtype=np.int64), INT32_MIN, INT32_MAX)


def wrap32(x: np.ndarray) -> np.ndarray:
    """Wrap to int32 (what the array's accumulators do), as int64."""
    return numerics.wrap_int32(np.asarray(x, dtype=np.int64)).astype(np.int64)


# ------------------------------------------------------------------------ quantize, dequantize


def quantize_tensor(
    x: torch.Tensor, scale: float, zero_point: int, qmin: int = QMIN, qmax: int = QMAX
) -> torch.Tensor:
    """fp32 -> int8 as PyTorch's ``quantize_per_tensor``: ``clamp(round_half_even(x * (1 /
    scale)) + zp, qmin, qmax)``, the product computed in fp32."""
    x = x.to(torch.float32)
    inv_scale = 1.0 / scale
    return torch.clamp(torch.round(x * inv_scale) + zero_point, qmin, qmax).to(torch.int8)


def dequantize_tensor(q: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
    """int -> fp32 as PyTorch's ``dequantize_per_tensor``: ``(q - zp) * scale`` in fp32."""
    return (q.to(torch.float32) - zero_point) * scale


def dequantize_per_channel(
    q: torch.Tensor, scales: Sequence[float], zero_points: Sequence[int], axis: int
) -> torch.Tensor:
    """int -> fp32 with one (scale, zero point) per index of ``axis`` (weights, biases)."""
    shape = [1] * q.dim()
    shape[axis] = -1
    s = torch.tensor(scales, dtype=torch.float32).reshape(shape)
    z = torch.tensor(zero_points, dtype=torch.float32).reshape(shape)
    return (q.to(torch.float32) - z) * s


def quantize_per_channel(
    x: torch.Tensor, scales: Sequence[float], zero_points: Sequence[int], axis: int,
    qmin: int = QMIN, qmax: int = QMAX, dtype: torch.dtype = torch.int8,
) -> torch.Tensor:
    """fp32 -> int per index of ``axis`` (PyTorch's ``quantize_per_channel``)."""
    shape = [1] * x.dim()
    shape[axis] = -1
    inv = (1.0 / torch.tensor(scales, dtype=torch.float32)).reshape(shape)
    z = torch.tensor(zero_points, dtype=torch.float32).reshape(shape)
    return torch.clamp(torch.round(x.to(torch.float32) * inv) + z, qmin, qmax).to(dtype)


# ---------------------------------------------------------------- conv / linear / matmul


def channel_multipliers(
    in_scale: float, weight_scales: Sequence[float], out_scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel ``(multipliers, shifts)`` (int64 arrays) of a conv/linear layer:
    ``in_scale * weight_scale[o] / out_scale``."""
    pairs = [quantize_multiplier(in_scale * s / out_scale) for s in weight_scales]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def folded_bias(weight: np.ndarray, bias: np.ndarray | None, in_zero_point: int) -> np.ndarray:
    """The int32 bias a conv/linear kernel adds to ``sum(x * w)``: ``b - zx * sum(w[o])``.

    ``weight`` is int8 ``[O, ...]`` (symmetric: zero point 0); ``sum(x * w) - zx * sum(w)``
    equals ``sum((x - zx) * w)`` as long as padding holds ``zx`` (the real zero).  Bounded by
    ``|b| + 128 * 128 * K``, which fits int32 for any ``K`` below 2^17 when ``|b| < 2^30``.
    """
    w = np.asarray(weight, dtype=np.int64).reshape(weight.shape[0], -1)
    b = np.zeros(w.shape[0], np.int64) if bias is None else np.asarray(bias, dtype=np.int64)
    return sat32(b - in_zero_point * w.sum(axis=1))


# ------------------------------------------------------------------------------------ qadd


@dataclass(frozen=True)
class AddPlan:
    """The constants of ``qadd``'s integer steps (see :func:`run_qadd`)."""

    a_zero_point: int
    b_zero_point: int
    a_factor: int
    b_factor: int
    multiplier: int
    shift: int
    out_zero_point: int
    qmin: int = QMIN
    qmax: int = QMAX


def plan_qadd(
    a_q: tuple[float, int], b_q: tuple[float, int], out_q: tuple[float, int], qmin: int = QMIN, qmax: int = QMAX
) -> AddPlan:
    """Constants of ``out = quantize(real(a) + real(b))`` (each ``*_q`` is ``(scale, zp)``).

    Derivation: with the unit ``u = max(sa, sb) / 2^20``, ``sa = fa * u`` and ``sb = fb * u``
    up to half a unit, ``fa = round(sa / u)``, ``fb = round(sb / u)`` (the larger is exactly
    2^20).  Then ``real(a) + real(b) ~= u * ((a - za) * fa + (b - zb) * fb)`` and the int32
    sum is requantized by ``u / so``.  Bounds: ``|a - za| <= 255`` and ``fa, fb <= 2^20``, so
    each product is at most 255 * 2^20 < 2^28 and the sum below 2^29: every step fits int32,
    and the factors are exact fp32 immediates (< 2^24).  Error: the factor rounding adds at most
    ``255 * max(sa, sb) / (2^20 * so)`` output steps (below 1/16 while ``max(sa, sb) / so <=
    2^8``) to REQUANT's at most 3/4 step.
    """
    (sa, za), (sb, zb), (so, zo) = a_q, b_q, out_q
    big = max(sa, sb)
    unit = math.ldexp(big, -ADD_FACTOR_BITS)
    fa, fb = _round_half_away(sa / unit), _round_half_away(sb / unit)
    m, s = quantize_multiplier(unit / so)
    return AddPlan(za, zb, fa, fb, m, s, zo, qmin, qmax)


def run_qadd(a: np.ndarray, b: np.ndarray, plan: AddPlan) -> np.ndarray:
    """``qadd`` as the vector unit runs it, one ``QADD`` instruction (operands broadcast against
    each other; :func:`npuc.isa.numerics.quantized_add`, the function the simulator runs):

    1. subtract the zero points from a and b (int32);
    2. multiply by the integer factors (int32, saturated);
    3. add (int32, saturated);
    4. requantize with (multiplier, shift), out zero point, [qmin, qmax].
    """
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    return numerics.quantized_add(a, b, plan.a_zero_point, plan.a_factor, plan.b_zero_point, plan.b_factor,
                                  plan.multiplier, plan.shift, plan.out_zero_point, plan.qmin, plan.qmax)


# ------------------------------------------------------------------------------------ qmul


@dataclass(frozen=True)
class MulPlan:
    """The constants of ``qmul``'s integer steps (see :func:`run_qmul`)."""

    a_zero_point: int
    b_zero_point: int
    multiplier: int
    shift: int
    out_zero_point: int
    qmin: int = QMIN
    qmax: int = QMAX


def plan_qmul(
    a_q: tuple[float, int], b_q: tuple[float, int], out_q: tuple[float, int], qmin: int = QMIN, qmax: int = QMAX
) -> MulPlan:
    """Constants of ``out = quantize(real(a) * real(b))``: ``real(a) * real(b) = sa * sb * (a -
    za) * (b - zb)``, so the int32 product (at most 255 * 255 < 2^16) is requantized by
    ``sa * sb / so``.  Error: REQUANT's at most 3/4 step."""
    (sa, za), (sb, zb), (so, zo) = a_q, b_q, out_q
    m, s = quantize_multiplier(sa * sb / so)
    return MulPlan(za, zb, m, s, zo, qmin, qmax)


def run_qmul(a: np.ndarray, b: np.ndarray, plan: MulPlan) -> np.ndarray:
    """``qmul`` as the vector unit runs it, one ``QMUL`` instruction
    (:func:`npuc.isa.numerics.quantized_mul`): subtract the zero points, multiply (int32),
    requantize."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    return numerics.quantized_mul(a, b, plan.a_zero_point, plan.b_zero_point, plan.multiplier, plan.shift,
                                  plan.out_zero_point, plan.qmin, plan.qmax)


# ------------------------------------------------------------------------- averages (pool, mean)


def average_multiplier(in_scale: float, count: int, out_scale: float) -> tuple[int, int]:
    """``(multiplier, shift)`` that turns an int32 sum of ``count`` zero-point-free values into
    their average at the output scale: ``in_scale / (count * out_scale)``."""
    if count < 1:
        raise NpucError(f"an average over {count} elements is not defined")
    return quantize_multiplier(in_scale / (count * out_scale))


def run_average(
    sums: np.ndarray, counts: np.ndarray, in_q: tuple[float, int], out_q: tuple[float, int]
) -> np.ndarray:
    """Requantize window sums of ``x - zx`` (int32) divided by their element counts.

    The kernel computes each sum as ``sum(x) - n * zx`` over the ``n`` elements it adds (VPOOL
    or VREDUCE sum into int32, then VUN adds ``-n * zx``; padding filled with ``zx`` adds 0),
    then REQUANTs with :func:`average_multiplier` of the window's divisor.  Bounds: a sum of n
    values of at most 255 fits int32 for n < 2^23.  ``counts`` broadcasts against ``sums``;
    each distinct count gets its own multiplier.
    """
    (sx, _), (so, zo) = in_q, out_q
    counts = np.broadcast_to(np.asarray(counts, dtype=np.int64), np.shape(sums))
    mults = np.zeros(counts.shape, np.int64)
    shifts = np.zeros(counts.shape, np.int64)
    for c in np.unique(counts):
        m, s = average_multiplier(sx, int(c), so)
        mults[counts == c] = m
        shifts[counts == c] = s
    return requantize(sat32(sums), mults, shifts, zo)


# ----------------------------------------------------------------------------------- lookup


def lut_table(
    fn: Callable[[torch.Tensor], torch.Tensor], in_q: tuple[float, int], out_q: tuple[float, int]
) -> tuple[int, ...]:
    """The 256-entry int8 table of ``fn``: ``table[j] = quantize(fn(dequantize(j - 128)))``,
    computed in float64 with round-half-even (``fn`` takes and returns a float64 tensor)."""
    (si, zi), (so, zo) = in_q, out_q
    codes = torch.arange(QMIN, QMAX + 1, dtype=torch.float64)
    y = fn((codes - zi) * si).to(torch.float64)
    q = torch.clamp(torch.round(y / so) + zo, QMIN, QMAX)
    return tuple(int(v) for v in q.tolist())


def run_lut(x: np.ndarray, table: Sequence[int]) -> np.ndarray:
    """``y = table[x + 128]`` (the ISA's LUT)."""
    t = np.asarray(table, dtype=np.int8)
    return t[np.asarray(x, dtype=np.int64) + 128]
