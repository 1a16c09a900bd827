"""ATen rules for the ops real models needed beyond the core set: resampling (bilinear resize,
grid sampling), transposed convolution, group and instance normalization, ELU, log1p, flip,
cumsum and gather.  They register into the one table of :mod:`npuc.frontend.aten_table`."""

from __future__ import annotations

import torch

from npuc.frontend.aten_table import Dropped, _at_least_1d, norm_dim, norm_dims, pair, require_float_scalar, rule
from npuc.frontend.context import ConvertContext, Unsupported
from npuc.ir.graph import Value

# grid_sampler_2d's integer codes (ATen's GridSamplerInterpolation / GridSamplerPadding)
_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@rule("elu", "aten.elu.default")
def _elu(ctx: ConvertContext, a: dict) -> Value:
    dt = ctx.out_dtype()
    x = ctx.value(a["self"], dt)
    return ctx.add("elu", (x,), alpha=require_float_scalar(a["alpha"], "alpha of elu"),
                   scale=require_float_scalar(a["scale"], "scale of elu"),
                   input_scale=require_float_scalar(a["input_scale"], "input_scale of elu"))


@rule("log1p", "aten.log1p.default")
def _log1p(ctx: ConvertContext, a: dict) -> Value:
    return ctx.add("log1p", (ctx.value(a["self"], ctx.out_dtype()),))


@rule("expm1", "aten.expm1.default")
def _expm1(ctx: ConvertContext, a: dict) -> Value:
    return ctx.add("expm1", (ctx.value(a["self"], ctx.out_dtype()),))


@rule("flip", "aten.flip.default")
def _flip(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["self"])
    dims = tuple(sorted(set(norm_dims(a["dims"], x.type.rank))))
    return ctx.add("flip", (x,), dims=dims) if dims else x


@rule("cumsum", "aten.cumsum.default")
def _cumsum(ctx: ConvertContext, a: dict) -> Value:
    dt = ctx.out_dtype()
    x = _at_least_1d(ctx, ctx.value(a["self"], dt))
    out = ctx.add("cumsum", (x,), dim=norm_dim(a["dim"], max(1, ctx.type_of(x).rank)))
    return ctx.reshape(out, ctx.out_shape())


@rule("gather", "aten.gather.default")
def _gather(ctx: ConvertContext, a: dict) -> Value:
    x = _at_least_1d(ctx, ctx.value(a["self"]))
    index = _at_least_1d(ctx, ctx.value(a["index"]))
    out = ctx.add("gather", (x, index), dim=norm_dim(a["dim"], x.type.rank))
    return ctx.reshape(out, ctx.out_shape())


def _affine(ctx: ConvertContext, a: dict, channels: int, dt: torch.dtype) -> tuple[Value, Value]:
    w = ctx.value(a["weight"]) if a["weight"] is not None else ctx.tensor_const("ones", torch.ones(channels, dtype=dt))
    b = ctx.value(a["bias"]) if a["bias"] is not None else ctx.tensor_const("zeros", torch.zeros(channels, dtype=dt))
    return w, b


@rule("group_norm", "aten.native_group_norm.default")
def _group_norm(ctx: ConvertContext, a: dict) -> tuple:
    x = ctx.value(a["input"])
    c = x.type.shape[1]
    w, b = _affine(ctx, a, c, x.type.dtype.torch)
    out = ctx.add("group_norm", (x, w, b), groups=int(a["group"]), eps=float(a["eps"]))
    return (out, Dropped("saved mean of group_norm"), Dropped("saved inverse std of group_norm"))


@rule("group_norm", "aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(ctx: ConvertContext, a: dict) -> tuple:
    """Batch statistics of the input itself: instance norm (PyTorch folds the batch into the
    channels, so N = 1) is a group norm with one channel per group."""
    x = ctx.value(a["input"])
    if x.type.rank < 2 or x.type.shape[0] != 1:
        raise Unsupported("batch norm with batch statistics over a batch of more than one (training mode) "
                          "has no graph op; instance norm is supported")
    c = x.type.shape[1]
    w, b = _affine(ctx, a, c, x.type.dtype.torch)
    out = ctx.add("group_norm", (x, w, b), groups=c, eps=float(a["eps"]))
    return (out, Dropped("saved mean of batch_norm"), Dropped("saved inverse std of batch_norm"))


@rule("upsample_bilinear2d", "aten.upsample_bilinear2d.vec")
def _upsample_bilinear(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["input"])
    if x.type.rank != 4:
        raise Unsupported(f"bilinear upsampling of a rank-{x.type.rank} tensor (upsample_bilinear2d takes NCHW)")
    scales = tuple(0.0 if s is None else float(s) for s in (a["scale_factors"] or (None, None)))
    return ctx.add("upsample_bilinear2d", (x,), output_size=tuple(ctx.out_shape()[-2:]),
                   align_corners=bool(a["align_corners"]), scales=scales)


@rule("grid_sample", "aten.grid_sampler_2d.default")
def _grid_sampler(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["input"])
    grid = ctx.value(a["grid"], x.type.dtype.torch)
    mode, pad = int(a["interpolation_mode"]), int(a["padding_mode"])
    if mode not in _GRID_MODES or pad not in _GRID_PADDING:
        raise Unsupported(f"grid sampling mode {mode} / padding mode {pad} is unknown")
    return ctx.add("grid_sample", (x, grid), mode=_GRID_MODES[mode], padding_mode=_GRID_PADDING[pad],
                   align_corners=bool(a["align_corners"]))


def conv_transpose(ctx: ConvertContext, a: dict) -> Value:
    """aten.convolution with ``transposed``: a 2-D transposed convolution (1-D mapped onto it)."""
    x, w = ctx.value(a["input"]), ctx.value(a["weight"])
    bias = [] if a["bias"] is None else [ctx.value(a["bias"])]
    spatial = w.type.rank - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-D transposed convolution has no graph op (conv_transpose2d only)")
    if x.type.rank == spatial + 1:
        x = ctx.reshape(x, (1, *x.type.shape))

    def window(name: str) -> tuple[int, ...]:
        v = a[name]
        return pair(v, name) if spatial == 2 else (int(v[0] if isinstance(v, (list, tuple)) else v),)

    stride, padding, out_pad, dilation = (window(k) for k in ("stride", "padding", "output_padding", "dilation"))
    if spatial == 1:
        x = ctx.reshape(x, (*x.type.shape[:2], 1, x.type.shape[2]))
        w = ctx.reshape(w, (*w.type.shape[:2], 1, w.type.shape[2]))
        stride, padding, out_pad, dilation = (1, stride[0]), (0, padding[0]), (0, out_pad[0]), (1, dilation[0])
    y = ctx.add("conv_transpose2d", (x, w, *bias), stride=stride, padding=padding, output_padding=out_pad,
                dilation=dilation, groups=int(a["groups"]))
    return ctx.reshape(y, ctx.out_shape())
