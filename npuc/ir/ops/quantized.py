"""Quantized ops: int8 values with per-tensor quantization parameters in their types.

A quantized activation is ``tensor<...xi8, quant=([scale], [zero_point], None)>``; weights are
i8 constants with per-output-channel (axis 0) symmetric parameters, biases i32 constants of scale
``input_scale * weight_scale`` and zero point 0 (see docs/quantization.md).  Every op's output
parameters are attributes (``out_scale``, ``out_zero_point``), and ``qmin``/``qmax`` is the
clamp range a fused relu/relu6/hardtanh leaves.

The reference semantics are the integer algorithms of :mod:`npuc.quant.arith` (the same code the
backend computes its kernel constants with), exact: sums of products are formed in float64,
which is exact for these magnitudes, then wrapped to int32 like the array's accumulators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from npuc.ir.opdef import NoAttrs, OpDef, Trait, fail, register
from npuc.ir.ops.common import (
    broadcast_shapes,
    require_dim,
    require_float,
    require_ints_at_least,
    require_min_rank,
    require_rank,
)
from npuc.ir.ops.linalg import (
    ConvTranspose2dAttrs,
    conv_output_size,
    conv_transpose_output_size,
    verify_conv_transpose,
)
from npuc.ir.ops.pooling import pool_output_size
from npuc.ir.ops.reduction import reduced_shape
from npuc.ir.types import DType, QuantParams, TensorType
from npuc.quant import arith

# ------------------------------------------------------------------------------------ checks


def act_params(t: TensorType) -> tuple[float, int]:
    """``(scale, zero_point)`` of a per-tensor quantized type."""
    return t.quant.scale[0], t.quant.zero_point[0]


def quant_type(shape: tuple[int, ...], scale: float, zero_point: int) -> TensorType:
    """The i8 type of a per-tensor quantized value."""
    return TensorType(tuple(shape), DType.i8, QuantParams((float(scale),), (int(zero_point),), None))


def require_activation(op: str, t: TensorType, what: str = "input") -> None:
    """``t`` must be i8 with per-tensor quantization parameters."""
    if t.dtype != DType.i8:
        raise fail(op, f"{what} must be an i8 tensor, got {t.dtype.value}")
    q = t.quant
    if q is None or q.axis is not None or len(q.scale) != 1 or len(q.zero_point) != 1:
        raise fail(op, f"{what} {t} must carry per-tensor quantization parameters (one scale, one zero point)")
    _check_scale_zp(op, what, q.scale[0], q.zero_point[0])


def _check_scale_zp(op: str, what: str, scale: float, zero_point: int) -> None:
    if not (math.isfinite(scale) and scale > 0):
        raise fail(op, f"scale {scale} of the {what} must be a positive finite number")
    if not arith.QMIN <= zero_point <= arith.QMAX:
        raise fail(op, f"zero point {zero_point} of the {what} is outside the int8 range")


def require_weight(op: str, w: TensorType, out_channels: int) -> None:
    """``w`` must be i8 with symmetric per-tensor or per-output-channel (axis 0) parameters."""
    if w.dtype != DType.i8:
        raise fail(op, f"weight must be an i8 tensor, got {w.dtype.value}")
    q = w.quant
    if q is None:
        raise fail(op, f"weight {w} carries no quantization parameters")
    per_channel = q.axis == 0 and len(q.scale) == out_channels
    per_tensor = q.axis is None and len(q.scale) == 1
    if not (per_channel or per_tensor) or len(q.zero_point) != len(q.scale):
        raise fail(op, f"weight {w} must be quantized per tensor or per output channel (axis 0, {out_channels} scales)")
    if any(z != 0 for z in q.zero_point):
        raise fail(op, f"weight {w} must be quantized symmetrically (zero points 0)")
    if any(not (math.isfinite(s) and s > 0) for s in q.scale):
        raise fail(op, f"weight scales of {w} must be positive finite numbers")


def weight_scales(w: TensorType, out_channels: int) -> tuple[float, ...]:
    """One weight scale per output channel (a per-tensor scale repeated)."""
    s = w.quant.scale
    return s if len(s) == out_channels else s * out_channels


def require_bias(op: str, b: TensorType, x: TensorType, w: TensorType, out_channels: int) -> None:
    """``b`` must be i32 ``[O]``; when it carries parameters, scale ``sx * sw[o]``, zero point 0."""
    if b.dtype != DType.i32 or b.shape != (out_channels,):
        raise fail(op, f"bias must be an i32 tensor of shape [{out_channels}], got {b}")
    q = b.quant
    if q is None:
        return
    if any(z != 0 for z in q.zero_point):
        raise fail(op, f"bias {b} must have zero points 0")
    want = [x.quant.scale[0] * s for s in weight_scales(w, out_channels)]
    got = q.scale if len(q.scale) == out_channels else q.scale * out_channels
    if len(got) != out_channels or any(not math.isclose(g, e, rel_tol=1e-5) for g, e in zip(got, want)):
        raise fail(op, f"bias scales of {b} must be input scale x weight scale per channel")


@dataclass(frozen=True)
class OutAttrs:
    """Attributes every requantizing op has: output scale and zero point (no clamp)."""

    out_scale: float = 1.0
    out_zero_point: int = 0


def verify_out(op: str, a, clamp: bool) -> None:
    """The output parameters (and the clamp range when the op has one) are in their domains."""
    _check_scale_zp(op, "output", a.out_scale, a.out_zero_point)
    if clamp:
        if not arith.QMIN <= a.qmin <= a.qmax <= arith.QMAX:
            raise fail(op, f"clamp range [{a.qmin}, {a.qmax}] must satisfy -128 <= qmin <= qmax <= 127")


def _ints(t: torch.Tensor) -> np.ndarray:
    return t.numpy().astype(np.int64)


def _i8(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int8))


# ------------------------------------------------------------------------- quantize, dequantize


@dataclass(frozen=True)
class QuantizeAttrs:
    """``quantize``: the (per-tensor) scale and zero point of the int8 result."""

    scale: float = 1.0
    zero_point: int = 0


def _quantize_infer(ins, a: QuantizeAttrs):
    require_float("quantize", ins[0])
    return (quant_type(ins[0].shape, a.scale, a.zero_point),)


register(
    OpDef(
        name="quantize",
        traits=frozenset({Trait.UNARY, Trait.IMAGE_PRESERVING}),
        summary="f32 -> i8: clamp(round_half_even(x * (1 / scale)) + zero_point, -128, 127)",
        attrs=QuantizeAttrs,
        infer=_quantize_infer,
        verify=lambda ins, a: _check_scale_zp("quantize", "result", a.scale, a.zero_point),
        reference=lambda ins, a: (arith.quantize_tensor(ins[0], a.scale, a.zero_point),),
        category="quantized",
        operands=("x",),
    )
)


def _dequantize_infer(ins, a):
    x = ins[0]
    if x.dtype not in (DType.i8, DType.i32) or x.quant is None:
        raise fail("dequantize", f"input must be an i8 or i32 tensor with quantization parameters, got {x}")
    q = x.quant
    if q.axis is None and len(q.scale) != 1:
        raise fail("dequantize", f"per-tensor parameters of {x} must hold one scale")
    if q.axis is not None:
        require_dim("dequantize", q.axis, x.rank, "quantization axis")
        if len(q.scale) != x.shape[q.axis] or len(q.zero_point) != len(q.scale):
            raise fail("dequantize", f"{x} needs one scale and zero point per index of axis {q.axis}")
    return (TensorType(x.shape, DType.f32),)


def _dequantize_ref(ins, types, a):
    q = types[0].quant
    if q.axis is None:
        return (arith.dequantize_tensor(ins[0], q.scale[0], q.zero_point[0]),)
    return (arith.dequantize_per_channel(ins[0], q.scale, q.zero_point, q.axis),)


def needs_types(op: str):
    """The plain ``reference`` of an op whose meaning needs its operand types."""

    def reference(ins, a):
        raise fail(op, "its reference reads the operands' quantization parameters: run it with OpDef.evaluate")

    return reference


register(
    OpDef(
        name="dequantize",
        traits=frozenset({Trait.UNARY, Trait.IMAGE_PRESERVING}),
        summary="i8 (or i32) -> f32: (x - zero_point) * scale, parameters from the input's type",
        attrs=NoAttrs,
        infer=_dequantize_infer,
        reference=needs_types("dequantize"),
        typed_reference=_dequantize_ref,
        category="quantized",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------------ qconv2d


@dataclass(frozen=True)
class QConv2dAttrs:
    """``qconv2d``: the conv2d window attributes, the output parameters and the clamp range."""

    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    out_scale: float = 1.0
    out_zero_point: int = 0
    qmin: int = arith.QMIN
    qmax: int = arith.QMAX


def _qconv2d_verify(ins, a: QConv2dAttrs) -> None:
    require_ints_at_least("qconv2d", "stride", a.stride, 1, count=2)
    require_ints_at_least("qconv2d", "padding", a.padding, 0, count=2)
    require_ints_at_least("qconv2d", "dilation", a.dilation, 1, count=2)
    if a.groups < 1:
        raise fail("qconv2d", f"groups = {a.groups} must be >= 1")
    verify_out("qconv2d", a, clamp=True)


def _qconv2d_infer(ins, a: QConv2dAttrs):
    x, w = ins[0], ins[1]
    require_rank("qconv2d", x, 4, "input (NCHW)")
    require_rank("qconv2d", w, 4, "weight [O, I/groups, kh, kw]")
    require_activation("qconv2d", x)
    o, i, kh, kw = w.shape
    require_weight("qconv2d", w, o)
    n, c, h, wd = x.shape
    if i * a.groups != c or o % a.groups:
        raise fail("qconv2d", f"weight {w} with {a.groups} groups does not fit the input {x}")
    if len(ins) == 3:
        require_bias("qconv2d", ins[2], x, w, o)
    oh = conv_output_size(h, kh, a.stride[0], a.padding[0], a.dilation[0])
    ow = conv_output_size(wd, kw, a.stride[1], a.padding[1], a.dilation[1])
    if oh < 1 or ow < 1:
        raise fail("qconv2d", f"output would be {oh}x{ow}: the dilated kernel does not fit the padded input {x}")
    return (quant_type((n, o, oh, ow), a.out_scale, a.out_zero_point),)


def _requantize_channels(acc: np.ndarray, types, w_scales, a, channel_axis: int) -> torch.Tensor:
    """int32 accumulators -> int8 outputs, one multiplier per output channel (``channel_axis``),
    from the input scale and ``w_scales`` (one weight scale per output channel)."""
    mults, shifts = arith.channel_multipliers(act_params(types[0])[0], w_scales, a.out_scale)
    shape = [1] * acc.ndim
    shape[channel_axis] = len(mults)
    out = arith.requantize(arith.wrap32(acc), mults.reshape(shape), shifts.reshape(shape),
                           a.out_zero_point, a.qmin, a.qmax)
    return _i8(out)


def _centered(t: torch.Tensor, zero_point: int) -> torch.Tensor:
    """``t - zero_point`` as float64 (exact: sums of these products stay far below 2^53)."""
    return t.to(torch.float64) - zero_point


def _qconv2d_ref(ins, types, a: QConv2dAttrs):
    _, zx = act_params(types[0])
    x = _centered(ins[0], zx)  # zero padding of x - zx is padding x with zx
    bias = ins[2].to(torch.float64) if len(ins) == 3 else None
    acc = F.conv2d(x, ins[1].to(torch.float64), bias, a.stride, a.padding, a.dilation, a.groups)
    w = types[1]
    return (_requantize_channels(acc.round().numpy().astype(np.int64), types, weight_scales(w, w.shape[0]), a, 1),)


register(
    OpDef(
        name="qconv2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="int8 conv2d: int32 sum of (x - zx) * w + b, requantized per output channel",
        attrs=QConv2dAttrs,
        infer=_qconv2d_infer,
        verify=_qconv2d_verify,
        reference=needs_types("qconv2d"),
        typed_reference=_qconv2d_ref,
        min_inputs=2,
        max_inputs=3,
        category="quantized",
        operands=("x", "w", "[b]"),
    )
)

# --------------------------------------------------------------------------- qconv_transpose2d


@dataclass(frozen=True)
class QConvTranspose2dAttrs:
    """``qconv_transpose2d``: the conv_transpose2d attributes, the output parameters and the
    clamp range."""

    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    output_padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    out_scale: float = 1.0
    out_zero_point: int = 0
    qmin: int = arith.QMIN
    qmax: int = arith.QMAX

    def window(self) -> ConvTranspose2dAttrs:
        return ConvTranspose2dAttrs(self.stride, self.padding, self.output_padding, self.dilation, self.groups)


def transposed_weight_scales(w: TensorType, groups: int) -> tuple[float, ...]:
    """One scale per output channel of a transposed convolution's weight ``[I, O/groups, kh,
    kw]`` quantized per tensor or per channel along axis 1 (its output channels within a group:
    output channel ``g * O/groups + j`` has scale ``j``)."""
    per_group = w.shape[1]
    s = w.quant.scale
    return (s if len(s) == per_group else s * per_group) * groups


def require_transposed_weight(op: str, w: TensorType) -> None:
    """``w`` must be i8 with symmetric per-tensor or per-output-channel (axis 1) parameters."""
    if w.dtype != DType.i8:
        raise fail(op, f"weight must be an i8 tensor, got {w.dtype.value}")
    q = w.quant
    if q is None:
        raise fail(op, f"weight {w} carries no quantization parameters")
    per_channel = q.axis == 1 and len(q.scale) == w.shape[1]
    per_tensor = q.axis is None and len(q.scale) == 1
    if not (per_channel or per_tensor) or len(q.zero_point) != len(q.scale):
        raise fail(op, f"weight {w} must be quantized per tensor or per output channel (axis 1, {w.shape[1]} scales)")
    if any(z != 0 for z in q.zero_point):
        raise fail(op, f"weight {w} must be quantized symmetrically (zero points 0)")
    if any(not (math.isfinite(s) and s > 0) for s in q.scale):
        raise fail(op, f"weight scales of {w} must be positive finite numbers")


def _qconv_t_verify(ins, a: QConvTranspose2dAttrs) -> None:
    verify_conv_transpose(ins, a.window(), "qconv_transpose2d")
    verify_out("qconv_transpose2d", a, clamp=True)


def _qconv_t_infer(ins, a: QConvTranspose2dAttrs):
    op = "qconv_transpose2d"
    x, w = ins[0], ins[1]
    require_rank(op, x, 4, "input (NCHW)")
    require_rank(op, w, 4, "weight [I, O/groups, kh, kw]")
    require_activation(op, x)
    require_transposed_weight(op, w)
    n, c, h, wd = x.shape
    i, og, kh, kw = w.shape
    if i != c or c % a.groups:
        raise fail(op, f"weight {w} with {a.groups} groups does not fit the input {x}")
    o = og * a.groups
    if len(ins) == 3:
        b = ins[2]
        if b.dtype != DType.i32 or b.shape != (o,):
            raise fail(op, f"bias must be an i32 tensor of shape [{o}], got {b}")
        want = [x.quant.scale[0] * s for s in transposed_weight_scales(w, a.groups)]
        q = b.quant
        if q is not None:
            got = q.scale if len(q.scale) == o else q.scale * o
            if any(z != 0 for z in q.zero_point) or any(not math.isclose(g, e, rel_tol=1e-5) for g, e in zip(got, want)):
                raise fail(op, f"bias {b} must have zero points 0 and scales input scale x weight scale per channel")
    oh = conv_transpose_output_size(h, kh, a.stride[0], a.padding[0], a.output_padding[0], a.dilation[0])
    ow = conv_transpose_output_size(wd, kw, a.stride[1], a.padding[1], a.output_padding[1], a.dilation[1])
    if oh < 1 or ow < 1:
        raise fail(op, f"output would be {oh}x{ow}: the padding removes every output pixel")
    return (quant_type((n, o, oh, ow), a.out_scale, a.out_zero_point),)


def _qconv_t_ref(ins, types, a: QConvTranspose2dAttrs):
    _, zx = act_params(types[0])
    bias = ins[2].to(torch.float64) if len(ins) == 3 else None
    acc = F.conv_transpose2d(_centered(ins[0], zx), ins[1].to(torch.float64), bias, a.stride, a.padding,
                             a.output_padding, a.groups, a.dilation).round().numpy().astype(np.int64)
    return (_requantize_channels(acc, types, transposed_weight_scales(types[1], a.groups), a, 1),)


register(
    OpDef(
        name="qconv_transpose2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="int8 conv_transpose2d: int32 sum of (x - zx) * w + b over the transposed windows, weight "
                "[I, O/groups, kh, kw] scaled per output channel (axis 1), requantized per output channel",
        attrs=QConvTranspose2dAttrs,
        infer=_qconv_t_infer,
        verify=_qconv_t_verify,
        reference=needs_types("qconv_transpose2d"),
        typed_reference=_qconv_t_ref,
        min_inputs=2,
        max_inputs=3,
        category="quantized",
        operands=("x", "w", "[b]"),
    )
)

# ------------------------------------------------------------------------------------ qlinear


@dataclass(frozen=True)
class QLinearAttrs:
    """``qlinear``: the output parameters and the clamp range."""

    out_scale: float = 1.0
    out_zero_point: int = 0
    qmin: int = arith.QMIN
    qmax: int = arith.QMAX


def _qlinear_infer(ins, a: QLinearAttrs):
    x, w = ins[0], ins[1]
    require_min_rank("qlinear", x, 1)
    require_rank("qlinear", w, 2, "weight [N, K]")
    require_activation("qlinear", x)
    n, k = w.shape
    require_weight("qlinear", w, n)
    if x.shape[-1] != k:
        raise fail("qlinear", f"input {x} has {x.shape[-1]} features, weight {w} expects {k}")
    if len(ins) == 3:
        require_bias("qlinear", ins[2], x, w, n)
    return (quant_type(x.shape[:-1] + (n,), a.out_scale, a.out_zero_point),)


def _qlinear_ref(ins, types, a: QLinearAttrs):
    _, zx = act_params(types[0])
    bias = ins[2].to(torch.float64) if len(ins) == 3 else None
    acc = F.linear(_centered(ins[0], zx), ins[1].to(torch.float64), bias)
    w = types[1]
    return (_requantize_channels(acc.round().numpy().astype(np.int64), types, weight_scales(w, w.shape[0]), a,
                                 acc.dim() - 1),)


register(
    OpDef(
        name="qlinear",
        summary="int8 linear: int32 sum over K of (x - zx) * w + b, requantized per output feature",
        attrs=QLinearAttrs,
        infer=_qlinear_infer,
        verify=lambda ins, a: verify_out("qlinear", a, clamp=True),
        reference=needs_types("qlinear"),
        typed_reference=_qlinear_ref,
        min_inputs=2,
        max_inputs=3,
        category="quantized",
        operands=("x", "w", "[b]"),
    )
)

# ------------------------------------------------------------------------------------ qmatmul


def _qmatmul_infer(ins, a: OutAttrs):
    x, y = ins
    require_min_rank("qmatmul", x, 2, "first operand")
    require_min_rank("qmatmul", y, 2, "second operand")
    require_activation("qmatmul", x, "first operand")
    require_activation("qmatmul", y, "second operand")
    if x.shape[-1] != y.shape[-2]:
        raise fail("qmatmul", f"inner dimensions differ: {x} @ {y}")
    batch = broadcast_shapes("qmatmul", x.shape[:-2], y.shape[:-2])
    return (quant_type(batch + (x.shape[-2], y.shape[-1]), a.out_scale, a.out_zero_point),)


def _qmatmul_ref(ins, types, a: OutAttrs):
    (sa, za), (sb, zb) = act_params(types[0]), act_params(types[1])
    acc = torch.matmul(_centered(ins[0], za), _centered(ins[1], zb)).round().numpy().astype(np.int64)
    m, s = arith.quantize_multiplier(sa * sb / a.out_scale)
    return (_i8(arith.requantize(arith.wrap32(acc), m, s, a.out_zero_point)),)


register(
    OpDef(
        name="qmatmul",
        summary="int8 matmul: int32 sum of (a - za)(b - zb), requantized by sa * sb / out_scale",
        attrs=OutAttrs,
        infer=_qmatmul_infer,
        verify=lambda ins, a: verify_out("qmatmul", a, clamp=False),
        reference=needs_types("qmatmul"),
        typed_reference=_qmatmul_ref,
        min_inputs=2,
        max_inputs=2,
        category="quantized",
        operands=("a", "b"),
    )
)

# ------------------------------------------------------------------------------- qadd, qmul


@dataclass(frozen=True)
class QBinaryAttrs:
    """``qadd``/``qmul``: the output parameters and the clamp range."""

    out_scale: float = 1.0
    out_zero_point: int = 0
    qmin: int = arith.QMIN
    qmax: int = arith.QMAX


def _qbinary_infer(name: str):
    def infer(ins, a: QBinaryAttrs):
        require_activation(name, ins[0], "first operand")
        require_activation(name, ins[1], "second operand")
        shape = broadcast_shapes(name, ins[0].shape, ins[1].shape)
        return (quant_type(shape, a.out_scale, a.out_zero_point),)

    return infer


def _qadd_ref(ins, types, a: QBinaryAttrs):
    plan = arith.plan_qadd(act_params(types[0]), act_params(types[1]), (a.out_scale, a.out_zero_point), a.qmin, a.qmax)
    return (_i8(arith.run_qadd(_ints(ins[0]), _ints(ins[1]), plan)),)


def _qmul_ref(ins, types, a: QBinaryAttrs):
    plan = arith.plan_qmul(act_params(types[0]), act_params(types[1]), (a.out_scale, a.out_zero_point), a.qmin, a.qmax)
    return (_i8(arith.run_qmul(_ints(ins[0]), _ints(ins[1]), plan)),)


for _name, _summary, _ref in (
    ("qadd", "int8 a + b with broadcasting: both sides rescaled by integer factors, then REQUANT", _qadd_ref),
    ("qmul", "int8 a * b with broadcasting: int32 product of (a - za)(b - zb), then REQUANT", _qmul_ref),
):
    register(
        OpDef(
            name=_name,
            summary=_summary,
            attrs=QBinaryAttrs,
            infer=_qbinary_infer(_name),
            verify=(lambda n: lambda ins, a: verify_out(n, a, clamp=True))(_name),
            reference=needs_types(_name),
            typed_reference=_ref,
            min_inputs=2,
            max_inputs=2,
            category="quantized",
            operands=("a", "b"),
            traits=frozenset({Trait.BINARY, Trait.COMMUTATIVE, Trait.IMAGE_PRESERVING}),
        )
    )

# --------------------------------------------------------------------------------------- qlut


@dataclass(frozen=True)
class QLutAttrs:
    """``qlut``: the 256-entry table (entry j is the output for input j - 128) and the output
    parameters the table was built for."""

    table: tuple[int, ...] = ()
    out_scale: float = 1.0
    out_zero_point: int = 0


def _qlut_verify(ins, a: QLutAttrs) -> None:
    verify_out("qlut", a, clamp=False)
    if len(a.table) != 256 or any(not arith.QMIN <= v <= arith.QMAX for v in a.table):
        raise fail("qlut", f"table must hold 256 int8 values, got {len(a.table)} entries")


def _qlut_infer(ins, a: QLutAttrs):
    require_activation("qlut", ins[0])
    return (quant_type(ins[0].shape, a.out_scale, a.out_zero_point),)


register(
    OpDef(
        name="qlut",
        traits=frozenset({Trait.UNARY, Trait.IMAGE_PRESERVING}),
        summary="int8 -> int8 through a 256-entry table: y = table[x + 128]",
        attrs=QLutAttrs,
        infer=_qlut_infer,
        verify=_qlut_verify,
        reference=lambda ins, a: (_i8(arith.run_lut(_ints(ins[0]), a.table)),),
        category="quantized",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------- qavg_pool2d


@dataclass(frozen=True)
class QAvgPool2dAttrs:
    """``qavg_pool2d``: the avg_pool2d attributes and the output parameters."""

    kernel: tuple[int, int] = (2, 2)
    stride: tuple[int, int] = (2, 2)
    padding: tuple[int, int] = (0, 0)
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    out_scale: float = 1.0
    out_zero_point: int = 0


def _qavg_verify(ins, a: QAvgPool2dAttrs) -> None:
    require_ints_at_least("qavg_pool2d", "kernel", a.kernel, 1, count=2)
    require_ints_at_least("qavg_pool2d", "stride", a.stride, 1, count=2)
    require_ints_at_least("qavg_pool2d", "padding", a.padding, 0, count=2)
    if any(p > k // 2 for k, p in zip(a.kernel, a.padding)):
        raise fail("qavg_pool2d", f"padding {list(a.padding)} must be at most half of the kernel {list(a.kernel)}")
    if a.divisor_override is not None and a.divisor_override < 1:
        raise fail("qavg_pool2d", f"divisor_override = {a.divisor_override} must be >= 1 or none")
    verify_out("qavg_pool2d", a, clamp=False)


def _qavg_infer(ins, a: QAvgPool2dAttrs):
    x = ins[0]
    require_rank("qavg_pool2d", x, 4, "input (NCHW)")
    require_activation("qavg_pool2d", x)
    n, c, h, w = x.shape
    oh = pool_output_size(h, a.kernel[0], a.stride[0], a.padding[0], 1, a.ceil_mode)
    ow = pool_output_size(w, a.kernel[1], a.stride[1], a.padding[1], 1, a.ceil_mode)
    if oh < 1 or ow < 1:
        raise fail("qavg_pool2d", f"output would be {oh}x{ow}: the window {list(a.kernel)} does not fit {x}")
    return (quant_type((n, c, oh, ow), a.out_scale, a.out_zero_point),)


def window_sums(x: torch.Tensor, a: QAvgPool2dAttrs, out_hw: tuple[int, int]) -> torch.Tensor:
    """Sum of each pooling window of ``x`` (float64, padding adds 0), cropped to ``out_hw``."""
    ph, pw = a.padding
    padded = F.pad(x.to(torch.float64), (pw, pw, ph, ph))
    sums = F.avg_pool2d(padded, a.kernel, a.stride, 0, a.ceil_mode, True, 1)
    return sums[..., : out_hw[0], : out_hw[1]]


def window_counts(a: QAvgPool2dAttrs, hw: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """The divisor of each output position ``[oh, ow]``, by PyTorch's avg_pool2d rule."""
    if a.divisor_override is not None:
        return np.full(out_hw, a.divisor_override, np.int64)
    ph, pw = a.padding
    mask = torch.ones((1, 1) + hw, dtype=torch.float64)
    mask = F.pad(mask, (pw, pw, ph, ph), value=1.0 if a.count_include_pad else 0.0)
    counts = window_sums(mask[..., :, :], QAvgPool2dAttrs(a.kernel, a.stride, (0, 0), a.ceil_mode), out_hw)
    return counts[0, 0].round().numpy().astype(np.int64)


