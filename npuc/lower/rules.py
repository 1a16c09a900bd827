"""Lowering rules: each graph op the NPU can run, as the kernels of docs/kernels.md.

A rule maps a node to a list of candidate :class:`~npuc.lower.context.Lowered` (tried in order:
the first whose kernels are all accepted wins) or to a string: the reason the NPU cannot run it.
Ops with no rule at all get their reason from :data:`CPU_REASONS`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from npuc.ir.graph import Node, Value
from npuc.ir.opdef import Trait, ops_with
from npuc.kir.kernel import (
    BINARY_EPILOGUE_OPS,
    COMMUTATIVE_EPILOGUE_OPS,
    UNARY_EPILOGUE_OPS,
    EpilogueOp,
    FillAttrs,
    LayerNormAttrs,
    PoolAttrs,
    ReduceAttrs,
    SoftmaxAttrs,
)
from npuc.kir.tensor import NHWC, DramTensor
from npuc.lower.context import LowerContext, Lowered
from npuc.lower.layout import broadcast_to, is_channels_last

Rule = Callable[[LowerContext, Node], "list[Lowered] | str"]
RULES: dict[str, Rule] = {}

# Why ops without a rule run on the CPU, in words a user understands.
CPU_REASONS: dict[str, str] = {
    "argmax": "argmax returns int64 indices; the NPU has no 64-bit integers",
    "log_softmax": "log_softmax needs a logarithm, which the vector unit does not compute",
    "erf": "erf: the vector unit has no erf on its own (only inside gelu)",
    "sin": "sin: the vector unit computes no trigonometric functions",
    "cos": "cos: the vector unit computes no trigonometric functions",
}


def rule(*ops: str):
    def deco(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn

    return deco


def single(*kernels, views=()) -> list[Lowered]:
    return [Lowered(tuple(kernels), tuple(views))]


# ------------------------------------------------------------------------------- elementwise

@rule(*sorted(UNARY_EPILOGUE_OPS))
def lower_unary(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    params: tuple = ()
    if node.op == "gelu":
        params = (("approximate", node.attrs.approximate),)
    elif node.op == "clamp":
        lo = -math.inf if node.attrs.min is None else float(node.attrs.min)
        hi = math.inf if node.attrs.max is None else float(node.attrs.max)
        params = (("min", lo), ("max", hi))
    epi = (EpilogueOp(node.op, params=params),)
    return single(ctx.kernel(node, "eltwise", (broadcast_to(ctx.tensor(x), y.type.shape),), ctx.out(y), epilogue=epi))


@rule(*sorted(BINARY_EPILOGUE_OPS))
def lower_binary(ctx: LowerContext, node: Node):
    a, b = node.inputs
    y = node.outputs[0]
    sa, sb = ctx.scalar(a), ctx.scalar(b)
    if sa is not None and sb is not None:
        return f"{node.op} of two constants was not folded"
    if sb is not None or sa is not None:
        main, s, first = (a, sb, False) if sb is not None else (b, sa, True)
        epi = EpilogueOp(node.op, scalar=s, operand_first=first and node.op not in COMMUTATIVE_EPILOGUE_OPS)
    else:
        # the kernel input is the operand of the output's full shape (prefer a computed one)
        swap = a.type.shape != y.type.shape or (ctx.const(a) is not None and ctx.const(b) is None
                                                 and b.type.shape == y.type.shape)
        main, other = (b, a) if swap else (a, b)
        operand = broadcast_to(ctx.tensor(other), y.type.shape)
        epi = EpilogueOp(node.op, operand=operand, operand_first=swap and node.op not in COMMUTATIVE_EPILOGUE_OPS)
    x = broadcast_to(ctx.tensor(main), y.type.shape)
    return single(ctx.kernel(node, "eltwise", (x,), ctx.out(y), epilogue=(epi,)))


@rule("pow")
def lower_pow(ctx: LowerContext, node: Node):
    e = float(node.attrs.exponent)
    x, y = node.inputs[0], node.outputs[0]
    xt = ctx.tensor(x)
    named = {0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal"}
    if e in named:
        epi = (EpilogueOp(named[e]),)
    elif e == int(e) and 1 <= e <= 4:
        epi = tuple(EpilogueOp("mul", operand=xt) for _ in range(int(e) - 1))
    else:
        return f"pow with exponent {e:g}: the NPU computes integer powers up to 4 and square roots only"
    return single(ctx.kernel(node, "eltwise", (xt,), ctx.out(y), epilogue=epi))


@rule("cast")
def lower_cast(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    masks = lower_bool_cast(ctx, node)
    if masks is not None:
        return masks
    if not (x.type.dtype.is_float and y.type.dtype.is_float):
        return f"cast from {x.type.dtype.value} to {y.type.dtype.value}: the NPU holds only fp16 values of a float model"
    return single(views=((y, ctx.tensor(x)),))  # every float is fp16 on the NPU: a no-op


@rule("batch_norm")
def lower_batch_norm(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    params = [ctx.const(v) for v in node.inputs[1:]]
    if any(p is None for p in params):
        return "batch_norm with statistics computed at run time: the NPU folds only constant statistics"
    w, b, mean, var = (p.to(torch.float32) for p in params)
    scale = w / torch.sqrt(var + node.attrs.eps)
    shift = b - mean * scale
    name = ctx.const_of[node.inputs[1]]
    bshape = (y.type.shape[1],) + (1,) * (y.type.rank - 2)
    s_t = broadcast_to(ctx.const_tensor(name, scale.reshape(bshape), "~bn_scale"), y.type.shape)
    h_t = broadcast_to(ctx.const_tensor(name, shift.reshape(bshape), "~bn_shift"), y.type.shape)
    epi = (EpilogueOp("mul", operand=s_t), EpilogueOp("add", operand=h_t))
    return single(ctx.kernel(node, "eltwise", (ctx.tensor(x),), ctx.out(y), epilogue=epi))


# ------------------------------------------------------------------------------- array work


def channels_last(ctx: LowerContext, node: Node, t: DramTensor) -> tuple[DramTensor, list]:
    """``t`` itself when it is channels-last, else a copy into a channels-last temporary."""
    if is_channels_last(t):
        return t, []
    tmp = ctx.temp(f"{node.outputs[0].name}.nhwc", t.shape, NHWC)
    return tmp, [ctx.kernel(node, "copy", (t,), tmp, suffix=".nhwc")]


def bias_epilogue(ctx: LowerContext, b: Value | None, out_shape: tuple[int, ...], axis: int) -> tuple[EpilogueOp, ...]:
    """``add(bias)`` with the [O] bias seen with the output's shape (zero strides elsewhere)."""
    if b is None:
        return ()
    bt = ctx.tensor(b)
    shape = [1] * len(out_shape)
    shape[axis] = out_shape[axis]
    view = bt.reshape(tuple(shape))
    return (EpilogueOp("add", operand=broadcast_to(view, out_shape)),)


