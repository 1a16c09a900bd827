"""The one table from npuc graph ops to TOSA (and linalg where TOSA has no op).

:data:`TOSA_TABLE` maps each graph op to a lowering ``lower(em, node) -> value`` that appends
TOSA operations through :class:`~npuc.mlir.export.Emitter`.  Conventions of TOSA that shape the
lowerings:

- elementwise operands must have equal ranks: lower-rank operands are reshaped first (size-1 dims
  broadcast as in npuc);
- convolution and pooling are NHWC (weights OHWI, depthwise HWCM): the graph's NCHW tensors are
  transposed around them; weights are transposed at export time;
- ``tosa.mul`` takes a shift operand, ``tosa.matmul``/``conv2d``/``avg_pool2d`` take zero-point
  operands (zero for float);
- reductions keep the reduced dim; ``keepdim=False`` is a reshape after them.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from npuc.ir.graph import Node
from npuc.mlir.builder import ExportError, i32_array, i64_array, int_attr, tensor_type

Lowering = Callable[[Any, Node], Any]
TOSA_TABLE: dict[str, Lowering] = {}


def lowers(*ops: str) -> Callable[[Lowering], Lowering]:
    def deco(fn: Lowering) -> Lowering:
        for op in ops:
            TOSA_TABLE[op] = fn
        return fn

    return deco


def _out(node: Node):
    v = node.outputs[0].type
    return v.shape, v.dtype.torch


# ------------------------------------------------------------------------------ elementwise

_BINARY = {"add": "tosa.add", "sub": "tosa.sub", "maximum": "tosa.maximum", "minimum": "tosa.minimum",
           "logical_and": "tosa.logical_and", "logical_or": "tosa.logical_or"}
_COMPARE = {"eq": ("tosa.equal", False), "gt": ("tosa.greater", False), "ge": ("tosa.greater_equal", False),
            "lt": ("tosa.greater", True), "le": ("tosa.greater_equal", True)}
_UNARY = {"exp": "tosa.exp", "log": "tosa.log", "tanh": "tosa.tanh", "sigmoid": "tosa.sigmoid", "erf": "tosa.erf",
          "abs": "tosa.abs", "reciprocal": "tosa.reciprocal", "rsqrt": "tosa.rsqrt", "sin": "tosa.sin",
          "cos": "tosa.cos", "logical_not": "tosa.logical_not"}


@lowers(*_BINARY)
def _binary(em, node: Node):
    a, b = em.broadcast_pair(node.inputs[0], node.inputs[1])
    return em.op(_BINARY[node.op], (a, b), node.outputs[0].type)


@lowers("mul")
def _mul(em, node: Node):
    a, b = em.broadcast_pair(node.inputs[0], node.inputs[1])
    return em.mul(a, b, node.outputs[0].type)


@lowers("div")
def _div(em, node: Node):
    a, b = em.broadcast_pair(node.inputs[0], node.inputs[1])
    rb = em.b.op("tosa.reciprocal", (b,), em.ty_of(b))
    return em.mul(a, rb, node.outputs[0].type)


@lowers(*_COMPARE)
def _compare(em, node: Node):
    a, b = em.broadcast_pair(node.inputs[0], node.inputs[1])
    name, swap = _COMPARE[node.op]
    return em.op(name, (b, a) if swap else (a, b), node.outputs[0].type)


@lowers("ne")
def _ne(em, node: Node):
    a, b = em.broadcast_pair(node.inputs[0], node.inputs[1])
    eq = em.op("tosa.equal", (a, b), node.outputs[0].type)
    return em.op("tosa.logical_not", (eq,), node.outputs[0].type)


@lowers(*_UNARY)
def _unary(em, node: Node):
    return em.op(_UNARY[node.op], (em.value(node.inputs[0]),), node.outputs[0].type)


@lowers("neg")
def _neg(em, node: Node):
    x = em.value(node.inputs[0])
    shape, dt = _out(node)
    return em.op("tosa.sub", (em.scalar(0, dt, len(shape)), x), node.outputs[0].type)


@lowers("sqrt")
def _sqrt(em, node: Node):
    x = em.value(node.inputs[0])
    r = em.b.op("tosa.rsqrt", (x,), em.ty_of(x))
    return em.op("tosa.reciprocal", (r,), node.outputs[0].type)


@lowers("relu")
def _relu(em, node: Node):
    return em.clamp(em.value(node.inputs[0]), 0.0, None, node.outputs[0].type)


@lowers("clamp")
def _clamp(em, node: Node):
    a = node.attrs
    return em.clamp(em.value(node.inputs[0]), a.min, a.max, node.outputs[0].type)


@lowers("pow")
def _pow(em, node: Node):
    x = em.value(node.inputs[0])
    e = node.attrs.exponent
    shape, dt = _out(node)
    ty = node.outputs[0].type
    if e == int(e) and 1 <= e <= 4:
        acc = x
        for _ in range(int(e) - 1):
            acc = em.mul(acc, x, ty)
        return acc
    if e == 0.5:
        return _sqrt(em, node)
    return em.op("tosa.pow", (x, em.scalar(e, dt, len(shape))), ty)


@lowers("silu")
def _silu(em, node: Node):
    x = em.value(node.inputs[0])
    ty = node.outputs[0].type
    return em.mul(x, em.op("tosa.sigmoid", (x,), ty), ty)


def _relu6_plus3(em, x, ty):
    shape, dt = ty.shape, ty.dtype.torch
    y = em.op("tosa.add", (x, em.scalar(3.0, dt, len(shape))), ty)
    return em.clamp(y, 0.0, 6.0, ty)


@lowers("hardsigmoid")
def _hardsigmoid(em, node: Node):
    ty = node.outputs[0].type
    r6 = _relu6_plus3(em, em.value(node.inputs[0]), ty)
    return em.mul(r6, em.scalar(1.0 / 6.0, ty.dtype.torch, ty.rank), ty)


@lowers("hardswish")
def _hardswish(em, node: Node):
    ty = node.outputs[0].type
    x = em.value(node.inputs[0])
    r6 = _relu6_plus3(em, x, ty)
    return em.mul(em.mul(x, r6, ty), em.scalar(1.0 / 6.0, ty.dtype.torch, ty.rank), ty)


@lowers("gelu")
def _gelu(em, node: Node):
    ty = node.outputs[0].type
    dt, r = ty.dtype.torch, ty.rank
    x = em.value(node.inputs[0])
    if node.attrs.approximate == "tanh":
        x3 = em.mul(em.mul(x, x, ty), x, ty)
        inner = em.op("tosa.add", (x, em.mul(x3, em.scalar(0.044715, dt, r), ty)), ty)
        t = em.op("tosa.tanh", (em.mul(inner, em.scalar(math.sqrt(2 / math.pi), dt, r), ty),), ty)
    else:
        t = em.op("tosa.erf", (em.mul(x, em.scalar(1 / math.sqrt(2), dt, r), ty),), ty)
    one_plus = em.op("tosa.add", (t, em.scalar(1.0, dt, r)), ty)
    return em.mul(em.mul(x, one_plus, ty), em.scalar(0.5, dt, r), ty)


@lowers("where")
def _where(em, node: Node):
    shape = node.outputs[0].type.shape
    c, a, b = (em.value_at_rank(v, len(shape)) for v in node.inputs)
    return em.op("tosa.select", (c, a, b), node.outputs[0].type)


@lowers("cast")
def _cast(em, node: Node):
    src = node.inputs[0].type.dtype
    dst = node.outputs[0].type.dtype
    x = em.value(node.inputs[0])
    if dst.torch == torch.bool:
        zero = em.scalar(0, src.torch, node.inputs[0].type.rank)
        a, b = x, zero
        return em.op("tosa.logical_not", (em.op("tosa.equal", (a, b), node.outputs[0].type),), node.outputs[0].type)
    return em.op("tosa.cast", (x,), node.outputs[0].type)


# ------------------------------------------------------------------------------ shape


@lowers("reshape")
def _reshape(em, node: Node):
    return em.reshape(em.value(node.inputs[0]), node.outputs[0].type.shape, node.outputs[0].type.dtype.torch)


@lowers("permute")
def _permute(em, node: Node):
    return em.op("tosa.transpose", (em.value(node.inputs[0]),), node.outputs[0].type,
                 {"perms": i32_array(node.attrs.perm)})


@lowers("expand")
def _expand(em, node: Node):
    shape = node.outputs[0].type.shape
    x = em.value_at_rank(node.inputs[0], len(shape))
    src = (1,) * (len(shape) - node.inputs[0].type.rank) + node.inputs[0].type.shape
    multiples = [o // s for o, s in zip(shape, src)]
    return em.op("tosa.tile", (x, em.b.shape(multiples)), node.outputs[0].type)


@lowers("slice")
def _slice(em, node: Node):
    a = node.attrs
    x_ty = node.inputs[0].type
    x = em.value(node.inputs[0])
    out_shape = node.outputs[0].type.shape
    n = out_shape[a.dim]
    if a.step == 1:
        start = [0] * x_ty.rank
        start[a.dim] = a.start
        return em.op("tosa.slice", (x, em.b.shape(start), em.b.shape(out_shape)), node.outputs[0].type)
    # A strided slice: take n * step elements (padding the tail when needed), view them as
    # [n, step] and keep column 0.
    dt = x_ty.dtype.torch
    span = n * a.step
    avail = x_ty.shape[a.dim] - a.start
    start = [0] * x_ty.rank
    start[a.dim] = a.start
    size = list(x_ty.shape)
    size[a.dim] = min(span, avail)
    y = em.op("tosa.slice", (x, em.b.shape(start), em.b.shape(size)), tensor_type(size, dt))
    if span > avail:
        pads = [0] * (2 * x_ty.rank)
        pads[2 * a.dim + 1] = span - avail
        size[a.dim] = span
        y = em.op("tosa.pad", (y, em.b.shape(pads), em.scalar(0, dt, 1)), tensor_type(size, dt))
    split = list(x_ty.shape[: a.dim]) + [n, a.step] + list(x_ty.shape[a.dim + 1:])
    y = em.reshape(y, split, dt)
    start = [0] * len(split)
    size = list(split)
    size[a.dim + 1] = 1
    y = em.op("tosa.slice", (y, em.b.shape(start), em.b.shape(size)), tensor_type(size, dt))
    return em.reshape(y, out_shape, dt)


@lowers("select")
def _select(em, node: Node):
    a = node.attrs
    x_ty = node.inputs[0].type
    start = [0] * x_ty.rank
    start[a.dim] = a.index
    size = list(x_ty.shape)
    size[a.dim] = 1
    dt = x_ty.dtype.torch
    y = em.op("tosa.slice", (em.value(node.inputs[0]), em.b.shape(start), em.b.shape(size)), tensor_type(size, dt))
    return em.reshape(y, node.outputs[0].type.shape, dt)


@lowers("concat")
def _concat(em, node: Node):
    return em.op("tosa.concat", [em.value(v) for v in node.inputs], node.outputs[0].type,
                 {"axis": int_attr(node.attrs.dim, 32)})


@lowers("pad")
def _pad(em, node: Node):
    x_ty = node.inputs[0].type
    r = x_ty.rank
    pads = list(node.attrs.pads)
    before, after = [0] * r, [0] * r
    for k in range(len(pads) // 2):
        before[r - 1 - k], after[r - 1 - k] = pads[2 * k], pads[2 * k + 1]
    x = em.value(node.inputs[0])
    dt = x_ty.dtype.torch
    if any(p < 0 for p in before + after):  # negative pads crop first
        start = [max(-p, 0) for p in before]
        size = [d - max(-b, 0) - max(-e, 0) for d, b, e in zip(x_ty.shape, before, after)]
        x = em.op("tosa.slice", (x, em.b.shape(start), em.b.shape(size)), tensor_type(size, dt))
        before, after = [max(p, 0) for p in before], [max(p, 0) for p in after]
    flat = [v for b, e in zip(before, after) for v in (b, e)]
    return em.op("tosa.pad", (x, em.b.shape(flat), em.scalar(node.attrs.value, dt, 1)), node.outputs[0].type)


def _gather_rows(em, table, table_shape, indices_value, n_idx: int, dt):
    """Rows ``indices`` of a [num, D] table: tosa.gather on [1, num, D] with i32 indices [1, n]."""
    num, d = table_shape
    t3 = em.reshape(table, (1, num, d), dt)
    idx = em.reshape(indices_value, (1, n_idx), em.dtype_of(indices_value))
    if em.dtype_of(indices_value) != torch.int32:
        idx = em.b.op("tosa.cast", (idx,), tensor_type((1, n_idx), torch.int32))
    return em.b.op("tosa.gather", (t3, idx), tensor_type((1, n_idx, d), dt))


@lowers("embedding")
def _embedding(em, node: Node):
    w, idx = node.inputs
    dt = w.type.dtype.torch
    n = max(1, idx.type.numel)
    rows = _gather_rows(em, em.value(w), w.type.shape, em.value(idx), n, dt)
    return em.reshape(rows, node.outputs[0].type.shape, dt)


@lowers("index_select")
def _index_select(em, node: Node):
    x, idx = node.inputs
    dim = node.attrs.dim
    dt = x.type.dtype.torch
    shape = x.type.shape
    perm = [dim] + [i for i in range(len(shape)) if i != dim]
    moved = em.b.op("tosa.transpose", (em.value(x),), tensor_type([shape[p] for p in perm], dt),
                    {"perms": i32_array(perm)}) if dim != 0 else em.value(x)
    rest = math.prod(shape[:dim] + shape[dim + 1:])
    n = max(1, idx.type.numel)
    rows = _gather_rows(em, moved, (shape[dim], rest), em.value(idx), n, dt)
    picked = em.reshape(rows, [n] + [shape[p] for p in perm[1:]], dt)
    if dim == 0:
        return em.reshape(picked, node.outputs[0].type.shape, dt)
    inv = [perm.index(i) for i in range(len(shape))]
    out_shape = node.outputs[0].type.shape
    return em.op("tosa.transpose", (picked,), node.outputs[0].type, {"perms": i32_array(inv)}) \
        if tuple(out_shape) == tuple(([n] + [shape[p] for p in perm[1:]])[i] for i in inv) else \
        em.reshape(picked, out_shape, dt)


# ------------------------------------------------------------------------------ reductions


def _reduce(em, x, x_shape, dims, name: str, dt):
    shape = list(x_shape)
    for d in dims:
        shape[d] = 1
        x = em.b.op(name, (x,), tensor_type(shape, dt), {"axis": int_attr(d, 32)})
    return x, shape


def _reduce_lowering(name: str, mean: bool = False) -> Lowering:
    def lower(em, node: Node):
        x_ty = node.inputs[0].type
        dt = x_ty.dtype.torch
        dims = node.attrs.dims
        y, shape = _reduce(em, em.value(node.inputs[0]), x_ty.shape, dims, name, dt)
        if mean:
            count = math.prod(x_ty.shape[d] for d in dims)
            y = em.mul(y, em.scalar(1.0 / count, dt, len(shape)), tensor_type(shape, dt))
        return em.reshape(y, node.outputs[0].type.shape, dt)

    return lower


lowers("reduce_sum")(_reduce_lowering("tosa.reduce_sum"))
lowers("reduce_max")(_reduce_lowering("tosa.reduce_max"))
lowers("reduce_min")(_reduce_lowering("tosa.reduce_min"))
lowers("reduce_mean")(_reduce_lowering("tosa.reduce_sum", mean=True))


@lowers("argmax")
def _argmax(em, node: Node):
    x_ty = node.inputs[0].type
    dim = node.attrs.dim
    shape = [d for i, d in enumerate(x_ty.shape) if i != dim]
    y = em.b.op("tosa.argmax", (em.value(node.inputs[0]),), tensor_type(shape, torch.int32), {"axis": int_attr(dim, 32)})
    y = em.b.op("tosa.cast", (y,), tensor_type(shape, torch.int64))
    return em.reshape(y, node.outputs[0].type.shape, torch.int64)


def _softmax_core(em, node: Node, log: bool):
    x_ty = node.inputs[0].type
    dt = x_ty.dtype.torch
    dim = node.attrs.dim
    x = em.value(node.inputs[0])
    m, mshape = _reduce(em, x, x_ty.shape, (dim,), "tosa.reduce_max", dt)
    ty = node.outputs[0].type
    z = em.op("tosa.sub", (x, m), ty)
    e = em.op("tosa.exp", (z,), ty)
    s, _ = _reduce(em, e, x_ty.shape, (dim,), "tosa.reduce_sum", dt)
    if log:
        return em.op("tosa.sub", (z, em.b.op("tosa.log", (s,), tensor_type(mshape, dt))), ty)
    return em.mul(e, em.b.op("tosa.reciprocal", (s,), tensor_type(mshape, dt)), ty)


lowers("softmax")(lambda em, node: _softmax_core(em, node, log=False))
lowers("log_softmax")(lambda em, node: _softmax_core(em, node, log=True))


@lowers("layer_norm")
def _layer_norm(em, node: Node):
    x_ty = node.inputs[0].type
    dt = x_ty.dtype.torch
    r = x_ty.rank
    dims = tuple(range(r - node.attrs.normalized_rank, r))
    count = math.prod(x_ty.shape[d] for d in dims)
    x = em.value(node.inputs[0])
    ty = node.outputs[0].type
    s, rshape = _reduce(em, x, x_ty.shape, dims, "tosa.reduce_sum", dt)
    rty = tensor_type(rshape, dt)
    mean = em.mul(s, em.scalar(1.0 / count, dt, r), rty)
    c = em.op("tosa.sub", (x, mean), ty)
    v, _ = _reduce(em, em.mul(c, c, ty), x_ty.shape, dims, "tosa.reduce_sum", dt)
    var = em.mul(v, em.scalar(1.0 / count, dt, r), rty)
    inv = em.b.op("tosa.rsqrt", (em.b.op("tosa.add", (var, em.scalar(node.attrs.eps, dt, r)), rty),), rty)
    y = em.mul(c, inv, ty)
    w = em.value_at_rank(node.inputs[1], r)
    b = em.value_at_rank(node.inputs[2], r)
    return em.op("tosa.add", (em.mul(y, w, ty), b), ty)


@lowers("batch_norm")
def _batch_norm(em, node: Node):
    x_ty = node.inputs[0].type
    consts = [em.known(v) for v in node.inputs[1:]]
    if any(c is None for c in consts):
        raise ExportError("batch_norm with run-time statistics has no MLIR lowering")
    w, b, mean, var = (c.double() for c in consts)
    scale = w / torch.sqrt(var + node.attrs.eps)
    shift = b - mean * scale
    shape = (1, x_ty.shape[1]) + (1,) * (x_ty.rank - 2)
    dt = x_ty.dtype.torch
    ty = node.outputs[0].type
    y = em.mul(em.value(node.inputs[0]), em.b.const(scale.to(dt).reshape(shape)), ty)
    return em.op("tosa.add", (y, em.b.const(shift.to(dt).reshape(shape))), ty)


# ------------------------------------------------------------------------------ linear algebra


def _matmul3(em, a, b, a_shape, b_shape, dt):
    """tosa.matmul of [B, M, K] x [B, K, N] (zero points are 0 for float)."""
    zero = em.scalar(0, dt, 1)
    return em.b.op("tosa.matmul", (a, b, zero, zero), tensor_type((a_shape[0], a_shape[1], b_shape[2]), dt))


@lowers("linear")
def _linear(em, node: Node):
    x, w = node.inputs[0], node.inputs[1]
    dt = x.type.dtype.torch
    k = x.type.shape[-1]
    n = w.type.shape[0]
    m = math.prod(x.type.shape[:-1])
    wt = em.known(w)
    if wt is not None:
        wk = em.b.const(wt.t().contiguous().reshape(1, k, n))
    else:
        wk = em.b.op("tosa.transpose", (em.value(w),), tensor_type((k, n), dt), {"perms": i32_array((1, 0))})
        wk = em.reshape(wk, (1, k, n), dt)
    x3 = em.reshape(em.value(x), (1, m, k), dt)
    y = _matmul3(em, x3, wk, (1, m, k), (1, k, n), dt)
    if len(node.inputs) > 2:
        y = em.b.op("tosa.add", (y, em.value_at_rank(node.inputs[2], 3)), tensor_type((1, m, n), dt))
    return em.reshape(y, node.outputs[0].type.shape, dt)


@lowers("matmul")
def _matmul(em, node: Node):
    a, b = node.inputs
    dt = a.type.dtype.torch
    out = node.outputs[0].type.shape
    batch = out[:-2]
    nb = math.prod(batch)
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]

    def to3(v, rows, cols):
        full = tuple(batch) + (rows, cols)
        x = em.value_at_rank(v, len(full))
        src = (1,) * (len(full) - v.type.rank) + v.type.shape
        if tuple(src) != full:
            x = em.b.op("tosa.tile", (x, em.b.shape([f // s for f, s in zip(full, src)])), tensor_type(full, dt))
        return em.reshape(x, (nb, rows, cols), dt)

    y = _matmul3(em, to3(a, m, k), to3(b, k, n), (nb, m, k), (nb, k, n), dt)
    return em.reshape(y, out, dt)


def _to_nhwc(em, x, shape, dt):
    n, c, h, w = shape
    return em.b.op("tosa.transpose", (x,), tensor_type((n, h, w, c), dt), {"perms": i32_array((0, 2, 3, 1))})


def _to_nchw(em, y, nhwc_shape, node: Node):
    return em.op("tosa.transpose", (y,), node.outputs[0].type, {"perms": i32_array((0, 3, 1, 2))})


@lowers("conv2d")
def _conv2d(em, node: Node):
    x, w = node.inputs[0], node.inputs[1]
    a = node.attrs
    dt = x.type.dtype.torch
    wt = em.known(w)
    if wt is None:
        raise ExportError("conv2d with a run-time weight has no TOSA lowering in npuc")
    n, cin, h, wd = x.type.shape
    cout, cpg, kh, kw = wt.shape
    _, _, oh, ow = node.outputs[0].type.shape
    bias = em.known(node.inputs[2]) if len(node.inputs) > 2 else torch.zeros(cout, dtype=dt)
    if bias is None:
        raise ExportError("conv2d with a run-time bias has no TOSA lowering in npuc")
    xin, pads = _pool_input(em, em.value(x), x.type.shape, a, (oh, ow), dt, 0.0, kernel=(kh, kw), dilation=a.dilation)
    props = {"pad": i64_array(pads), "stride": i64_array(a.stride), "dilation": i64_array(a.dilation), "acc_type": _acc(dt)}
    zero = em.scalar(0, dt, 1)
    out_nhwc = tensor_type((n, oh, ow, cout), dt)
    if a.groups == 1:
        wk = em.b.const(wt.permute(0, 2, 3, 1).contiguous())  # OHWI
        y = em.b.op("tosa.conv2d", (xin, wk, em.b.const(bias.to(dt)), zero, zero), out_nhwc, props)
    elif a.groups == cin and cpg == 1:
        mult = cout // cin
        wk = em.b.const(wt.reshape(cin, mult, kh, kw).permute(2, 3, 0, 1).contiguous())  # HWCM
        y = em.b.op("tosa.depthwise_conv2d", (xin, wk, em.b.const(bias.to(dt)), zero, zero), out_nhwc, props)
    else:
        raise ExportError(f"grouped conv2d (groups={a.groups}, not depthwise) has no TOSA lowering in npuc")
    return _to_nchw(em, y, (n, oh, ow, cout), node)


def _acc(dt):
    from npuc.mlir.builder import element_type

    return element_type(torch.float32 if dt in (torch.float32, torch.float16, torch.bfloat16) else torch.int32)


# ------------------------------------------------------------------------------ pooling


def _pool_pads(h: int, k: int, s: int, p: int, oh: int) -> tuple[int, int, int]:
    """(pad_before, pad_after, rows to crop at the end) so that TOSA's exact-division output size
    (H + before + after - k) / s + 1 equals ``oh``."""
    need = (oh - 1) * s + k  # rows the windows cover, padding included
    after = need - h - p
    crop = 0
    if after < 0:
        crop, after = -after, 0
    return p, after, crop


def _pool_input(em, x_val, shape, a, out_hw, dt, fill: float, kernel=None, dilation=(1, 1)):
    """The NHWC input of a window op and its TOSA pads [top, bottom, left, right]."""
    n, c, h, w = shape
    (oh, ow) = out_hw
    kh, kw = kernel if kernel is not None else a.kernel
    ph = _pool_pads(h, (kh - 1) * dilation[0] + 1, a.stride[0], a.padding[0], oh)
    pw = _pool_pads(w, (kw - 1) * dilation[1] + 1, a.stride[1], a.padding[1], ow)
    x = _to_nhwc(em, x_val, shape, dt)
    if ph[2] or pw[2]:
        size = (n, h - ph[2], w - pw[2], c)
        x = em.b.op("tosa.slice", (x, em.b.shape((0, 0, 0, 0)), em.b.shape(size)), tensor_type(size, dt))
    return x, (ph[0], ph[1], pw[0], pw[1])


@lowers("max_pool2d")
def _max_pool(em, node: Node):
    a = node.attrs
    if tuple(a.dilation) != (1, 1):
        raise ExportError("dilated max_pool2d has no TOSA lowering")
    x = node.inputs[0]
    dt = x.type.dtype.torch
    n, c, _, _ = x.type.shape
    oh, ow = node.outputs[0].type.shape[2:]
    xin, pad = _pool_input(em, em.value(x), x.type.shape, a, (oh, ow), dt, float("-inf"))
    y = em.b.op("tosa.max_pool2d", (xin,), tensor_type((n, oh, ow, c), dt),
                {"kernel": i64_array(a.kernel), "stride": i64_array(a.stride), "pad": i64_array(pad)})
    return _to_nchw(em, y, (n, oh, ow, c), node)


def _avg_pool_nhwc(em, xin, out_shape, kernel, stride, pad, dt):
    zero = em.scalar(0, dt, 1)
    return em.b.op("tosa.avg_pool2d", (xin, zero, zero), tensor_type(out_shape, dt),
                   {"kernel": i64_array(kernel), "stride": i64_array(stride), "pad": i64_array(pad),
                    "acc_type": _acc(dt)})


@lowers("avg_pool2d")
def _avg_pool(em, node: Node):
    a = node.attrs
    x = node.inputs[0]
    dt = x.type.dtype.torch
    n, c, h, w = x.type.shape
    oh, ow = node.outputs[0].type.shape[2:]
    if a.divisor_override is not None or a.ceil_mode:
        raise ExportError("avg_pool2d with divisor_override or ceil_mode has no TOSA lowering in npuc")
    if a.count_include_pad and (a.padding[0] or a.padding[1]):
        ph, pw = a.padding
        padded = em.b.op("tosa.pad", (em.value(x), em.b.shape((0, 0, 0, 0, ph, ph, pw, pw)), em.scalar(0, dt, 1)),
                         tensor_type((n, c, h + 2 * ph, w + 2 * pw), dt))
        unpadded = type(a)(kernel=a.kernel, stride=a.stride, padding=(0, 0))
        xin, pad = _pool_input(em, padded, (n, c, h + 2 * ph, w + 2 * pw), unpadded, (oh, ow), dt, 0.0)
    else:
        xin, pad = _pool_input(em, em.value(x), x.type.shape, a, (oh, ow), dt, 0.0)
    y = _avg_pool_nhwc(em, xin, (n, oh, ow, c), a.kernel, a.stride, pad, dt)
    return _to_nchw(em, y, (n, oh, ow, c), node)


@lowers("adaptive_avg_pool2d")
def _adaptive_avg(em, node: Node):
    x = node.inputs[0]
    dt = x.type.dtype.torch
    n, c, h, w = x.type.shape
    oh, ow = node.attrs.output_size
    if (oh, ow) == (1, 1):
        y, shape = _reduce(em, em.value(x), x.type.shape, (2, 3), "tosa.reduce_sum", dt)
        return em.mul(y, em.scalar(1.0 / (h * w), dt, 4), node.outputs[0].type)
    if h % oh or w % ow:
        raise ExportError(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow} (uneven windows) has no TOSA lowering in npuc")
    k = (h // oh, w // ow)
    y = _avg_pool_nhwc(em, _to_nhwc(em, em.value(x), x.type.shape, dt), (n, oh, ow, c), k, k, (0, 0, 0, 0), dt)
    return _to_nchw(em, y, (n, oh, ow, c), node)


@lowers("upsample_nearest2d")
def _upsample(em, node: Node):
    x = node.inputs[0]
    dt = x.type.dtype.torch
    n, c, h, w = x.type.shape
    oh, ow = node.attrs.output_size
    if oh % h or ow % w:
        raise ExportError(f"nearest upsampling from {h}x{w} to {oh}x{ow} (not an integer factor) has no TOSA lowering in npuc")
    sh, sw = oh // h, ow // w
    # Integer nearest upsampling is a broadcast: [n, c, h, 1, w, 1] tiled to [n, c, h, sh, w, sw].
    y = em.reshape(em.value(x), (n, c, h, 1, w, 1), dt)
    y = em.b.op("tosa.tile", (y, em.b.shape((1, 1, 1, sh, 1, sw))), tensor_type((n, c, h, sh, w, sw), dt))
    return em.reshape(y, (n, c, oh, ow), dt)
