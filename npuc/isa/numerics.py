"""Arithmetic of the NPU, bit for bit: saturation, rounding, requantization, activations.

Integer rules: results are computed exactly (int64) and then saturated to the destination type,
except the array's int32 accumulators, which wrap (two's complement) like hardware adders.
Float to integer conversion rounds half to even, saturates, and maps NaN to 0.  Floating-point
vector arithmetic is done in fp32 and rounded (to nearest even) to the destination type.

Requantization follows the gemmlowp/TFLite fixed-point scheme::

    left  = max(-shift, 0);  right = max(shift, 0)
    x1 = saturate_int32(x << left)
    x2 = SaturatingRoundingDoublingHighMul(x1, multiplier)        # round(x1 * m / 2^31)
    x3 = RoundingDivideByPOT(x2, right)                           # round half away from zero
    y  = clamp(x3 + zero_point, qmin, qmax)

with ``SaturatingRoundingDoublingHighMul(a, b) = (a*b + (2^30 if a*b >= 0 else 1 - 2^30)) / 2^31``
(division truncating toward zero; the one overflowing case a = b = -2^31 gives 2^31 - 1) and
``RoundingDivideByPOT(x, e) = (x >> e) + (1 if (x & (2^e - 1)) > ((2^e - 1) >> 1) + (x < 0) else 0)``.
The multiplier is a non-negative int32 (a Q0.31 fraction); ``shift`` lies in [-31, 31].
"""

from __future__ import annotations

import numpy as np

from npuc.isa.enums import DType, UnOp

_INT_RANGE = {
    DType.int8: (-(1 << 7), (1 << 7) - 1),
    DType.int16: (-(1 << 15), (1 << 15) - 1),
    DType.int32: (-(1 << 31), (1 << 31) - 1),
}
INT32_MIN, INT32_MAX = _INT_RANGE[DType.int32]


def int_range(dt: DType) -> tuple[int, int]:
    return _INT_RANGE[dt]


def to_dtype(x: np.ndarray, dt: DType) -> np.ndarray:
    """Convert ``x`` (integer or float array) to ``dt`` by the NPU's rules."""
    if dt.is_float:
        with np.errstate(over="ignore"):  # overflow to infinity is the defined result
            return np.asarray(x, dtype=np.float64 if x.dtype.kind in "iu" else x.dtype).astype(dt.np)
    lo, hi = _INT_RANGE[dt]
    if x.dtype.kind == "f":
        x = np.nan_to_num(np.rint(x.astype(np.float64)), nan=0.0, posinf=hi, neginf=lo)
    return np.clip(x, lo, hi).astype(dt.np)


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of an int64 array to int32."""
    return x.astype(np.int64).astype(np.uint32).astype(np.int32)


def widen(x: np.ndarray) -> np.ndarray:
    """The exact wide type arithmetic is done in: int64 for integers, fp32 for floats."""
    return x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float32)


# --------------------------------------------------------------------------- requantization
def srdhm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul of int32 values (given as int64 arrays)."""
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    q = np.where(s >= 0, s >> 31, -((-s) >> 31))
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, q)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """RoundingDivideByPOT: x / 2^exponent, rounding half away from zero."""
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def requantize(
    x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, zero_point: int, qmin: int, qmax: int
) -> np.ndarray:
    """int32 -> int8 by the fixed-point scheme above; ``multiplier``/``shift`` broadcast to x."""
    x = x.astype(np.int64)
    m = np.asarray(multiplier, dtype=np.int64)
    sh = np.asarray(shift, dtype=np.int64)
    left = np.maximum(-sh, 0)
    right = np.maximum(sh, 0)
    x1 = np.clip(x << left, INT32_MIN, INT32_MAX)
    x3 = rounding_divide_by_pot(srdhm(x1, m), right)
    return np.clip(x3 + zero_point, qmin, qmax).astype(np.int8)


def saturate_int32(x: np.ndarray) -> np.ndarray:
    """Saturate an int64 array to the int32 range (kept int64)."""
    return np.clip(x, INT32_MIN, INT32_MAX)


