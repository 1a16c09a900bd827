"""Arm Vela 5.2 as a peer: its own environment, int8 TFLite of the networks npuc compiles, its figures.

What the Vela benchmarks (vela_compile_time.py, vela_compare.py) share:

* :func:`tflite_spec` walks npuc's optimized int8 graph (the graph ``compile_graph`` compiles:
  quantized ops, int8 weights per output channel, int32 biases) and restates it as TFLite
  operators and tensors: NCHW activations become NHWC, conv weights OHWI, depthwise weights
  1HWO, fused clamps become fused activations, PyTorch's explicit paddings become SAME when
  they agree with it and an explicit PAD otherwise.  The network Vela compiles is therefore the
  one npuc compiles, with the same weights and the same quantization parameters; an op with no
  int8 TFLite equivalent stops the walk with a sentence naming it.
* :class:`Vela` makes Vela's own virtual environment (``bench/.venv-vela``, never npuc's),
  writes the ``.tflite`` there with the flatbuffer classes Vela ships (``ethosu.vela.tflite``) and
  ``flatbuffers.Builder`` (this file, run by that environment's python: ``write-tflite``), runs
  ``vela`` with Arm's system configs and parses ``<name>_summary_<system>.csv`` and the
  per-layer CSV.
* :class:`LiteRT` checks a restatement: TFLite's own reference kernels (LiteRT, in
  ``bench/.venv-litert``) run the ``.tflite`` on the int8 input npuc's graph quantizes, and
  their int8 output is compared with npuc's integer reference interpreter on the same graph.
* :data:`NETWORKS`: the 56x56x64->64 3x3 convolution and the zoo models, by name.

Run directly, it prints Vela's figures for the networks (``--quick``: the conv and ResNet-18),
and with ``--check`` the agreement of TFLite's reference kernels with npuc on each.

    python bench/vela_peer.py [--quick] [--check] [--venv bench/.venv-vela]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

VELA_VERSION = "5.2.0"
DEFAULT_VENV = Path(__file__).resolve().parent / ".venv-vela"
_READY = ".npuc-bench-ready"  # written once the environment is complete

# Vela's system configurations (Arm's vela.ini) for the two npuc presets that model them
SYSTEMS = {
    "u55": ("ethos-u55-256", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
    "u65": ("ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram"),
}


class PeerUnavailable(Exception):
    """Vela cannot be installed or run here; the message says why, as a sentence."""


class NotExpressible(Exception):
    """The network has an op that int8 TFLite (as Vela takes it) cannot express."""


# ------------------------------------------------------------------------------------ networks


def conv56():
    """The 56x56x64 -> 64 3x3 convolution (stride 1, padding 1, ReLU) and its input."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU()).eval()
    return model, (torch.randn(1, 64, 56, 56),)


def _zoo(name: str):
    def load():
        from npuc.zoo import load_model

        return load_model(name)

    return load


NETWORKS = {
    "conv56": conv56,
    "resnet18": _zoo("torchvision:resnet18"),
    "resnet50": _zoo("torchvision:resnet50"),
    "mobilenet_v2": _zoo("torchvision:mobilenet_v2"),
    "vit_b_16": _zoo("torchvision:vit_b_16"),
}


def calibration_samples(name: str, count: int, example: tuple) -> list[tuple]:
    """``count`` calibration samples: the zoo's input generator, or seeded N(0, 1) like ``example``."""
    import torch

    if name != "conv56":
        from npuc.zoo import ZOO

        return [ZOO[f"torchvision:{name}"].make_inputs(s) for s in range(1, count + 1)]
    out = []
    for s in range(1, count + 1):
        g = torch.Generator().manual_seed(s)
        out.append(tuple(torch.randn(x.shape, generator=g) for x in example))
    return out


def int8_graph(model, example: tuple, target, calibration: list[tuple], name: str):
    """npuc's optimized int8 graph of ``model``: what ``compile_graph(g, target, quantize="int8")``
    compiles, and what :func:`tflite_spec` restates for Vela."""
    from npuc.artifact import quantized_graph
    from npuc.pipeline import run_graph_passes

    return run_graph_passes(quantized_graph(model, example, target, calibration, name))


# ------------------------------------------------------------------------------- TFLite spec
# TFLite enums (schema.fbs): Padding, ActivationFunctionType, BuiltinOperator
SAME, VALID = 0, 1
ACT_NONE, ACT_RELU, ACT_RELU6 = 0, 1, 3
_NCHW_TO_NHWC = (0, 2, 3, 1)
_NHWC_AXIS = (0, 3, 1, 2)  # NCHW dim d is NHWC dim _NHWC_AXIS[d]


