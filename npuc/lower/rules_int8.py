"""Lowering rules of the quantized graph ops (docs/quantization.md) to the int8 kernels.

Every constant an int8 kernel loads comes from :mod:`npuc.quant.arith`, the functions the ops'
reference semantics run, so the simulator's result is the reference's by construction:

=============== ============================================================================
``qconv2d``     ``conv2d`` (or ``depthwise_conv2d`` when groups = C = O) with the folded int32
                bias (``arith.folded_bias``) and per-channel REQUANT records
                (``arith.channel_multipliers``, stored as ``npuc.kir.records`` says); padding
                holds the input zero point
``qconv_transpose2d`` the float conv_transpose2d's kernels (a buffer filled with the input zero
                point's code, the input copied into it with the stride, a stride-1 ``conv2d``)
                with the flipped weights, their folded bias and per-channel records
``qlinear``     ``gemm`` with b = wᵀ, the folded bias and per-feature records
``qmatmul``     ``gemm`` when both zero points are 0 (symmetric activations), zero bias
``qadd/qmul``   ``qbinary`` with ``arith.plan_qadd`` / ``plan_qmul``
``qlut``        ``lut`` with the op's table
``qavg_pool2d`` ``pool2d`` avg with one record per divisor (``arith.average_multiplier``)
``qmean``       ``pool2d`` global avg over H, W, else ``reduce`` mean
``qclamp``      ``eltwise`` with an integer clamp (fused into its producer when possible)
=============== ============================================================================

Ops that only move int8 data (reshape, permute, slice, concat, pad, max_pool2d, ...) use the
float rules of :mod:`npuc.lower.rules` unchanged: their kernels copy bytes or take maxima.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from npuc.kir import records as channel_records
from npuc.kir.kernel import EpilogueOp, PoolAttrs, QBinaryAttrs, QuantAttrs, ReduceAttrs
from npuc.codegen.kernels.vector_pool import record_divisors
from npuc.kir.tensor import DramTensor
from npuc.ir.graph import Node, Value
from npuc.isa.enums import DType
from npuc.lower.context import LowerContext, Lowered
from npuc.lower.layout import broadcast_to
from npuc.lower.rules import as_matrix, channels_last, rule, single
from npuc.quant import arith

I32 = DType.int32


def act(v: Value) -> tuple[float, int]:
    """(scale, zero point) of a per-tensor quantized value."""
    q = v.type.quant
    return float(q.scale[0]), int(q.zero_point[0])


def _records(mults, shifts) -> torch.Tensor:
    """Per-tensor REQUANT records ``[n, 2]`` (int32 multiplier, shift): a pool's, a qadd's (per-channel
    records of conv2d, depthwise_conv2d and gemm are stored as npuc.kir.records says)."""
    return torch.tensor(np.stack([np.asarray(mults, np.int64), np.asarray(shifts, np.int64)], axis=1), dtype=torch.int32)


def _record(pair: tuple[int, int]) -> torch.Tensor:
    return _records([pair[0]], [pair[1]])


def _weight_scales(w: Value, n: int) -> tuple[float, ...]:
    s = w.type.quant.scale
    return tuple(s) if len(s) == n else tuple(s) * n


def _consts(ctx: LowerContext, node: Node, bias: torch.Tensor, mults, shifts) -> tuple[DramTensor, DramTensor]:
    """The folded bias (int32 ``[n]``) and the per-channel REQUANT records (stored as
    ``npuc.kir.records`` says: int8 ``[5 n]``) of ``node`` as constants."""
    base = node.outputs[0].name
    stored = torch.from_numpy(channel_records.pack(mults, shifts))
    return (ctx.const_tensor(base, bias.to(torch.int32), "~qbias", I32),
            ctx.const_tensor(base, stored, "~requant", DType.int8))


def quant_macs(node: Node) -> int:
    """Multiply-accumulates of a quantized conv/linear/matmul node (0 for others)."""
    out = node.outputs[0].type
    if node.op == "qconv2d":
        w = node.inputs[1].type.shape
        return out.numel * w[1] * w[2] * w[3]
    if node.op == "qconv_transpose2d":  # each input pixel meets O/groups x kh x kw weights
        w = node.inputs[1].type.shape
        return node.inputs[0].type.numel * w[1] * w[2] * w[3]
    if node.op in ("qlinear", "qmatmul"):
        return out.numel * node.inputs[0].type.shape[-1]
    return 0


# ------------------------------------------------------------------------------- array work


def _conv_like_constants(ctx: LowerContext, node: Node, n: int, weight: torch.Tensor | None = None,
                         scales: tuple[float, ...] | None = None):
    """(folded bias, records) tensors of a qconv2d/qlinear node with ``n`` output channels, or a
    reason when the weights or bias are not constants.  ``weight``: the weight the kernel
    multiplies, output channels first (default: the node's own); ``scales``: one weight scale
    per output channel (default: the weight's, along axis 0)."""
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) == 3 else None
    wc = ctx.const(w) if weight is None else weight
    if wc is None:
        return f"{node.op} with weights computed at run time: the NPU's int8 layers take constant weights"
    bc = None
    if b is not None:
        bc = ctx.const(b)
        if bc is None:
            return f"{node.op} with a bias computed at run time"
    sx, zx = act(x)
    a = node.attrs
    bias = arith.folded_bias(wc.numpy(), None if bc is None else bc.numpy(), zx)
    mults, shifts = arith.channel_multipliers(sx, scales or _weight_scales(w, n), a.out_scale)
    return _consts(ctx, node, torch.from_numpy(bias), mults, shifts)


def _quant(node: Node, zx: int) -> QuantAttrs:
    a = node.attrs
    return QuantAttrs(zx, a.out_zero_point, getattr(a, "qmin", arith.QMIN), getattr(a, "qmax", arith.QMAX))


@rule("qconv2d")
def lower_qconv2d(ctx: LowerContext, node: Node):
    from npuc.ir.ops.linalg import Conv2dAttrs

    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    a = node.attrs
    c, o, g = x.type.shape[1], w.type.shape[0], a.groups
    consts = _conv_like_constants(ctx, node, o)
    if isinstance(consts, str):
        return consts
    kind = "depthwise_conv2d" if g > 1 and g == c == o else "conv2d"
    xt, pre = channels_last(ctx, node, ctx.tensor(x))
    conv = Conv2dAttrs(a.stride, a.padding, a.dilation, a.groups)
    k = ctx.kernel(node, kind, (xt, ctx.tensor(w), *consts), ctx.out(y), conv)
    return single(*pre, _with_quant(k, _quant(node, act(x)[1])))


@rule("qconv_transpose2d")
def lower_qconv_transpose(ctx: LowerContext, node: Node):
    from npuc.ir.ops.quantized import transposed_weight_scales
    from npuc.lower.rules_models import flipped_weight, transposed_as_conv

    x, w = node.inputs[0], node.inputs[1]
    wc = ctx.const(w)
    if wc is None:
        return f"{node.op} with weights computed at run time: the NPU's int8 layers take constant weights"
    g = node.attrs.groups
    flipped = flipped_weight(wc, g)
    consts = _conv_like_constants(ctx, node, flipped.shape[0], flipped, transposed_weight_scales(w.type, g))
    if isinstance(consts, str):
        return consts
    wt = ctx.const_tensor(ctx.const_of[w], flipped, "~convT", DType.int8)
    zx = act(x)[1]
    return transposed_as_conv(ctx, node, wt, consts, (), float(zx), _quant(node, zx))


def _with_quant(k, q: QuantAttrs):
    from dataclasses import replace

    return replace(k, quant=q)


@rule("qlinear")
def lower_qlinear(ctx: LowerContext, node: Node):
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    n, k = w.type.shape
    m = x.type.numel // k
    consts = _conv_like_constants(ctx, node, n)
    if isinstance(consts, str):
        return consts
    a, pre = as_matrix(ctx, node, ctx.tensor(x), m, k)
    bt = ctx.const_tensor(ctx.const_of[w], ctx.const(w).t(), "^T")
    out = ctx.out(y).reshape((m, n))
    if out is None:
        return "qlinear whose output layout is not row-major"
    kern = ctx.kernel(node, "gemm", (a, bt, *consts), out)
    return single(*pre, _with_quant(kern, _quant(node, act(x)[1])))


@rule("qmatmul")
def lower_qmatmul(ctx: LowerContext, node: Node):
    a, b = node.inputs
    y = node.outputs[0]
    (sa, za), (sb, zb) = act(a), act(b)
    if za or zb:
        return (f"qmatmul of activations with zero points {za} and {zb}: the array multiplies raw int8 "
                "codes, and the zero-point corrections need row and column sums at run time (symmetric "
                "activations, zero point 0, run on the NPU)")
    batch = y.type.shape[:-2]
    m, kk = a.type.shape[-2:]
    n = b.type.shape[-1]
    at = broadcast_to(ctx.tensor(a), batch + (m, kk))
    bt = broadcast_to(ctx.tensor(b), batch + (kk, n))
    pair = arith.quantize_multiplier(sa * sb / node.attrs.out_scale)
    consts = _consts(ctx, node, torch.zeros(n, dtype=torch.int32), [pair[0]] * n, [pair[1]] * n)
    kern = ctx.kernel(node, "gemm", (at, bt, *consts), ctx.out(y))
    return single(_with_quant(kern, QuantAttrs(0, node.attrs.out_zero_point)))


# ------------------------------------------------------------------------------ elementwise


@rule("qadd", "qmul")
def lower_qbinary(ctx: LowerContext, node: Node):
    a, b = node.inputs
    y = node.outputs[0]
    at = node.attrs
    out_q = (at.out_scale, at.out_zero_point)
    if node.op == "qadd":
        p = arith.plan_qadd(act(a), act(b), out_q, at.qmin, at.qmax)
        factors = (p.a_factor, p.b_factor)
    else:
        p = arith.plan_qmul(act(a), act(b), out_q, at.qmin, at.qmax)
        factors = ()
    shape = y.type.shape
    rec = ctx.const_tensor(y.name, _record((p.multiplier, p.shift)), "~requant", I32)
    q = QuantAttrs(0, p.out_zero_point, p.qmin, p.qmax, (p.a_zero_point, p.b_zero_point), factors)
    ins = (broadcast_to(ctx.tensor(a), shape), broadcast_to(ctx.tensor(b), shape), rec)
    kern = ctx.kernel(node, "qbinary", ins, ctx.out(y), QBinaryAttrs(node.op[1:]))
    return single(_with_quant(kern, q))


@rule("qlut")
def lower_qlut(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    table = ctx.const_tensor(y.name, torch.tensor(node.attrs.table, dtype=torch.int8), "~table", DType.int8)
    return single(ctx.kernel(node, "lut", (ctx.tensor(x), table), ctx.out(y)))


@rule("qclamp")
def lower_qclamp(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    epi = (EpilogueOp("clamp", params=(("min", node.attrs.qmin), ("max", node.attrs.qmax))),)
    return single(ctx.kernel(node, "eltwise", (ctx.tensor(x),), ctx.out(y), epilogue=epi))


# ---------------------------------------------------------------------------------- averages


def _avg_pool(ctx: LowerContext, node: Node, attrs: PoolAttrs, out: DramTensor, out_hw: tuple[int, int]):
    """An int8 average pool kernel with one REQUANT record per divisor it uses."""
    x = node.inputs[0]
    (sx, zx), so = act(x), node.attrs.out_scale
    divisors = record_divisors(attrs, tuple(x.type.shape[2:]), out_hw)
    pairs = [arith.average_multiplier(sx, d, so) for d in divisors]
    rec = ctx.const_tensor(node.outputs[0].name, _records([p[0] for p in pairs], [p[1] for p in pairs]),
                           "~requant", I32)
    xt, pre = channels_last(ctx, node, ctx.tensor(x))
    k = ctx.kernel(node, "pool2d", (xt, rec), out, attrs)
    return [*pre, _with_quant(k, QuantAttrs(zx, node.attrs.out_zero_point))]


@rule("qavg_pool2d")
def lower_qavg_pool(ctx: LowerContext, node: Node):
    a = node.attrs
    y = node.outputs[0]
    attrs = PoolAttrs("avg", a.kernel, a.stride, a.padding, (1, 1), a.ceil_mode, a.count_include_pad, a.divisor_override)
    return single(*_avg_pool(ctx, node, attrs, ctx.out(y), tuple(y.type.shape[2:])))


@rule("qmean")
def lower_qmean(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    a = node.attrs
    (sx, zx), so = act(x), a.out_scale
    count = math.prod(x.type.shape[d] for d in a.dims)
    rec = ctx.const_tensor(y.name, _record(arith.average_multiplier(sx, count, so)), "~requant", I32)
    red = ctx.kernel(node, "reduce", (ctx.tensor(x), rec), ctx.out(y), ReduceAttrs("mean", tuple(a.dims), a.keepdim))
    reduce = Lowered((_with_quant(red, QuantAttrs(zx, a.out_zero_point)),))
    if x.type.rank == 4 and tuple(a.dims) == (2, 3):
        out4 = ctx.out(y).reshape(x.type.shape[:2] + (1, 1))
        if out4 is not None:
            h, w = x.type.shape[2:]
            pool = Lowered(tuple(_avg_pool(ctx, node, PoolAttrs("avg", (h, w), (h, w)), out4, (1, 1))))
            return [pool, reduce]
    return [reduce]