@rule("conv2d")
def lower_conv2d(ctx: LowerContext, node: Node):
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) == 3 else None
    y = node.outputs[0]
    if ctx.const(w) is None:
        return "conv2d with weights computed at run time: the NPU's convolutions take constant weights"
    if b is not None and ctx.const(b) is None:
        return "conv2d with a bias computed at run time"
    c, o, g = x.type.shape[1], w.type.shape[0], node.attrs.groups
    kind = "depthwise_conv2d" if g > 1 and g == c == o else "conv2d"
    xt, pre = channels_last(ctx, node, ctx.tensor(x))
    out = ctx.out(y)
    epi = bias_epilogue(ctx, b, y.type.shape, 1)
    k = ctx.kernel(node, kind, (xt, ctx.tensor(w)), out, node.attrs, epi)
    return single(*pre, k)


def as_matrix(ctx: LowerContext, node: Node, t: DramTensor, rows: int, cols: int) -> tuple[DramTensor, list]:
    """``t`` seen as a [rows, cols] matrix, copying it row-major first when strides cannot say it."""
    view = t.reshape((rows, cols))
    if view is not None:
        return view, []
    tmp = ctx.temp(f"{node.outputs[0].name}.rm", t.shape)
    return tmp.reshape((rows, cols)), [ctx.kernel(node, "copy", (t,), tmp, suffix=".rm")]