@dataclass(frozen=True)
class TensorSpec:
    """One TFLite tensor: shape (NHWC for images), int8/int32, quantization, constant data key."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # "int8" | "int32"
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    axis: int = 0
    const: bool = False


@dataclass(frozen=True)
class OpSpec:
    """One TFLite operator: builtin name, tensor indices, options table and its scalar fields."""

    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: str | None = None
    fields: tuple[tuple[str, int], ...] = ()


@dataclass
class TfliteSpec:
    """A TFLite model as plain data (JSON + arrays), written by :func:`write_tflite` in Vela's venv."""

    name: str
    tensors: list[TensorSpec] = field(default_factory=list)
    ops: list[OpSpec] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    data: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.ops:
            out[o.op] = out.get(o.op, 0) + 1
        return out

    def save(self, folder: Path) -> None:
        doc = {
            "name": self.name,
            "tensors": [asdict(t) for t in self.tensors],
            "ops": [{"op": o.op, "inputs": list(o.inputs), "outputs": list(o.outputs), "options": o.options,
                     "fields": [list(f) for f in o.fields]} for o in self.ops],
            "inputs": self.inputs, "outputs": self.outputs,
        }
        (folder / "spec.json").write_text(json.dumps(doc))
        np.savez(folder / "data.npz", **{f"t{i}": self.data[t.name] for i, t in enumerate(self.tensors) if t.const})


class _Walk:
    """The state of one graph walk: TFLite tensor index of each npuc value."""

    def __init__(self, g, exact_pool_padding: bool) -> None:
        self.g = g
        self.exact_pool_padding = exact_pool_padding
        self.spec = TfliteSpec(g.name)
        self.index: dict[object, int] = {}
        self.producer = g.producers()

    def add(self, t: TensorSpec, data: np.ndarray | None = None) -> int:
        self.spec.tensors.append(t)
        if data is not None:
            self.spec.data[t.name] = data
        return len(self.spec.tensors) - 1

    def const_array(self, v) -> np.ndarray:
        node = self.producer.get(v)
        if node is None or node.op != "const":
            raise NotExpressible(f"{v.name} is not a constant (a weight or bias computed at run time)")
        return self.g.constants[node.attrs.name].numpy()

    def activation(self, v, shape=None) -> int:
        """The index of activation ``v`` (created on first use; NHWC for 4-D)."""
        if v in self.index:
            return self.index[v]
        t = v.type
        if t.dtype.value != "i8" or t.quant is None or len(t.quant.scale) != 1:
            raise NotExpressible(f"value %{v.name} is {t.dtype.value}: Vela takes only int8 tensors with one scale")
        s = shape if shape is not None else _tflite_shape(t.shape)
        i = self.add(TensorSpec(v.name, s, "int8", (t.quant.scale[0],), (t.quant.zero_point[0],)))
        self.index[v] = i
        return i

    def const(self, name: str, arr: np.ndarray, dtype: str, scale=(), zero_point=(), axis: int = 0) -> int:
        arr = np.ascontiguousarray(arr.astype(np.int8 if dtype == "int8" else np.int32))
        return self.add(TensorSpec(name, tuple(arr.shape), dtype, tuple(map(float, scale)), tuple(map(int, zero_point)),
                                   axis, True), arr)

    def out_tensor(self, name: str, shape, scale: float, zero_point: int) -> int:
        return self.add(TensorSpec(name, tuple(shape), "int8", (float(scale),), (int(zero_point),)))

    def emit(self, op: str, inputs, outputs, options: str | None = None, **fields: int) -> None:
        self.spec.ops.append(OpSpec(op, tuple(inputs), tuple(outputs), options, tuple(sorted(fields.items()))))


def _tflite_shape(shape) -> tuple[int, ...]:
    return tuple(shape[d] for d in _NCHW_TO_NHWC) if len(shape) == 4 else tuple(shape)


def fused_activation(op: str, qmin: int, qmax: int, scale: float, zero_point: int) -> int:
    """The TFLite fused activation whose clamp is [qmin, qmax] at the output's (scale, zero point)."""
    if qmin <= -128 and qmax >= 127:
        return ACT_NONE
    lo = max(-128, zero_point)
    if qmin == lo and qmax == 127:
        return ACT_RELU
    if qmin == lo and qmax == min(127, zero_point + round(6.0 / scale)):
        return ACT_RELU6
    raise NotExpressible(f"{op}'s clamp [{qmin}, {qmax}] is not a TFLite fused activation (none, relu, relu6) "
                         f"at scale {scale:g}, zero point {zero_point}")


