"""Lowering rules for ops real models needed beyond the first set: ``elu`` as an elementwise
chain, ``group_norm`` as a layernorm kernel over each group, ``upsample_bilinear2d`` (and ``adaptive_avg_pool2d`` with windows of unequal sizes) as
two matrix products with constant weights.

Bilinear resizing is separable: ``y[n, c] = A_h @ x[n, c] @ A_w^T`` with the [out, in] matrices
of PyTorch's 1-D linear interpolation (:func:`npuc.ir.ops.resample.linear_weights`, align_corners
and scales included), so it runs on the systolic array as two gemm kernels: the first over the
rows of every channel (``x @ A_w^T``), the second with ``A_h`` broadcast over the channels.
"""

from __future__ import annotations

import math

import torch

from npuc.kir.kernel import EpilogueOp, FillAttrs, LayerNormAttrs
from npuc.kir.tensor import NHWC
from npuc.ir.graph import Node
from npuc.ir.ops.resample import linear_weights
from npuc.lower.context import LowerContext
from npuc.lower.layout import broadcast_to
from npuc.lower.rules import bias_epilogue, channels_last, rule, single


@rule("elu")
def lower_elu(ctx: LowerContext, node: Node):
    """elu(x) = scale * relu(x) + scale * alpha * (exp(input_scale * min(x, 0)) - 1): two eltwise
    kernels (the positive part, then the negative part added to it)."""
    a = node.attrs
    x, y = node.inputs[0], node.outputs[0]
    xt = ctx.tensor(x)
    pos = ctx.temp(f"{y.name}.pos", y.type.shape)
    pos_steps = (EpilogueOp("relu"),) + ((EpilogueOp("mul", scalar=a.scale),) if a.scale != 1.0 else ())
    k1 = ctx.kernel(node, "eltwise", (xt,), pos, epilogue=pos_steps, suffix=".pos")
    neg_steps = [EpilogueOp("clamp", params=(("min", -math.inf), ("max", 0.0)))]
    if a.input_scale != 1.0:
        neg_steps.append(EpilogueOp("mul", scalar=a.input_scale))
    neg_steps += [EpilogueOp("exp"), EpilogueOp("add", scalar=-1.0), EpilogueOp("mul", scalar=a.scale * a.alpha),
                  EpilogueOp("add", operand=pos)]
    k2 = ctx.kernel(node, "eltwise", (xt,), ctx.out(y), epilogue=tuple(neg_steps))
    return single(k1, k2)


@rule("expm1")
def lower_expm1(ctx: LowerContext, node: Node):
    """exp(x) - 1 as one eltwise kernel (fp16 on the NPU: the cancellation near 0 is within its error)."""
    x, y = node.inputs[0], node.outputs[0]
    epi = (EpilogueOp("exp"), EpilogueOp("add", scalar=-1.0))
    return single(ctx.kernel(node, "eltwise", (ctx.tensor(x),), ctx.out(y), epilogue=epi))


@rule("upsample_bilinear2d")
def lower_bilinear(ctx: LowerContext, node: Node):
    a = node.attrs
    h, w = node.inputs[0].type.shape[2:]
    oh, ow = a.output_size
    ah = linear_weights(h, oh, a.align_corners, a.scales[0])
    aw = linear_weights(w, ow, a.align_corners, a.scales[1])
    return separable(ctx, node, ah, aw, "bilinear")


def adaptive_weights(n_in: int, n_out: int) -> torch.Tensor:
    """The [n_out, n_in] matrix of adaptive average pooling: output i averages the inputs
    [floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out))."""
    m = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def separable(ctx: LowerContext, node: Node, ah: torch.Tensor, aw: torch.Tensor, what: str):
    """``y[n, c] = ah @ x[n, c] @ aw^T`` (``ah`` [oh, h], ``aw`` [ow, w], constants) as two gemm
    kernels: a linear map of the rows and one of the columns of every channel (bilinear
    resizing, adaptive average pooling with windows of unequal sizes)."""
    x, y = node.inputs[0], node.outputs[0]
    n, c, h, w = x.type.shape
    oh, ow = ah.shape[0], aw.shape[0]
    tag = f"{y.name}.{what}"
    awt_t = broadcast_to(ctx.const_tensor(tag, aw.float().T.contiguous(), ".w"), (n, c, w, ow))
    ah_t = broadcast_to(ctx.const_tensor(tag, ah.float().contiguous(), ".h"), (n, c, oh, h))
    rows = ctx.temp(f"{y.name}.rows", (n, c, h, ow))
    k1 = ctx.kernel(node, "gemm", (ctx.tensor(x), awt_t), rows, suffix=".w")
    k2 = ctx.kernel(node, "gemm", (ah_t, rows), ctx.out(y), suffix=".h")
    return single(k1, k2)


