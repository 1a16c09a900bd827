"""Import of quantized models: Q/DQ patterns of a converted PT2E program -> quantized graph ops.

The converted program computes every int8 op of the NPU as ``quantize(op(dequantize(x), ...))``
in float (PyTorch's quantized reference).  The import goes in two steps:

1. the ATen table imports the ``quantized_decomposed`` ops like any other: ``quantize_per_tensor``
   becomes ``quantize``, ``dequantize_per_tensor`` becomes ``dequantize``, and the int8 weights
   and int32 biases (``dequantize_per_channel`` of folded constants) become i8/i32 constants
   whose types carry their per-channel parameters, followed by ``dequantize``;
2. :func:`recognize_quantized` rewrites each ``quantize`` whose input is a float op fed by
   ``dequantize`` nodes into the op's quantized form (``qconv2d``, ``qadd``, ``qlut``, ...):
   a relu/clamp between the op and the ``quantize`` folds into ``qmin``/``qmax``; data-movement
   ops keep i8 (with a requantizing table when the output parameters differ); a ``quantize`` of
   a ``dequantize`` is the value itself or a requantizing table.

Whatever matches no pattern stays as it is: a float op with ``dequantize`` before and
``quantize`` after (ops the quantizer left in float).  Graph inputs are quantized by the first
``quantize``; graph outputs are ``dequantize`` results.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Sequence

import torch

from npuc.frontend.aten_table import rule
from npuc.frontend.context import ConvertContext, Folded, Unsupported
from npuc.ir.graph import Graph, Node, Value
from npuc.ir.opdef import get_op
from npuc.ir.ops.quantized import (
    QAvgPool2dAttrs,
    QBinaryAttrs,
    QClampAttrs,
    QConv2dAttrs,
    QConvTranspose2dAttrs,
    QLinearAttrs,
    QLutAttrs,
    QMeanAttrs,
    OutAttrs,
    transposed_weight_scales,
)
from npuc.ir.rewrite import Rewriter, rewrite
from npuc.ir.types import DType, QuantParams
from npuc.quant import arith

# ------------------------------------------------------------------------------ ATen rules

QPT = "quantized_decomposed.quantize_per_tensor.default"
DQPT = "quantized_decomposed.dequantize_per_tensor.default"
DQPC = "quantized_decomposed.dequantize_per_channel.default"


def _require_int8_range(a: dict, what: str) -> None:
    if a["dtype"] != torch.int8 or (a["quant_min"], a["quant_max"]) != (arith.QMIN, arith.QMAX):
        raise Unsupported(
            f"{what} to {a['dtype']} in [{a['quant_min']}, {a['quant_max']}]: npuc's activations are int8 in [-128, 127]"
        )


@rule("quantize", QPT, fold=False)
def _quantize_per_tensor(ctx: ConvertContext, a: dict) -> Value:
    _require_int8_range(a, "quantization")
    scale, zp = float(a["scale"]), int(a["zero_point"])
    r = ctx.resolve(a["input"])
    if isinstance(r, Folded):  # a constant quantized at import time
        q = arith.quantize_tensor(r.tensor, scale, zp)
        return ctx.builder.constant(r.name, q, quant=QuantParams((scale,), (zp,), None))
    return ctx.add("quantize", (ctx.value(a["input"]),), scale=scale, zero_point=zp)


@rule("dequantize", DQPT, fold=False)
def _dequantize_per_tensor(ctx: ConvertContext, a: dict) -> Value:
    scale, zp = float(a["scale"]), int(a["zero_point"])
    r = ctx.resolve(a["input"])
    if isinstance(r, Folded) and r.tensor.dtype in (torch.int8, torch.int32):
        # a weight (int8, symmetric in [-127, 127]) or bias (int32) quantized per tensor
        name = _constant_name(ctx, r.tensor, r.name)
        x = ctx.builder.constant(name, r.tensor, quant=QuantParams((scale,), (zp,), None))
        return ctx.add("dequantize", (x,))
    _require_int8_range(a, "dequantization")
    if isinstance(r, Folded):
        x = ctx.builder.constant(r.name, r.tensor, quant=QuantParams((scale,), (zp,), None))
    else:
        x = ctx.value(a["input"])
        if x.type.quant != QuantParams((scale,), (zp,), None):
            raise Unsupported(f"dequantization with scale {scale}, zero point {zp} of a value of type {x.type}")
    return ctx.add("dequantize", (x,))


@rule("dequantize", DQPC, fold=False)
def _dequantize_per_channel(ctx: ConvertContext, a: dict) -> Value:
    data, scales = ctx.folded(a["input"]), ctx.folded(a["scales"])
    if data is None or scales is None:
        raise Unsupported("per-channel dequantization of a value computed at run time (only of constant weights)")
    if data.dtype not in (torch.int8, torch.int32):
        raise Unsupported(f"per-channel dequantization of a {data.dtype} constant (int8 weights, int32 biases)")
    zps = ctx.folded(a["zero_points"]) if a["zero_points"] is not None else torch.zeros_like(scales)
    axis = int(a["axis"]) % max(data.dim(), 1)
    quant = QuantParams(tuple(float(s) for s in scales.tolist()), tuple(int(z) for z in zps.tolist()), axis)
    x = ctx.builder.constant(_constant_name(ctx, data, ctx.resolve(a["input"]).name), data, quant=quant)
    return ctx.add("dequantize", (x,))


def _constant_name(ctx: ConvertContext, data: torch.Tensor, fallback: str) -> str:
    """``<module>.weight`` / ``<module>.bias`` of the layer reading a quantized constant (the
    converted program names them ``_frozen_param<i>``)."""
    users = list(ctx.node.users) if ctx.node is not None else []
    stack = users[0].meta.get("nn_module_stack") if users else None
    if not stack:
        return fallback
    path = list(stack.values())[-1][0]
    path = path.removeprefix("L['self'].")
    return f"{path}.{'weight' if data.dtype == torch.int8 else 'bias'}" if path else fallback


# ------------------------------------------------------------------------------ recognition


DEFAULT_FLOAT_OPS = ("softmax", "layer_norm")


def recognize_quantized(g: Graph, float_ops: Collection[str] = DEFAULT_FLOAT_OPS) -> Graph:
    """``g`` with every recognized ``quantize(op(dequantize ...))`` pattern as a quantized op,
    except for the graph ops named in ``float_ops`` (QuantOptions.float_ops), which stay float."""
    keep = frozenset(float_ops)
    g = rewrite(g, _int8_reshapes_of_convolutions)
    return rewrite(g, lambda node, rw: _visit(node, rw, keep))


CONVOLUTIONS = ("conv2d", "conv_transpose2d")


def _int8_reshapes_of_convolutions(node: Node, rw: Rewriter) -> Value | None:
    """A 1-D convolution imports as a 2-D one between reshapes (H = 1): ``quantize(reshape(
    conv(reshape(dequantize(x)), reshape(dequantize(w)), ...)))``, a relu or clamp perhaps
    after the second reshape.  Reshapes commute with per-tensor (de)quantization and with
    elementwise ops, so this moves them to the int8 side -- ``reshape`` of the int8 ``x``, a
    reshaped int8 weight constant, ``reshape(quantize(relu(conv)))`` -- where the patterns of
    :func:`_visit` find the convolution between its ``dequantize`` and ``quantize``."""
    if node.op in CONVOLUTIONS:
        x, w = _int8_reshaped(rw, node.inputs[0]), _int8_reshaped_weight(rw, node.inputs[1])
        if x is None and w is None:
            return None
        inputs = [x or node.inputs[0], w or node.inputs[1], *node.inputs[2:]]
        return rw.add(node.op, inputs, node.attrs)
    if node.op == "quantize":  # quantize(reshape(conv)) or quantize(relu(reshape(conv))), relu/clamp elementwise
        p = rw.producer(node.inputs[0])
        act = None
        if p is not None and p.op in ("relu", "clamp") and rw.num_users(p.outputs[0]) == 1:
            act, p = p, rw.producer(p.inputs[0])
        if p is None or p.op != "reshape" or rw.num_users(p.outputs[0]) != 1:
            return None
        conv = rw.producer(p.inputs[0])
        if conv is None or conv.op not in CONVOLUTIONS:
            return None
        y = p.inputs[0] if act is None else rw.add(act.op, (p.inputs[0],), act.attrs)
        return rw.add("reshape", (rw.add("quantize", (y,), node.attrs),), p.attrs)
    return None


def _int8_reshaped(rw: Rewriter, v: Value) -> Value | None:
    """``dequantize(reshape(x))`` for ``v = reshape(dequantize(x))`` of a per-tensor int8 ``x``."""
    p = rw.producer(v)
    if p is None or p.op != "reshape":
        return None
    x = _dequantized(rw, p.inputs[0])
    if x is None or rw.const(x) is not None:
        return None
    return rw.add("dequantize", (rw.add("reshape", (x,), p.attrs),))


def _int8_reshaped_weight(rw: Rewriter, v: Value) -> Value | None:
    """``dequantize(w')`` for ``v = reshape(dequantize(w))`` of a quantized int8 constant ``w``,
    ``w'`` the reshaped constant (per-channel parameters kept when the reshape leaves the
    dimensions up to their axis as they are)."""
    p = rw.producer(v)
    if p is None or p.op != "reshape":
        return None
    w = _dequantized_const(rw, p.inputs[0], DType.i8)
    if w is None:
        return None
    q, shape = w.type.quant, v.type.shape
    if q.axis is not None and tuple(shape[:q.axis + 1]) != tuple(w.type.shape[:q.axis + 1]):
        return None
    data = rw.const(w).reshape(shape)
    return rw.add("dequantize", (rw.constant(f"{rw.producer(w).attrs.name}.2d", data, quant=q),))


Params = tuple[float, int]


def _visit(node: Node, rw: Rewriter, keep_float: frozenset[str]) -> Value | None:
    if node.op != "quantize":
        return None
    out: Params = (node.attrs.scale, node.attrs.zero_point)
    v = node.inputs[0]
    lo, hi = arith.QMIN, arith.QMAX
    p = rw.producer(v)
    if p is not None and p.op in ("relu", "clamp") and p.op not in keep_float and _dequantized(rw, p.inputs[0]) is None:
        if rw.num_users(v) != 1:
            return None
        lo, hi = _clamp_range(p, out)
        v = p.inputs[0]
        p = rw.producer(v)
    if p is None or (p.op != "dequantize" and rw.num_users(v) != 1):
        return None
    handler = HANDLERS.get(p.op)
    if handler is None or p.op in keep_float:
        return None
    result = handler(p, rw, out, lo, hi)
    if isinstance(result, Value):
        rw.want_name(result, p.outputs[0].name)  # the float op's name (its module path, layer1.0.conv1)
    return result


def _clamp_range(act: Node, out: Params) -> tuple[int, int]:
    """The int8 range ``[qmin, qmax]`` of a relu/clamp whose result is quantized with ``out``."""
    if act.op == "relu":
        lo, hi = 0.0, None
    else:
        lo, hi = act.attrs.min, act.attrs.max
    return _quantized_bound(lo, out, arith.QMIN), _quantized_bound(hi, out, arith.QMAX)


def _quantized_bound(bound: float | None, out: Params, default: int) -> int:
    """A real clamp bound as an int8 code (quantize is monotonic, so clamping commutes with it)."""
    if bound is None:
        return default
    return int(arith.quantize_tensor(torch.tensor([bound], dtype=torch.float32), out[0], out[1])[0])


def _dequantized(rw: Rewriter, v: Value) -> Value | None:
    """The per-tensor i8 value ``v`` is the dequantization of, or None."""
    p = rw.producer(v)
    if p is None or p.op != "dequantize":
        return None
    x = p.inputs[0]
    q = x.type.quant
    if x.type.dtype != DType.i8 or q is None or q.axis is not None or len(q.scale) != 1:
        return None
    return x


def _dequantized_const(rw: Rewriter, v: Value, dtype: DType) -> Value | None:
    """The quantized ``dtype`` constant ``v`` is the dequantization of, or None."""
    p = rw.producer(v)
    if p is None or p.op != "dequantize":
        return None
    x = p.inputs[0]
    if x.type.dtype != dtype or rw.const(x) is None:
        return None
    return x


def _params(v: Value) -> Params:
    return v.type.quant.scale[0], v.type.quant.zero_point[0]


def _requant(rw: Rewriter, x: Value, out: Params) -> Value:
    """``x`` with the output parameters ``out`` (a requantizing table when they differ)."""
    if _params(x) == out:
        return x
    table = arith.lut_table(lambda t: t, _params(x), out)
    return rw.add("qlut", (x,), QLutAttrs(table, out[0], out[1]))


def _clamped(rw: Rewriter, y: Value, lo: int, hi: int) -> Value:
    """``y`` clamped to ``[lo, hi]`` when that is narrower than int8."""
    if (lo, hi) == (arith.QMIN, arith.QMAX):
        return y
    return rw.add("qclamp", (y,), QClampAttrs(lo, hi))


Handler = Callable[[Node, Rewriter, Params, int, int], "Value | None"]


def _requantize_pair(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    """``quantize(dequantize(x))``: x itself, or x requantized."""
    x = _dequantized(rw, n.output)
    return None if x is None else _clamped(rw, _requant(rw, x, out), lo, hi)


def _weighted(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    x = _dequantized(rw, n.inputs[0])
    w = _dequantized_const(rw, n.inputs[1], DType.i8)
    if x is None or w is None or any(z != 0 for z in w.type.quant.zero_point):
        return None
    operands = [x, w]
    if len(n.inputs) == 3:
        b = _bias(rw, n.inputs[2], x, w)
        if b is None:
            return None
        operands.append(b)
    if n.op == "conv2d":
        c = n.attrs
        attrs: Any = QConv2dAttrs(c.stride, c.padding, c.dilation, c.groups, out[0], out[1], lo, hi)
        return rw.add("qconv2d", operands, attrs)
    return rw.add("qlinear", operands, QLinearAttrs(out[0], out[1], lo, hi))


def _transposed(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    """``conv_transpose2d`` of dequantized int8 values: ``qconv_transpose2d`` (weights scaled per
    output channel along axis 1)."""
    x = _dequantized(rw, n.inputs[0])
    w = _transposed_weight(rw, n.inputs[1])
    if x is None or w is None or any(z != 0 for z in w.type.quant.zero_point):
        return None
    a = n.attrs
    operands = [x, w]
    if len(n.inputs) == 3:
        b = _bias(rw, n.inputs[2], x, w, transposed_weight_scales(w.type, a.groups))
        if b is None:
            return None
        operands.append(b)
    attrs = QConvTranspose2dAttrs(a.stride, a.padding, a.output_padding, a.dilation, a.groups, out[0], out[1], lo, hi)
    return rw.add("qconv_transpose2d", operands, attrs)


def _transposed_weight(rw: Rewriter, v: Value) -> Value | None:
    """The i8 weight ``[I, O/groups, kh, kw]`` quantized per tensor or along axis 1 that ``v`` is
    the dequantization of, or None."""
    w = _dequantized_const(rw, v, DType.i8)
    if w is None or w.type.quant.axis not in (None, 1):
        return None
    return w


def _bias(rw: Rewriter, b: Value, x: Value, w: Value, scales_w: tuple[float, ...] | None = None) -> Value | None:
    """The i32 bias operand: a dequantized i32 constant, or a float constant quantized here with
    the scales ``input scale x weight scale`` (``scales_w``: one per output channel, by default
    the weight's per-channel scales along axis 0)."""
    q = _dequantized_const(rw, b, DType.i32)
    if q is not None:
        return q
    t = rw.const(b)
    if t is None or not t.dtype.is_floating_point:
        return None
    sx = _params(x)[0]
    if scales_w is None:
        o = w.type.shape[0]
        scales_w = w.type.quant.scale if len(w.type.quant.scale) == o else w.type.quant.scale * o
    o = len(scales_w)
    scales = tuple(sx * s for s in scales_w)
    data = arith.quantize_per_channel(t, scales, (0,) * o, 0, -(2**31), 2**31 - 1, torch.int32)
    return rw.constant(f"{rw.producer(b).attrs.name}.int32", data, quant=QuantParams(scales, (0,) * o, 0))


def _binary(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    a, b = _dequantized(rw, n.inputs[0]), _dequantized(rw, n.inputs[1])
    if a is None or b is None:
        return None
    if n.op == "matmul":
        return _clamped(rw, rw.add("qmatmul", (a, b), OutAttrs(out[0], out[1])), lo, hi)
    return rw.add("q" + n.op, (a, b), QBinaryAttrs(out[0], out[1], lo, hi))


def _lut(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    """An elementwise function of one int8 input: its table (clamped to the fused range)."""
    x = _dequantized(rw, n.inputs[0])
    if x is None:
        return None
    if n.op in ("relu", "clamp") and _params(x) == out:
        a_lo, a_hi = _clamp_range(n, out)
        return rw.add("qclamp", (x,), QClampAttrs(a_lo, max(a_lo, a_hi)))
    opdef = get_op(n.op)
    # a code outside the function's domain (log of a negative value) maps to the real value 0
    table = arith.lut_table(lambda t: torch.nan_to_num(opdef.reference([t], n.attrs)[0], nan=0.0), _params(x), out)
    table = tuple(min(max(v, lo), hi) for v in table)
    return rw.add("qlut", (x,), QLutAttrs(table, out[0], out[1]))


def _average(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    x = _dequantized(rw, n.inputs[0])
    if x is None:
        return None
    if n.op == "reduce_mean":
        y = rw.add("qmean", (x,), QMeanAttrs(n.attrs.dims, n.attrs.keepdim, out[0], out[1]))
    elif n.op == "avg_pool2d":
        a = n.attrs
        y = rw.add("qavg_pool2d", (x,), QAvgPool2dAttrs(a.kernel, a.stride, a.padding, a.ceil_mode,
                                                        a.count_include_pad, a.divisor_override, out[0], out[1]))
    else:
        y = _adaptive(rw, x, n.attrs.output_size, out)
        if y is None:
            return None
    return _clamped(rw, y, lo, hi)


def _adaptive(rw: Rewriter, x: Value, size: tuple[int, int], out: Params) -> Value | None:
    """adaptive_avg_pool2d as a mean (1x1 output) or an average pool (sizes dividing the input)."""
    h, w = x.type.shape[2:]
    if tuple(size) == (1, 1):
        return rw.add("qmean", (x,), QMeanAttrs((2, 3), True, out[0], out[1]))
    if h % size[0] or w % size[1]:
        return None  # windows of unequal sizes: stays in float
    k = (h // size[0], w // size[1])
    return rw.add("qavg_pool2d", (x,), QAvgPool2dAttrs(k, k, (0, 0), False, True, None, out[0], out[1]))


def _moving(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    """A data-movement op on the int8 codes themselves (padding with the quantized pad value)."""
    x = _dequantized(rw, n.inputs[0])
    if x is None:
        return None
    attrs = n.attrs
    if n.op == "pad":
        code = int(arith.quantize_tensor(torch.tensor([attrs.value]), *_params(x))[0])
        attrs = type(attrs)(attrs.pads, float(code))
    y = rw.add(n.op, (x, *n.inputs[1:]), attrs)  # a gather's indices pass as they are
    return _clamped(rw, _requant(rw, y, out), lo, hi)


def _concat(n: Node, rw: Rewriter, out: Params, lo: int, hi: int) -> Value | None:
    parts = [_dequantized(rw, v) for v in n.inputs]
    if any(p is None for p in parts):
        return None
    y = rw.add("concat", [_requant(rw, p, out) for p in parts], n.attrs)
    return _clamped(rw, y, lo, hi)


HANDLERS: dict[str, Handler] = {
    "dequantize": _requantize_pair,
    "conv2d": _weighted,
    "conv_transpose2d": _transposed,
    "linear": _weighted,
    "add": _binary,
    "mul": _binary,
    "matmul": _binary,
    "avg_pool2d": _average,
    "adaptive_avg_pool2d": _average,
    "reduce_mean": _average,
    "concat": _concat,
    **{op: _lut for op in ("sigmoid", "tanh", "hardswish", "hardsigmoid", "silu", "gelu", "relu", "clamp", "elu",
                           "expm1", "log1p", "log")},
    **{op: _moving for op in ("reshape", "permute", "slice", "select", "expand", "upsample_nearest2d",
                              "max_pool2d", "pad", "flip", "index_select", "gather")},
}


# ------------------------------------------------------------------------------ entry point


def import_quantized(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    calibration: Sequence[Any],
    target: Any = None,
    options: Any = None,
    *,
    name: str | None = None,
) -> Graph:
    """Quantize ``model`` for the NPU (calibrating on ``calibration``) and import it as a graph of
    quantized ops (unoptimized: the graph passes run next)."""
    from npuc.frontend.pt2e import quantize

    q = quantize(model, example_inputs, calibration, target, options)
    float_ops = options.float_ops if options is not None else DEFAULT_FLOAT_OPS
    return import_quantized_module(q.module, name=name or type(model).__name__, float_ops=float_ops)


def import_quantized_program(
    ep: torch.export.ExportedProgram, *, name: str = "main", float_ops: Collection[str] = DEFAULT_FLOAT_OPS
) -> Graph:
    """Import a converted (Q/DQ) exported program and recognize its quantized ops (leaving the
    graph ops named in ``float_ops`` in float)."""
    from npuc.frontend.importer import import_program

    return recognize_quantized(import_program(ep, name=name), float_ops)


def import_quantized_module(
    gm: torch.fx.GraphModule, *, name: str = "main", float_ops: Collection[str] = DEFAULT_FLOAT_OPS
) -> Graph:
    """Import a module converted by ``convert_pt2e`` as it is (no second export) and recognize
    its quantized ops (leaving the graph ops named in ``float_ops`` in float)."""
    from npuc.frontend.importer import import_graph_module

    return recognize_quantized(import_graph_module(gm, name=name), float_ops)


def refresh_shapes(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> None:
    """Recompute every node's ``val`` metadata on fake copies of ``example_inputs``: torchao's QAT
    rewrites leave the shapes of the small pattern they were traced with on the nodes they add."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate(*[mode.from_tensor(x) for x in example_inputs])


def is_quantized(graph: torch.fx.Graph) -> bool:
    """Whether an FX graph holds PT2E's quantize/dequantize ops (a converted model)."""
    return any(n.op == "call_function" and str(n.target).startswith("quantized_decomposed.")
               for n in graph.nodes)
