"""TOSA lowerings of npuc's int8 graph ops, bit-exact against the integer reference.

Every requantization is the ISA's REQUANT (:func:`npuc.quant.arith.requantize`) written with TOSA
integer operations on int32:

1. a left shift for a negative shift, saturating to int32 (``select`` on the bounds);
2. SaturatingRoundingDoublingHighMul by the Q0.31 multiplier, which is ``tosa.mul`` of int32 by
   int32 with shift 31 (``(x * m + 2^30) >> 31``: the same rounding, half up, and no saturation
   since the multiplier is below 2^31);
3. RoundingDivideByPOT, half away from zero: ``(x >> s) + ((x & mask) > (mask >> 1) + (x < 0))``;
4. the output zero point, the clamp to [qmin, qmax] and the cast to int8.

Multipliers and shifts come from the same functions the reference uses (``quantize_multiplier``,
``channel_multipliers``, ``plan_qadd``, ``average_multiplier``), so both compute with the same
integers.  Convolutions and matmuls use TOSA's int8 forms (int32 accumulators, the input zero
point as TOSA's zero-point operand, so padding holds the zero point as in the reference).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from npuc.ir.graph import Node
from npuc.mlir.builder import ExportError, i32_array, i64_array, int_attr, tensor_type
from npuc.mlir.tosa_table import _pool_input, _to_nchw, _to_nhwc, lowers
from npuc.quant import arith

I32 = torch.int32


def _act(v):
    q = v.type.quant
    if q is None or q.axis is not None:
        raise ExportError(f"%{v.name} is not a per-tensor quantized activation")
    return q.scale[0], q.zero_point[0]


def _i32(em, x, shape):
    if em.dtype_of(x) == I32:
        return x
    return em.b.op("tosa.cast", (x,), tensor_type(shape, I32))


def _c32(em, values, shape):
    """An int32 constant broadcasting against ``shape`` (scalar or per channel)."""
    return em.b.const(torch.as_tensor(np.asarray(values, dtype=np.int64), dtype=I32).reshape(shape))


def requant(em, acc, shape, mults, shifts, zero_point: int, qmin: int, qmax: int, param_shape):
    """int32 ``acc`` of ``shape`` -> int8 by REQUANT with ``mults``/``shifts`` of ``param_shape``."""
    shape = tuple(shape)
    ty = tensor_type(shape, I32)
    bool_ty = tensor_type(shape, torch.bool)
    mults = np.broadcast_to(np.asarray(mults, dtype=np.int64), param_shape)
    shifts = np.broadcast_to(np.asarray(shifts, dtype=np.int64), param_shape)
    x = acc
    left = np.maximum(-shifts, 0)
    if left.any():
        hi, lo = arith.INT32_MAX >> left, arith.INT32_MIN >> left
        shifted = em.b.op("tosa.logical_left_shift", (x, _c32(em, left, param_shape)), ty)
        x = em.b.op("tosa.select", (em.b.op("tosa.greater", (x, _c32(em, hi, param_shape)), bool_ty),
                                    _c32(em, np.full(param_shape, arith.INT32_MAX), param_shape), shifted), ty)
        x = em.b.op("tosa.select", (em.b.op("tosa.greater", (_c32(em, lo, param_shape), acc), bool_ty),
                                    _c32(em, np.full(param_shape, arith.INT32_MIN), param_shape), x), ty)
    shift31 = em.b.const(torch.tensor([31], dtype=torch.int8))
    x = em.b.op("tosa.mul", (x, _c32(em, mults, param_shape), shift31), ty)
    right = np.maximum(shifts, 0)
    if right.any():
        mask = (np.int64(1) << right) - 1
        remainder = em.b.op("tosa.bitwise_and", (x, _c32(em, mask, param_shape)), ty)
        negative = em.b.op("tosa.cast", (em.b.op("tosa.greater", (_c32(em, np.zeros(param_shape), param_shape), x), bool_ty),), ty)
        threshold = em.b.op("tosa.add", (_c32(em, mask >> 1, param_shape), negative), ty)
        up = em.b.op("tosa.cast", (em.b.op("tosa.greater", (remainder, threshold), bool_ty),), ty)
        x = em.b.op("tosa.arithmetic_right_shift", (x, _c32(em, right, param_shape)), ty,
                    {"round": _bool_attr(False)})
        x = em.b.op("tosa.add", (x, up), ty)
    rank = len(shape)
    x = em.b.op("tosa.add", (x, _c32(em, [zero_point], (1,) * rank)), ty)
    x = em.clamp_int(x, qmin, qmax, ty)
    return em.b.op("tosa.cast", (x,), tensor_type(shape, torch.int8))


def _bool_attr(v: bool):
    from xdsl.dialects.builtin import BoolAttr

    return BoolAttr.from_bool(v)


def _zp(em, z: int):
    return em.b.const(torch.tensor([z], dtype=torch.int8))


# ------------------------------------------------------------------------------ edges


@lowers("quantize")
def _quantize(em, node: Node):
    x = node.inputs[0]
    shape = x.type.shape
    a = node.attrs
    f32 = tensor_type(shape, torch.float32)
    y = em.mul(em.value(x), em.b.const(torch.full((1,) * len(shape), 1.0 / a.scale, dtype=torch.float32)), x.type)
    # fp32 -> int rounds half to even in TOSA's cast, as torch.round does.
    q = em.b.op("tosa.cast", (y,), tensor_type(shape, I32))
    q = em.b.op("tosa.add", (q, _c32(em, [a.zero_point], (1,) * len(shape))), tensor_type(shape, I32))
    q = em.clamp_int(q, arith.QMIN, arith.QMAX, tensor_type(shape, I32))
    del f32
    return em.b.op("tosa.cast", (q,), tensor_type(shape, torch.int8))


@lowers("dequantize")
def _dequantize(em, node: Node):
    x = node.inputs[0]
    q = x.type.quant
    shape = x.type.shape
    r = len(shape)
    f = em.b.op("tosa.cast", (em.value(x),), tensor_type(shape, torch.float32))
    if q.axis is None:
        z = torch.full((1,) * r, float(q.zero_point[0]))
        s = torch.full((1,) * r, float(q.scale[0]))
    else:
        pshape = [1] * r
        pshape[q.axis] = -1
        z = torch.tensor([float(v) for v in q.zero_point], dtype=torch.float32).reshape(pshape)
        s = torch.tensor(q.scale, dtype=torch.float32).reshape(pshape)
    ty = node.outputs[0].type
    d = em.op("tosa.sub", (f, em.b.const(z.float())), ty)
    return em.mul(d, em.b.const(s.float()), ty)


# ------------------------------------------------------------------------------ conv / linear / matmul


@lowers("qconv2d")
def _qconv2d(em, node: Node):
    x, w = node.inputs[0], node.inputs[1]
    a = node.attrs
    wt = em.known(w)
    if wt is None:
        raise ExportError("qconv2d with a run-time weight has no TOSA lowering in npuc")
    sx, zx = _act(x)
    n, cin, h, wd = x.type.shape
    cout, cpg, kh, kw = wt.shape
    _, _, oh, ow = node.outputs[0].type.shape
    bias = em.known(node.inputs[2]) if len(node.inputs) > 2 else torch.zeros(cout, dtype=I32)
    xin, pads = _pool_input(em, em.value(x), x.type.shape, a, (oh, ow), torch.int8, 0.0, kernel=(kh, kw), dilation=a.dilation)
    props = {"pad": i64_array(pads), "stride": i64_array(a.stride), "dilation": i64_array(a.dilation),
             "acc_type": tensor_type((1,), I32).element_type}
    acc_ty = tensor_type((n, oh, ow, cout), I32)
    b32 = em.b.const(bias.to(I32))
    if a.groups == 1:
        y = em.b.op("tosa.conv2d", (xin, em.b.const(wt.permute(0, 2, 3, 1).contiguous()), b32, _zp(em, zx), _zp(em, 0)),
                    acc_ty, props)
    elif a.groups == cin and cpg == 1:
        mult = cout // cin
        wk = em.b.const(wt.reshape(cin, mult, kh, kw).permute(2, 3, 0, 1).contiguous())
        y = em.b.op("tosa.depthwise_conv2d", (xin, wk, b32, _zp(em, zx), _zp(em, 0)), acc_ty, props)
    else:
        raise ExportError(f"grouped qconv2d (groups={a.groups}, not depthwise) has no TOSA lowering in npuc")
    mults, shifts = arith.channel_multipliers(sx, _weight_scales(w, cout), a.out_scale)
    q = requant(em, y, (n, oh, ow, cout), mults, shifts, a.out_zero_point, a.qmin, a.qmax, (1, 1, 1, cout))
    return em.b.op("tosa.transpose", (q,), tensor_type(node.outputs[0].type.shape, torch.int8),
                   {"perms": i32_array((0, 3, 1, 2))})


def _weight_scales(w, o: int):
    from npuc.ir.ops.quantized import weight_scales

    return weight_scales(w.type, o)


def _matmul_i8(em, a3, b3, za: int, zb: int, m_shape):
    return em.b.op("tosa.matmul", (a3, b3, _zp(em, za), _zp(em, zb)), tensor_type(m_shape, I32))


@lowers("qlinear")
def _qlinear(em, node: Node):
    x, w = node.inputs[0], node.inputs[1]
    a = node.attrs
    sx, zx = _act(x)
    n, k = w.type.shape
    m = math.prod(x.type.shape[:-1])
    wt = em.known(w)
    if wt is None:
        raise ExportError("qlinear with a run-time weight has no TOSA lowering in npuc")
    x3 = em.reshape(em.value(x), (1, m, k), torch.int8)
    acc = _matmul_i8(em, x3, em.b.const(wt.t().contiguous().reshape(1, k, n)), zx, 0, (1, m, n))
    if len(node.inputs) > 2:
        acc = em.b.op("tosa.add", (acc, em.b.const(em.known(node.inputs[2]).to(I32).reshape(1, 1, n))), tensor_type((1, m, n), I32))
    mults, shifts = arith.channel_multipliers(sx, _weight_scales(w, n), a.out_scale)
    q = requant(em, acc, (1, m, n), mults, shifts, a.out_zero_point, a.qmin, a.qmax, (1, 1, n))
    return em.reshape(q, node.outputs[0].type.shape, torch.int8)


@lowers("qmatmul")
def _qmatmul(em, node: Node):
    a_v, b_v = node.inputs
    (sa, za), (sb, zb) = _act(a_v), _act(b_v)
    out = node.outputs[0].type.shape
    batch = out[:-2]
    nb = math.prod(batch)
    m, k = a_v.type.shape[-2:]
    n = b_v.type.shape[-1]

    def to3(v, rows, cols):
        full = tuple(batch) + (rows, cols)
        x = em.value_at_rank(v, len(full))
        src = (1,) * (len(full) - v.type.rank) + v.type.shape
        if tuple(src) != full:
            x = em.b.op("tosa.tile", (x, em.b.shape([f // s for f, s in zip(full, src)])), tensor_type(full, torch.int8))
        return em.reshape(x, (nb, rows, cols), torch.int8)

    acc = _matmul_i8(em, to3(a_v, m, k), to3(b_v, k, n), za, zb, (nb, m, n))
    mult, shift = arith.quantize_multiplier(sa * sb / node.attrs.out_scale)
    q = requant(em, acc, (nb, m, n), [mult], [shift], node.attrs.out_zero_point, arith.QMIN, arith.QMAX, (1, 1, 1))
    return em.reshape(q, out, torch.int8)


# ------------------------------------------------------------------------------ elementwise


def _centered32(em, v, shape, zero_point: int):
    x = _i32(em, em.value_at_rank(v, len(shape)), (1,) * (len(shape) - v.type.rank) + v.type.shape)
    vshape = (1,) * (len(shape) - v.type.rank) + v.type.shape
    return em.b.op("tosa.sub", (x, _c32(em, [zero_point], (1,) * len(shape))), tensor_type(vshape, I32)), vshape


@lowers("qadd")
def _qadd(em, node: Node):
    a = node.attrs
    shape = node.outputs[0].type.shape
    plan = arith.plan_qadd(_act(node.inputs[0]), _act(node.inputs[1]), (a.out_scale, a.out_zero_point), a.qmin, a.qmax)
    shift0 = em.b.const(torch.tensor([0], dtype=torch.int8))
    xa, sa = _centered32(em, node.inputs[0], shape, plan.a_zero_point)
    xb, sb = _centered32(em, node.inputs[1], shape, plan.b_zero_point)
    xa = em.b.op("tosa.mul", (xa, _c32(em, [plan.a_factor], (1,) * len(shape)), shift0), tensor_type(sa, I32))
    xb = em.b.op("tosa.mul", (xb, _c32(em, [plan.b_factor], (1,) * len(shape)), shift0), tensor_type(sb, I32))
    acc = em.b.op("tosa.add", (xa, xb), tensor_type(shape, I32))
    return requant(em, acc, shape, [plan.multiplier], [plan.shift], plan.out_zero_point, plan.qmin, plan.qmax,
                   (1,) * len(shape))


@lowers("qmul")
def _qmul(em, node: Node):
    a = node.attrs
    shape = node.outputs[0].type.shape
    plan = arith.plan_qmul(_act(node.inputs[0]), _act(node.inputs[1]), (a.out_scale, a.out_zero_point), a.qmin, a.qmax)
    xa, _ = _centered32(em, node.inputs[0], shape, plan.a_zero_point)
    xb, _ = _centered32(em, node.inputs[1], shape, plan.b_zero_point)
    shift0 = em.b.const(torch.tensor([0], dtype=torch.int8))
    acc = em.b.op("tosa.mul", (xa, xb, shift0), tensor_type(shape, I32))
    return requant(em, acc, shape, [plan.multiplier], [plan.shift], plan.out_zero_point, plan.qmin, plan.qmax,
                   (1,) * len(shape))


@lowers("qlut")
def _qlut(em, node: Node):
    table = em.b.const(torch.tensor(node.attrs.table, dtype=torch.int8))
    return em.op("tosa.table", (em.value(node.inputs[0]), table), node.outputs[0].type)


@lowers("qclamp")
def _qclamp(em, node: Node):
    return em.clamp_int(em.value(node.inputs[0]), node.attrs.qmin, node.attrs.qmax, node.outputs[0].type)


# ------------------------------------------------------------------------------ averages


@lowers("qmean")
def _qmean(em, node: Node):
    x = node.inputs[0]
    sx, zx = _act(x)
    a = node.attrs
    xs, _ = _centered32(em, x, x.type.shape, zx)
    shape = list(x.type.shape)
    for d in a.dims:
        shape[d] = 1
        xs = em.b.op("tosa.reduce_sum", (xs,), tensor_type(shape, I32), {"axis": int_attr(d, 32)})
    count = math.prod(x.type.shape[d] for d in a.dims)
    m, s = arith.average_multiplier(sx, count, a.out_scale)
    q = requant(em, xs, shape, [m], [s], a.out_zero_point, arith.QMIN, arith.QMAX, (1,) * len(shape))
    return em.reshape(q, node.outputs[0].type.shape, torch.int8)


@lowers("qavg_pool2d")
def _qavg_pool(em, node: Node):
    from npuc.ir.ops.quantized import window_counts

    x = node.inputs[0]
    a = node.attrs
    sx, zx = _act(x)
    n, c, h, w = x.type.shape
    oh, ow = node.outputs[0].type.shape[2:]
    if a.ceil_mode:
        raise ExportError("qavg_pool2d with ceil_mode has no TOSA lowering in npuc")
    # Window sums of x - zx: an int32 depthwise convolution with ones (padding holds zx).
    xs, _ = _centered32(em, x, x.type.shape, zx)
    kh, kw = a.kernel
    xin, pads = _pool_input(em, xs, x.type.shape, a, (oh, ow), I32, 0.0)
    ones = em.b.const(torch.ones((kh, kw, c, 1), dtype=torch.int32))
    del ones
    # TOSA has no int32 window sum; sum the kh*kw shifted slices instead.
    sums = None
    padded_shape = (n, h + pads[0] + pads[1], w + pads[2] + pads[3], c)
    if any(pads):
        flat = [0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0]
        xin = em.b.op("tosa.pad", (xin, em.b.shape(flat), em.b.const(torch.zeros(1, dtype=I32))),
                      tensor_type(padded_shape, I32))
    for i in range(kh):
        for j in range(kw):
            size = (n, (oh - 1) * a.stride[0] + 1, (ow - 1) * a.stride[1] + 1, c)
            part = em.b.op("tosa.slice", (xin, em.b.shape((0, i, j, 0)), em.b.shape(size)), tensor_type(size, I32))
            if a.stride != (1, 1):
                part = _subsample(em, part, size, a.stride, (n, oh, ow, c))
            sums = part if sums is None else em.b.op("tosa.add", (sums, part), tensor_type((n, oh, ow, c), I32))
    counts = np.asarray(window_counts(a, (h, w), (oh, ow)), dtype=np.int64)
    counts = np.broadcast_to(counts.reshape(counts.shape[-2:]) if counts.ndim >= 2 else counts, (oh, ow))
    mults = np.zeros((oh, ow), np.int64)
    shifts = np.zeros((oh, ow), np.int64)
    for cnt in np.unique(counts):
        m, s = arith.average_multiplier(sx, int(cnt), a.out_scale)
        mults[counts == cnt], shifts[counts == cnt] = m, s
    q = requant(em, sums, (n, oh, ow, c), mults.reshape(1, oh, ow, 1), shifts.reshape(1, oh, ow, 1),
                a.out_zero_point, arith.QMIN, arith.QMAX, (1, oh, ow, 1))
    return _to_nchw(em, q, (n, oh, ow, c), node)


def _subsample(em, x, shape, stride, out_shape):
    n, hh, ww, c = shape
    sh, sw = stride
    oh, ow = out_shape[1], out_shape[2]
    padded = (n, oh * sh, ow * sw, c)
    if padded != shape:
        flat = [0, 0, 0, oh * sh - hh, 0, ow * sw - ww, 0, 0]
        x = em.b.op("tosa.pad", (x, em.b.shape(flat), em.b.const(torch.zeros(1, dtype=I32))), tensor_type(padded, I32))
    x = em.reshape(x, (n, oh, sh, ow, sw, c), I32)
    x = em.b.op("tosa.slice", (x, em.b.shape((0, 0, 0, 0, 0, 0)), em.b.shape((n, oh, 1, ow, 1, c))),
                tensor_type((n, oh, 1, ow, 1, c), I32))
    return em.reshape(x, (n, oh, ow, c), I32)


_ = (_to_nhwc,)