@rule("group_norm")
def lower_group_norm(ctx: LowerContext, node: Node):
    """group_norm as a ``layernorm`` kernel over each group's elements (the input seen as
    [N, groups, C/groups * spatial], row-major; a copy first when its layout is not), then the
    per-channel affine as an ``eltwise`` kernel."""
    x, w, b = node.inputs
    y = node.outputs[0]
    n, c = x.type.shape[:2]
    g = node.attrs.groups
    rest = x.type.numel // (n * g)
    t = ctx.tensor(x)
    grouped = t.reshape((n, g, rest))
    pre = []
    if grouped is None:
        dense = ctx.temp(f"{y.name}.rm", t.shape)
        pre.append(ctx.kernel(node, "copy", (t,), dense, suffix=".rm"))
        grouped = dense.reshape((n, g, rest))
    tag = f"{y.name}.group_norm"
    ones = ctx.const_tensor(tag, torch.ones(rest), ".ones")
    zeros = ctx.const_tensor(tag, torch.zeros(rest), ".zeros")
    normed = ctx.temp(f"{y.name}.normed", (n, g, rest))
    k1 = ctx.kernel(node, "layernorm", (grouped, ones, zeros), normed, LayerNormAttrs(1, node.attrs.eps), suffix=".norm")
    chan = (c,) + (1,) * (x.type.rank - 2)
    wt = broadcast_to(ctx.tensor(w).reshape(chan), x.type.shape)
    bt = broadcast_to(ctx.tensor(b).reshape(chan), x.type.shape)
    k2 = ctx.kernel(node, "eltwise", (normed.reshape(x.type.shape),), ctx.out(y),
                    epilogue=(EpilogueOp("mul", operand=wt), EpilogueOp("add", operand=bt)))
    return single(*pre, k1, k2)


MAX_FLIP_COPIES = 64  # a flip is one copy per slice of the flipped dims


@rule("flip")
def lower_flip(ctx: LowerContext, node: Node):
    """flip of dims other than the innermost: one ``copy`` kernel per slice of the flipped dims
    into the mirrored slice of the output (DMA strides are not negative, so the innermost dim,
    whose elements a copy moves in order, cannot be reversed this way)."""
    x, y = node.inputs[0], node.outputs[0]
    dims = node.attrs.dims
    shape = x.type.shape
    if x.type.rank - 1 in dims and shape[-1] > 1:
        return "flip of the innermost dim: the NPU's copies move a row's elements in order"
    count = 1
    for d in dims:
        count *= shape[d]
    if count > MAX_FLIP_COPIES:
        return f"flip of {count} slices: more than {MAX_FLIP_COPIES} copy kernels"
    src_all, dst_all = ctx.tensor(x), ctx.out(y)
    kernels = []
    for k in range(count):
        src, dst, rest = src_all, dst_all, k
        for d in reversed(dims):
            i, rest = rest % shape[d], rest // shape[d]
            src, dst = src.slice(d, i, i + 1), dst.slice(d, shape[d] - 1 - i, shape[d] - i)
        kernels.append(ctx.kernel(node, "copy", (src,), dst, suffix=f".{k}"))
    return single(*kernels)


@rule("cumsum")
def lower_cumsum(ctx: LowerContext, node: Node):
    """A float cumsum along ``dim`` is a matrix product with the constant upper-triangular
    matrix of ones: ``y = x @ U`` with ``x`` seen with ``dim`` last (a ``gemm`` kernel)."""
    x, y = node.inputs[0], node.outputs[0]
    if not x.type.dtype.is_float:
        return f"cumsum of {x.type.dtype.value}: the NPU sums only the fp16 values of a float model"
    d, rank = node.attrs.dim, x.type.rank
    n = x.type.shape[d]
    perm = tuple(i for i in range(rank) if i != d) + (d,)
    xt, yt = ctx.tensor(x).permute(perm), ctx.out(y).permute(perm)
    if rank == 1:
        xt, yt = xt.reshape((1, n)), yt.reshape((1, n))
        if xt is None or yt is None:
            return "cumsum of a 1-D view the NPU cannot see as a row"
    upper = ctx.const_tensor(f"{y.name}.cumsum", torch.triu(torch.ones(n, n)), ".upper")
    bt = broadcast_to(upper, xt.shape[:-2] + (n, n))
    return single(ctx.kernel(node, "gemm", (xt, bt), yt))


@rule("conv_transpose2d")
def lower_conv_transpose(ctx: LowerContext, node: Node):
    """A transposed convolution as a convolution over the zero-inserted input
    (:func:`transposed_as_conv`) with the float bias in the epilogue."""
    w = node.inputs[1]
    b = node.inputs[2] if len(node.inputs) == 3 else None
    wc = ctx.const(w)
    if wc is None:
        return "conv_transpose2d with weights computed at run time: the NPU's convolutions take constant weights"
    if b is not None and ctx.const(b) is None:
        return "conv_transpose2d with a bias computed at run time"
    wt = ctx.const_tensor(ctx.const_of[w], flipped_weight(wc, node.attrs.groups), "~convT")
    epi = bias_epilogue(ctx, b, node.outputs[0].type.shape, 1)
    return transposed_as_conv(ctx, node, wt, (), epi, 0.0)