def _qavg_ref(ins, types, a: QAvgPool2dAttrs):
    sx, zx = act_params(types[0])
    out_hw = _qavg_infer(types, a)[0].shape[2:]
    sums = window_sums(_centered(ins[0], zx), a, out_hw).round().numpy().astype(np.int64)
    counts = window_counts(a, tuple(types[0].shape[2:]), out_hw)
    return (_i8(arith.run_average(sums, counts, (sx, zx), (a.out_scale, a.out_zero_point))),)


register(
    OpDef(
        name="qavg_pool2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="int8 average pool: int32 window sum of x - zx, requantized by 1 / divisor",
        attrs=QAvgPool2dAttrs,
        infer=_qavg_infer,
        verify=_qavg_verify,
        reference=needs_types("qavg_pool2d"),
        typed_reference=_qavg_ref,
        category="quantized",
        operands=("x",),
    )
)

# -------------------------------------------------------------------------------------- qmean


@dataclass(frozen=True)
class QMeanAttrs:
    """``qmean``: the dims averaged (sorted, unique), whether they are kept, the output parameters."""

    dims: tuple[int, ...] = (0,)
    keepdim: bool = False
    out_scale: float = 1.0
    out_zero_point: int = 0


def _qmean_verify(ins, a: QMeanAttrs) -> None:
    if not a.dims or list(a.dims) != sorted(set(a.dims)):
        raise fail("qmean", f"dims = {list(a.dims)} must be non-empty, sorted and unique")
    for d in a.dims:
        require_dim("qmean", d, ins[0].rank, "dims entry")
    verify_out("qmean", a, clamp=False)