def padding_mode(size: int, kernel: int, stride: int, dilation: int, pad: int) -> tuple[int, tuple[int, int]]:
    """(SAME or VALID when one of them is exactly PyTorch's padding, else None; (before, after)):
    ``after`` is the padding PyTorch's output actually reads on the far side."""
    dk = dilation * (kernel - 1) + 1
    out = (size + 2 * pad - dk) // stride + 1
    after = max((out - 1) * stride + dk - size - pad, 0)
    if pad == 0 and after == 0:
        return VALID, (0, 0)
    total = max((out - 1) * stride + dk - size, 0)
    if out == -(-size // stride) and total // 2 == pad and total - pad == after:
        return SAME, (pad, after)
    return None, (pad, after)


def _spatial(w: _Walk, node, x_idx: int, kernel, stride, dilation, padding) -> tuple[int, int]:
    """(input index, padding mode): an explicit PAD before the op when SAME/VALID is not PyTorch's."""
    _, _, h, wd = node.inputs[0].type.shape
    mh, ph = padding_mode(h, kernel[0], stride[0], dilation[0], padding[0])
    mw, pw = padding_mode(wd, kernel[1], stride[1], dilation[1], padding[1])
    if mh is not None and mh == mw:
        return x_idx, mh
    xin = w.spec.tensors[x_idx]
    shape = (xin.shape[0], xin.shape[1] + sum(ph), xin.shape[2] + sum(pw), xin.shape[3])
    pads = w.const(f"{node.outputs[0].name}.paddings", np.array([[0, 0], list(ph), list(pw), [0, 0]]), "int32")
    out = w.out_tensor(f"{node.outputs[0].name}.padded", shape, xin.scale[0], xin.zero_point[0])
    w.emit("PAD", (x_idx, pads), (out,), "PadOptions")
    return out, VALID


def _qconv2d(w: _Walk, node) -> None:
    x, wt, b = node.inputs
    a = node.attrs
    weight = w.const_array(wt)
    bias = w.const_array(b)
    o, cpg, kh, kw = weight.shape
    c = x.type.shape[1]
    y = node.outputs[0]
    xi, pad = _spatial(w, node, w.activation(x), (kh, kw), a.stride, a.dilation, a.padding)
    act = fused_activation("qconv2d", a.qmin, a.qmax, a.out_scale, a.out_zero_point)
    ws = _per_channel(wt.type, o)
    bias_scale = [x.type.quant.scale[0] * s for s in ws]
    bi = w.const(f"{y.name}.bias", bias, "int32", bias_scale, [0] * o)
    yi = w.activation(y)
    common = dict(Padding=pad, StrideH=a.stride[0], StrideW=a.stride[1], DilationHFactor=a.dilation[0],
                  DilationWFactor=a.dilation[1], FusedActivationFunction=act)
    if a.groups == 1:
        wi = w.const(f"{y.name}.weight", weight.transpose(0, 2, 3, 1), "int8", ws, [0] * o, 0)
        w.emit("CONV_2D", (xi, wi, bi), (yi,), "Conv2DOptions", **common)
    elif a.groups == c and cpg == 1:
        wi = w.const(f"{y.name}.weight", weight.transpose(1, 2, 3, 0), "int8", ws, [0] * o, 3)
        w.emit("DEPTHWISE_CONV_2D", (xi, wi, bi), (yi,), "DepthwiseConv2DOptions", DepthMultiplier=o // c, **common)
    else:
        raise NotExpressible(f"qconv2d {y.name} has {a.groups} groups: TFLite has only plain and depthwise convolutions")


def _per_channel(t, channels: int) -> list[float]:
    s = list(t.quant.scale)
    return s if len(s) == channels else s * channels


def _qlinear(w: _Walk, node) -> None:
    x, wt, b = node.inputs
    a = node.attrs
    if x.type.rank != 2:
        raise NotExpressible(f"qlinear {node.outputs[0].name} takes a rank-{x.type.rank} input; "
                             "this writer restates only [batch, features] fully connected layers")
    weight, bias = w.const_array(wt), w.const_array(b)
    n = weight.shape[0]
    ws = _per_channel(wt.type, n)
    y = node.outputs[0]
    xi = w.activation(x)
    wi = w.const(f"{y.name}.weight", weight, "int8", ws, [0] * n, 0)
    bi = w.const(f"{y.name}.bias", bias, "int32", [x.type.quant.scale[0] * s for s in ws], [0] * n)
    act = fused_activation("qlinear", a.qmin, a.qmax, a.out_scale, a.out_zero_point)
    w.emit("FULLY_CONNECTED", (xi, wi, bi), (w.activation(y),), "FullyConnectedOptions", FusedActivationFunction=act)


def _qbinary(op: str):
    def emit(w: _Walk, node) -> None:
        a = node.attrs
        if node.inputs[0].type.shape != node.inputs[1].type.shape:
            raise NotExpressible(f"{node.op} {node.outputs[0].name} broadcasts; this writer restates same-shape operands only")
        act = fused_activation(node.op, a.qmin, a.qmax, a.out_scale, a.out_zero_point)
        ins = [w.activation(v) for v in node.inputs]
        w.emit(op, ins, (w.activation(node.outputs[0]),), f"{op.title()}Options", FusedActivationFunction=act)

    return emit


def _max_pool2d(w: _Walk, node) -> None:
    a = node.attrs
    if a.dilation != (1, 1) or a.ceil_mode:
        raise NotExpressible(f"max_pool2d {node.outputs[0].name}: dilation or ceil_mode has no TFLite equivalent")
    x = node.inputs[0]
    xi, mode = w.activation(x), VALID
    if any(a.padding):
        # PyTorch pads with -inf.  TFLite's PAD pads with the zero point, which is the int8 minimum
        # (so exactly -inf for a max) when the input's zero point is -128 (after a ReLU); but Vela
        # runs such a PAD as a memory copy, so for timing SAME is used: the same shape and work,
        # the border windows shifted
        if w.exact_pool_padding and x.type.quant.zero_point[0] == -128:
            xi, mode = _spatial(w, node, xi, a.kernel, a.stride, (1, 1), a.padding)
        else:
            mode = SAME
            w.spec.notes.append(f"max_pool2d {node.outputs[0].name}: PyTorch's padding {a.padding} as SAME "
                                "(the same shape and work; the border windows shifted)")
    y = w.activation(node.outputs[0])
    w.emit("MAX_POOL_2D", (xi,), (y,), "Pool2DOptions", Padding=mode, StrideH=a.stride[0], StrideW=a.stride[1],
           FilterHeight=a.kernel[0], FilterWidth=a.kernel[1], FusedActivationFunction=ACT_NONE)


def _qavg_pool2d(w: _Walk, node) -> None:
    a = node.attrs
    if any(a.padding) or a.ceil_mode or a.divisor_override is not None:
        raise NotExpressible(f"qavg_pool2d {node.outputs[0].name}: padding, ceil_mode or a divisor is not restated")
    w.emit("AVERAGE_POOL_2D", (w.activation(node.inputs[0]),), (w.activation(node.outputs[0]),), "Pool2DOptions",
           Padding=VALID, StrideH=a.stride[0], StrideW=a.stride[1], FilterHeight=a.kernel[0], FilterWidth=a.kernel[1],
           FusedActivationFunction=ACT_NONE)


def _qmean(w: _Walk, node) -> None:
    a = node.attrs
    x = node.inputs[0]
    if x.type.rank != 4 or tuple(a.dims) != (2, 3):
        raise NotExpressible(f"qmean {node.outputs[0].name} over dims {a.dims}: only the spatial mean of an image is restated")
    axes = w.const(f"{node.outputs[0].name}.axes", np.array([_NHWC_AXIS[d] for d in a.dims]), "int32")
    w.emit("MEAN", (w.activation(x), axes), (w.activation(node.outputs[0]),), "ReducerOptions", KeepDims=int(a.keepdim))


def _reshape(w: _Walk, node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    if x.type.rank == 4 and x.type.shape[2] * x.type.shape[3] != 1 and y.type.rank != 4:
        raise NotExpressible(f"reshape {y.name} flattens an image with H x W > 1 (needs a transpose to NCHW order)")
    if x.type.rank == 4 and y.type.rank == 4:
        raise NotExpressible(f"reshape {y.name} between images is not restated")
    shape = w.const(f"{y.name}.shape", np.array(_tflite_shape(y.type.shape)), "int32")
    w.emit("RESHAPE", (w.activation(x), shape), (w.activation(y),), "ReshapeOptions")


_OPS = {
    "qconv2d": _qconv2d,
    "qlinear": _qlinear,
    "qadd": _qbinary("ADD"),
    "qmul": _qbinary("MUL"),
    "max_pool2d": _max_pool2d,
    "qavg_pool2d": _qavg_pool2d,
    "qmean": _qmean,
    "reshape": _reshape,
}

_NO_BUILTIN = {"layer_norm": "TFLite has no LAYER_NORM builtin"}


def _stop_reason(g, nodes) -> str | None:
    """Why ``g`` has no int8 TFLite restatement (None when it has one)."""
    edges = ("quantize", "dequantize")
    floats = [n for n in nodes if n.op not in edges and any(o.type.dtype.is_float for o in n.outputs)]
    inner_q = [n for n in nodes if (n.op == "quantize" and n.inputs[0] not in g.inputs)
               or (n.op == "dequantize" and n.outputs[0] not in g.outputs)]
    unknown = sorted({n.op for n in nodes if n.op not in _OPS and n.op not in edges})
    if not (floats or unknown or inner_q):
        return None
    parts = []
    if floats:
        kinds: dict[str, int] = {}
        for n in floats:
            kinds[n.op] = kinds.get(n.op, 0) + 1
        listed = ", ".join(f"{k} x{v}" + (f" ({_NO_BUILTIN[k]})" if k in _NO_BUILTIN else "") for k, v in kinds.items())
        parts.append(f"npuc's int8 graph keeps {len(floats)} ops in float ({listed}), first %{floats[0].outputs[0].name} = "
                     f"{floats[0].op}, and Vela compiles only int8 operators")
    if inner_q:
        parts.append(f"it quantizes and dequantizes inside the network {len(inner_q)} times (float islands)")
    if unknown:
        parts.append(f"ops this writer does not restate: {', '.join(unknown)}")
    return "; ".join(parts)


def tflite_spec(g, exact_pool_padding: bool = False) -> TfliteSpec:
    """The int8 TFLite restatement of npuc's optimized int8 graph ``g`` (see the module docstring).
    ``exact_pool_padding``: a padded max pool after a ReLU gets an explicit PAD (exact, but Vela
    copies it: for the numerical check), else SAME padding (the same work: for timing).
    Raises NotExpressible saying what stops it: float ops, float islands, ops not restated."""
    w = _Walk(g, exact_pool_padding)
    nodes = [n for n in g.nodes if n.op != "const"]
    why = _stop_reason(g, nodes)
    if why is not None:
        raise NotExpressible(why)
    for n in nodes:
        if n.op == "quantize":
            w.spec.inputs.append(w.activation(n.outputs[0]))
        elif n.op == "dequantize":
            w.spec.outputs.append(w.activation(n.inputs[0]))
        else:
            _OPS[n.op](w, n)
    return w.spec


# ----------------------------------------------------------------- the writer (Vela's venv)


def write_tflite(spec_dir: Path, out: Path) -> None:
    """Write spec_dir/spec.json + data.npz as a .tflite with Vela's flatbuffer classes.
    Runs in Vela's environment (``python vela_peer.py write-tflite SPEC_DIR OUT``)."""
    import flatbuffers
    from ethosu.vela.tflite import (Buffer, BuiltinOperator, BuiltinOptions, Model, Operator, OperatorCode,
                                    QuantizationParameters, SubGraph, Tensor, TensorType)
    import importlib

    doc = json.loads((spec_dir / "spec.json").read_text())
    data = np.load(spec_dir / "data.npz")
    b = flatbuffers.Builder(1 << 20)

    def ivec(start, values, add=None):
        start(b, len(values))
        for v in reversed(values):
            (add or b.PrependInt32)(v)
        return b.EndVector()

    buffers = [None]  # buffer 0 is the empty buffer, by convention
    tensors = []
    for i, t in enumerate(doc["tensors"]):
        buf = 0
        if t["const"]:
            buffers.append(data[f"t{i}"].tobytes())
            buf = len(buffers) - 1
        name = b.CreateString(t["name"])
        shape = ivec(Tensor.StartShapeVector, t["shape"])
        scale = ivec(QuantizationParameters.StartScaleVector, t["scale"], b.PrependFloat32)
        zp = ivec(QuantizationParameters.StartZeroPointVector, t["zero_point"], b.PrependInt64)
        QuantizationParameters.Start(b)
        QuantizationParameters.AddScale(b, scale)
        QuantizationParameters.AddZeroPoint(b, zp)
        QuantizationParameters.AddQuantizedDimension(b, t["axis"])
        q = QuantizationParameters.End(b)
        Tensor.Start(b)
        Tensor.AddShape(b, shape)
        Tensor.AddType(b, TensorType.TensorType.INT8 if t["dtype"] == "int8" else TensorType.TensorType.INT32)
        Tensor.AddBuffer(b, buf)
        Tensor.AddName(b, name)
        Tensor.AddQuantization(b, q)
        tensors.append(Tensor.End(b))

    codes = sorted({o["op"] for o in doc["ops"]})
    operators = []
    for o in doc["ops"]:
        opts = None
        if o["options"]:
            mod = importlib.import_module(f"ethosu.vela.tflite.{o['options']}")
            mod.Start(b)
            for k, v in o["fields"]:
                getattr(mod, f"Add{k}")(b, v)
            opts = mod.End(b)
        ins = ivec(Operator.StartInputsVector, o["inputs"])
        outs = ivec(Operator.StartOutputsVector, o["outputs"])
        Operator.Start(b)
        Operator.AddOpcodeIndex(b, codes.index(o["op"]))
        Operator.AddInputs(b, ins)
        Operator.AddOutputs(b, outs)
        if opts is not None:
            Operator.AddBuiltinOptionsType(b, getattr(BuiltinOptions.BuiltinOptions, o["options"]))
            Operator.AddBuiltinOptions(b, opts)
        operators.append(Operator.End(b))

    def tvec(start, items):
        start(b, len(items))
        for x in reversed(items):
            b.PrependUOffsetTRelative(x)
        return b.EndVector()

    sg_name = b.CreateString(doc["name"])
    t_vec = tvec(SubGraph.StartTensorsVector, tensors)
    o_vec = tvec(SubGraph.StartOperatorsVector, operators)
    i_vec = ivec(SubGraph.StartInputsVector, doc["inputs"])
    out_vec = ivec(SubGraph.StartOutputsVector, doc["outputs"])
    SubGraph.Start(b)
    SubGraph.AddTensors(b, t_vec)
    SubGraph.AddOperators(b, o_vec)
    SubGraph.AddInputs(b, i_vec)
    SubGraph.AddOutputs(b, out_vec)
    SubGraph.AddName(b, sg_name)
    subgraph = SubGraph.End(b)

    op_codes = []
    for c in codes:
        code = getattr(BuiltinOperator.BuiltinOperator, c)
        OperatorCode.Start(b)
        OperatorCode.AddDeprecatedBuiltinCode(b, min(code, 127))
        OperatorCode.AddBuiltinCode(b, code)
        OperatorCode.AddVersion(b, 1)
        op_codes.append(OperatorCode.End(b))
    buf_offsets = []
    for raw in buffers:
        vec = b.CreateNumpyVector(np.frombuffer(raw, np.uint8)) if raw else None
        Buffer.Start(b)
        if vec is not None:
            Buffer.AddData(b, vec)
        buf_offsets.append(Buffer.End(b))
    codes_vec = tvec(Model.StartOperatorCodesVector, op_codes)
    sg_vec = tvec(Model.StartSubgraphsVector, [subgraph])
    buf_vec = tvec(Model.StartBuffersVector, buf_offsets)
    desc = b.CreateString("npuc int8 graph restated for Vela")
    Model.Start(b)
    Model.AddVersion(b, 3)
    Model.AddOperatorCodes(b, codes_vec)
    Model.AddSubgraphs(b, sg_vec)
    Model.AddDescription(b, desc)
    Model.AddBuffers(b, buf_vec)
    b.Finish(Model.End(b), file_identifier=b"TFL3")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(b.Output())
    os.replace(tmp, out)


# ----------------------------------------------------------------------------- running Vela


@dataclass(frozen=True)
class VelaRun:
    """Vela's figures for one network on one system configuration."""

    network: str
    system: str
    cycles: int  # cycles_total
    npu_cycles: int
    macs: int
    dram_bytes: int
    flash_bytes: int
    sram_bytes: int
    cpu_seconds: float  # the whole vela process, user + system
    cpu_ops: int  # operators Vela left to the CPU
    layers: tuple[dict, ...] = ()  # the per-layer CSV's rows (with per_layer=True)

    @property
    def off_chip_bytes(self) -> int:
        return self.dram_bytes + self.flash_bytes


def _make_venv(venv: Path, requirement: str, what: str) -> None:
    """A virtual environment at ``venv`` with ``requirement`` installed (made once; a failed
    attempt leaves nothing behind and raises PeerUnavailable with the reason)."""
    if (venv / _READY).exists():
        return
    print(f"creating {venv} and installing {requirement} ({what}'s own environment) ...", file=sys.stderr)
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    for cmd in ([base, "-m", "venv", str(venv)], [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", requirement]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            tail = (r.stderr.strip().splitlines() or ["no message"])[-1]
            hint = (f"; {requirement} comes from PyPI, so this needs the network or a pip index that holds it"
                    if "pip" in cmd else "")
            raise PeerUnavailable(f"could not create {what}'s environment in {venv}: '{' '.join(cmd[-3:])}' failed "
                                  f"({tail}){hint}")
    (venv / _READY).write_text(requirement + "\n")


class Vela:
    """Vela 5.2 in its own virtual environment (created on first use)."""

    def __init__(self, venv: Path = DEFAULT_VENV, workdir: Path | None = None) -> None:
        self.venv = Path(venv)
        self.python = self.venv / "bin" / "python"
        self.vela = self.venv / "bin" / "vela"
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="npuc-vela-"))
        self.ensure()
        self.config = Path(self._ask("import ethosu.vela, os; print(os.path.join(os.path.dirname(os.path.dirname("
                                     "ethosu.vela.__file__)), 'config_files', 'Arm', 'vela.ini'))"))

    def ensure(self) -> None:
        _make_venv(self.venv, f"ethos-u-vela=={VELA_VERSION}", "Vela")

    def _ask(self, code: str) -> str:
        r = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True)
        if r.returncode != 0:
            raise PeerUnavailable(f"Vela's environment {self.venv} does not work: {r.stderr.strip()[-300:]}")
        return r.stdout.strip()

    def write(self, spec: TfliteSpec, name: str) -> Path:
        """``spec`` as ``<workdir>/<name>.tflite``, written by Vela's python."""
        folder = self.workdir / f"{name}.spec"
        folder.mkdir(parents=True, exist_ok=True)
        spec.save(folder)
        out = self.workdir / f"{name}.tflite"
        r = subprocess.run([str(self.python), __file__, "write-tflite", str(folder), str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise PeerUnavailable(f"writing {out.name} in Vela's environment failed: {r.stderr.strip()[-600:]}")
        return out

    def compile(self, tflite: Path, system: str, per_layer: bool = False) -> VelaRun:
        """Run vela on ``tflite`` for ``system`` ("u55" or "u65"); its figures and CPU seconds
        (``per_layer``: with ``--verbose-performance``, which also writes the per-layer CSV)."""
        accel, sysconf, mode = SYSTEMS[system]
        out = self.workdir / f"{tflite.stem}.{system}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [str(self.vela), str(tflite), "--accelerator-config", accel, "--config", str(self.config),
               "--system-config", sysconf, "--memory-mode", mode, "--output-dir", str(out)]
        cmd += ["--verbose-performance"] if per_layer else []
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(cmd, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise PeerUnavailable(f"vela failed on {tflite.name} ({system}): {(r.stderr or r.stdout).strip()[-600:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return self._parse(tflite.stem, system, sysconf, out, cpu, r.stdout)

    def _parse(self, name: str, system: str, sysconf: str, out: Path, cpu: float, stdout: str) -> VelaRun:
        summary = out / f"{name}_summary_{sysconf}.csv"
        if not summary.exists():
            raise PeerUnavailable(f"vela wrote no {summary.name} in {out}")
        with summary.open() as f:
            row = next(csv.DictReader(f))
        layers: tuple[dict, ...] = ()
        if (out / f"{name}_per-layer.csv").exists():
            with (out / f"{name}_per-layer.csv").open() as f:
                layers = tuple(csv.DictReader(f))
        found = re.search(r"CPU operators = (\d+)", stdout)

        def num(key: str) -> float:
            return float(row.get(key) or 0)

        cpu_ops = int(found.group(1)) if found else -1
        return VelaRun(name, system, int(num("cycles_total")), int(num("cycles_npu")), int(num("nn_macs")),
                       int(num("dram_total_bytes")), int(num("off_chip_flash_total_bytes")),
                       int(num("sram_total_bytes")), cpu, cpu_ops, layers)


# --------------------------------------------------- the restatement checked by TFLite itself

LITERT_VERSION = "2.3.0"
DEFAULT_LITERT_VENV = Path(__file__).resolve().parent / ".venv-litert"


def run_tflite(tflite: Path, x_path: Path, y_path: Path) -> None:
    """Run ``tflite`` on the int8 array in ``x_path`` with TFLite's reference kernels; save the
    output to ``y_path``.  Runs in LiteRT's environment (``python vela_peer.py run-tflite ...``)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(tflite), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.load(x_path))
    it.invoke()
    np.save(y_path, it.get_tensor(it.get_output_details()[0]["index"]))


@dataclass(frozen=True)
class Agreement:
    """TFLite's reference kernels on the restated .tflite against npuc's integer reference."""

    outputs: int
    equal: int
    max_lsb: int

    def __str__(self) -> str:
        return (f"TFLite's reference kernels against npuc's integer reference: {self.equal:,} of {self.outputs:,} "
                f"int8 outputs equal ({100 * self.equal / self.outputs:.1f}%), at most {self.max_lsb} LSB apart")


class LiteRT:
    """LiteRT (TFLite's interpreter) in its own virtual environment, to check a restated network."""

    def __init__(self, venv: Path = DEFAULT_LITERT_VENV) -> None:
        self.venv = Path(venv)
        self.python = self.venv / "bin" / "python"
        _make_venv(self.venv, f"ai-edge-litert=={LITERT_VERSION}", "LiteRT")

    def agreement(self, g, tflite: Path, example: tuple) -> Agreement:
        """Run ``tflite`` on ``example`` quantized as npuc's graph quantizes it; compare its int8
        output with npuc's reference interpreter on the same graph."""
        import npuc
        from npuc.quant import arith

        (q,) = [n for n in g.nodes if n.op == "quantize"]
        (dq,) = [n for n in g.nodes if n.op == "dequantize"]
        xq = arith.quantize_tensor(example[0], q.attrs.scale, q.attrs.zero_point).numpy()
        xq = xq.transpose(_NCHW_TO_NHWC) if xq.ndim == 4 else xq
        (y,) = npuc.interpret(g, *example)
        scale, zp = dq.inputs[0].type.quant.scale[0], dq.inputs[0].type.quant.zero_point[0]
        want = np.clip(np.round(y.numpy().astype(np.float64) / scale) + zp, -128, 127).astype(np.int64)
        want = want.transpose(_NCHW_TO_NHWC) if want.ndim == 4 else want
        with tempfile.TemporaryDirectory() as d:
            xp, yp = Path(d) / "x.npy", Path(d) / "y.npy"
            np.save(xp, np.ascontiguousarray(xq))
            r = subprocess.run([str(self.python), __file__, "run-tflite", str(tflite), str(xp), str(yp)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise PeerUnavailable(f"LiteRT could not run {tflite.name}: {r.stderr.strip()[-600:]}")
            got = np.load(yp).astype(np.int64)
        diff = np.abs(got - want)
        return Agreement(diff.size, int((diff == 0).sum()), int(diff.max()))


# ------------------------------------------------------------------------------------ shared


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def write_json(path: str | Path, doc) -> None:
    """The figures as JSON, written atomically (npuc.fileio.write_atomic)."""
    from npuc.fileio import write_atomic

    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n", "the figures")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the conv and ResNet-18")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="Vela's virtual environment")
    ap.add_argument("--calibration", type=int, default=4, help="calibration samples for the int8 graph")
    ap.add_argument("--check", action="store_true",
                    help="also run each .tflite with TFLite's reference kernels (LiteRT, its own venv) against npuc")
    args = ap.parse_args()
    try:
        vela = Vela(args.venv)
        litert = LiteRT() if args.check else None
    except PeerUnavailable as e:
        sys.exit(f"vela_peer: {e}")
    names = ["conv56", "resnet18"] if args.quick else list(NETWORKS)
    for name in names:
        model, example = NETWORKS[name]()
        g = int8_graph(model, example, "npu-mid", calibration_samples(name, args.calibration, example), name)
        try:
            spec = tflite_spec(g)
        except NotExpressible as e:
            print(f"{name}: no int8 TFLite for Vela: {e}")
            continue
        path = vela.write(spec, name)
        ops = ", ".join(f"{k} {v}" for k, v in sorted(spec.counts().items()))
        print(f"{name}: {path.stat().st_size:,} bytes of TFLite ({ops})")
        for note in spec.notes:
            print(f"  note: {note}")
        if litert is not None:
            exact = tflite_spec(g, exact_pool_padding=True)
            print(f"  {litert.agreement(g, vela.write(exact, name + '-exact'), example)}"
                  + (" (max pool padded exactly)" if exact.notes != spec.notes else ""))
        for system in SYSTEMS:
            r = vela.compile(path, system)
            print(f"  {system}: {r.cycles:,} cycles ({r.npu_cycles:,} NPU), {r.macs:,} MACs, off-chip "
                  f"{r.off_chip_bytes:,} B (DRAM {r.dram_bytes:,}, flash {r.flash_bytes:,}), SRAM {r.sram_bytes:,} B, "
                  f"{r.cpu_seconds:.2f} CPU s, {r.cpu_ops} CPU ops")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "write-tflite":
        write_tflite(Path(sys.argv[2]), Path(sys.argv[3]))
    elif len(sys.argv) == 5 and sys.argv[1] == "run-tflite":
        run_tflite(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.path.append(str(Path(__file__).resolve().parent.parent))  # npuc, unless PYTHONPATH or the venv has it
        main()
