"""The one table from ONNX operators to npuc graph ops.

:data:`ONNX_TABLE` maps each supported ONNX operator (default domain, opsets 13 to the current
one) to an :class:`OnnxRule`: the graph op(s) it becomes, as text for the docs
(docs/onnx-ops.md), and a converter ``convert(ctx) -> result`` reading the node through
:class:`~npuc.frontend.onnx_context.OnnxContext`.  A converter returns a graph value, a tuple of
them (multi-output operators), or a ``torch.Tensor`` for a result known at import time (``Shape``
of a static tensor).  It raises :class:`~npuc.frontend.context.Unsupported` with a reason when a
particular use of the operator has no graph-op form (a 3-D convolution, a run-time reshape
target, ``Resize`` in linear mode ...).

Operators with no rule are still imported when every operand is known at import time: the node
is evaluated by ONNX's own reference implementation (import-time folding, see
:mod:`npuc.frontend.onnx_import`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from npuc.frontend.onnx_context import OnnxContext, Unsupported, onnx_dtype_to_torch
from npuc.ir.graph import Value

Converter = Callable[[OnnxContext], Any]


@dataclass(frozen=True)
class OnnxRule:
    """How one ONNX operator is imported: the graph op(s) it becomes and the converter doing it."""

    graph_ops: str
    convert: Converter
    notes: str = ""


ONNX_TABLE: dict[str, OnnxRule] = {}
IDENTITY = "(identity)"
FOLDED = "(import-time constant)"


def rule(graph_ops: str, *op_types: str, notes: str = "") -> Callable[[Converter], Converter]:
    """Register ``fn`` as the converter of each ONNX operator in ``op_types``."""

    def deco(fn: Converter) -> Converter:
        for name in op_types:
            if name in ONNX_TABLE:
                raise RuntimeError(f"ONNX operator {name} has two rules")
            ONNX_TABLE[name] = OnnxRule(graph_ops, fn, notes)
        return fn

    return deco


def supported_onnx_ops() -> dict[str, str]:
    """Each supported ONNX operator -> the graph op(s) it becomes."""
    return {k: ONNX_TABLE[k].graph_ops for k in sorted(ONNX_TABLE)}


# ------------------------------------------------------------------------------ helpers


def norm_axis(axis: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= axis < r:
        raise Unsupported(f"axis {axis} is out of range for rank {rank}")
    return axis % r


def require_float(ctx: OnnxContext, i: int = 0) -> torch.dtype:
    dt = ctx.dtype(i)
    if not dt.is_floating_point:
        raise Unsupported(f"npuc computes it on floating-point tensors only, this one is {dt}")
    return dt


def _spatial_2d(ctx: OnnxContext, what: str) -> None:
    if ctx.rank(0) != 4:
        raise Unsupported(f"npuc {what} is 2-D (NCHW input); this input has rank {ctx.rank(0)}")


def _pads_2d(ctx: OnnxContext, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int]) -> list[int]:
    """ONNX ``pads`` [h0, w0, h1, w1] of a 2-D window op, with ``auto_pad`` resolved."""
    auto = ctx.attr("auto_pad", "NOTSET")
    h, w = ctx.shape(0)[2:]
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise Unsupported(f"pads {pads} are not those of a 2-D window")
        return pads
    if auto == "VALID":
        return [0, 0, 0, 0]
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad {auto!r} is not an ONNX padding mode")
    begin, end = [], []
    for size, k, s, d in zip((h, w), kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def _window(ctx: OnnxContext, kernel: tuple[int, int]):
    strides = tuple(ctx.attr("strides", [1, 1]))
    dilations = tuple(ctx.attr("dilations", [1, 1]))
    if len(strides) != 2 or len(dilations) != 2:
        raise Unsupported(f"strides {list(strides)} / dilations {list(dilations)} are not those of a 2-D window")
    pads = _pads_2d(ctx, kernel, strides, dilations)
    return strides, dilations, pads


def _pad_explicit(ctx: OnnxContext, x: Value, pads: list[int], value: float) -> Value:
    """``x`` padded on H and W by ONNX pads [h0, w0, h1, w1] (F.pad order: W first)."""
    return ctx.add("pad", (x,), pads=(pads[1], pads[3], pads[0], pads[2]), value=value)


def in_f32(fn: Converter) -> Converter:
    """Run a multi-op decomposition of a 16-bit float operator in f32 and round once at the end,
    as ONNX's reference does (rounding after every op would drift by an ulp)."""

    def convert(ctx: OnnxContext) -> Any:
        dt = ctx.dtype(0)
        if dt not in (torch.float16, torch.bfloat16):
            return fn(ctx)
        name = ctx.node.input[0]
        wide = ctx.value(0, torch.float32)
        saved = ctx.env[name]
        ctx.env[name] = wide
        try:
            out = fn(ctx)
        finally:
            ctx.env[name] = saved
        return ctx.cast(out, dt)

    return convert


# ------------------------------------------------------------------------------ structural


@rule(IDENTITY, "Identity", "Dropout")
def _identity(ctx: OnnxContext) -> Any:
    if ctx.node.op_type == "Dropout":
        if ctx.has(2) and bool(ctx.need_known(2, "training_mode")):
            raise Unsupported("training-mode dropout is random; npuc imports inference graphs")
        if len(ctx.node.output) > 1 and ctx.node.output[1]:
            raise Unsupported("the dropout mask output is not computed by npuc")
    e = ctx.entry(0)
    return e.tensor if not isinstance(e, Value) else e