def flipped_weight(w: torch.Tensor, groups: int) -> torch.Tensor:
    """The conv2d weight ``[O, I/groups, kh, kw]`` that computes a transposed convolution with
    weight ``w`` ``[I, O/groups, kh, kw]`` over the zero-inserted input:
    ``w'[o, c, i, j] = w[c, o, kh-1-i, kw-1-j]`` per group."""
    i, og, kh, kw = w.shape
    g = groups
    return w.reshape(g, i // g, og, kh, kw).transpose(1, 2).reshape(g * og, i // g, kh, kw).flip(-2, -1).contiguous()


def transposed_as_conv(ctx: LowerContext, node: Node, wt, consts: tuple, epi: tuple, zero: float, quant=None):
    """The kernels of a transposed convolution ``node`` (float or int8): ``x`` is copied with a
    stride of ``stride`` into a channels-last buffer filled with ``zero`` (0.0, or the int8 code
    of the real zero) with a border of ``dilation * (k - 1) - padding`` (plus
    ``output_padding`` at the bottom and right; a negative border crops), then a stride-1
    ``conv2d`` (``depthwise_conv2d`` when every group is one channel) with the flipped weights
    ``wt`` and the extra operands ``consts`` (an int8 kernel's folded bias and REQUANT records)
    computes every output pixel.  The array spends ``stride^2`` times the transposed
    convolution's MACs, on the zeros; a stride of 1 with an equal border needs no buffer (the
    conv pads, with ``zero`` too).  ``quant``: the int8 kernel's QuantAttrs."""
    from dataclasses import replace

    from npuc.ir.ops.linalg import Conv2dAttrs

    x, y = node.inputs[0], node.outputs[0]
    a = node.attrs
    n, c, h, wd = x.type.shape
    og, kh, kw = node.inputs[1].type.shape[1:]
    g = a.groups
    lo = [a.dilation[i] * (k - 1) - a.padding[i] for i, k in enumerate((kh, kw))]
    hi = [lo[i] + a.output_padding[i] for i in range(2)]
    kind = "depthwise_conv2d" if g > 1 and g == c == g * og else "conv2d"

    def conv(inp, padding):
        k = ctx.kernel(node, kind, (inp, wt, *consts), ctx.out(y), Conv2dAttrs((1, 1), tuple(padding), a.dilation, g),
                       epi)
        return k if quant is None else replace(k, quant=quant)

    if a.stride == (1, 1) and lo == hi and min(lo) >= 0:
        xt, pre = channels_last(ctx, node, ctx.tensor(x))
        return single(*pre, conv(xt, lo))
    oh, ow = y.type.shape[2:]
    hp, wp = oh + a.dilation[0] * (kh - 1), ow + a.dilation[1] * (kw - 1)
    buf = ctx.temp(f"{y.name}.zero_inserted", (n, c, hp, wp), NHWC)
    fill = ctx.kernel(node, "fill", (), buf, FillAttrs(zero), suffix=".zeros")
    src, dst = ctx.tensor(x), buf
    for d, (size, s, first) in enumerate(zip((h, wd), a.stride, lo), start=2):
        i0 = max(0, -(-(-first) // s))  # first input row whose position first + i*s is >= 0
        i1 = min(size, (dst.shape[d] - 1 - first) // s + 1)  # past the last one inside the buffer
        if i1 <= i0:
            return single(fill, conv(buf, (0, 0)))
        src = src.slice(d, i0, i1)
        dst = dst.slice(d, first + i0 * s, first + (i1 - 1) * s + 1, s)
    copy = ctx.kernel(node, "copy", (src,), dst, suffix=".insert")
    return single(fill, copy, conv(buf, (0, 0)))


@rule("grid_sample")
def lower_grid_sample(ctx: LowerContext, node: Node):
    """``grid_sample`` as one ``grid_sample`` kernel (VGATHER of the image's channels-last rows
    by the computed corner indices, docs/kernels.md); x is copied channels-last first when it
    is not.  Reflection padding and bicubic sampling stay on the CPU."""
    a = node.attrs
    if a.mode not in ("bilinear", "nearest"):
        return f"grid_sample mode {a.mode!r}: the NPU samples bilinear or nearest only"
    if a.padding_mode not in ("zeros", "border"):
        return f"grid_sample padding_mode {a.padding_mode!r}: the NPU pads with zeros or the border only"
    x, grid = node.inputs
    xt, pre = channels_last(ctx, node, ctx.tensor(x))
    return single(*pre, ctx.kernel(node, "grid_sample", (xt, ctx.tensor(grid)), ctx.out(node.outputs[0]), a))