def quantized_add(
    a: np.ndarray, b: np.ndarray, a_zero_point: int, a_factor: int, b_zero_point: int, b_factor: int,
    multiplier: int, shift: int, zero_point: int, qmin: int, qmax: int,
) -> np.ndarray:
    """The requantizing add of two int8 arrays (``QADD``): each operand less its zero point
    times its integer factor, the two added, then :func:`requantize`; every step saturated to
    int32 as the vector unit's int32 arithmetic is."""
    x = saturate_int32((a.astype(np.int64) - a_zero_point) * a_factor)
    y = saturate_int32((b.astype(np.int64) - b_zero_point) * b_factor)
    return requantize(saturate_int32(x + y), np.int64(multiplier), np.int64(shift), zero_point, qmin, qmax)


def quantized_mul(
    a: np.ndarray, b: np.ndarray, a_zero_point: int, b_zero_point: int,
    multiplier: int, shift: int, zero_point: int, qmin: int, qmax: int,
) -> np.ndarray:
    """The requantizing multiply of two int8 arrays (``QMUL``): the product of the operands less
    their zero points, saturated to int32, then :func:`requantize`."""
    x = saturate_int32(a.astype(np.int64) - a_zero_point)
    y = saturate_int32(b.astype(np.int64) - b_zero_point)
    return requantize(saturate_int32(x * y), np.int64(multiplier), np.int64(shift), zero_point, qmin, qmax)


# --------------------------------------------------------------------------- activations
_SQRT1_2 = np.float32(0.7071067811865476)


def erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), in fp32."""
    x = x.astype(np.float32)
    s = np.sign(x)
    a = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    poly = t * (
        np.float32(0.254829592)
        + t * (np.float32(-0.284496736) + t * (np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * np.float32(1.061405429))))
    )
    return s * (np.float32(1.0) - poly * np.exp(-a * a))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


def _hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(x + np.float32(3.0), 0, 6) / np.float32(6.0)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.float32(0.7978845608028654)  # sqrt(2 / pi)
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def unary(op: UnOp, x: np.ndarray, imm0: float, imm1: float) -> np.ndarray:
    """``VUN`` on a wide array (int64 or fp32); returns a wide array (float for float ops)."""
    with np.errstate(all="ignore"):
        match op:
            case UnOp.copy:
                return x
            case UnOp.relu:
                return np.maximum(x, 0)
            case UnOp.clamp:
                return np.minimum(np.maximum(x, _imm(x, imm0)), _imm(x, imm1))
            case UnOp.neg:
                return -x
            case UnOp.abs:
                return np.abs(x)
            case UnOp.adds:
                return x + _imm(x, imm0) if x.dtype.kind == "f" else x + imm0
            case UnOp.muls:
                return x * _imm(x, imm0) if x.dtype.kind == "f" else x * imm0
            case UnOp.exp:
                return np.exp(x)
            case UnOp.sigmoid:
                return _sigmoid(x)
            case UnOp.tanh:
                return np.tanh(x)
            case UnOp.gelu:
                return np.float32(0.5) * x * (np.float32(1.0) + erf(x * _SQRT1_2))
            case UnOp.gelu_tanh:
                return _gelu_tanh(x)
            case UnOp.silu:
                return x * _sigmoid(x)
            case UnOp.hardswish:
                return x * _hardsigmoid(x)
            case UnOp.hardsigmoid:
                return _hardsigmoid(x)
            case UnOp.rsqrt:
                return np.float32(1.0) / np.sqrt(x)
            case UnOp.reciprocal:
                return np.float32(1.0) / x
            case UnOp.sqrt:
                return np.sqrt(x)
            case UnOp.log:
                return np.log(x)
            case UnOp.log1p:
                return np.log1p(x)
    raise ValueError(f"unknown unary op {op}")


def _imm(x: np.ndarray, v: float):
    """An immediate in the arithmetic type of ``x``: fp32 for floats, float64 for integers
    (integer results are rounded half to even and saturated by :func:`to_dtype`)."""
    return np.float32(v) if x.dtype.kind == "f" else np.float64(v)
