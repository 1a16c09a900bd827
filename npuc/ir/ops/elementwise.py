"""Elementwise ops: unary activations and math, casts, broadcasting binary arithmetic,
comparisons and ``where``.

Operand dtypes of binary ops must be equal: the frontend inserts ``cast`` where PyTorch would
promote, and turns Python scalars into 0-d constants of the other operand's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from npuc.ir.opdef import NoAttrs, OpDef, Trait, fail, register
from npuc.ir.ops.common import (
    broadcast_shapes,
    require_float,
    require_numeric,
    require_same_dtype,
)
from npuc.ir.types import DType, TensorType

# Which element types an op accepts: "float" (floating point), "numeric" (no bool), "any".
_DTYPE_CHECK: dict[str, Callable[[str, TensorType, str], None]] = {
    "float": require_float,
    "numeric": require_numeric,
    "any": lambda op, t, what: None,
}

# ------------------------------------------------------------------------------------ unary


def _unary_infer(name: str, accepts: str, result: DType | None):
    def infer(ins, a):
        _DTYPE_CHECK[accepts](name, ins[0], "input")
        return (ins[0] if result is None else ins[0].with_dtype(result),)

    return infer


# Traits of every unary/binary op: an elementwise result keeps an image's layout unless it is bool.
def _elementwise_traits(arity: Trait, result: DType | None, extra: tuple[Trait, ...]) -> frozenset[Trait]:
    return frozenset({arity, *extra} | (set() if result is DType.bool else {Trait.IMAGE_PRESERVING}))


E, T, C = Trait.EPILOGUE, Trait.TRANSCENDENTAL, Trait.COMMUTATIVE


def _unary(name: str, summary: str, fn, accepts: str = "float", result: DType | None = None,
           traits: tuple[Trait, ...] = ()) -> None:
    register(
        OpDef(
            name=name,
            summary=summary,
            attrs=NoAttrs,
            infer=_unary_infer(name, accepts, result),
            reference=lambda ins, a: (fn(ins[0]),),
            category="elementwise",
            operands=("x",),
            traits=_elementwise_traits(Trait.UNARY, result, traits),
        )
    )


_unary("relu", "max(x, 0)", torch.relu, accepts="numeric", traits=(E,))
_unary("sigmoid", "1 / (1 + exp(-x))", torch.sigmoid, traits=(E, T))
_unary("tanh", "hyperbolic tangent", torch.tanh, traits=(E, T))
_unary("silu", "x * sigmoid(x) (swish)", F.silu, traits=(E, T))
_unary("hardswish", "x * relu6(x + 3) / 6", F.hardswish, traits=(E,))
_unary("hardsigmoid", "relu6(x + 3) / 6", F.hardsigmoid, traits=(E,))
_unary("exp", "e ** x", torch.exp, traits=(E, T))
_unary("log", "natural logarithm", torch.log, traits=(E, T))
_unary("sqrt", "square root", torch.sqrt, traits=(E, T))
_unary("rsqrt", "1 / sqrt(x)", torch.rsqrt, traits=(E, T))
_unary("neg", "-x", torch.neg, accepts="numeric", traits=(E,))
_unary("reciprocal", "1 / x", torch.reciprocal, traits=(E,))
_unary("abs", "|x|", torch.abs, accepts="numeric", traits=(E,))
_unary("erf", "Gauss error function", torch.erf, traits=(T,))
_unary("sin", "sine", torch.sin, traits=(T,))
_unary("cos", "cosine", torch.cos, traits=(T,))
_unary("logical_not", "x == 0, as bool", torch.logical_not, accepts="any", result=DType.bool)


@dataclass(frozen=True)
class GeluAttrs:
    """``gelu``: exact (``"none"``) or the tanh approximation (``"tanh"``)."""

    approximate: str = "none"


def _gelu_verify(ins, a: GeluAttrs) -> None:
    if a.approximate not in ("none", "tanh"):
        raise fail("gelu", f"approximate = {a.approximate!r} must be 'none' or 'tanh'")


register(
    OpDef(
        name="gelu",
        summary="x * Phi(x), exact (erf) or tanh-approximated",
        attrs=GeluAttrs,
        infer=_unary_infer("gelu", "float", None),
        verify=_gelu_verify,
        reference=lambda ins, a: (F.gelu(ins[0], approximate=a.approximate),),
        category="elementwise",
        operands=("x",),
        traits=_elementwise_traits(Trait.UNARY, None, (E, T)),
    )
)


@dataclass(frozen=True)
class ClampAttrs:
    """``clamp``: lower and upper bound, either may be absent (relu6, hardtanh, clamp)."""

    min: float | None = None
    max: float | None = None


def _clamp_verify(ins, a: ClampAttrs) -> None:
    if a.min is None and a.max is None:
        raise fail("clamp", "at least one of min and max must be set")
    bounds = [b for b in (a.min, a.max) if b is not None]
    if any(math.isnan(b) for b in bounds):
        raise fail("clamp", "bounds must not be NaN")
    if ins and not ins[0].dtype.is_float and any(b != int(b) for b in bounds if math.isfinite(b)):
        raise fail("clamp", f"bounds {a.min}, {a.max} of an integer tensor must be integers")


def _clamp_ref(ins, a: ClampAttrs):
    x = ins[0]
    lo, hi = a.min, a.max
    if not x.dtype.is_floating_point:
        lo = None if lo is None or math.isinf(lo) else int(lo)
        hi = None if hi is None or math.isinf(hi) else int(hi)
        if lo is None and hi is None:
            return (x.clone(),)
    return (torch.clamp(x, lo, hi),)


register(
    OpDef(
        name="clamp",
        summary="min(max(x, min), max); a missing bound is not applied (min > max gives max)",
        attrs=ClampAttrs,
        infer=_unary_infer("clamp", "numeric", None),
        verify=_clamp_verify,
        reference=_clamp_ref,
        category="elementwise",
        operands=("x",),
        traits=_elementwise_traits(Trait.UNARY, None, (E,)),
    )
)


@dataclass(frozen=True)
class PowAttrs:
    """``pow``: the scalar exponent of ``x ** exponent``."""

    exponent: float = 2.0


def _pow_verify(ins, a: PowAttrs) -> None:
    if ins and not ins[0].dtype.is_float and not (a.exponent >= 0 and a.exponent == int(a.exponent)):
        raise fail("pow", f"exponent {a.exponent} of an integer tensor must be a non-negative integer")


def _pow_ref(ins, a: PowAttrs):
    x = ins[0]
    e = a.exponent if x.dtype.is_floating_point else int(a.exponent)
    return (torch.pow(x, e),)


register(
    OpDef(
        name="pow",
        summary="x ** exponent (a scalar)",
        attrs=PowAttrs,
        infer=_unary_infer("pow", "numeric", None),
        verify=_pow_verify,
        reference=_pow_ref,
        category="elementwise",
        operands=("x",),
        traits=_elementwise_traits(Trait.UNARY, None, (T,)),
    )
)


@dataclass(frozen=True)
class CastAttrs:
    """``cast``: the element type to convert to (floats to ints truncate toward zero)."""

    dtype: DType = DType.f32


register(
    OpDef(
        name="cast",
        summary="convert the elements to another dtype (as Tensor.to)",
        attrs=CastAttrs,
        infer=lambda ins, a: (ins[0].with_dtype(a.dtype),),
        reference=lambda ins, a: (ins[0].to(a.dtype.torch),),
        category="elementwise",
        operands=("x",),
        traits=frozenset({Trait.UNARY, Trait.IMAGE_PRESERVING, Trait.VIEW}),
    )
)

# ----------------------------------------------------------------------------------- binary


def _binary_infer(name: str, accepts: str, result: DType | None):
    def infer(ins, a):
        x, y = ins
        require_same_dtype(name, ins)
        _DTYPE_CHECK[accepts](name, x, "operands")
        dtype = x.dtype if result is None else result
        return (TensorType(broadcast_shapes(name, x.shape, y.shape), dtype),)

    return infer


def _binary(name: str, summary: str, fn, accepts: str = "numeric", result: DType | None = None,
            traits: tuple[Trait, ...] = ()) -> None:
    register(
        OpDef(
            name=name,
            summary=summary,
            attrs=NoAttrs,
            infer=_binary_infer(name, accepts, result),
            reference=lambda ins, a: (fn(ins[0], ins[1]),),
            min_inputs=2,
            max_inputs=2,
            category="elementwise",
            operands=("x", "y"),
            traits=_elementwise_traits(Trait.BINARY, result, traits),
        )
    )


_binary("add", "x + y with broadcasting", torch.add, traits=(E, C))
_binary("sub", "x - y with broadcasting", torch.sub, traits=(E,))
_binary("mul", "x * y with broadcasting", torch.mul, traits=(E, C))
_binary("div", "x / y with broadcasting (true division, floats only)", torch.div, accepts="float", traits=(E,))
_binary("maximum", "elementwise max(x, y) with broadcasting (NaN propagates)", torch.maximum, traits=(E, C))
_binary("minimum", "elementwise min(x, y) with broadcasting (NaN propagates)", torch.minimum, traits=(E, C))
_binary("eq", "x == y -> bool", torch.eq, accepts="any", result=DType.bool, traits=(C,))
_binary("ne", "x != y -> bool", torch.ne, accepts="any", result=DType.bool, traits=(C,))
_binary("lt", "x < y -> bool", torch.lt, accepts="numeric", result=DType.bool)
_binary("le", "x <= y -> bool", torch.le, accepts="numeric", result=DType.bool)
_binary("gt", "x > y -> bool", torch.gt, accepts="numeric", result=DType.bool)
_binary("ge", "x >= y -> bool", torch.ge, accepts="numeric", result=DType.bool)
_binary("logical_and", "(x != 0) and (y != 0) -> bool", torch.logical_and, accepts="any", result=DType.bool, traits=(C,))
_binary("logical_or", "(x != 0) or (y != 0) -> bool", torch.logical_or, accepts="any", result=DType.bool, traits=(C,))


def _where_infer(ins, a):
    cond, x, y = ins
    if cond.dtype != DType.bool:
        raise fail("where", f"condition must be a bool tensor, got {cond.dtype.value}")
    require_same_dtype("where", (x, y))
    return (TensorType(broadcast_shapes("where", cond.shape, x.shape, y.shape), x.dtype),)


register(
    OpDef(
        name="where",
        summary="cond ? x : y, all three broadcast together",
        attrs=NoAttrs,
        infer=_where_infer,
        reference=lambda ins, a: (torch.where(ins[0], ins[1], ins[2]),),
        min_inputs=3,
        max_inputs=3,
        category="elementwise",
        operands=("cond", "x", "y"),
        traits=frozenset({Trait.IMAGE_PRESERVING}),
    )
)

_unary("log1p", "log(1 + x), accurate for small x", torch.log1p, traits=(E, T))
_unary("expm1", "exp(x) - 1, accurate for small x", torch.expm1)


@dataclass(frozen=True)
class EluAttrs:
    """``elu``: x > 0 ? scale * x : scale * alpha * (exp(input_scale * x) - 1) (ELU, SELU, CELU)."""

    alpha: float = 1.0
    scale: float = 1.0
    input_scale: float = 1.0


def _elu_verify(ins, a: EluAttrs) -> None:
    if not all(math.isfinite(v) for v in (a.alpha, a.scale, a.input_scale)):
        raise fail("elu", f"alpha, scale and input_scale must be finite, got {a.alpha}, {a.scale}, {a.input_scale}")


def _elu_ref(ins, a: EluAttrs):
    x = ins[0]
    neg = a.scale * a.alpha * torch.expm1(x * a.input_scale)
    return (torch.where(x > 0, x * a.scale, neg),)


register(
    OpDef(
        name="elu",
        summary="x > 0 ? scale * x : scale * alpha * (exp(input_scale * x) - 1)",
        attrs=EluAttrs,
        infer=_unary_infer("elu", "float", None),
        verify=_elu_verify,
        reference=_elu_ref,
        category="elementwise",
        operands=("x",),
        traits=_elementwise_traits(Trait.UNARY, None, (T,)),
    )
)
