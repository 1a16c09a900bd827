"""Hand-written cases: at least one per graph op, each with its expected value written
independently of the op's reference (formulas, index arithmetic, or a different torch call).

They cover what OpInfo samples do not: integer and bool dtypes, slices with steps, 3-way
broadcasting, depthwise convolution, non-divisible adaptive pooling, constant operands, ...
The text round-trip tests reuse them as one graph per op.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from irtestlib import Case

from npuc.ir import DType, NoAttrs
from npuc.ir.ops.elementwise import CastAttrs, ClampAttrs, GeluAttrs, PowAttrs
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.ir.ops.norm import BatchNormAttrs, LayerNormAttrs, SoftmaxAttrs
from npuc.ir.ops.pooling import AdaptiveAvgPool2dAttrs, AvgPool2dAttrs, MaxPool2dAttrs
from npuc.ir.ops.reduction import ArgmaxAttrs, ReduceAttrs
from npuc.ir.ops.shape import (
    ConcatAttrs,
    ExpandAttrs,
    IndexSelectAttrs,
    PadAttrs,
    PermuteAttrs,
    ReshapeAttrs,
    SelectAttrs,
    SliceAttrs,
    UpsampleNearest2dAttrs,
)

Expected = Callable[[], torch.Tensor]
CASES: list[tuple[str, Case, Expected]] = []


def case(name: str, c: Case, expected: Expected) -> None:
    CASES.append((name, c, expected))


g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def randint(lo: int, hi: int, *shape: int, dtype=torch.int32) -> torch.Tensor:
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


# ------------------------------------------------------------------------------ elementwise

x = randn(2, 3, 5) * 3
pos = x.abs() + 0.1
UNARY_FORMULAS: dict[str, tuple[torch.Tensor, Expected]] = {
    "relu": (x, lambda: torch.where(x > 0, x, torch.zeros_like(x))),
    "sigmoid": (x, lambda: 1 / (1 + torch.exp(-x))),
    "tanh": (x, lambda: (torch.exp(2 * x) - 1) / (torch.exp(2 * x) + 1)),
    "silu": (x, lambda: x / (1 + torch.exp(-x))),
    "hardswish": (x, lambda: x * torch.clamp(x + 3, 0, 6) / 6),
    "hardsigmoid": (x, lambda: torch.clamp(x + 3, 0, 6) / 6),
    "exp": (x, lambda: math.e ** x),
    "log": (pos, lambda: torch.log2(pos) * math.log(2)),
    "sqrt": (pos, lambda: pos ** 0.5),
    "rsqrt": (pos, lambda: pos ** -0.5),
    "neg": (x, lambda: 0 - x),
    "reciprocal": (pos, lambda: 1 / pos),
    "abs": (x, lambda: torch.where(x < 0, -x, x)),
    "erf": (x, lambda: torch.special.erf(x)),
    "sin": (x, lambda: torch.cos(x - math.pi / 2)),
    "cos": (x, lambda: torch.sin(x + math.pi / 2)),
    "logical_not": (torch.tensor([0.0, 1.0, -2.0, float("nan")]), lambda: torch.tensor([True, False, False, False])),
}
for op, (inp, fn) in UNARY_FORMULAS.items():
    case(op, Case(op, (inp,), NoAttrs()), fn)

xi = randint(-50, 50, 4, 7)
case("relu_i32", Case("relu", (xi,), NoAttrs()), lambda: xi * (xi > 0))
case("neg_i64", Case("neg", (xi.long(),), NoAttrs()), lambda: -1 * xi.long())
case("abs_i8", Case("abs", (xi.to(torch.int8),), NoAttrs()), lambda: (xi * xi.sign()).to(torch.int8))
case("logical_not_i32", Case("logical_not", (xi,), NoAttrs()), lambda: xi == 0)

case("gelu_none", Case("gelu", (x,), GeluAttrs("none")), lambda: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))
case("gelu_tanh", Case("gelu", (x,), GeluAttrs("tanh")),
     lambda: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))))
case("clamp_relu6", Case("clamp", (x,), ClampAttrs(0.0, 6.0)), lambda: torch.minimum(torch.relu(x), torch.tensor(6.0)))
case("clamp_min_only", Case("clamp", (x,), ClampAttrs(-0.5, None)), lambda: torch.maximum(x, torch.tensor(-0.5)))
case("clamp_max_only", Case("clamp", (x,), ClampAttrs(None, 1.25)), lambda: torch.minimum(x, torch.tensor(1.25)))
case("clamp_i32", Case("clamp", (xi,), ClampAttrs(-3.0, 4.0)), lambda: xi.clamp(-3, 4))
case("clamp_i32_inf", Case("clamp", (xi,), ClampAttrs(float("-inf"), 4.0)), lambda: torch.where(xi > 4, 4, xi).int())
case("pow_2", Case("pow", (x,), PowAttrs(2.0)), lambda: x * x)
case("pow_half", Case("pow", (pos,), PowAttrs(0.5)), lambda: torch.sqrt(pos))
case("pow_neg", Case("pow", (pos,), PowAttrs(-1.5)), lambda: 1 / (pos * torch.sqrt(pos)))
case("pow_i64_3", Case("pow", (xi.long(),), PowAttrs(3.0)), lambda: xi.long() * xi.long() * xi.long())
case("cast_f32_i32", Case("cast", (x,), CastAttrs(DType.i32)), lambda: torch.trunc(x).int())
case("cast_i32_f16", Case("cast", (xi,), CastAttrs(DType.f16)), lambda: xi.half())
case("cast_f32_bool", Case("cast", (torch.tensor([0.0, -0.0, 2.0, float("nan")]),), CastAttrs(DType.bool)),
     lambda: torch.tensor([False, False, True, True]))

a, b = randn(3, 1, 5), randn(4, 1)
b_pos = b.abs() + 0.5
scalar = torch.tensor(2.5)
BINARY_FORMULAS: dict[str, tuple[torch.Tensor, torch.Tensor, Expected]] = {
    "add": (a, b, lambda: a.expand(3, 4, 5) + b.expand(3, 4, 5)),
    "sub": (a, b, lambda: a + (-b)),
    "mul": (a, b, lambda: torch.exp(torch.log(a.abs()) + torch.log(b.abs())) * torch.sign(a) * torch.sign(b)),
    "div": (a, b_pos, lambda: a * (1 / b_pos)),
    "maximum": (a, b, lambda: torch.where(a > b, a, b)),
    "minimum": (a, b, lambda: torch.where(a < b, a, b)),
    "eq": (a, a[:, :, :1], lambda: (a - a[:, :, :1]).abs() == 0),
    "ne": (a, a[:, :, :1], lambda: (a - a[:, :, :1]).abs() != 0),
    "lt": (a, b, lambda: (b - a) > 0),
    "le": (a, b, lambda: (b - a) >= 0),
    "gt": (a, b, lambda: (a - b) > 0),
    "ge": (a, b, lambda: (a - b) >= 0),
    "logical_and": (a > 0, b > 0, lambda: (a > 0) & (b > 0)),
    "logical_or": (a > 0, b > 0, lambda: (a > 0) | (b > 0)),
}
for op, (l, r, fn) in BINARY_FORMULAS.items():
    case(op, Case(op, (l, r), NoAttrs()), fn)

case("add_scalar_const", Case("add", (a, scalar), NoAttrs(), frozenset({1})), lambda: a + 2.5)
case("mul_const_first", Case("mul", (scalar, a), NoAttrs(), frozenset({0})), lambda: a * 2.5)
case("sub_i32", Case("sub", (xi, xi[:1]), NoAttrs()), lambda: xi - xi[0])
case("maximum_i8", Case("maximum", (xi.to(torch.int8), torch.tensor(3, dtype=torch.int8)), NoAttrs()),
     lambda: xi.clamp(min=3).to(torch.int8))
case("lt_i64", Case("lt", (xi.long(), torch.tensor([[0]])), NoAttrs()), lambda: xi < 0)
case("eq_bool", Case("eq", (xi > 0, xi > 5), NoAttrs()), lambda: (xi > 0) == (xi > 5))
case("logical_or_i32", Case("logical_or", (xi, xi * 0), NoAttrs()), lambda: xi != 0)
cond, wx, wy = randn(5) > 0, randn(3, 1, 1), randn(4, 1)


def _where_expected() -> torch.Tensor:
    out = torch.empty(3, 4, 5)
    for i in range(3):
        for j in range(4):
            for k in range(5):
                out[i, j, k] = wx[i, 0, 0] if cond[k] else wy[j, 0]
    return out


case("where_3way", Case("where", (cond, wx, wy), NoAttrs()), _where_expected)


# ----------------------------------------------------------------------------- linear algebra

xc = randn(2, 4, 9, 7)
w_dw = randn(8, 1, 3, 3)
b8 = randn(8)
case("conv2d_depthwise_multiplier", Case("conv2d", (xc, w_dw, b8), Conv2dAttrs((2, 1), (1, 2), (1, 1), 4)),
     lambda: _conv_naive(xc, w_dw, b8, (2, 1), (1, 2), (1, 1), 4))
w_g = randn(6, 2, 2, 3)
case("conv2d_grouped_dilated", Case("conv2d", (xc, w_g), Conv2dAttrs((1, 2), (0, 1), (3, 2), 2)),
     lambda: _conv_naive(xc, w_g, None, (1, 2), (0, 1), (3, 2), 2))
w_1 = randn(5, 4, 1, 1)
case("conv2d_pointwise_const_weight", Case("conv2d", (xc, w_1), Conv2dAttrs(), frozenset({1})),
     lambda: torch.einsum("nchw,oc->nohw", xc, w_1[:, :, 0, 0]))


def _conv_naive(x, w, b, stride, padding, dilation, groups) -> torch.Tensor:
    """Convolution as an explicit sum over the kernel taps (unfold-free)."""
    n, c, h, wd = x.shape
    o, ipg, kh, kw = w.shape
    xp = F.pad(x, (padding[1], padding[1], padding[0], padding[0]))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = torch.zeros(n, o, oh, ow)
    opg = o // groups
    for oc in range(o):
        gi = oc // opg
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dilation[0], j * dilation[1]
                patch = xp[:, gi * ipg:(gi + 1) * ipg, r0:r0 + stride[0] * (oh - 1) + 1:stride[0],
                           c0:c0 + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, oc] += torch.einsum("nchw,c->nhw", patch, w[oc, :, i, j])
    if b is not None:
        out += b.view(1, -1, 1, 1)
    return out


xl, wl, bl = randn(2, 3, 6), randn(4, 6), randn(4)
case("linear_rank3_bias", Case("linear", (xl, wl, bl), NoAttrs()), lambda: torch.einsum("abk,nk->abn", xl, wl) + bl)
case("linear_rank1_no_bias", Case("linear", (xl[0, 0], wl), NoAttrs()), lambda: (wl * xl[0, 0]).sum(1))
ma, mb = randn(2, 1, 3, 4), randn(5, 4, 6)
case("matmul_batch_broadcast", Case("matmul", (ma, mb), NoAttrs()),
     lambda: torch.einsum("xyik,ykj->xyij", ma.expand(2, 5, 3, 4), mb))
mi_a, mi_b = randint(-5, 5, 3, 4), randint(-5, 5, 4, 2)
case("matmul_i32", Case("matmul", (mi_a, mi_b), NoAttrs()), lambda: (mi_a.unsqueeze(2) * mi_b.unsqueeze(0)).sum(1).int())

# --------------------------------------------------------------------------------- norms

xb = randn(2, 3, 4, 5)
bn = (randn(3), randn(3), randn(3), randn(3).abs() + 0.1)
case("batch_norm_nchw", Case("batch_norm", (xb, *bn), BatchNormAttrs(1e-3), frozenset({1, 2, 3, 4})),
     lambda: (xb - bn[2].view(1, 3, 1, 1)) / torch.sqrt(bn[3].view(1, 3, 1, 1) + 1e-3) * bn[0].view(1, 3, 1, 1)
     + bn[1].view(1, 3, 1, 1))
xb2 = randn(6, 3)
case("batch_norm_rank2", Case("batch_norm", (xb2, *bn), BatchNormAttrs(0.0)),
     lambda: (xb2 - bn[2]) / torch.sqrt(bn[3]) * bn[0] + bn[1])
lw, lb = randn(4, 5), randn(4, 5)
case("layer_norm_rank2", Case("layer_norm", (xb, lw, lb), LayerNormAttrs(2, 1e-5)),
     lambda: (xb - xb.mean((2, 3), keepdim=True)) / torch.sqrt(xb.var((2, 3), unbiased=False, keepdim=True) + 1e-5)
     * lw + lb)
case("softmax_dim1", Case("softmax", (xb,), SoftmaxAttrs(1)), lambda: torch.exp(xb) / torch.exp(xb).sum(1, keepdim=True))
case("log_softmax_dim3", Case("log_softmax", (xb,), SoftmaxAttrs(3)),
     lambda: xb - torch.log(torch.exp(xb).sum(3, keepdim=True)))

# -------------------------------------------------------------------------------- pooling

xp = randn(1, 2, 7, 9)
case("max_pool2d_ceil_pad_dil", Case("max_pool2d", (xp,), MaxPool2dAttrs((3, 2), (2, 3), (1, 1), (2, 1), True)),
     lambda: _pool_naive(xp, (3, 2), (2, 3), (1, 1), (2, 1), True, "max"))
case("max_pool2d_plain", Case("max_pool2d", (xp,), MaxPool2dAttrs()), lambda: _pool_naive(xp, (2, 2), (2, 2), (0, 0), (1, 1), False, "max"))
case("avg_pool2d_exclude_pad_ceil",
     Case("avg_pool2d", (xp,), AvgPool2dAttrs((3, 3), (2, 2), (1, 1), True, False, None)),
     lambda: _pool_naive(xp, (3, 3), (2, 2), (1, 1), (1, 1), True, "avg_exclude"))
case("avg_pool2d_include_pad", Case("avg_pool2d", (xp,), AvgPool2dAttrs((2, 4), (1, 2), (1, 2), False, True, None)),
     lambda: _pool_naive(xp, (2, 4), (1, 2), (1, 2), (1, 1), False, "avg_include"))
case("avg_pool2d_divisor", Case("avg_pool2d", (xp,), AvgPool2dAttrs((2, 2), (2, 2), (0, 0), False, True, 3)),
     lambda: _pool_naive(xp, (2, 2), (2, 2), (0, 0), (1, 1), False, "sum") / 3)


def _pool_naive(x, kernel, stride, padding, dilation, ceil_mode, kind) -> torch.Tensor:
    """Pooling by explicit windows; ceil_mode windows must start inside input or left padding."""
    n, c, h, w = x.shape

    def count(size, k, s, p, d):
        last = size + 2 * p - d * (k - 1) - 1
        o = (last + (s - 1 if ceil_mode else 0)) // s + 1
        return o - 1 if ceil_mode and (o - 1) * s >= size + p else o

    oh, ow = (count(h, kernel[0], stride[0], padding[0], dilation[0]),
              count(w, kernel[1], stride[1], padding[1], dilation[1]))
    out = torch.empty(n, c, oh, ow)
    for i in range(oh):
        for j in range(ow):
            rows = [i * stride[0] - padding[0] + a * dilation[0] for a in range(kernel[0])]
            cols = [j * stride[1] - padding[1] + b * dilation[1] for b in range(kernel[1])]
            inside_r = [r for r in rows if 0 <= r < h]
            inside_c = [q for q in cols if 0 <= q < w]
            win = x[:, :, inside_r][:, :, :, inside_c]
            if kind == "max":
                out[:, :, i, j] = win.amax((2, 3))
            elif kind == "sum":
                out[:, :, i, j] = win.sum((2, 3))
            elif kind == "avg_exclude":
                out[:, :, i, j] = win.sum((2, 3)) / (len(inside_r) * len(inside_c))
            else:  # include padding, but not the part of a ceil-mode window past the padded input
                nr = len([r for r in rows if r < h + padding[0]])
                nc = len([q for q in cols if q < w + padding[1]])
                out[:, :, i, j] = win.sum((2, 3)) / (nr * nc)
    return out


case("adaptive_avg_pool2d_uneven", Case("adaptive_avg_pool2d", (xp,), AdaptiveAvgPool2dAttrs((3, 4))),
     lambda: _adaptive_naive(xp, (3, 4)))


def _adaptive_naive(x, size) -> torch.Tensor:
    n, c, h, w = x.shape
    out = torch.empty(n, c, *size)
    for i in range(size[0]):
        for j in range(size[1]):
            r0, r1 = (i * h) // size[0], -((-(i + 1) * h) // size[0])
            c0, c1 = (j * w) // size[1], -((-(j + 1) * w) // size[1])
            out[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean((2, 3))
    return out


# ------------------------------------------------------------------------------- reductions

xr = randn(3, 4, 5)
case("reduce_sum_02_keep", Case("reduce_sum", (xr,), ReduceAttrs((0, 2), True)),
     lambda: xr.sum(0, keepdim=True).sum(2, keepdim=True))
case("reduce_sum_i32_stays_i32", Case("reduce_sum", (xi,), ReduceAttrs((1,), False)),
     lambda: torch.tensor([int(sum(int(v) for v in row)) for row in xi], dtype=torch.int32))
case("reduce_mean_all", Case("reduce_mean", (xr,), ReduceAttrs((0, 1, 2), False)), lambda: xr.sum() / xr.numel())
case("reduce_max_1", Case("reduce_max", (xr,), ReduceAttrs((1,), False)), lambda: xr.max(1).values)
case("reduce_min_i32", Case("reduce_min", (xi,), ReduceAttrs((0,), True)), lambda: xi.min(0, keepdim=True).values)
ties = torch.tensor([[1, 5, 5, 2], [7, 7, 7, 7]], dtype=torch.int32)
case("argmax_first_tie", Case("argmax", (ties,), ArgmaxAttrs(1, False)), lambda: torch.tensor([1, 0]))
case("argmax_keepdim", Case("argmax", (xr,), ArgmaxAttrs(0, True)), lambda: xr.max(0, keepdim=True).indices)

# ------------------------------------------------------------------------- shape and movement

xs = torch.arange(2 * 3 * 7, dtype=torch.float32).reshape(2, 3, 7)
case("reshape", Case("reshape", (xs,), ReshapeAttrs((7, 1, 6))), lambda: xs.flatten().view(7, 1, 6))
case("permute", Case("permute", (xs,), PermuteAttrs((2, 0, 1))), lambda: xs.transpose(0, 2).transpose(1, 2))
case("expand", Case("expand", (xs[:, :1],), ExpandAttrs((4, 2, 3, 7))), lambda: xs[:, :1].repeat(4, 1, 3, 1))
case("slice_step3", Case("slice", (xs,), SliceAttrs(2, 1, 7, 3)), lambda: xs[:, :, [1, 4]])
case("slice_step2_odd", Case("slice", (xs,), SliceAttrs(2, 0, 7, 2)), lambda: xs[:, :, [0, 2, 4, 6]])
case("slice_empty", Case("slice", (xs,), SliceAttrs(1, 2, 2, 1)), lambda: xs[:, 2:2])
case("select", Case("select", (xs,), SelectAttrs(1, 2)), lambda: xs[:, 2])
case("concat_3", Case("concat", (xs, xs[:, :1] * 2, xs[:, :2] - 1), ConcatAttrs(1)),
     lambda: torch.tensor([xs[n].tolist() + (xs[n, :1] * 2).tolist() + (xs[n, :2] - 1).tolist() for n in range(2)]))
case("concat_1", Case("concat", (xs,), ConcatAttrs(0)), lambda: xs)


def _pad_expected() -> torch.Tensor:
    out = torch.full((2, 4, 6), -1.5)  # last dim: 1 before, 2 cropped after; dim 1: 1 after
    out[:, :3, 1:] = xs[:, :, :5]
    return out


case("pad_neg_and_pos", Case("pad", (xs,), PadAttrs((1, -2, 0, 1), -1.5)), _pad_expected)

case("pad_i32", Case("pad", (xi,), PadAttrs((2, 0), 7.0)), lambda: torch.cat([torch.full((4, 2), 7, dtype=torch.int32), xi], 1))
xu = randn(1, 2, 3, 5)
case("upsample_nearest2d_uneven", Case("upsample_nearest2d", (xu,), UpsampleNearest2dAttrs((7, 11))),
     lambda: xu[:, :, [(i * 3) // 7 for i in range(7)]][:, :, :, [(j * 5) // 11 for j in range(11)]])
emb = randn(10, 4)
idx = torch.tensor([[0, 9, 3], [3, 3, 1]], dtype=torch.int32)
case("embedding_i32", Case("embedding", (emb, idx), NoAttrs(), frozenset({0})),
     lambda: torch.stack([torch.stack([emb[int(i)] for i in row]) for row in idx]))
case("index_select_repeats", Case("index_select", (xs, torch.tensor([6, 0, 6])), IndexSelectAttrs(2)),
     lambda: torch.stack([xs[:, :, 6], xs[:, :, 0], xs[:, :, 6]], 2))

# ------------------------------------------------------------------ ops added for real models

from npuc.ir.ops.elementwise import EluAttrs  # noqa: E402
from npuc.ir.ops.linalg import ConvTranspose2dAttrs  # noqa: E402
from npuc.ir.ops.norm import GroupNormAttrs  # noqa: E402
from npuc.ir.ops.reduction import CumsumAttrs  # noqa: E402
from npuc.ir.ops.resample import GridSampleAttrs, UpsampleBilinear2dAttrs  # noqa: E402
from npuc.ir.ops.shape import FlipAttrs, GatherAttrs  # noqa: E402

case("elu_alpha", Case("elu", (x,), EluAttrs(0.7)), lambda: torch.where(x > 0, x, 0.7 * (torch.exp(x) - 1)))
case("elu_selu", Case("elu", (x,), EluAttrs(1.6732632423543772, 1.0507009873554805)),
     lambda: 1.0507009873554805 * torch.where(x > 0, x, 1.6732632423543772 * (torch.exp(x) - 1)))
case("log1p", Case("log1p", (pos,)), lambda: torch.log(1 + pos.double()).float())
case("expm1", Case("expm1", (x,)), lambda: (torch.exp(x.double()) - 1).float())
case("flip_two_dims", Case("flip", (xs,), FlipAttrs((0, 2))), lambda: xs[[1, 0]][:, :, list(range(6, -1, -1))])
case("cumsum_dim2", Case("cumsum", (xs,), CumsumAttrs(2)), lambda: xs @ torch.triu(torch.ones(7, 7)))
case("cumsum_i32", Case("cumsum", (xi,), CumsumAttrs(0)),
     lambda: torch.stack([xi[: i + 1].sum(0) for i in range(xi.shape[0])]).to(torch.int32))
idx_ga = torch.tensor([[[6, 0], [1, 1], [2, 5]], [[0, 0], [3, 4], [6, 6]]])
case("gather_dim2", Case("gather", (xs, idx_ga), GatherAttrs(2)),
     lambda: torch.tensor([[[float(xs[i, j, int(idx_ga[i, j, k])]) for k in range(2)] for j in range(3)] for i in range(2)]))
x_gn, w_gn, b_gn = randn(2, 4, 3, 3), randn(4), randn(4)


def _group_norm_naive(x, groups, w, b, eps=1e-5):
    n, c = x.shape[:2]
    y = x.reshape(n, groups, -1)
    y = (y - y.mean(-1, keepdim=True)) / torch.sqrt(y.var(-1, unbiased=False, keepdim=True) + eps)
    return y.reshape(x.shape) * w[None, :, None, None] + b[None, :, None, None]


case("group_norm_2", Case("group_norm", (x_gn, w_gn, b_gn), GroupNormAttrs(2)), lambda: _group_norm_naive(x_gn, 2, w_gn, b_gn))
case("group_norm_instance", Case("group_norm", (x_gn, w_gn, b_gn), GroupNormAttrs(4)), lambda: _group_norm_naive(x_gn, 4, w_gn, b_gn))
x_ct, w_ct, b_ct = randn(1, 2, 3, 4), randn(2, 3, 3, 2), randn(3)


def _conv_transpose_naive(x, w, b, stride, padding, out_pad):
    """Every input pixel scatters x * w into the output (the definition)."""
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    oh = (h - 1) * stride[0] - 2 * padding[0] + kh + out_pad[0]
    ow = (wd - 1) * stride[1] - 2 * padding[1] + kw + out_pad[1]
    full = torch.zeros(n, o, oh + 2 * padding[0], ow + 2 * padding[1])
    for i in range(h):
        for j in range(wd):
            contrib = torch.einsum("nc,cokl->nokl", x[:, :, i, j], w)
            full[:, :, i * stride[0]: i * stride[0] + kh, j * stride[1]: j * stride[1] + kw] += contrib
    y = full[:, :, padding[0]: padding[0] + oh, padding[1]: padding[1] + ow]
    return y + b[None, :, None, None]


case("conv_transpose2d_stride_pad", Case("conv_transpose2d", (x_ct, w_ct, b_ct), ConvTranspose2dAttrs((2, 1), (1, 0), (1, 0))),
     lambda: _conv_transpose_naive(x_ct, w_ct, b_ct, (2, 1), (1, 0), (1, 0)))


def _linear_1d(n_in, n_out, align_corners):
    m = torch.zeros(n_out, n_in)
    for i in range(n_out):
        if align_corners:
            src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((i + 0.5) * n_in / n_out - 0.5, 0.0)
        lo = min(int(math.floor(src)), n_in - 1)
        hi = min(lo + 1, n_in - 1)
        frac = src - lo
        m[i, lo] += 1 - frac
        m[i, hi] += frac
    return m


x_bil = randn(1, 2, 3, 4)
for _ac in (False, True):
    case(f"upsample_bilinear2d_ac{int(_ac)}", Case("upsample_bilinear2d", (x_bil,), UpsampleBilinear2dAttrs((5, 7), _ac)),
         lambda _ac=_ac: _linear_1d(3, 5, _ac) @ x_bil @ _linear_1d(4, 7, _ac).T)
grid_s = torch.tensor([[[[-1.0, -1.0], [0.3, -0.2]], [[0.9, 0.6], [1.4, 0.0]]]])


def _grid_naive(x, grid_s):
    """Bilinear, zeros padding, align_corners=False: (x, y) in [-1, 1] -> ((x + 1) W - 1) / 2."""
    n, c, h, w = x.shape
    out = torch.zeros(n, c, grid_s.shape[1], grid_s.shape[2])
    for i in range(grid_s.shape[1]):
        for j in range(grid_s.shape[2]):
            gx, gy = float(grid_s[0, i, j, 0]), float(grid_s[0, i, j, 1])
            px, py = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2
            x0, y0 = math.floor(px), math.floor(py)
            for yy, xx in ((y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)):
                wgt = (1 - abs(px - xx)) * (1 - abs(py - yy))
                if 0 <= yy < h and 0 <= xx < w:
                    out[0, :, i, j] += wgt * x[0, :, yy, xx]
    return out


case("grid_sample_bilinear_zeros", Case("grid_sample", (x_bil, grid_s), GridSampleAttrs()), lambda: _grid_naive(x_bil, grid_s))