@rule("cast", "Cast")
def _cast(ctx: OnnxContext) -> Value:
    return _cast_to(ctx, onnx_dtype_to_torch(ctx.attr("to")))


@rule("cast", "CastLike")
def _cast_like(ctx: OnnxContext) -> Value:
    return _cast_to(ctx, ctx.dtype(1))


def _cast_to(ctx: OnnxContext, to: torch.dtype) -> Value:
    # Float to integer truncates toward zero in ONNX as in PyTorch.
    return ctx.value(0, to)


@rule(FOLDED, "Shape")
def _shape(ctx: OnnxContext) -> torch.Tensor:
    shape = list(ctx.shape(0))
    r = len(shape)
    start = ctx.attr("start", 0)
    end = ctx.attr("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    return torch.tensor(shape[start:end], dtype=torch.int64)


@rule(FOLDED, "Size")
def _size(ctx: OnnxContext) -> torch.Tensor:
    return torch.tensor(math.prod(ctx.shape(0)), dtype=torch.int64)


# ------------------------------------------------------------------------------ elementwise unary


def _unary(graph_op: str) -> Converter:
    def convert(ctx: OnnxContext) -> Value:
        require_float(ctx)
        return ctx.add(graph_op, (ctx.value(0),))

    return convert


for _onnx, _op in (
    ("Relu", "relu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh"), ("Exp", "exp"), ("Log", "log"),
    ("Sqrt", "sqrt"), ("Reciprocal", "reciprocal"), ("Erf", "erf"), ("Sin", "sin"), ("Cos", "cos"),
    ("HardSwish", "hardswish"),
):
    rule(_op, _onnx)(_unary(_op))


@rule("neg", "Neg")
def _neg(ctx: OnnxContext) -> Value:
    return ctx.add("neg", (ctx.value(0),))


@rule("abs", "Abs")
def _abs(ctx: OnnxContext) -> Value:
    return ctx.add("abs", (ctx.value(0),))


@rule("logical_not", "Not")
def _not(ctx: OnnxContext) -> Value:
    return ctx.add("logical_not", (ctx.value(0),))


@rule("relu, mul, where (Relu when the slope is 0)", "LeakyRelu")
def _leaky_relu(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    x = ctx.value(0)
    alpha = float(ctx.attr("alpha", 0.01))
    positive = ctx.add("gt", (x, ctx.scalar(0.0, dt)))
    return ctx.add("where", (positive, x, ctx.add("mul", (x, ctx.scalar(alpha, dt)))))


@rule("gt, mul, where", "PRelu")
def _prelu(ctx: OnnxContext) -> Value:
    require_float(ctx)
    x, slope = ctx.value(0), ctx.value(1)
    positive = ctx.add("gt", (x, ctx.scalar(0.0, x.type.dtype.torch)))
    return ctx.add("where", (positive, x, ctx.add("mul", (x, slope))))


@rule("hardsigmoid (alpha 1/6, beta 1/2), else mul, add, clamp", "HardSigmoid")
@in_f32
def _hard_sigmoid(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    x = ctx.value(0)
    if math.isclose(alpha, 1 / 6, rel_tol=1e-6) and beta == 0.5:
        return ctx.add("hardsigmoid", (x,))
    y = ctx.add("add", (ctx.add("mul", (x, ctx.scalar(alpha, dt))), ctx.scalar(beta, dt)))
    return ctx.add("clamp", (y,), min=0.0, max=1.0)


@rule("gelu", "Gelu")
def _gelu(ctx: OnnxContext) -> Value:
    require_float(ctx)
    return ctx.add("gelu", (ctx.value(0),), approximate=ctx.attr("approximate", "none"))


@rule("clamp (known bounds), maximum, minimum", "Clip")
def _clip(ctx: OnnxContext) -> Value:
    x = ctx.value(0)
    dt = x.type.dtype.torch
    bounds = []
    for i in (1, 2):
        if not ctx.has(i):
            bounds.append(None)
            continue
        t = ctx.known(i)
        bounds.append(float(t) if t is not None and dt.is_floating_point else ctx.value(i, dt))
    lo, hi = bounds
    if all(b is None or isinstance(b, float) for b in bounds):
        if lo is None and hi is None:
            return x
        if lo is not None and hi is not None and lo > hi:
            return ctx.add("expand", (ctx.scalar(hi, dt),), shape=x.type.shape)  # ONNX: all become max
        return ctx.add("clamp", (x,), min=lo, max=hi)
    if lo is not None:
        x = ctx.add("maximum", (x, lo if isinstance(lo, Value) else ctx.scalar(lo, dt)))
    if hi is not None:
        x = ctx.add("minimum", (x, hi if isinstance(hi, Value) else ctx.scalar(hi, dt)))
    return x


@rule("exp, sub, mul, gt, where", "Elu", "Selu", "Celu")
@in_f32
def _elu_family(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    x = ctx.value(0)
    op = ctx.node.op_type
    alpha = float(ctx.attr("alpha", {"Elu": 1.0, "Celu": 1.0, "Selu": 1.6732632423543772}[op]))
    gamma = float(ctx.attr("gamma", 1.0507009873554805)) if op == "Selu" else 1.0
    inner = x if op != "Celu" else ctx.add("div", (x, ctx.scalar(alpha, dt)))
    neg = ctx.add("mul", (ctx.add("sub", (ctx.add("exp", (inner,)), ctx.scalar(1.0, dt))), ctx.scalar(alpha, dt)))
    y = ctx.add("where", (ctx.add("gt", (x, ctx.scalar(0.0, dt))), x, neg))
    return y if gamma == 1.0 else ctx.add("mul", (y, ctx.scalar(gamma, dt)))


def _softplus(ctx: OnnxContext, x: Value) -> Value:
    """log(1 + exp(x)), computed as relu(x) + log(1 + exp(-|x|)) so that large x does not overflow."""
    dt = x.type.dtype.torch
    tail = ctx.add("log", (ctx.add("add", (ctx.add("exp", (ctx.add("neg", (ctx.add("abs", (x,)),)),)), ctx.scalar(1.0, dt))),))
    return ctx.add("add", (ctx.add("relu", (x,)), tail))


@rule("relu, abs, neg, exp, add, log", "Softplus")
@in_f32
def _softplus_rule(ctx: OnnxContext) -> Value:
    require_float(ctx)
    return _softplus(ctx, ctx.value(0))


@rule("softplus form, tanh, mul", "Mish")
@in_f32
def _mish(ctx: OnnxContext) -> Value:
    require_float(ctx)
    x = ctx.value(0)
    return ctx.add("mul", (x, ctx.add("tanh", (_softplus(ctx, x),))))


@rule("abs, add, div", "Softsign")
@in_f32
def _softsign(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    x = ctx.value(0)
    return ctx.add("div", (x, ctx.add("add", (ctx.add("abs", (x,)), ctx.scalar(1.0, dt)))))


@rule("gt, where", "ThresholdedRelu")
@in_f32
def _thresholded_relu(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    x = ctx.value(0)
    above = ctx.add("gt", (x, ctx.scalar(float(ctx.attr("alpha", 1.0)), dt)))
    return ctx.add("where", (above, x, ctx.scalar(0.0, dt)))


@rule("silu (alpha 1), else mul, sigmoid", "Swish")
@in_f32
def _swish(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    x = ctx.value(0)
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha == 1.0:
        return ctx.add("silu", (x,))
    return ctx.add("mul", (x, ctx.add("sigmoid", (ctx.add("mul", (x, ctx.scalar(alpha, dt))),))))


@rule("pow (a known scalar exponent)", "Pow")
def _pow(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    e = ctx.known(1)
    if e is None or e.numel() != 1:
        raise Unsupported("npuc's pow takes a scalar exponent known at import time")
    e = float(e.reshape(()))
    x = ctx.value(0)
    if e == 1.0:
        return x
    if e == 0.5:
        return ctx.add("sqrt", (x,))
    y = ctx.add("pow", (x,), exponent=e)
    return y if y.type.dtype.torch == dt else ctx.cast(y, dt)


# ------------------------------------------------------------------------------ elementwise binary


def _binary(graph_op: str) -> Converter:
    def convert(ctx: OnnxContext) -> Value:
        return ctx.add(graph_op, (ctx.value(0), ctx.value(1)))

    return convert


for _onnx, _op in (
    ("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Equal", "eq"), ("Greater", "gt"),
    ("Less", "lt"), ("GreaterOrEqual", "ge"), ("LessOrEqual", "le"), ("And", "logical_and"),
    ("Or", "logical_or"), ("Xor", "ne"),
):
    rule(_op, _onnx)(_binary(_op))


@rule("div", "Div")
def _div(ctx: OnnxContext) -> Value:
    if not ctx.dtype(0).is_floating_point:
        raise Unsupported(f"integer division ({ctx.dtype(0)}) has no graph op (npuc's div is true division)")
    return ctx.add("div", (ctx.value(0), ctx.value(1)))


def _variadic(graph_op: str, mean: bool = False) -> Converter:
    def convert(ctx: OnnxContext) -> Value:
        vals = ctx.values()
        acc = vals[0]
        for v in vals[1:]:
            acc = ctx.add(graph_op, (acc, v))
        if mean:
            acc = ctx.add("div", (acc, ctx.scalar(float(len(vals)), acc.type.dtype.torch)))
        elif len(vals) == 1 and acc.type.shape == vals[0].type.shape:
            return acc
        return acc

    return convert


rule("maximum", "Max")(_variadic("maximum"))
rule("minimum", "Min")(_variadic("minimum"))
rule("add", "Sum")(_variadic("add"))
rule("add, div", "Mean")(_variadic("add", mean=True))


@rule("where", "Where")
def _where(ctx: OnnxContext) -> Value:
    return ctx.add("where", (ctx.value(0), ctx.value(1), ctx.value(2)))


# ------------------------------------------------------------------------------ linear algebra


@rule("conv2d (pad for asymmetric padding)", "Conv")
def _conv(ctx: OnnxContext) -> Value:
    require_float(ctx)
    _spatial_2d(ctx, "Conv")
    wshape = ctx.shape(1)
    kernel = tuple(ctx.attr("kernel_shape", list(wshape[2:])))
    strides, dilations, pads = _window(ctx, kernel)
    x = ctx.value(0)
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x = _pad_explicit(ctx, x, pads, 0.0)
        pads = [0, 0, 0, 0]
    ins = [x, ctx.value(1)] + ([ctx.value(2)] if ctx.has(2) else [])
    return ctx.add("conv2d", ins, stride=strides, padding=(pads[0], pads[1]), dilation=dilations,
                   groups=int(ctx.attr("group", 1)))


@rule("matmul", "MatMul")
def _matmul(ctx: OnnxContext) -> Value:
    require_float(ctx)
    a, b = ctx.value(0), ctx.value(1)
    ra, rb = a.type.rank, b.type.rank
    if ra == 1 and rb == 1:
        out = ctx.add("matmul", (ctx.reshape(a, (1,) + a.type.shape), ctx.reshape(b, b.type.shape + (1,))))
        return ctx.reshape(out, ())
    if ra == 1:
        out = ctx.add("matmul", (ctx.reshape(a, (1,) + a.type.shape), b))
        return ctx.reshape(out, out.type.shape[:-2] + out.type.shape[-1:])
    if rb == 1:
        out = ctx.add("matmul", (a, ctx.reshape(b, b.type.shape + (1,))))
        return ctx.reshape(out, out.type.shape[:-1])
    return ctx.add("matmul", (a, b))


@rule("linear, matmul, permute, mul, add", "Gemm")
def _gemm(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    a, b = ctx.value(0), ctx.value(1)
    if ctx.attr("transA", 0):
        a = ctx.add("permute", (a,), perm=(1, 0))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if ctx.attr("transB", 0):
        y = ctx.add("linear", (a, b))
    else:
        y = ctx.add("matmul", (a, b))
    if alpha != 1.0:
        y = ctx.add("mul", (y, ctx.scalar(alpha, dt)))
    if ctx.has(2) and beta != 0.0:
        c = ctx.value(2)
        if beta != 1.0:
            c = ctx.add("mul", (c, ctx.scalar(beta, dt)))
        y = ctx.add("add", (y, c))
    return y


# ------------------------------------------------------------------------------ normalization


@rule("batch_norm", "BatchNormalization")
def _batch_norm(ctx: OnnxContext) -> Value:
    require_float(ctx)
    if ctx.attr("training_mode", 0):
        raise Unsupported("training-mode batch normalization (batch statistics) is not an inference op")
    if len(ctx.node.output) > 1 and any(ctx.node.output[1:]):
        raise Unsupported("the running statistics outputs are only produced in training mode")
    x = ctx.value(0)
    if x.type.rank < 2:
        raise Unsupported("its input needs a channel dim (rank >= 2)")
    return ctx.add("batch_norm", [ctx.value(i) for i in range(5)], eps=float(ctx.attr("epsilon", 1e-5)))


@rule("layer_norm (and reduce_mean, sub, mul, add, rsqrt for the Mean and InvStdDev outputs)", "LayerNormalization")
def _layer_norm(ctx: OnnxContext) -> Any:
    dt = require_float(ctx)
    x = ctx.value(0)
    r = x.type.rank
    axis = norm_axis(int(ctx.attr("axis", -1)), r)
    norm_shape = x.type.shape[axis:]
    eps = float(ctx.attr("epsilon", 1e-5))
    if ctx.attr("stash_type", 1) != 1:
        raise Unsupported("stash_type other than float32 is not supported")
    w, b = ctx.value(1), (ctx.value(2) if ctx.has(2) else ctx.const(torch.zeros(norm_shape, dtype=dt), "bias"))
    if w.type.shape != norm_shape:
        w = ctx.add("expand", (ctx.reshape(w, (1,) * (len(norm_shape) - w.type.rank) + w.type.shape),), shape=norm_shape)
    if b.type.shape != norm_shape:
        b = ctx.add("expand", (ctx.reshape(b, (1,) * (len(norm_shape) - b.type.rank) + b.type.shape),), shape=norm_shape)
    y = ctx.add("layer_norm", (x, w, b), normalized_rank=r - axis, eps=eps)
    if len(ctx.node.output) == 1 or not any(ctx.node.output[1:]):
        return y
    dims = tuple(range(axis, r))
    mean = ctx.add("reduce_mean", (x,), dims=dims, keepdim=True)
    centered = ctx.add("sub", (x, mean))
    var = ctx.add("reduce_mean", (ctx.add("mul", (centered, centered)),), dims=dims, keepdim=True)
    inv = ctx.add("rsqrt", (ctx.add("add", (var, ctx.scalar(eps, dt))),))
    return (y, mean, inv)[: len(ctx.node.output)]


@rule("reduce_mean, sub, mul, add, rsqrt", "InstanceNormalization")
def _instance_norm(ctx: OnnxContext) -> Value:
    dt = require_float(ctx)
    x = ctx.value(0)
    r = x.type.rank
    if r < 3:
        raise Unsupported("its input needs spatial dims (rank >= 3)")
    dims = tuple(range(2, r))
    mean = ctx.add("reduce_mean", (x,), dims=dims, keepdim=True)
    centered = ctx.add("sub", (x, mean))
    var = ctx.add("reduce_mean", (ctx.add("mul", (centered, centered)),), dims=dims, keepdim=True)
    inv = ctx.add("rsqrt", (ctx.add("add", (var, ctx.scalar(float(ctx.attr("epsilon", 1e-5)), dt))),))
    c = x.type.shape[1]
    scale = ctx.reshape(ctx.value(1), (c,) + (1,) * (r - 2))
    bias = ctx.reshape(ctx.value(2), (c,) + (1,) * (r - 2))
    return ctx.add("add", (ctx.add("mul", (ctx.add("mul", (centered, inv)), scale)), bias))


def _softmax_like(graph_op: str) -> Converter:
    def convert(ctx: OnnxContext) -> Value:
        require_float(ctx)
        x = ctx.value(0)
        return ctx.add(graph_op, (x,), dim=norm_axis(int(ctx.attr("axis", -1)), x.type.rank))

    return convert


rule("softmax", "Softmax")(_softmax_like("softmax"))
rule("log_softmax", "LogSoftmax")(_softmax_like("log_softmax"))


# ------------------------------------------------------------------------------ pooling


@rule("max_pool2d (pad with -inf for asymmetric padding)", "MaxPool")
def _max_pool(ctx: OnnxContext) -> Value:
    require_float(ctx)
    _spatial_2d(ctx, "MaxPool")
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise Unsupported("its Indices output is not computed by npuc")
    if ctx.attr("storage_order", 0):
        raise Unsupported("storage_order only affects the Indices output, which npuc does not compute")
    kernel = tuple(ctx.attr("kernel_shape"))
    if len(kernel) != 2:
        raise Unsupported(f"kernel_shape {list(kernel)} is not 2-D")
    strides, dilations, pads = _window(ctx, kernel)
    x = ctx.value(0)
    ceil = bool(ctx.attr("ceil_mode", 0))
    if pads[0] != pads[2] or pads[1] != pads[3]:
        if ceil:
            raise Unsupported("asymmetric padding with ceil_mode has no graph-op form")
        x = _pad_explicit(ctx, x, pads, float("-inf"))
        pads = [0, 0, 0, 0]
    return ctx.add("max_pool2d", (x,), kernel=kernel, stride=strides, padding=(pads[0], pads[1]),
                   dilation=dilations, ceil_mode=ceil)


@rule("avg_pool2d", "AveragePool")
def _avg_pool(ctx: OnnxContext) -> Value:
    require_float(ctx)
    _spatial_2d(ctx, "AveragePool")
    kernel = tuple(ctx.attr("kernel_shape"))
    if len(kernel) != 2:
        raise Unsupported(f"kernel_shape {list(kernel)} is not 2-D")
    strides, dilations, pads = _window(ctx, kernel)
    if tuple(dilations) != (1, 1):
        raise Unsupported("dilated average pooling has no graph op")
    include = bool(ctx.attr("count_include_pad", 0))
    ceil = bool(ctx.attr("ceil_mode", 0))
    x = ctx.value(0)
    if pads[0] != pads[2] or pads[1] != pads[3]:
        if not include or ceil:
            raise Unsupported("asymmetric padding is only supported with count_include_pad=1 and no ceil_mode")
        x = _pad_explicit(ctx, x, pads, 0.0)
        pads = [0, 0, 0, 0]
    if ceil and include and (pads[0] or pads[1]):
        # PyTorch leaves windows that start in the right padding out of the count; ONNX too, but
        # counts the padded cells of the last window differently.
        raise Unsupported("ceil_mode with count_include_pad and padding counts windows differently in PyTorch")
    return ctx.add("avg_pool2d", (x,), kernel=kernel, stride=strides, padding=(pads[0], pads[1]),
                   ceil_mode=ceil, count_include_pad=include)


@rule("reduce_mean", "GlobalAveragePool")
def _global_avg(ctx: OnnxContext) -> Value:
    require_float(ctx)
    x = ctx.value(0)
    if x.type.rank == 4:
        return ctx.add("adaptive_avg_pool2d", (x,), output_size=(1, 1))
    return ctx.add("reduce_mean", (x,), dims=tuple(range(2, x.type.rank)), keepdim=True)


@rule("reduce_max", "GlobalMaxPool")
def _global_max(ctx: OnnxContext) -> Value:
    require_float(ctx)
    x = ctx.value(0)
    return ctx.add("reduce_max", (x,), dims=tuple(range(2, x.type.rank)), keepdim=True)


# ------------------------------------------------------------------------------ reductions

# Operators whose axes became an input (from opset 13 for ReduceSum, 18 for the others).
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_axes(ctx: OnnxContext) -> tuple[int, ...] | None:
    """The reduced axes (sorted, non-negative), or None for "no reduction" (noop_with_empty_axes)."""
    r = ctx.rank(0)
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.node.op_type, 18):
        axes = ctx.ints(1, "axes")
    else:
        axes = ctx.attr("axes")
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(r))
    return tuple(sorted({norm_axis(int(a), r) for a in axes}))


def _reduce(ctx: OnnxContext, graph_op: str, x: Value) -> Value:
    dims = _reduce_axes(ctx)
    if dims is None:
        return x
    if x.type.rank == 0:
        return x
    return ctx.add(graph_op, (x,), dims=dims, keepdim=bool(ctx.attr("keepdims", 1)))


def _reduce_rule(graph_op: str) -> Converter:
    def convert(ctx: OnnxContext) -> Value:
        x = ctx.value(0)
        if graph_op == "reduce_mean":
            require_float(ctx)
        return _reduce(ctx, graph_op, x)

    return convert


rule("reduce_mean", "ReduceMean")(_reduce_rule("reduce_mean"))
rule("reduce_sum", "ReduceSum")(_reduce_rule("reduce_sum"))
rule("reduce_max", "ReduceMax")(_reduce_rule("reduce_max"))
rule("reduce_min", "ReduceMin")(_reduce_rule("reduce_min"))


@rule("mul, reduce_sum", "ReduceSumSquare")
def _reduce_sum_square(ctx: OnnxContext) -> Value:
    x = ctx.value(0)
    return _reduce(ctx, "reduce_sum", ctx.add("mul", (x, x)))


@rule("abs, reduce_sum", "ReduceL1")
def _reduce_l1(ctx: OnnxContext) -> Value:
    return _reduce(ctx, "reduce_sum", ctx.add("abs", (ctx.value(0),)))


@rule("mul, reduce_sum, sqrt", "ReduceL2")
def _reduce_l2(ctx: OnnxContext) -> Value:
    require_float(ctx)
    x = ctx.value(0)
    y = _reduce(ctx, "reduce_sum", ctx.add("mul", (x, x)))
    return ctx.add("sqrt", (y,))


@rule("reduce_sum, log", "ReduceLogSum")
def _reduce_log_sum(ctx: OnnxContext) -> Value:
    require_float(ctx)
    return ctx.add("log", (_reduce(ctx, "reduce_sum", ctx.value(0)),))


@rule("reduce_max, sub, exp, reduce_sum, log, add", "ReduceLogSumExp")
def _reduce_log_sum_exp(ctx: OnnxContext) -> Value:
    require_float(ctx)
    x = ctx.value(0)
    dims = _reduce_axes(ctx)
    if dims is None or x.type.rank == 0:
        return x
    keep = bool(ctx.attr("keepdims", 1))
    m = ctx.add("reduce_max", (x,), dims=dims, keepdim=True)
    # A row of -inf would give nan from -inf - -inf; those rows keep their max (-inf) as the result.
    safe = ctx.add("where", (ctx.add("eq", (m, ctx.scalar(float("-inf"), x.type.dtype.torch))),
                             ctx.scalar(0.0, x.type.dtype.torch), m))
    s = ctx.add("reduce_sum", (ctx.add("exp", (ctx.add("sub", (x, safe)),)),), dims=dims, keepdim=keep)
    return ctx.add("add", (ctx.add("log", (s,)), ctx.reshape(safe, s.type.shape)))


@rule("argmax", "ArgMax")
def _argmax(ctx: OnnxContext) -> Value:
    if ctx.attr("select_last_index", 0):
        raise Unsupported("select_last_index=1 is not supported (npuc's argmax picks the first maximum)")
    x = ctx.value(0)
    return ctx.add("argmax", (x,), dim=norm_axis(int(ctx.attr("axis", 0)), x.type.rank),
                   keepdim=bool(ctx.attr("keepdims", 1)))


# ------------------------------------------------------------------------------ shape


def _resolve_reshape(shape: tuple[int, ...], target: list[int], allowzero: bool) -> tuple[int, ...]:
    out = [shape[i] if (d == 0 and not allowzero and i < len(shape)) else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise Unsupported(f"reshape target {target} has more than one -1")
    n = math.prod(shape)
    if -1 in out:
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or n % rest:
            raise Unsupported(f"cannot reshape {list(shape)} into {target}")
        out[out.index(-1)] = n // rest
    if math.prod(out) != n or any(d < 0 for d in out):
        raise Unsupported(f"cannot reshape {list(shape)} into {target}")
    return tuple(out)


@rule("reshape", "Reshape")
def _reshape(ctx: OnnxContext) -> Value:
    target = ctx.ints(1, "target shape")
    return ctx.reshape(ctx.value(0), _resolve_reshape(ctx.shape(0), target, bool(ctx.attr("allowzero", 0))))


@rule("reshape", "Flatten")
def _flatten(ctx: OnnxContext) -> Value:
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise Unsupported(f"axis {axis} is out of range for rank {len(shape)}")
    return ctx.reshape(ctx.value(0), (math.prod(shape[:axis]), math.prod(shape[axis:])))


@rule("reshape", "Squeeze")
def _squeeze(ctx: OnnxContext) -> Value:
    shape = ctx.shape(0)
    axes = ctx.ints(1, "axes")
    if axes is None:
        dims = {i for i, d in enumerate(shape) if d == 1}
    else:
        dims = {norm_axis(a, len(shape)) for a in axes}
        if any(shape[d] != 1 for d in dims):
            raise Unsupported(f"it squeezes a dim of size other than 1 (shape {list(shape)}, axes {axes})")
    return ctx.reshape(ctx.value(0), [d for i, d in enumerate(shape) if i not in dims])


@rule("reshape", "Unsqueeze")
def _unsqueeze(ctx: OnnxContext) -> Value:
    shape = list(ctx.shape(0))
    axes = ctx.ints(1, "axes")
    r = len(shape) + len(axes)
    dims = sorted(norm_axis(a, r) for a in axes)
    if len(set(dims)) != len(dims):
        raise Unsupported(f"axes {axes} repeat a dim")
    for d in dims:
        shape.insert(d, 1)
    return ctx.reshape(ctx.value(0), shape)


@rule("permute", "Transpose")
def _transpose(ctx: OnnxContext) -> Value:
    r = ctx.rank(0)
    perm = ctx.attr("perm") or list(reversed(range(r)))
    x = ctx.value(0)
    if list(perm) == list(range(r)):
        return x
    return ctx.add("permute", (x,), perm=tuple(int(p) for p in perm))


@rule("concat", "Concat")
def _concat(ctx: OnnxContext) -> Value:
    vals = ctx.values()
    dim = norm_axis(int(ctx.attr("axis")), vals[0].type.rank)
    vals = [v for v in vals if v.type.shape[dim] != 0] or vals[:1]
    if len(vals) == 1:
        return vals[0]
    return ctx.add("concat", vals, dim=dim)


def _slice_one(ctx: OnnxContext, x: Value, dim: int, start: int, end: int, step: int) -> Value:
    size = x.type.shape[dim]
    if step == 0:
        raise Unsupported("a slice step of 0")
    if step < 0:
        raise Unsupported("negative slice steps (reversal) have no graph op")
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    end = max(end, start)
    if (start, end, step) == (0, size, 1):
        return x
    return ctx.add("slice", (x,), dim=dim, start=start, end=end, step=step)


@rule("slice", "Slice")
def _slice(ctx: OnnxContext) -> Value:
    starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
    r = ctx.rank(0)
    axes = ctx.ints(3, "axes") or list(range(len(starts)))
    steps = ctx.ints(4, "steps") or [1] * len(starts)
    x = ctx.value(0)
    for a, s, e, st in zip(axes, starts, ends, steps):
        x = _slice_one(ctx, x, norm_axis(a, r), s, e, st)
    return x


@rule("slice", "Split")
def _split(ctx: OnnxContext) -> tuple[Value, ...]:
    x = ctx.value(0)
    dim = norm_axis(int(ctx.attr("axis", 0)), x.type.rank)
    size = x.type.shape[dim]
    n = len(ctx.node.output)
    sizes = ctx.ints(1, "split sizes")
    if sizes is None:
        parts = int(ctx.attr("num_outputs", n))
        chunk = -(-size // parts)
        sizes = [min(chunk, size - i * chunk) for i in range(parts)]
    if sum(sizes) != size or len(sizes) != n:
        raise Unsupported(f"split sizes {sizes} do not cover dim {dim} of size {size} in {n} outputs")
    outs, start = [], 0
    for s in sizes:
        outs.append(_slice_one(ctx, x, dim, start, start + s, 1))
        start += s
    return tuple(outs)


def _wrapped_index(ctx: OnnxContext, n: int) -> Value:
    """Run-time indices (input 1) with ``n`` added where negative (ONNX counts those from the end)."""
    i = ctx.value(1)
    dt = i.type.dtype.torch
    neg = ctx.add("lt", (i, ctx.scalar(0, dt)))
    return ctx.add("where", (neg, ctx.add("add", (i, ctx.scalar(n, dt))), i))


@rule("select, index_select, embedding, lt, add, where", "Gather")
def _gather(ctx: OnnxContext) -> Value:
    shape = ctx.shape(0)
    dim = norm_axis(int(ctx.attr("axis", 0)), len(shape))
    idx = ctx.known(1)
    if idx is not None:
        idx = torch.where(idx < 0, idx + shape[dim], idx)
        if idx.numel() and (idx.min() < 0 or idx.max() >= shape[dim]):
            raise Unsupported(f"an index is out of range for dim {dim} of size {shape[dim]}")
        x = ctx.value(0)
        if idx.dim() == 0:
            return ctx.add("select", (x,), dim=dim, index=int(idx))
        picked = ctx.add("index_select", (x,ctx.const(idx.reshape(-1).to(torch.int64), "index")), dim=dim)
        return ctx.reshape(picked, shape[:dim] + tuple(idx.shape) + shape[dim + 1:])
    idx = _wrapped_index(ctx, shape[dim])
    if dim == 0 and len(shape) == 2:
        return ctx.add("embedding", (ctx.value(0), idx))
    if ctx.rank(1) <= 1:
        return ctx.add("index_select", (ctx.value(0), idx), dim=dim) if ctx.rank(1) == 1 else \
            ctx.reshape(ctx.add("index_select", (ctx.value(0), ctx.reshape(idx, (1,))), dim=dim),
                        shape[:dim] + shape[dim + 1:])
    raise Unsupported("run-time indices of rank > 1 are only supported on a 2-D table along axis 0 (an embedding)")


@rule("expand", "Expand")
def _expand(ctx: OnnxContext) -> Value:
    target = ctx.ints(1, "target shape")
    shape = ctx.shape(0)
    r = max(len(shape), len(target))
    a = (1,) * (r - len(shape)) + tuple(shape)
    b = (1,) * (r - len(target)) + tuple(target)
    out = []
    for da, db in zip(a, b):
        if da != db and 1 not in (da, db):
            raise Unsupported(f"shape {list(shape)} does not broadcast to {target}")
        out.append(da if db == 1 else db)
    x = ctx.reshape(ctx.value(0), a)
    return x if tuple(out) == a else ctx.add("expand", (x,), shape=tuple(out))


@rule("expand, reshape", "Tile")
def _tile(ctx: OnnxContext) -> Value:
    reps = ctx.ints(1, "repeats")
    shape = ctx.shape(0)
    if len(reps) != len(shape):
        raise Unsupported(f"repeats {reps} do not match the input rank {len(shape)}")
    x = ctx.value(0)
    if all(r == 1 for r in reps):
        return x
    inter = tuple(d for s in shape for d in (1, s))
    big = tuple(d for s, r in zip(shape, reps) for d in (r, s))
    y = ctx.add("expand", (ctx.reshape(x, inter),), shape=big)
    return ctx.reshape(y, [s * r for s, r in zip(shape, reps)])


@rule("pad", "Pad")
def _pad(ctx: OnnxContext) -> Value:
    mode = ctx.attr("mode", "constant")
    if mode != "constant":
        raise Unsupported(f"mode {mode!r} padding has no graph op (only 'constant')")
    r = ctx.rank(0)
    pads = ctx.ints(1, "pads")
    value = 0.0
    if ctx.has(2):
        cv = ctx.need_known(2, "constant value")
        value = float(cv.reshape(-1)[0]) if cv.numel() else 0.0
    axes = ctx.ints(3, "axes") if ctx.n_inputs() > 3 else None
    axes = [norm_axis(a, r) for a in axes] if axes else list(range(r))
    n = len(axes)
    if len(pads) != 2 * n:
        raise Unsupported(f"pads {pads} do not match {n} axes")
    begin, end = {a: 0 for a in range(r)}, {a: 0 for a in range(r)}
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[k + n]
    x = ctx.value(0)
    if not x.type.dtype.is_float and value != int(value):
        raise Unsupported(f"pad value {value} is not an integer for an integer tensor")
    fpads: list[int] = []
    for a in reversed(range(r)):
        fpads += [begin[a], end[a]]
    while fpads and fpads[-2:] == [0, 0]:
        fpads = fpads[:-2]
    if not fpads:
        return x
    return ctx.add("pad", (x,), pads=tuple(fpads), value=value)


@rule("reshape, permute", "DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: OnnxContext) -> Value:
    if ctx.rank(0) != 4:
        raise Unsupported("its input must be NCHW (rank 4)")
    n, c, h, w = ctx.shape(0)
    b = int(ctx.attr("blocksize"))
    x = ctx.value(0)
    if ctx.node.op_type == "SpaceToDepth":
        if h % b or w % b:
            raise Unsupported(f"H and W ({h}, {w}) are not multiples of the block size {b}")
        y = ctx.reshape(x, (n, c, h // b, b, w // b, b))
        perm = (0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
        y = ctx.add("permute", (y,), perm=perm)
        return ctx.reshape(y, (n, c * b * b, h // b, w // b))
    if c % (b * b):
        raise Unsupported(f"C ({c}) is not a multiple of blocksize^2 ({b * b})")
    if ctx.attr("mode", "DCR") == "DCR":
        y = ctx.reshape(x, (n, b, b, c // (b * b), h, w))
        y = ctx.add("permute", (y,), perm=(0, 3, 4, 1, 5, 2))
    else:
        y = ctx.reshape(x, (n, c // (b * b), b, b, h, w))
        y = ctx.add("permute", (y,), perm=(0, 1, 4, 2, 5, 3))
    return ctx.reshape(y, (n, c // (b * b), h * b, w * b))


def _resize_output_size(ctx: OnnxContext, scales_i: int, sizes_i: int) -> tuple[int, int]:
    shape = ctx.shape(0)
    sizes = ctx.ints(sizes_i, "sizes")
    scales_t = ctx.known(scales_i) if ctx.has(scales_i) else None
    if ctx.has(scales_i) and scales_t is None:
        ctx.need_known(scales_i, "scales")
    if ctx.attr("axes"):
        raise Unsupported("Resize with axes is not supported")
    if sizes:
        if sizes[:2] != list(shape[:2]):
            raise Unsupported("it resizes the batch or channel dim")
        return int(sizes[2]), int(sizes[3])
    scales = [float(s) for s in scales_t.reshape(-1).tolist()] if scales_t is not None else []
    if len(scales) != 4 or scales[:2] != [1.0, 1.0]:
        raise Unsupported(f"scales {scales} are not those of an NCHW spatial resize")
    oh, ow = int(math.floor(shape[2] * scales[2])), int(math.floor(shape[3] * scales[3]))
    if oh != shape[2] * scales[2] or ow != shape[3] * scales[3] or scales[2] < 1 or scales[3] < 1:
        raise Unsupported(f"non-integer upsampling scales {scales[2:]} map pixels differently in npuc")
    return oh, ow


@rule("upsample_nearest2d", "Resize", "Upsample")
def _resize(ctx: OnnxContext) -> Value:
    require_float(ctx)
    if ctx.rank(0) != 4:
        raise Unsupported("npuc resizes NCHW tensors only")
    mode = ctx.attr("mode", "nearest")
    if mode != "nearest":
        raise Unsupported(f"mode {mode!r} has no graph op (only 'nearest')")
    if ctx.node.op_type == "Upsample":
        oh, ow = _resize_output_size(ctx, 1, 99)
    else:
        ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
        nearest = ctx.attr("nearest_mode", "round_prefer_floor")
        if ctx.attr("exclude_outside", 0) or ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise Unsupported("exclude_outside / keep_aspect_ratio_policy are not supported")
        oh, ow = _resize_output_size(ctx, 2, 3)
        h, w = ctx.shape(0)[2:]
        integer = oh % h == 0 and ow % w == 0
        # npuc's nearest is floor(i * in / out): ONNX's asymmetric + floor, and for integer
        # upscaling also half_pixel (or pytorch_half_pixel) + round_prefer_floor / round_prefer_ceil.
        same = (ctm == "asymmetric" and nearest == "floor") or (
            integer and ctm in ("half_pixel", "pytorch_half_pixel")
            and nearest in ("round_prefer_floor", "round_prefer_ceil")
            and _half_pixel_is_floor(oh // h, ow // w, nearest)
        )
        if not same:
            raise Unsupported(
                f"nearest resize with coordinate_transformation_mode={ctm!r}, nearest_mode={nearest!r} "
                f"and output {oh}x{ow} picks pixels differently from npuc's (floor(i * in / out))"
            )
    return ctx.add("upsample_nearest2d", (ctx.value(0),), output_size=(oh, ow))


def _half_pixel_is_floor(sh: int, sw: int, nearest: str) -> bool:
    """Whether half-pixel coordinates rounded by ``nearest`` pick floor(i / s) for integer scale s:
    x = (i + 0.5) / s - 0.5; for odd s the tie never occurs, for even s a tie occurs only when
    (i + 0.5) / s - 0.5 is exactly k + 0.5, which round_prefer_ceil takes upwards."""
    for s in (sh, sw):
        for i in range(2 * s):
            x = (i + 0.5) / s - 0.5
            r = math.floor(x + 0.5) if nearest == "round_prefer_ceil" else math.ceil(x - 0.5)
            if max(r, 0) != i // s:
                return False
    return True