@rule("linear")
def lower_linear(ctx: LowerContext, node: Node):
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) == 3 else None
    y = node.outputs[0]
    n, k = w.type.shape
    m = x.type.numel // k
    a, pre = as_matrix(ctx, node, ctx.tensor(x), m, k)
    wc = ctx.const(w)
    if wc is not None:
        bt = ctx.const_tensor(ctx.const_of[w], wc.t(), "^T")  # b = w^T, [K, N]
    else:
        bt = ctx.tensor(w).permute((1, 0))
    out = ctx.out(y).reshape((m, n))
    if out is None:
        return "linear whose output layout is not row-major"
    epi = bias_epilogue(ctx, b, (m, n), 1)
    return single(*pre, ctx.kernel(node, "gemm", (a, bt), out, None, epi))


@rule("matmul")
def lower_matmul(ctx: LowerContext, node: Node):
    a, b = node.inputs
    y = node.outputs[0]
    batch = y.type.shape[:-2]
    m, kk = a.type.shape[-2:]
    n = b.type.shape[-1]
    at = broadcast_to(ctx.tensor(a), batch + (m, kk))
    bt = broadcast_to(ctx.tensor(b), batch + (kk, n))
    return single(ctx.kernel(node, "gemm", (at, bt), ctx.out(y)))


# ---------------------------------------------------------------------------------- pooling


def pool_kernel(ctx: LowerContext, node: Node, attrs: PoolAttrs, out: DramTensor):
    xt, pre = channels_last(ctx, node, ctx.tensor(node.inputs[0]))
    return [*pre, ctx.kernel(node, "pool2d", (xt,), out, attrs)]


@rule("max_pool2d")
def lower_max_pool(ctx: LowerContext, node: Node):
    a = node.attrs
    attrs = PoolAttrs("max", a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode)
    return single(*pool_kernel(ctx, node, attrs, ctx.out(node.outputs[0])))


@rule("avg_pool2d")
def lower_avg_pool(ctx: LowerContext, node: Node):
    a = node.attrs
    attrs = PoolAttrs("avg", a.kernel, a.stride, a.padding, (1, 1), a.ceil_mode, a.count_include_pad, a.divisor_override)
    return single(*pool_kernel(ctx, node, attrs, ctx.out(node.outputs[0])))


def global_mean(ctx: LowerContext, node: Node, out4: DramTensor) -> list[Lowered]:
    """Mean over H and W as one pooling window, else as a reduction."""
    x = node.inputs[0]
    h, w = x.type.shape[2:]
    attrs = PoolAttrs("avg", (h, w), (h, w))
    pool = Lowered(tuple(pool_kernel(ctx, node, attrs, out4)))
    red = Lowered((ctx.kernel(node, "reduce", (ctx.tensor(x),), out4, ReduceAttrs("mean", (2, 3), True)),))
    return [pool, red]


