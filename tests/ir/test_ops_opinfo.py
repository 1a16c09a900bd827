"""Per-op tests against PyTorch, driven by PyTorch's OpInfo database.

For every OpInfo that maps onto a graph op, each sample (cpu, float32, capped) is translated by a
small adapter into operands + attributes of the graph op, built as a one-op graph (running the
op's infer and verify), and checked: the inferred output type equals the shape and dtype of the
OpInfo's own result, and the interpreted values equal it.  A sample an adapter cannot express is
skipped by an explicit rule whose reason is returned (a string) and counted.

``python tests/ir/test_ops_opinfo.py`` prints the used/skipped counts and the skip reasons.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
from irtestlib import Case, check
from torch.testing._internal.common_methods_invocations import op_db

from npuc.ir import DType, NoAttrs, all_ops
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

MAX_USED = 32  # samples checked per OpInfo
MAX_SEEN = 128  # samples looked at per OpInfo

Adapted = Case | str  # a case, or the reason the sample is skipped


@dataclass(frozen=True)
class Entry:
    """How an OpInfo maps onto a graph op."""

    graph_op: str
    adapt: Callable[[Any], Adapted]
    unusable: str = ""  # when set: why no sample can be expressed (checked to stay true)


# --------------------------------------------------------------------------- adapter helpers


def params(sample, names: tuple[str, ...], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sample's positional args and kwargs, by parameter name."""
    p = dict(defaults or {})
    if len(sample.args) > len(names):
        raise AssertionError(f"sample has more args than {names}")
    p.update(zip(names, sample.args))
    p.update(sample.kwargs)
    return p


