"""The one table from ATen op overloads to npuc graph ops.

:data:`ATEN_TABLE` maps each supported ATen overload name (``"aten.convolution.default"``) to an
:class:`AtenRule`: the graph op(s) it becomes, as text for ``npuc ops`` and the docs, and a small
converter ``convert(ctx, args) -> result`` where ``args`` holds the op's arguments bound by schema
name.  A converter returns a graph value, a tuple of them (multi-output ATen ops), a
:class:`~npuc.frontend.context.Dropped` marker for results npuc does not compute, or None for ops
that only assert.  It raises :class:`~npuc.frontend.context.Unsupported` with a reason when a
particular use of the op has no graph-op form (a transposed convolution, a float ``%`` ...).

Conventions: binary operands are cast to PyTorch's promoted type (graph ops want equal dtypes),
Python scalars become 0-d constants of that type, and every dimension attribute is normalized to be
non-negative.  Shapes come from torch.export's recorded example values, so reshapes are static.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Callable

import torch

from npuc.frontend.context import ConvertContext, Dropped, Unsupported
from npuc.ir.graph import Value

Converter = Callable[[ConvertContext, dict[str, Any]], Any]


@dataclass(frozen=True)
class AtenRule:
    """How one ATen overload is imported: the graph op(s) it becomes and the converter doing it."""

    graph_ops: str
    convert: Converter
    fold: bool = True  # False: never evaluated at import time, even with every operand known


IDENTITY = "(identity)"
DROPPED = "(dropped)"

ATEN_TABLE: dict[str, AtenRule] = {}


# Entries for torch.export's training IR only (a converted PT2E module imported without a second
# export, npuc.frontend.importer.import_graph_module): core-ATen exports never contain them.
TRAINING_IR_OPS = frozenset({
    "aten.conv2d.default", "aten.conv1d.default", "aten.flatten.using_ints", "aten.reshape.default",
    "aten.dropout.default", "aten.batch_norm.default", "aten.native_batch_norm.default", "aten.to.dtype",
    "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar",
})


def rule(graph_ops: str, *aten_names: str, fold: bool = True) -> Callable[[Converter], Converter]:
    """Register ``fn`` as the converter of each ATen overload in ``aten_names``.

    ``fold=False`` keeps the op out of import-time folding (the quantize/dequantize ops, whose
    constant int8 operands must reach the graph as they are)."""

    def deco(fn: Converter) -> Converter:
        for name in aten_names:
            if name in ATEN_TABLE:
                raise RuntimeError(f"ATen op {name} has two rules")
            ATEN_TABLE[name] = AtenRule(graph_ops, fn, fold)
        return fn

    return deco


def supported_aten_ops() -> dict[str, str]:
    """Each supported ATen overload name -> the graph op(s) it becomes (comma separated)."""
    return {k: ATEN_TABLE[k].graph_ops for k in sorted(ATEN_TABLE)}


# ------------------------------------------------------------------------------ helpers


def norm_dim(dim: int, rank: int) -> int:
    """A dimension index made non-negative (a 0-d tensor accepts 0 and -1)."""
    r = max(rank, 1)
    if not -r <= dim < r:
        raise Unsupported(f"dim {dim} is out of range for rank {rank}")
    return dim % r


def norm_dims(dims: Any, rank: int) -> tuple[int, ...]:
    """Reduction dims made non-negative and sorted; None or [] means every dim."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({norm_dim(d, rank) for d in dims}))


def pair(v: Any, name: str) -> tuple[int, int]:
    """A (h, w) pair from one int or a list of one or two."""
    if isinstance(v, int):
        return (v, v)
    v = list(v)
    if len(v) == 1:
        return (int(v[0]), int(v[0]))
    if len(v) == 2:
        return (int(v[0]), int(v[1]))
    raise Unsupported(f"{name} {v} is not a 2-D window parameter")