def _qmean_infer(ins, a: QMeanAttrs):
    require_activation("qmean", ins[0])
    return (quant_type(reduced_shape(ins[0].shape, a.dims, a.keepdim), a.out_scale, a.out_zero_point),)


def _qmean_ref(ins, types, a: QMeanAttrs):
    sx, zx = act_params(types[0])
    sums = _centered(ins[0], zx).sum(dim=a.dims, keepdim=a.keepdim).round().numpy().astype(np.int64)
    count = math.prod(types[0].shape[d] for d in a.dims)
    avg = arith.run_average(sums, np.int64(count), (sx, zx), (a.out_scale, a.out_zero_point))
    return (_i8(avg).reshape(sums.shape),)  # a mean over every dim is 0-d


register(
    OpDef(
        name="qmean",
        summary="int8 mean over dims: int32 sum of x - zx, requantized by 1 / count",
        attrs=QMeanAttrs,
        infer=_qmean_infer,
        verify=_qmean_verify,
        reference=needs_types("qmean"),
        typed_reference=_qmean_ref,
        category="quantized",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------------- qclamp


@dataclass(frozen=True)
class QClampAttrs:
    """``qclamp``: the integer clamp range."""

    qmin: int = arith.QMIN
    qmax: int = arith.QMAX


def _qclamp_verify(ins, a: QClampAttrs) -> None:
    if not arith.QMIN <= a.qmin <= a.qmax <= arith.QMAX:
        raise fail("qclamp", f"clamp range [{a.qmin}, {a.qmax}] must satisfy -128 <= qmin <= qmax <= 127")


def _qclamp_infer(ins, a: QClampAttrs):
    require_activation("qclamp", ins[0])
    return (ins[0],)


register(
    OpDef(
        name="qclamp",
        traits=frozenset({Trait.UNARY, Trait.IMAGE_PRESERVING}),
        summary="clamp int8 codes to [qmin, qmax] (a relu that could not be fused); parameters kept",
        attrs=QClampAttrs,
        infer=_qclamp_infer,
        verify=_qclamp_verify,
        reference=lambda ins, a: (torch.clamp(ins[0], a.qmin, a.qmax),),
        category="quantized",
        operands=("x",),
    )
)