@rule("adaptive_avg_pool2d")
def lower_adaptive(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    h, w = x.type.shape[2:]
    oh, ow = node.attrs.output_size
    if h % oh or w % ow:  # windows of unequal sizes: a linear map of the rows and of the columns
        from npuc.lower.rules_models import adaptive_weights, separable

        return separable(ctx, node, adaptive_weights(h, oh), adaptive_weights(w, ow), "adaptive")
    out = ctx.out(y)
    if (oh, ow) == (1, 1):
        return global_mean(ctx, node, out)
    kh, kw = h // oh, w // ow
    return single(*pool_kernel(ctx, node, PoolAttrs("avg", (kh, kw), (kh, kw)), out))


_REDUCE_OPS = {"reduce_sum": "sum", "reduce_mean": "mean", "reduce_max": "max", "reduce_min": "min"}


@rule(*_REDUCE_OPS)
def lower_reduce(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    a = node.attrs
    op = _REDUCE_OPS[node.op]
    if op == "mean" and x.type.rank == 4 and a.dims == (2, 3):
        out4 = ctx.out(y).reshape(x.type.shape[:2] + (1, 1))
        if out4 is not None:
            return global_mean(ctx, node, out4)
    return single(ctx.kernel(node, "reduce", (ctx.tensor(x),), ctx.out(y), ReduceAttrs(op, tuple(a.dims), a.keepdim)))


# ----------------------------------------------------------------------------- normalization


@rule("softmax")
def lower_softmax(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    return single(ctx.kernel(node, "softmax", (ctx.tensor(x),), ctx.out(y), SoftmaxAttrs(node.attrs.dim)))


@rule("layer_norm")
def lower_layer_norm(ctx: LowerContext, node: Node):
    x, w, b = node.inputs
    y = node.outputs[0]
    attrs = LayerNormAttrs(node.attrs.normalized_rank, node.attrs.eps)
    k = ctx.kernel(node, "layernorm", (ctx.tensor(x), ctx.tensor(w), ctx.tensor(b)), ctx.out(y), attrs)
    return single(k)


# ---------------------------------------------------------------------------- data movement


@rule("reshape")
def lower_reshape(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    t = ctx.tensor(x)
    view = t.reshape(y.type.shape)
    if view is not None:
        return single(views=((y, view),))
    tmp = ctx.temp(f"{y.name}.rm", t.shape)
    return single(ctx.kernel(node, "copy", (t,), tmp, suffix=".rm"), views=((y, tmp.reshape(y.type.shape)),))


@rule("permute")
def lower_permute(ctx: LowerContext, node: Node):
    return single(views=((node.outputs[0], ctx.tensor(node.inputs[0]).permute(tuple(node.attrs.perm))),))


@rule("expand")
def lower_expand(ctx: LowerContext, node: Node):
    y = node.outputs[0]
    return single(views=((y, broadcast_to(ctx.tensor(node.inputs[0]), y.type.shape)),))


@rule("slice")
def lower_slice(ctx: LowerContext, node: Node):
    a = node.attrs
    view = ctx.tensor(node.inputs[0]).slice(a.dim, a.start, a.end, a.step)
    return single(views=((node.outputs[0], view),))


@rule("select")
def lower_select(ctx: LowerContext, node: Node):
    a = node.attrs
    return single(views=((node.outputs[0], ctx.tensor(node.inputs[0]).select(a.dim, a.index)),))


@rule("concat")
def lower_concat(ctx: LowerContext, node: Node):
    y = node.outputs[0]
    out = ctx.out(y)
    dim = node.attrs.dim
    kernels, start = [], 0
    for i, x in enumerate(node.inputs):
        size = x.type.shape[dim]
        if size:
            dst = out.slice(dim, start, start + size)
            kernels.append(ctx.kernel(node, "copy", (ctx.tensor(x),), dst, suffix=f".{i}"))
        start += size
    return single(*kernels)


@rule("pad")
def lower_pad(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    pads = node.attrs.pads
    if any(p < 0 for p in pads):
        return "pad with negative pads (cropping)"
    out = ctx.out(y)
    inner = out
    for i in range(len(pads) // 2):
        d = y.type.rank - 1 - i
        inner = inner.slice(d, pads[2 * i], y.type.shape[d] - pads[2 * i + 1])
    fill = ctx.kernel(node, "fill", (), out, FillAttrs(float(node.attrs.value)), suffix=".fill")
    return single(fill, ctx.kernel(node, "copy", (ctx.tensor(x),), inner))


@rule("upsample_nearest2d")
def lower_upsample(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    h, w = x.type.shape[2:]
    oh, ow = node.attrs.output_size
    if oh % h or ow % w:
        return f"upsample_nearest2d from {h}x{w} to {oh}x{ow}: only whole scale factors are copies"
    sh, sw = oh // h, ow // w
    out = ctx.out(y)
    xt = ctx.tensor(x)
    kernels = []
    for i in range(sh):
        for j in range(sw):
            dst = out.slice(2, i, oh, sh).slice(3, j, ow, sw)
            kernels.append(ctx.kernel(node, "copy", (xt,), dst, suffix=f".{i}{j}"))
    return single(*kernels)


VIEW_OPS = ops_with(Trait.VIEW)

# The quantized graph ops register their rules in their own module.
import npuc.lower.rules_int8  # noqa: E402,F401
import npuc.lower.rules_models  # noqa: E402,F401
import npuc.lower.rules_gather  # noqa: E402,F401
from npuc.lower.rules_masks import lower_bool_cast  # noqa: E402