def pair(v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def norm_dim(d: int, rank: int) -> int:
    return d % rank if d < 0 else d


def unknown_kwargs(sample, allowed: set[str]) -> str | None:
    extra = sorted(set(sample.kwargs) - allowed)
    return f"unsupported keyword arguments {extra}" if extra else None


def unary(op: str, attrs: Any = None, allowed: set[str] = frozenset({"inplace"})) -> Callable[[Any], Adapted]:
    def adapt(s) -> Adapted:
        if s.args:
            return "extra positional arguments"
        if reason := unknown_kwargs(s, set(allowed)):
            return reason
        if s.kwargs.get("inplace"):
            return "in-place form"
        return Case(op, (s.input,), attrs)

    return adapt


def scalar_operand(v: Any, like: torch.Tensor) -> torch.Tensor | str:
    """A Python scalar becomes a 0-d tensor of the other operand's dtype (as the frontend does)."""
    if isinstance(v, complex):
        return "complex scalar operand"
    return torch.tensor(v, dtype=like.dtype)


def binary(op: str) -> Callable[[Any], Adapted]:
    def adapt(s) -> Adapted:
        if len(s.args) != 1:
            return "not exactly one other operand"
        if reason := unknown_kwargs(s, {"alpha"}):
            return reason
        if s.kwargs.get("alpha", 1) != 1:
            return "alpha != 1 (the frontend emits a separate mul)"
        other = s.args[0]
        consts: frozenset[int] = frozenset()
        if not isinstance(other, torch.Tensor):
            other = scalar_operand(other, s.input)
            if isinstance(other, str):
                return other
            consts = frozenset({1})
        if not isinstance(s.input, torch.Tensor):
            return "scalar first operand"
        if other.dtype != s.input.dtype:
            return "operand dtypes differ (the frontend inserts a cast)"
        return Case(op, (s.input, other), NoAttrs(), consts)

    return adapt


# ----------------------------------------------------------------------- elementwise adapters


def adapt_gelu(s) -> Adapted:
    if reason := unknown_kwargs(s, {"approximate"}):
        return reason
    return Case("gelu", (s.input,), GeluAttrs(s.kwargs.get("approximate", "none")))


def clamp_case(x: torch.Tensor, lo: Any, hi: Any) -> Adapted:
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        return "tensor bounds (the frontend lowers them to maximum/minimum)"
    if lo is None and hi is None:
        return "no bound at all"
    return Case("clamp", (x,), ClampAttrs(None if lo is None else float(lo), None if hi is None else float(hi)))


def adapt_clamp(s) -> Adapted:
    p = params(s, ("min", "max"), {"min": None, "max": None})
    return clamp_case(s.input, p["min"], p["max"])


def adapt_hardtanh(s) -> Adapted:
    p = params(s, ("min_val", "max_val", "inplace"), {"min_val": -1.0, "max_val": 1.0, "inplace": False})
    if p["inplace"]:
        return "in-place form"
    return clamp_case(s.input, p["min_val"], p["max_val"])


def adapt_relu6(s) -> Adapted:
    if s.args or s.kwargs.get("inplace"):
        return "extra arguments"
    return clamp_case(s.input, 0.0, 6.0)


def clamp_one_side(side: str) -> Callable[[Any], Adapted]:
    tensor_op = "maximum" if side == "min" else "minimum"

    def adapt(s) -> Adapted:
        (bound,) = s.args
        if isinstance(bound, torch.Tensor):
            if bound.dtype != s.input.dtype:
                return "operand dtypes differ (the frontend inserts a cast)"
            return Case(tensor_op, (s.input, bound), NoAttrs())
        return clamp_case(s.input, bound if side == "min" else None, bound if side == "max" else None)

    return adapt


def adapt_pow(s) -> Adapted:
    (e,) = s.args
    if isinstance(e, torch.Tensor) and e.dim() == 0:
        e = e.item()  # a constant 0-d exponent is folded into the attribute, as the frontend does
    if isinstance(e, torch.Tensor):
        return "tensor exponent (pow_tensor is not in the vocabulary)"
    if isinstance(e, complex):
        return "complex exponent"
    return Case("pow", (s.input,), PowAttrs(float(e)))


def adapt_to(s) -> Adapted:
    dtypes = [a for a in list(s.args) + list(s.kwargs.values()) if isinstance(a, torch.dtype)]
    if any(isinstance(a, torch.Tensor) for a in s.args):
        return "dtype taken from another tensor"
    if len(dtypes) != 1:
        return "no target dtype (device move only)"
    return Case("cast", (s.input,), CastAttrs(DType.from_torch(dtypes[0])))


def cast_to(dtype: DType) -> Callable[[Any], Adapted]:
    def adapt(s) -> Adapted:
        if s.args:
            return "extra positional arguments"
        return Case("cast", (s.input,), CastAttrs(dtype))

    return adapt


def adapt_where(s) -> Adapted:
    cond, other = s.args
    if not isinstance(other, torch.Tensor):
        other = scalar_operand(other, s.input)
        if isinstance(other, str):
            return other
    if other.dtype != s.input.dtype:
        return "operand dtypes differ (the frontend inserts a cast)"
    return Case("where", (cond, s.input, other), NoAttrs())


# ---------------------------------------------------------------- linear algebra and norms


def same_padding(kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int] | None:
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return None if any(t % 2 for t in totals) else (totals[0] // 2, totals[1] // 2)


def adapt_conv2d(s) -> Adapted:
    p = params(s, ("weight", "bias", "stride", "padding", "dilation", "groups"),
               {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1})
    if s.input.dim() != 4:
        return "unbatched input (the frontend adds the batch dim with reshape)"
    w, dil = p["weight"], pair(p["dilation"])
    padding = p["padding"]
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        padding = same_padding((w.shape[2], w.shape[3]), dil)
        if padding is None:
            return "asymmetric 'same' padding (the frontend emits a pad first)"
    attrs = Conv2dAttrs(pair(p["stride"]), pair(padding), dil, p["groups"])
    operands = (s.input, w) if p["bias"] is None else (s.input, w, p["bias"])
    return Case("conv2d", operands, attrs)


def adapt_linear(s) -> Adapted:
    p = params(s, ("weight", "bias"), {"bias": None})
    if p["weight"].dim() != 2:
        return "1-D weight (a dot product)"
    if s.input.dim() == 0:
        return "0-d input"
    operands = (s.input, p["weight"]) if p["bias"] is None else (s.input, p["weight"], p["bias"])
    return Case("linear", operands, NoAttrs())


def adapt_matmul(s) -> Adapted:
    (other,) = s.args
    if s.input.dim() < 2 or other.dim() < 2:
        return "a 1-D operand (the frontend reshapes it to a matrix)"
    return Case("matmul", (s.input, other), NoAttrs())


def adapt_batch_norm(s) -> Adapted:
    p = params(s, ("running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
               {"weight": None, "bias": None, "training": False, "eps": 1e-5})
    x = s.input
    if p["training"]:
        return "training mode (batch statistics)"
    if p["running_mean"] is None or p["running_var"] is None:
        return "no running statistics"
    if x.dim() < 2:
        return "input without a channel dim"
    c = x.shape[1]
    w = p["weight"] if p["weight"] is not None else torch.ones(c)
    b = p["bias"] if p["bias"] is not None else torch.zeros(c)
    return Case("batch_norm", (x, w, b, p["running_mean"], p["running_var"]), BatchNormAttrs(float(p["eps"])))


def adapt_layer_norm(s) -> Adapted:
    p = params(s, ("normalized_shape", "weight", "bias", "eps"), {"weight": None, "bias": None, "eps": 1e-5})
    if p["eps"] < 0:
        return "negative eps (npuc requires eps >= 0)"
    shape = tuple(p["normalized_shape"])
    if not shape:
        return "empty normalized_shape"
    w = p["weight"] if p["weight"] is not None else torch.ones(shape)
    b = p["bias"] if p["bias"] is not None else torch.zeros(shape)
    return Case("layer_norm", (s.input, w, b), LayerNormAttrs(len(shape), float(p["eps"])))


def softmax_like(op: str) -> Callable[[Any], Adapted]:
    def adapt(s) -> Adapted:
        p = params(s, ("dim", "dtype"), {"dtype": None})
        if p["dtype"] is not None:
            return "dtype argument (the frontend inserts a cast)"
        if s.input.dim() == 0:
            return "0-d input"
        return Case(op, (s.input,), SoftmaxAttrs(norm_dim(p["dim"], s.input.dim())))

    return adapt


# ----------------------------------------------------------------------------------- pooling


def adapt_max_pool2d(s) -> Adapted:
    p = params(s, ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
               {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "return_indices": False})
    if p["return_indices"]:
        return "indices output (unsupported unless unused)"
    if s.input.dim() != 4:
        return "unbatched input (the frontend adds the batch dim with reshape)"
    kernel = pair(p["kernel_size"])
    stride = kernel if p["stride"] in (None, (), []) else pair(p["stride"])
    attrs = MaxPool2dAttrs(kernel, stride, pair(p["padding"]), pair(p["dilation"]), bool(p["ceil_mode"]))
    return Case("max_pool2d", (s.input,), attrs)


def adapt_avg_pool2d(s) -> Adapted:
    p = params(s, ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
               {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                "divisor_override": None})
    if s.input.dim() != 4:
        return "unbatched input (the frontend adds the batch dim with reshape)"
    if p["divisor_override"] is not None and p["divisor_override"] < 1:
        return "divisor_override < 1 (npuc requires a positive divisor)"
    kernel = pair(p["kernel_size"])
    stride = kernel if p["stride"] in (None, (), []) else pair(p["stride"])
    attrs = AvgPool2dAttrs(kernel, stride, pair(p["padding"]), bool(p["ceil_mode"]),
                           bool(p["count_include_pad"]), p["divisor_override"])
    return Case("avg_pool2d", (s.input,), attrs)


def adapt_adaptive_avg_pool2d(s) -> Adapted:
    (size,) = s.args
    if s.input.dim() != 4:
        return "unbatched input (the frontend adds the batch dim with reshape)"
    size = (size, size) if isinstance(size, int) else tuple(size)
    size = tuple(s.input.shape[2 + i] if v is None else v for i, v in enumerate(size))
    return Case("adaptive_avg_pool2d", (s.input,), AdaptiveAvgPool2dAttrs(size))


# -------------------------------------------------------------------------------- reductions


def reduce(op: str) -> Callable[[Any], Adapted]:
    def adapt(s) -> Adapted:
        p = params(s, ("dim", "keepdim", "dtype"), {"dim": None, "keepdim": False, "dtype": None})
        x = s.input
        if p["dtype"] is not None:
            return "dtype argument (the frontend inserts a cast)"
        if x.dim() == 0:
            return "0-d input (nothing to reduce)"
        dims = p["dim"]
        if dims is None or dims == () or dims == []:
            dims = tuple(range(x.dim()))
        elif isinstance(dims, int):
            dims = (dims,)
        dims = tuple(sorted({norm_dim(d, x.dim()) for d in dims}))
        return Case(op, (x,), ReduceAttrs(dims, bool(p["keepdim"])))

    return adapt


def adapt_argmax(s) -> Adapted:
    p = params(s, ("dim", "keepdim"), {"dim": None, "keepdim": False})
    if p["dim"] is None:
        return "no dim (flattened argmax: the frontend reshapes first)"
    if s.input.dim() == 0:
        return "0-d input"
    return Case("argmax", (s.input,), ArgmaxAttrs(norm_dim(p["dim"], s.input.dim()), bool(p["keepdim"])))


# ----------------------------------------------------------------------------- shape adapters


def adapt_reshape(s) -> Adapted:
    (shape,) = s.args
    shape = list(shape)
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = s.input.numel() // known if known else 0
    return Case("reshape", (s.input,), ReshapeAttrs(tuple(shape)))


def adapt_permute(s) -> Adapted:
    (dims,) = s.args
    return Case("permute", (s.input,), PermuteAttrs(tuple(norm_dim(d, s.input.dim()) for d in dims)))


def adapt_expand(s) -> Adapted:
    (shape,) = s.args
    shape = list(shape)
    lead = len(shape) - s.input.dim()
    for i, d in enumerate(shape):
        if d == -1:
            shape[i] = s.input.shape[i - lead]
    return Case("expand", (s.input,), ExpandAttrs(tuple(shape)))


def adapt_narrow(s) -> Adapted:
    dim, start, length = s.args
    if isinstance(start, torch.Tensor):
        start = int(start)
    x = s.input
    dim = norm_dim(dim, x.dim())
    start = start + x.shape[dim] if start < 0 else start
    return Case("slice", (x,), SliceAttrs(dim, start, start + length, 1))


def adapt_select(s) -> Adapted:
    dim, index = s.args
    x = s.input
    dim = norm_dim(dim, x.dim())
    return Case("select", (x,), SelectAttrs(dim, index + x.shape[dim] if index < 0 else index))


def adapt_cat(s) -> Adapted:
    p = params(s, ("dim",), {"dim": 0})
    tensors = tuple(s.input)
    if any(t.dim() != tensors[0].dim() for t in tensors):
        return "legacy 1-D empty operand of another rank"
    if tensors[0].dim() == 0:
        return "0-d operands"
    if len({t.dtype for t in tensors}) > 1:
        return "operand dtypes differ (the frontend inserts a cast)"
    return Case("concat", tensors, ConcatAttrs(norm_dim(p["dim"], tensors[0].dim())))


def adapt_pad(s) -> Adapted:
    p = params(s, ("pad", "mode", "value"), {"mode": "constant", "value": None})
    if p["mode"] != "constant":
        return "non-constant padding mode"
    value = 0.0 if p["value"] is None else float(p["value"])
    return Case("pad", (s.input,), PadAttrs(tuple(p["pad"]), value))


def adapt_interpolate_nearest(s) -> Adapted:
    p = params(s, ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias"),
               {"size": None, "scale_factor": None, "mode": "nearest"})
    x = s.input
    if x.dim() != 4:
        return "not a 4-D (NCHW) input"
    if p["mode"] != "nearest":
        return "not mode 'nearest'"
    if p["size"] is not None:
        size = p["size"]
        size = (size, size) if isinstance(size, int) else tuple(size)
        return Case("upsample_nearest2d", (x,), UpsampleNearest2dAttrs((int(size[0]), int(size[1]))))
    scale = p["scale_factor"]
    scales = (scale, scale) if isinstance(scale, (int, float)) else tuple(scale)
    if any(f != int(f) for f in scales):
        return "non-integer scale factor (PyTorch maps indices with 1/scale, not in/out)"
    size = (x.shape[2] * int(scales[0]), x.shape[3] * int(scales[1]))
    return Case("upsample_nearest2d", (x,), UpsampleNearest2dAttrs(size))


def adapt_embedding(s) -> Adapted:
    (indices,) = s.args
    # padding_idx, scale_grad_by_freq and sparse only change gradients; max_norm rewrites the weight.
    if reason := unknown_kwargs(s, {"padding_idx", "scale_grad_by_freq", "sparse"}):
        return reason
    return Case("embedding", (s.input, indices), NoAttrs())


def adapt_index_select(s) -> Adapted:
    dim, index = s.args
    if s.input.dim() == 0:
        return "0-d input"
    return Case("index_select", (s.input, index), IndexSelectAttrs(norm_dim(dim, s.input.dim())))


# --------------------------------------------------------------------------------- the table

ENTRIES: dict[tuple[str, str], Entry] = {
    ("nn.functional.relu", ""): Entry("relu", unary("relu")),
    ("sigmoid", ""): Entry("sigmoid", unary("sigmoid")),
    ("tanh", ""): Entry("tanh", unary("tanh")),
    ("nn.functional.silu", ""): Entry("silu", unary("silu")),
    ("nn.functional.hardswish", ""): Entry("hardswish", unary("hardswish")),
    ("nn.functional.hardsigmoid", ""): Entry("hardsigmoid", unary("hardsigmoid")),
    ("exp", ""): Entry("exp", unary("exp")),
    ("log", ""): Entry("log", unary("log")),
    ("log1p", ""): Entry("log1p", unary("log1p")),
    ("expm1", ""): Entry("expm1", unary("expm1")),
    ("sqrt", ""): Entry("sqrt", unary("sqrt")),
    ("rsqrt", ""): Entry("rsqrt", unary("rsqrt")),
    ("neg", ""): Entry("neg", unary("neg")),
    ("reciprocal", ""): Entry("reciprocal", unary("reciprocal")),
    ("abs", ""): Entry("abs", unary("abs")),
    ("erf", ""): Entry("erf", unary("erf")),
    ("sin", ""): Entry("sin", unary("sin")),
    ("cos", ""): Entry("cos", unary("cos")),
    ("logical_not", ""): Entry("logical_not", unary("logical_not")),
    ("nn.functional.gelu", ""): Entry("gelu", adapt_gelu),
    ("clamp", ""): Entry("clamp", adapt_clamp, unusable="every sample bounds with tensors (lowered to maximum/minimum, "
                         "checked via clamp_min/clamp_max); scalar bounds are checked via hardtanh and relu6"),
    ("nn.functional.hardtanh", ""): Entry("clamp", adapt_hardtanh),
    ("nn.functional.relu6", ""): Entry("clamp", adapt_relu6),
    ("clamp_min", ""): Entry("maximum", clamp_one_side("min")),
    ("clamp_max", ""): Entry("minimum", clamp_one_side("max")),
    ("pow", ""): Entry("pow", adapt_pow),
    ("to", ""): Entry("cast", adapt_to),
    ("double", ""): Entry("cast", cast_to(DType.f64)),
    ("half", ""): Entry("cast", cast_to(DType.f16)),
    ("int", ""): Entry("cast", cast_to(DType.i32)),
    ("long", ""): Entry("cast", cast_to(DType.i64)),
    ("bool", ""): Entry("cast", cast_to(DType.bool)),
    ("add", ""): Entry("add", binary("add")),
    ("sub", ""): Entry("sub", binary("sub")),
    ("mul", ""): Entry("mul", binary("mul")),
    ("div", "no_rounding_mode"): Entry("div", binary("div")),
    ("true_divide", ""): Entry("div", binary("div")),
    ("maximum", ""): Entry("maximum", binary("maximum")),
    ("minimum", ""): Entry("minimum", binary("minimum")),
    ("eq", ""): Entry("eq", binary("eq")),
    ("ne", ""): Entry("ne", binary("ne")),
    ("lt", ""): Entry("lt", binary("lt")),
    ("le", ""): Entry("le", binary("le")),
    ("gt", ""): Entry("gt", binary("gt")),
    ("ge", ""): Entry("ge", binary("ge")),
    ("logical_and", ""): Entry("logical_and", binary("logical_and")),
    ("logical_or", ""): Entry("logical_or", binary("logical_or")),
    ("where", ""): Entry("where", adapt_where),
    ("nn.functional.conv2d", ""): Entry("conv2d", adapt_conv2d),
    ("nn.functional.linear", ""): Entry("linear", adapt_linear),
    ("matmul", ""): Entry("matmul", adapt_matmul),
    ("nn.functional.batch_norm", ""): Entry("batch_norm", adapt_batch_norm),
    ("nn.functional.layer_norm", ""): Entry("layer_norm", adapt_layer_norm),
    ("softmax", ""): Entry("softmax", softmax_like("softmax")),
    ("log_softmax", ""): Entry("log_softmax", softmax_like("log_softmax")),
    ("nn.functional.max_pool2d", ""): Entry("max_pool2d", adapt_max_pool2d),
    ("nn.functional.avg_pool2d", ""): Entry("avg_pool2d", adapt_avg_pool2d),
    ("nn.functional.adaptive_avg_pool2d", ""): Entry("adaptive_avg_pool2d", adapt_adaptive_avg_pool2d),
    ("sum", ""): Entry("reduce_sum", reduce("reduce_sum")),
    ("mean", ""): Entry("reduce_mean", reduce("reduce_mean")),
    ("amax", ""): Entry("reduce_max", reduce("reduce_max")),
    ("amin", ""): Entry("reduce_min", reduce("reduce_min")),
    ("argmax", ""): Entry("argmax", adapt_argmax),
    ("reshape", ""): Entry("reshape", adapt_reshape),
    ("permute", ""): Entry("permute", adapt_permute),
    ("expand", ""): Entry("expand", adapt_expand),
    ("narrow", ""): Entry("slice", adapt_narrow),
    ("select", ""): Entry("select", adapt_select),
    ("cat", ""): Entry("concat", adapt_cat),
    ("nn.functional.pad", "constant"): Entry("pad", adapt_pad),
    ("nn.functional.interpolate", "nearest"): Entry("upsample_nearest2d", adapt_interpolate_nearest),
    ("nn.functional.upsample_nearest", ""): Entry("upsample_nearest2d", adapt_interpolate_nearest),
    ("nn.functional.embedding", ""): Entry("embedding", adapt_embedding),
    ("index_select", ""): Entry("index_select", adapt_index_select),
}

# Graph ops no OpInfo checks; each is covered by hand-written cases in ircases.py instead.
NO_OPINFO: dict[str, str] = {
    "const": "not a computation; exercised by every graph with a constant operand",
    **{
        name: "quantized op: checked against PyTorch's quantized reference and exact arithmetic in tests/quant/"
        for name in ("quantize", "dequantize", "qconv2d", "qconv_transpose2d", "qlinear", "qmatmul", "qadd", "qmul", "qlut",
                     "qavg_pool2d", "qmean", "qclamp")
    },
    **{
        name: "checked by hand-written cases (ircases.py), its ATen import against eager "
              "(tests/regress/test_model_ops.py) and the random graphs (tests/fuzz)"
        for name in ("elu", "flip", "cumsum", "gather", "group_norm", "conv_transpose2d", "upsample_bilinear2d",
                     "grid_sample")
    },
}

OPINFOS = {(o.name, o.variant_test_name): o for o in op_db}


def _tensor_input(s) -> bool:
    x = s.input
    return isinstance(x, torch.Tensor) or (isinstance(x, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in x))


def run_opinfo(key: tuple[str, str]) -> tuple[int, Counter]:
    """Check the samples of one OpInfo; return (samples used, skip reasons counted)."""
    info, entry = OPINFOS[key], ENTRIES[key]
    used, skipped = 0, Counter()
    for s in itertools.islice(info.reference_inputs("cpu", torch.float32), MAX_SEEN):
        case = entry.adapt(s) if _tensor_input(s) else "scalar (non-tensor) input"
        if isinstance(case, str):
            skipped[case] += 1
            continue
        assert case.op == entry.graph_op
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # deprecation notes of some functional aliases
            expected = info.op(s.input, *s.args, **s.kwargs)
        check(case, expected)
        used += 1
        if used == MAX_USED:
            break
    return used, skipped


@pytest.mark.parametrize("key", sorted(ENTRIES), ids=lambda k: "-".join(p for p in k if p))
def test_opinfo_samples(key: tuple[str, str], record_property) -> None:
    used, skipped = run_opinfo(key)
    record_property("samples_used", used)
    record_property("samples_skipped", dict(skipped))
    if ENTRIES[key].unusable:
        assert used == 0, f"{key} now has expressible samples: drop its 'unusable' note"
    else:
        assert used >= 1, f"no sample of {key} could be expressed: {dict(skipped)}"


def test_every_op_is_covered_by_opinfo_or_listed() -> None:
    covered = {e.graph_op for e in ENTRIES.values()}
    for op in all_ops():
        assert (op.name in covered) != (op.name in NO_OPINFO), f"op {op.name}: covered by OpInfo xor listed in NO_OPINFO"


def test_every_entry_names_an_existing_opinfo() -> None:
    missing = [k for k in ENTRIES if k not in OPINFOS]
    assert not missing


if __name__ == "__main__":
    total_used = total_skipped = 0
    for key in sorted(ENTRIES):
        used, skipped = run_opinfo(key)
        total_used += used
        total_skipped += sum(skipped.values())
        reasons = "; ".join(f"{n}x {r}" for r, n in sorted(skipped.items()))
        print(f"{'/'.join(p for p in key if p):40s} -> {ENTRIES[key].graph_op:20s} used {used:2d}  skipped {sum(skipped.values()):2d}  {reasons}")
    print(f"total: {total_used} samples checked, {total_skipped} skipped by rule, {len(ENTRIES)} OpInfos")