def require_float_scalar(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise Unsupported(f"{what} must be a Python number, got {type(x).__name__}")
    return float(x)


# ------------------------------------------------------------------------------ structural


@rule(DROPPED, "aten._assert_tensor_metadata.default")
def _assert(ctx: ConvertContext, a: dict) -> None:
    return None


@rule(IDENTITY, "aten.clone.default", "aten.alias.default")
def _identity(ctx: ConvertContext, a: dict) -> Value:
    return ctx.value(a["self"])


@rule(IDENTITY, "aten.dropout.default")
def _dropout(ctx: ConvertContext, a: dict) -> Value:
    """Dropout of an inference graph (torch.export's training IR of a model in eval mode)."""
    if a["train"]:
        raise Unsupported("dropout in training mode is random; call model.eval() before exporting")
    return ctx.value(a["input"])


@rule("cast", "aten._to_copy.default", "aten.to.dtype")
def _to_copy(ctx: ConvertContext, a: dict) -> Value:
    """A cast (``aten.to.dtype`` is torch.export's training IR, read directly rather than
    decomposed node by node)."""
    return ctx.value(a["self"], ctx.out_dtype())


@rule("cast", "dim_order_ops._to_dim_order_copy.default")
def _to_dim_order_copy(ctx: ConvertContext, a: dict) -> Value:
    """ExecuTorch's edge dialect: a cast in the contiguous dimension order (others are refused)."""
    order = a["dim_order"]
    if order is not None and list(order) != sorted(order):
        raise Unsupported(f"a copy to dimension order {list(order)}: npuc imports contiguous tensors")
    return ctx.value(a["self"], ctx.out_dtype())


# ------------------------------------------------------------------------------ elementwise unary


def _unary(graph_op: str, keep_int: bool = False) -> Converter:
    def convert(ctx: ConvertContext, a: dict) -> Value:
        dt = ctx.out_dtype()
        x = ctx.value(a["self"], None if keep_int else dt)
        out = ctx.add(graph_op, (x,))
        return ctx.cast(out, dt)

    return convert


for _name, _op in (
    ("relu", "relu"), ("sigmoid", "sigmoid"), ("tanh", "tanh"), ("silu", "silu"),
    ("hardswish", "hardswish"), ("hardsigmoid", "hardsigmoid"), ("exp", "exp"), ("log", "log"),
    ("sqrt", "sqrt"), ("rsqrt", "rsqrt"), ("neg", "neg"), ("reciprocal", "reciprocal"),
    ("abs", "abs"), ("erf", "erf"), ("sin", "sin"), ("cos", "cos"),
):
    rule(_op, f"aten.{_name}.default")(_unary(_op))

rule("logical_not", "aten.logical_not.default")(_unary("logical_not", keep_int=True))


@rule("logical_not", "aten.bitwise_not.default")
def _bitwise_not(ctx: ConvertContext, a: dict) -> Value:
    if ctx.dtype_of(a["self"]) != torch.bool:
        raise Unsupported("bitwise not of integers has no graph op (only of booleans)")
    return ctx.add("logical_not", (ctx.value(a["self"]),))


@rule("gelu", "aten.gelu.default")
def _gelu(ctx: ConvertContext, a: dict) -> Value:
    return ctx.add("gelu", (ctx.value(a["self"]),), approximate=a["approximate"])


def _clamp_bound(x: Any, what: str) -> float | None:
    return None if x is None else require_float_scalar(x, what)


@rule("clamp", "aten.clamp.default")
def _clamp(ctx: ConvertContext, a: dict) -> Value:
    lo, hi = _clamp_bound(a["min"], "clamp min"), _clamp_bound(a["max"], "clamp max")
    x = ctx.value(a["self"], ctx.out_dtype())
    if lo is None and hi is None:
        return x
    return ctx.add("clamp", (x,), min=lo, max=hi)


@rule("clamp", "aten.hardtanh.default")
def _hardtanh(ctx: ConvertContext, a: dict) -> Value:
    lo = require_float_scalar(a["min_val"], "hardtanh min_val")
    hi = require_float_scalar(a["max_val"], "hardtanh max_val")
    return ctx.add("clamp", (ctx.value(a["self"]),), min=lo, max=hi)


@rule("maximum, minimum", "aten.clamp.Tensor")
def _clamp_tensor(ctx: ConvertContext, a: dict) -> Value:
    dt = ctx.out_dtype()
    x = ctx.value(a["self"], dt)
    if a["min"] is not None:
        x = ctx.add("maximum", (x, ctx.value(a["min"], dt)))
    if a["max"] is not None:
        x = ctx.add("minimum", (x, ctx.value(a["max"], dt)))
    return x


@rule("gt, mul, where", "aten.leaky_relu.default")
def _leaky_relu(ctx: ConvertContext, a: dict) -> Value:
    dt = ctx.out_dtype()
    x = ctx.value(a["self"])
    slope = require_float_scalar(a["negative_slope"], "negative_slope")
    positive = ctx.add("gt", (x, ctx.scalar(0.0, dt)))
    scaled = ctx.add("mul", (x, ctx.scalar(slope, dt)))
    return ctx.add("where", (positive, x, scaled))


@rule("pow", "aten.pow.Tensor_Scalar")
def _pow_scalar(ctx: ConvertContext, a: dict) -> Value:
    dt = ctx.out_dtype()
    e = require_float_scalar(a["exponent"], "exponent")
    return ctx.add("pow", (ctx.value(a["self"], dt),), exponent=e)


@rule("pow", "aten.pow.Tensor_Tensor")
def _pow_tensor(ctx: ConvertContext, a: dict) -> Value:
    e = ctx.folded(a["exponent"])
    if e is None or e.numel() != 1:
        raise Unsupported("only a constant single-element exponent has a graph op (pow {exponent})")
    dt = ctx.out_dtype()
    x = ctx.value(a["self"], dt)
    out = ctx.add("pow", (x,), exponent=float(e.reshape(())))
    return ctx.reshape(out, ctx.out_shape())


# ------------------------------------------------------------------------------ elementwise binary


def _binary(graph_op: str, compare: bool = False, alpha: bool = False) -> Converter:
    def convert(ctx: ConvertContext, a: dict) -> Value:
        lhs, rhs = a["self"], a["other"]
        dt = ctx.promoted(lhs, rhs) if compare else ctx.out_dtype()
        x = ctx.value(lhs, dt)
        if alpha and a.get("alpha", 1) != 1:
            rhs_v = ctx.add("mul", (ctx.value(rhs, dt), ctx.scalar(a["alpha"], dt)))
        else:
            rhs_v = ctx.value(rhs, dt)
        return ctx.add(graph_op, (x, rhs_v))

    return convert


for _op, _names in (
    ("add", ("aten.add.Tensor", "aten.add.Scalar")),
    ("sub", ("aten.sub.Tensor", "aten.sub.Scalar")),
):
    rule(_op, *_names)(_binary(_op, alpha=True))

for _op, _names in (
    ("mul", ("aten.mul.Tensor", "aten.mul.Scalar")),
    ("div", ("aten.div.Tensor", "aten.div.Scalar")),
    ("maximum", ("aten.maximum.default",)),
    ("minimum", ("aten.minimum.default",)),
):
    rule(_op, *_names)(_binary(_op))

for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    rule(_op, f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_binary(_op, compare=True))


@rule("div", "aten.div.Tensor_mode")
def _div_mode(ctx: ConvertContext, a: dict) -> Value:
    if a["rounding_mode"] is not None:
        raise Unsupported(f"division with rounding_mode='{a['rounding_mode']}' has no graph op")
    return _binary("div")(ctx, a)


def _logical(graph_op: str, bitwise: bool = False) -> Converter:
    def convert(ctx: ConvertContext, a: dict) -> Value:
        lhs, rhs = a["self"], a["other"]
        if bitwise and (ctx.dtype_of(lhs) != torch.bool or ctx.dtype_of(rhs) not in (torch.bool, None)):
            raise Unsupported("bitwise ops on integers have no graph op (only on booleans)")
        x = ctx.value(lhs, torch.bool)
        y = ctx.value(rhs, torch.bool)
        return ctx.add(graph_op, (x, y))

    return convert


rule("logical_and", "aten.logical_and.default")(_logical("logical_and"))
rule("logical_or", "aten.logical_or.default")(_logical("logical_or"))
rule("ne", "aten.logical_xor.default")(_logical("ne"))
rule("logical_and", "aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar")(_logical("logical_and", True))
rule("logical_or", "aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar")(_logical("logical_or", True))
rule("ne", "aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar")(_logical("ne", True))


@rule("where", "aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar")
def _where(ctx: ConvertContext, a: dict) -> Value:
    """``where``; a scalar operand (the training IR's ``where.ScalarOther`` and kin) becomes a
    0-d constant of the result's dtype."""
    dt = ctx.out_dtype()
    cond = ctx.value(a["condition"], torch.bool)
    return ctx.add("where", (cond, ctx.value(a["self"], dt), ctx.value(a["other"], dt)))


# ------------------------------------------------------------------------------ linear algebra


@rule("conv2d, conv_transpose2d", "aten.convolution.default")
def _convolution(ctx: ConvertContext, a: dict) -> Value:
    """2-D convolution; an unbatched input gains N = 1 and a 1-D convolution runs as 2-D over H = 1."""
    if a["transposed"]:
        from npuc.frontend.aten_models import conv_transpose

        return conv_transpose(ctx, a)
    x, w = ctx.value(a["input"]), ctx.value(a["weight"])
    bias = [] if a["bias"] is None else [ctx.value(a["bias"])]
    spatial = w.type.rank - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-D convolution has no graph op (conv2d only; 1-D is mapped onto it)")
    if x.type.rank == spatial + 1:
        x = ctx.reshape(x, (1, *x.type.shape))
    stride, padding, dilation = (_window(a[k], spatial, k) for k in ("stride", "padding", "dilation"))
    if spatial == 1:
        x = ctx.reshape(x, (*x.type.shape[:2], 1, x.type.shape[2]))
        w = ctx.reshape(w, (*w.type.shape[:2], 1, w.type.shape[2]))
        stride, padding, dilation = (1, stride[0]), (0, padding[0]), (1, dilation[0])
    y = ctx.add("conv2d", (x, w, *bias), stride=stride, padding=padding, dilation=dilation, groups=int(a["groups"]))
    return ctx.reshape(y, ctx.out_shape())


@rule("conv2d", "aten.conv2d.default", "aten.conv1d.default")
def _conv(ctx: ConvertContext, a: dict) -> Value:
    """torch.export's training IR (a converted PT2E model): the convolution, not transposed."""
    return _convolution(ctx, {**a, "transposed": False})


def _window(v: Any, spatial: int, name: str) -> tuple[int, ...]:
    """A convolution's per-dim stride/padding/dilation as a tuple of ``spatial`` ints."""
    if isinstance(v, str):
        raise Unsupported(f"{name}='{v}' should have been resolved by torch.export")
    return pair(v, name) if spatial == 2 else (int(v[0] if isinstance(v, (list, tuple)) else v),)


@rule("linear", "aten.linear.default")
def _linear(ctx: ConvertContext, a: dict) -> Value:
    bias = [] if a["bias"] is None else [ctx.value(a["bias"])]
    return ctx.add("linear", (ctx.value(a["input"]), ctx.value(a["weight"]), *bias))


@rule("matmul", "aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _matmul(ctx: ConvertContext, a: dict) -> Value:
    x, y = ctx.value(a["self"]), ctx.value(a["mat2"] if "mat2" in a else a["other"])
    return matmul(ctx, x, y)


def matmul(ctx: ConvertContext, x: Value, y: Value) -> Value:
    """torch.matmul, with 1-D operands lifted to 2-D and the result reshaped back."""
    if x.type.rank == 0 or y.type.rank == 0:
        raise Unsupported("matmul of a 0-d tensor is not defined")
    x2 = ctx.reshape(x, (1, *x.type.shape)) if x.type.rank == 1 else x
    y2 = ctx.reshape(y, (*y.type.shape, 1)) if y.type.rank == 1 else y
    out = ctx.add("matmul", (x2, y2))
    return ctx.reshape(out, ctx.out_shape())


@rule("matmul, mul, add", "aten.addmm.default")
def _addmm(ctx: ConvertContext, a: dict) -> Value:
    """``beta * self + alpha * (mat1 @ mat2)``; canonicalize makes a linear layer of it."""
    dt = ctx.out_dtype()
    product = ctx.add("matmul", (ctx.value(a["mat1"]), ctx.value(a["mat2"])))
    if a["alpha"] != 1:
        product = ctx.add("mul", (product, ctx.scalar(a["alpha"], dt)))
    if a["beta"] == 0:
        return product
    bias = ctx.value(a["self"], dt)
    if a["beta"] != 1:
        bias = ctx.add("mul", (bias, ctx.scalar(a["beta"], dt)))
    return ctx.add("add", (product, bias))


# ------------------------------------------------------------------------------ normalization


@rule("batch_norm", "aten._native_batch_norm_legit_no_training.default")
def _batch_norm(ctx: ConvertContext, a: dict) -> tuple:
    return (_batch_norm_value(ctx, a), Dropped("saved mean of batch_norm"), Dropped("saved inverse std of batch_norm"))


@rule("batch_norm", "aten.native_batch_norm.default")
def _native_batch_norm(ctx: ConvertContext, a: dict) -> tuple:
    """The decomposition of torch.export's training-IR ``batch_norm`` (a QAT model moved to eval,
    or an instance norm: batch statistics and no running ones)."""
    if _input_statistics(a):
        from npuc.frontend.aten_models import batch_norm_no_stats

        return batch_norm_no_stats(ctx, a)
    if a["training"]:
        raise Unsupported("batch_norm in training mode updates its statistics; move the model to eval first")
    return _batch_norm(ctx, a)


@rule("batch_norm", "aten.batch_norm.default")
def _batch_norm_training_ir(ctx: ConvertContext, a: dict) -> Value:
    """torch.export's training IR (a converted PT2E model): batch_norm in eval mode (or with
    batch statistics and no running ones: an instance norm)."""
    if _input_statistics(a):
        from npuc.frontend.aten_models import batch_norm_no_stats

        return batch_norm_no_stats(ctx, a)[0]
    if a["training"]:
        raise Unsupported("batch_norm in training mode updates its statistics; move the model to eval first")
    return _batch_norm_value(ctx, a)


def _input_statistics(a: dict) -> bool:
    """A batch norm normalizing by its input's own statistics, keeping no running ones (what an
    instance norm decomposes to): it updates no state, unlike one in training mode."""
    return bool(a["training"]) and a["running_mean"] is None and a["running_var"] is None


def _batch_norm_value(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["input"])
    channels = x.type.shape[1] if x.type.rank >= 2 else None
    if channels is None:
        raise Unsupported("batch_norm needs an input with a channel dimension")
    if a["running_mean"] is None or a["running_var"] is None:
        raise Unsupported("batch_norm without running statistics is a training-mode op")
    dt = x.type.dtype.torch
    w = ctx.value(a["weight"]) if a["weight"] is not None else ctx.tensor_const("ones", torch.ones(channels, dtype=dt))
    b = ctx.value(a["bias"]) if a["bias"] is not None else ctx.tensor_const("zeros", torch.zeros(channels, dtype=dt))
    return ctx.add("batch_norm", (x, w, b, ctx.value(a["running_mean"]), ctx.value(a["running_var"])),
                   eps=float(a["eps"]))


@rule("layer_norm", "aten.native_layer_norm.default")
def _layer_norm(ctx: ConvertContext, a: dict) -> tuple:
    x = ctx.value(a["input"])
    shape = tuple(int(d) for d in a["normalized_shape"])
    dt = x.type.dtype.torch
    w = ctx.value(a["weight"]) if a["weight"] is not None else ctx.tensor_const("ones", torch.ones(shape, dtype=dt))
    b = ctx.value(a["bias"]) if a["bias"] is not None else ctx.tensor_const("zeros", torch.zeros(shape, dtype=dt))
    out = ctx.add("layer_norm", (x, w, b), normalized_rank=len(shape), eps=float(a["eps"]))
    return (out, Dropped("saved mean of layer_norm"), Dropped("saved inverse std of layer_norm"))


def _softmax_like(graph_op: str) -> Converter:
    def convert(ctx: ConvertContext, a: dict) -> Value:
        dt = ctx.out_dtype()
        x = ctx.value(a["self"], dt)
        return ctx.add(graph_op, (x,), dim=norm_dim(a["dim"], x.type.rank))

    return convert


rule("softmax", "aten._softmax.default")(_softmax_like("softmax"))
rule("log_softmax", "aten._log_softmax.default")(_softmax_like("log_softmax"))


# ------------------------------------------------------------------------------ pooling


def _pool_stride(a: dict) -> tuple[int, int]:
    stride = a["stride"]
    if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0):
        return pair(a["kernel_size"], "kernel_size")
    return pair(stride, "stride")


def _as_nchw(ctx: ConvertContext, x: Value, op: str) -> Value:
    """A rank-4 view of a pooling input (an unbatched CHW input gains N = 1)."""
    if x.type.rank == 3:
        return ctx.reshape(x, (1, *x.type.shape))
    if x.type.rank != 4:
        raise Unsupported(f"{op} of a rank-{x.type.rank} tensor (npuc pools NCHW or CHW tensors)")
    return x


@rule("max_pool2d", "aten.max_pool2d_with_indices.default")
def _max_pool2d(ctx: ConvertContext, a: dict) -> Any:
    x = _as_nchw(ctx, ctx.value(a["self"]), "max_pool2d")
    out = ctx.add("max_pool2d", (x,), kernel=pair(a["kernel_size"], "kernel_size"), stride=_pool_stride(a),
                  padding=pair(a["padding"], "padding"), dilation=pair(a["dilation"], "dilation"),
                  ceil_mode=bool(a["ceil_mode"]))
    return (ctx.reshape(out, ctx.out_shape(0)), Dropped("indices output of max_pool2d"))


@rule("avg_pool2d", "aten.avg_pool2d.default")
def _avg_pool2d(ctx: ConvertContext, a: dict) -> Value:
    x = _as_nchw(ctx, ctx.value(a["self"]), "avg_pool2d")
    d = a["divisor_override"]
    out = ctx.add("avg_pool2d", (x,), kernel=pair(a["kernel_size"], "kernel_size"), stride=_pool_stride(a),
                  padding=pair(a["padding"], "padding"), ceil_mode=bool(a["ceil_mode"]),
                  count_include_pad=bool(a["count_include_pad"]), divisor_override=None if d is None else int(d))
    return ctx.reshape(out, ctx.out_shape())


@rule("adaptive_avg_pool2d", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(ctx: ConvertContext, a: dict) -> Value:
    x = _as_nchw(ctx, ctx.value(a["self"]), "adaptive_avg_pool2d")
    out = ctx.add("adaptive_avg_pool2d", (x,), output_size=tuple(ctx.out_shape()[-2:]))
    return ctx.reshape(out, ctx.out_shape())


# ------------------------------------------------------------------------------ reductions


def _at_least_1d(ctx: ConvertContext, x: Value) -> Value:
    """Graph reductions want rank >= 1: a 0-d operand becomes [1] (reducing dim 0 of it)."""
    return ctx.reshape(x, (1,)) if x.type.rank == 0 else x


def _reduce(graph_op: str) -> Converter:
    def convert(ctx: ConvertContext, a: dict) -> Value:
        x = ctx.value(a["self"], ctx.out_dtype())
        if x.type.rank == 0:
            return x
        dims = norm_dims(a.get("dim"), x.type.rank)
        return ctx.add(graph_op, (x,), dims=dims, keepdim=bool(a.get("keepdim", False)))

    return convert


rule("reduce_sum", "aten.sum.dim_IntList")(_reduce("reduce_sum"))
rule("reduce_mean", "aten.mean.dim", "aten.mean.default")(_reduce("reduce_mean"))
rule("reduce_max", "aten.amax.default", "aten.max.default")(_reduce("reduce_max"))
rule("reduce_min", "aten.amin.default", "aten.min.default")(_reduce("reduce_min"))


@rule("ne, cast, reduce_max", "aten.any.dim", "aten.any.dims", "aten.any.default")
def _any(ctx: ConvertContext, a: dict) -> Value:
    """any() as a max reduction of the operand as 0/1 floats, cast back to bool."""
    x = ctx.value(a["self"])
    nonzero = x if x.type.dtype.torch == torch.bool else ctx.add("ne", (x, ctx.scalar(0, x.type.dtype.torch)))
    ones = ctx.cast(nonzero, torch.float32)
    if x.type.rank > 0:
        ones = ctx.add("reduce_max", (ones,), dims=norm_dims(a.get("dim"), x.type.rank),
                       keepdim=bool(a.get("keepdim", False)))
    return ctx.cast(ones, torch.bool)


def _arg_extreme(ctx: ConvertContext, x: Value, dim: Any, keepdim: bool, smallest: bool,
                 out_shape: tuple[int, ...] | None = None) -> Value:
    """argmax (or argmin, as the argmax of -x) over ``dim``; None flattens first, as PyTorch does."""
    if smallest:
        x = ctx.add("neg", (x,))
    if dim is None or x.type.rank == 0:
        flat = ctx.reshape(x, (x.type.numel,))
        shape = ctx.out_shape() if out_shape is None else out_shape
        return ctx.reshape(ctx.add("argmax", (flat,), dim=0, keepdim=False), shape)
    return ctx.add("argmax", (x,), dim=norm_dim(dim, x.type.rank), keepdim=keepdim)


@rule("argmax", "aten.argmax.default")
def _argmax(ctx: ConvertContext, a: dict) -> Value:
    return _arg_extreme(ctx, ctx.value(a["self"]), a["dim"], bool(a["keepdim"]), smallest=False)


@rule("neg, argmax", "aten.argmin.default")
def _argmin(ctx: ConvertContext, a: dict) -> Value:
    return _arg_extreme(ctx, ctx.value(a["self"]), a["dim"], bool(a["keepdim"]), smallest=True)


def _extreme_with_index(smallest: bool) -> Converter:
    def convert(ctx: ConvertContext, a: dict) -> tuple:
        x = ctx.value(a["self"])
        keep = bool(a["keepdim"])
        if x.type.rank == 0:
            return (x, _arg_extreme(ctx, x, None, keep, smallest, ctx.out_shape(1)))
        d = norm_dim(a["dim"], x.type.rank)
        values = ctx.add("reduce_min" if smallest else "reduce_max", (x,), dims=(d,), keepdim=keep)
        return (values, _arg_extreme(ctx, x, d, keep, smallest))

    return convert


rule("reduce_max, argmax", "aten.max.dim")(_extreme_with_index(smallest=False))
rule("reduce_min, neg, argmax", "aten.min.dim")(_extreme_with_index(smallest=True))


# ------------------------------------------------------------------------------ shape and data movement


@rule("reshape", "aten.view.default", "aten.squeeze.dims", "aten.unsqueeze.default", "aten.flatten.using_ints",
      "aten.reshape.default")
def _reshape(ctx: ConvertContext, a: dict) -> Value:
    return ctx.reshape(ctx.value(a["self"]), ctx.out_shape())


@rule("permute", "aten.permute.default")
def _permute(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["self"])
    perm = tuple(norm_dim(d, x.type.rank) for d in a["dims"])
    return permute(ctx, x, perm)


def permute(ctx: ConvertContext, x: Value, perm: tuple[int, ...]) -> Value:
    if perm == tuple(range(x.type.rank)):
        return x
    return ctx.add("permute", (x,), perm=perm)


@rule("expand", "aten.expand.default")
def _expand(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["self"])
    shape = ctx.out_shape()
    if shape == x.type.shape:
        return x
    return ctx.add("expand", (x,), shape=shape)


def slice_range(size: int, start: Any, end: Any, step: int) -> tuple[int, int, int]:
    """PyTorch's clamping of slice bounds to ``0 <= start <= end <= size``."""
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    if step < 1:
        raise Unsupported(f"slice step {step} must be positive")
    return start, end, int(step)


@rule("slice", "aten.slice.Tensor")
def _slice(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["self"])
    dim = norm_dim(a["dim"], x.type.rank)
    start, end, step = slice_range(x.type.shape[dim], a["start"], a["end"], a["step"])
    return slice_value(ctx, x, dim, start, end, step)


def slice_value(ctx: ConvertContext, x: Value, dim: int, start: int, end: int, step: int) -> Value:
    if (start, end, step) == (0, x.type.shape[dim], 1):
        return x
    return ctx.add("slice", (x,), dim=dim, start=start, end=end, step=step)


@rule("select", "aten.select.int")
def _select(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["self"])
    dim = norm_dim(a["dim"], x.type.rank)
    size = x.type.shape[dim]
    index = int(a["index"])
    if not -size <= index < size:
        raise Unsupported(f"index {index} is out of range for dimension {dim} of size {size}")
    return ctx.add("select", (x,), dim=dim, index=index % size)


@rule("concat", "aten.cat.default")
def _cat(ctx: ConvertContext, a: dict) -> Value:
    dt = ctx.out_dtype()
    parts = [ctx.value(t, dt) for t in a["tensors"]]
    rank = len(ctx.out_shape())
    parts = [p for p in parts if not (p.type.rank == 1 and p.type.shape[0] == 0 and rank > 1)]
    dim = norm_dim(a["dim"], rank)
    if len(parts) == 1:
        return parts[0]
    return ctx.add("concat", tuple(parts), dim=dim)


@rule("slice", "aten.split_with_sizes.default")
def _split(ctx: ConvertContext, a: dict) -> tuple:
    x = ctx.value(a["self"])
    dim = norm_dim(a["dim"], x.type.rank)
    out, start = [], 0
    for i in range(len(ctx.meta())):
        size = ctx.out_shape(i)[dim]
        out.append(slice_value(ctx, x, dim, start, start + size, 1))
        start += size
    return tuple(out)


@rule("pad", "aten.constant_pad_nd.default")
def _pad(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["self"])
    pads = tuple(int(p) for p in a["pad"])
    if not any(pads):
        return x
    return ctx.add("pad", (x,), pads=pads, value=require_float_scalar(a["value"], "pad value"))


@rule("upsample_nearest2d", "aten.upsample_nearest2d.vec")
def _upsample_nearest(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["input"])
    if x.type.rank != 4:
        raise Unsupported(f"nearest upsampling of a rank-{x.type.rank} tensor (upsample_nearest2d takes NCHW)")
    out_hw = ctx.out_shape()[-2:]
    scales = a["scale_factors"] or [None, None]
    for s, i, o in zip(scales, x.type.shape[-2:], out_hw):
        if s is not None and float(s) * i != o:
            raise Unsupported(f"nearest upsampling by the non-integer scale {s} (size {i} -> {o})")
    return ctx.add("upsample_nearest2d", (x,), output_size=tuple(out_hw))


@rule("embedding", "aten.embedding.default")
def _embedding(ctx: ConvertContext, a: dict) -> Value:
    return ctx.add("embedding", (ctx.value(a["weight"]), ctx.value(a["indices"])))


@rule("index_select", "aten.index_select.default")
def _index_select(ctx: ConvertContext, a: dict) -> Value:
    x = ctx.value(a["self"])
    index = ctx.reshape(ctx.value(a["index"]), (ctx.value(a["index"]).type.numel,))
    dim = norm_dim(a["dim"], x.type.rank)
    picked = ctx.add("index_select", (_at_least_1d(ctx, x), index), dim=dim)
    return ctx.reshape(picked, ctx.out_shape())


@rule("index_select, reshape, permute, where, lt, add, mul", "aten.index.Tensor")
def _index(ctx: ConvertContext, a: dict) -> Value:
    """``x[i0, i1, ...]``, advanced indexing by integer tensors (``None`` for a ``:``): each index
    counted from the end where negative (``where(i < 0, i + n, i)``, as PyTorch), the indexed
    dims made one (moved to the front first when they are not adjacent, as PyTorch places the
    result's broadcast index dims), the flat index ``sum_k i_k * stride_k`` (broadcast), then one
    ``index_select`` of that dim."""
    x = ctx.value(a["self"])
    indices = list(a["indices"])
    used = [i for i, t in enumerate(indices) if t is not None]
    if not used:
        return x
    if any(ctx.dtype_of(indices[d]) in (torch.bool, torch.uint8) for d in used):
        raise Unsupported("indexing by a boolean mask gives a data-dependent shape")
    shape = x.type.shape
    if used != list(range(used[0], used[-1] + 1)):
        rest = [d for d in range(x.type.rank) if d not in used]
        x = ctx.add("permute", (x,), perm=tuple(used + rest))
        shape, used = tuple(shape[d] for d in used + rest), list(range(len(used)))
        idx = [ctx.value(indices[d]) for d in sorted(i for i, t in enumerate(indices) if t is not None)]
    else:
        idx = [ctx.value(indices[d]) for d in used]
    first, sizes = used[0], [shape[d] for d in used]
    flat = None
    for k, (i, n) in enumerate(zip(idx, sizes)):
        term = _wrapped(ctx, i, n)
        stride = math.prod(sizes[k + 1:])
        if stride != 1:
            term = ctx.add("mul", (term, _int_const(ctx, i, stride)))
        flat = term if flat is None else ctx.add("add", (flat, term))
    bshape = tuple(ctx.type_of(flat).shape)
    pre, post = shape[:first], shape[first + len(used):]
    x = ctx.reshape(x, pre + (math.prod(sizes),) + post)
    picked = ctx.add("index_select", (x, ctx.reshape(flat, (math.prod(bshape),))), dim=first)
    return ctx.reshape(picked, pre + bshape + post)


def _int_const(ctx: ConvertContext, like: Value, value: int) -> Value:
    return ctx.tensor_const("index", torch.tensor(value, dtype=like.type.dtype.torch))


def _wrapped(ctx: ConvertContext, i: Value, n: int) -> Value:
    """``i`` with ``n`` added where it is negative (PyTorch's indexing counts those from the end)."""
    neg = ctx.add("lt", (i, _int_const(ctx, i, 0)))
    return ctx.add("where", (neg, ctx.add("add", (i, _int_const(ctx, i, n))), i))


# The quantize/dequantize ops of quantized programs (npuc.frontend.quantized) and the ops of
# npuc.frontend.aten_models register here too.
import npuc.frontend.aten_models  # noqa: E402,F401
import npuc.frontend.quantized  # noqa: E402,F401
