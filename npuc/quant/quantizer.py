"""The PT2E quantizer of the NPU.

:class:`NpuQuantizer` annotates an exported (pre-dispatch ATen) graph with what the NPU runs in
int8 (docs/quantization.md): conv, transposed conv and linear with symmetric int8 weights (per
output channel by default: axis 0, or axis 1 of a transposed convolution's ``[I, O/groups, ...]``
weight) and int32 bias of scale ``input scale x weight scale``; per-tensor int8 activations;
add, mul, matmul; max/avg/adaptive-avg pooling and means; concat with one set of parameters for
all its operands; relu/relu6/hardtanh/clamp fused into their producer (one output observer after
the activation); sigmoid, tanh, hardswish, hardsigmoid, silu and gelu (lookup tables); and the
data-movement ops between them, which share their input's parameters.  Graph ops named in
``QuantOptions.float_ops`` are left unannotated, so they stay in float.

The flow around it (export, ``prepare_pt2e``, calibration, ``convert_pt2e``, the re-export the
frontend imports) is :func:`npuc.frontend.pt2e.quantize`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.fx import GraphModule, Node

from npuc._quiet import quiet_torchao_import

quiet_torchao_import()

from torchao.quantization.pt2e.fake_quantize import FakeQuantize  # noqa: E402
from torchao.quantization.pt2e.observer import (  # noqa: E402
    HistogramObserver,
    MinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import (
    DerivedQuantizationSpec,
    QuantizationAnnotation,
    QuantizationSpec,
    QuantizationSpecBase,
    Quantizer,
    SharedQuantizationSpec,
)

from npuc.errors import NpucError

aten = torch.ops.aten
ANNOTATION_KEY = "quantization_annotation"


@dataclass(frozen=True)
class QuantOptions:
    """How a model is quantized.

    ``per_channel``: one weight scale per output channel (else one per tensor).
    ``symmetric_activations``: activations with zero point 0 (else asymmetric, the default).
    ``float_ops``: graph op names left in float (softmax and layer_norm have no int8 form).
    ``observer``: ``"minmax"`` (ranges as seen) or ``"histogram"`` (ranges that minimize the
    quantization error, slower to calibrate).
    ``qat``: fake-quantize modules instead of observers, for quantization-aware training with
    ``prepare_qat_pt2e`` (the observer kind then sets how each fake-quantize measures ranges).
    """

    per_channel: bool = True
    symmetric_activations: bool = False
    float_ops: tuple[str, ...] = ("softmax", "layer_norm")
    observer: str = "minmax"
    qat: bool = False

    def __post_init__(self) -> None:
        if self.observer not in OBSERVERS:
            raise NpucError(f"QuantOptions.observer must be 'minmax' or 'histogram', got {self.observer!r}")
        if isinstance(self.float_ops, str) or not all(isinstance(o, str) for o in self.float_ops):
            raise NpucError(f"QuantOptions.float_ops must be a tuple of graph op names, got {self.float_ops!r}")
        object.__setattr__(self, "float_ops", tuple(self.float_ops))


OBSERVERS = ("minmax", "histogram")


def _observed(observer: Any, options: QuantOptions, **kwargs: Any) -> Any:
    """The observer constructor of a spec, or with ``options.qat`` a fake-quantize around it."""
    if options.qat:
        return FakeQuantize.with_args(observer=observer, **kwargs)
    return observer.with_args(**kwargs)


# ---------------------------------------------------------------------------- ATen op classes

# Each annotated ATen op -> the npuc graph op it becomes (what QuantOptions.float_ops names).
CONV_OPS = {aten.conv2d.default: "conv2d", aten.conv1d.default: "conv2d"}
# Transposed convolutions: weight [I, O/groups, k...], output channels on axis 1.
CONV_TRANSPOSE_OPS = {aten.conv_transpose2d.input: "conv_transpose2d", aten.conv_transpose1d.default: "conv_transpose2d"}
LINEAR_OPS = {aten.linear.default: "linear"}
BINARY_OPS = {
    aten.add.Tensor: "add", aten.add_.Tensor: "add", aten.mul.Tensor: "mul", aten.mul_.Tensor: "mul",
    aten.matmul.default: "matmul", aten.bmm.default: "matmul", aten.mm.default: "matmul",
}
FUSABLE_ACTIVATIONS = {
    aten.relu.default: "relu", aten.relu_.default: "relu", aten.hardtanh.default: "clamp",
    aten.hardtanh_.default: "clamp", aten.clamp.default: "clamp", aten.clamp_.default: "clamp",
    aten.relu6.default: "clamp", aten.relu6_.default: "clamp",
}
LUT_OPS = {
    aten.sigmoid.default: "sigmoid", aten.sigmoid_.default: "sigmoid", aten.tanh.default: "tanh",
    aten.tanh_.default: "tanh", aten.hardswish.default: "hardswish", aten.hardswish_.default: "hardswish",
    aten.hardsigmoid.default: "hardsigmoid", aten.hardsigmoid_.default: "hardsigmoid",
    aten.silu.default: "silu", aten.silu_.default: "silu", aten.gelu.default: "gelu",
    aten.elu.default: "elu", aten.elu_.default: "elu", aten.selu.default: "elu", aten.celu.default: "elu",
    aten.expm1.default: "expm1", aten.log1p.default: "log1p", aten.log.default: "log",
}
AVERAGE_OPS = {
    aten.avg_pool2d.default: "avg_pool2d", aten.adaptive_avg_pool2d.default: "adaptive_avg_pool2d",
    aten.mean.dim: "reduce_mean",
}
# Ops that only move or select data: their output shares their input's parameters.
SHARING_OPS = {
    aten.max_pool2d.default: "max_pool2d", aten.view.default: "reshape", aten.reshape.default: "reshape",
    aten.flatten.using_ints: "reshape", aten.squeeze.dim: "reshape", aten.squeeze.dims: "reshape",
    aten.unsqueeze.default: "reshape", aten.permute.default: "permute", aten.transpose.int: "permute",
    aten.select.int: "select", aten.slice.Tensor: "slice", aten.contiguous.default: "reshape",
    aten.clone.default: "reshape", aten.dropout.default: "reshape", aten.expand.default: "expand",
    aten.upsample_nearest2d.vec: "upsample_nearest2d", aten.pad.default: "pad",
    aten.constant_pad_nd.default: "pad", aten.flip.default: "flip",
    aten.index_select.default: "index_select", aten.gather.default: "gather", aten.index.Tensor: "index_select",
}
CONCAT_OPS = {aten.cat.default: "concat", aten.concat.default: "concat"}
# Batch norms left in the graph for quantization-aware training (folded by convert_pt2e).
BATCH_NORMS = (aten.batch_norm.default, aten._native_batch_norm_legit.default,
               aten._native_batch_norm_legit_no_training.default, aten.cudnn_batch_norm.default)


# ---------------------------------------------------------------------------- specs


def activation_spec(options: QuantOptions) -> QuantizationSpec:
    """Per-tensor int8 activations."""
    observer = HistogramObserver if options.observer == "histogram" else MinMaxObserver
    scheme = torch.per_tensor_symmetric if options.symmetric_activations else torch.per_tensor_affine
    return QuantizationSpec(
        dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=scheme,
        observer_or_fake_quant_ctr=_observed(observer, options, eps=2**-12),
    )


def weight_axis(node: Node) -> int:
    """The axis of a weight's output channels: 1 for a transposed convolution, else 0."""
    return 1 if node.target in CONV_TRANSPOSE_OPS else 0


def weight_spec(options: QuantOptions, axis: int = 0) -> QuantizationSpec:
    """Symmetric int8 weights in [-127, 127], per output channel (``axis``) or per tensor."""
    if options.per_channel:
        return QuantizationSpec(
            dtype=torch.int8, quant_min=-127, quant_max=127, qscheme=torch.per_channel_symmetric, ch_axis=axis,
            observer_or_fake_quant_ctr=_observed(PerChannelMinMaxObserver, options, eps=2**-12),
        )
    return QuantizationSpec(
        dtype=torch.int8, quant_min=-127, quant_max=127, qscheme=torch.per_tensor_symmetric,
        observer_or_fake_quant_ctr=_observed(MinMaxObserver, options, eps=2**-12),
    )


def bias_spec(node: Node, options: QuantOptions) -> DerivedQuantizationSpec:
    """int32 bias of scale ``input scale x weight scale`` and zero point 0.  A grouped transposed
    convolution's weight has one scale per output channel of a group (axis 1 holds O/groups):
    output channel ``g * O/groups + j`` has scale ``j``, so the scales repeat once per group."""
    x, w = node.args[0], node.args[1]
    groups = _transposed_groups(node)

    def derive(observers: list) -> tuple[torch.Tensor, torch.Tensor]:
        act_scale, _ = observers[0].calculate_qparams()
        w_scale, _ = observers[1].calculate_qparams()
        if options.per_channel:
            w_scale = w_scale.repeat(groups)
        scale = (act_scale * w_scale).to(torch.float32)
        return scale, torch.zeros_like(scale, dtype=torch.int32)

    return DerivedQuantizationSpec(
        derived_from=[(x, node), (w, node)], derive_qparams_fn=derive, dtype=torch.int32,
        quant_min=-(2**31), quant_max=2**31 - 1,
        qscheme=torch.per_channel_symmetric if options.per_channel else torch.per_tensor_symmetric,
        ch_axis=0,
    )


def _transposed_groups(node: Node) -> int:
    """The groups of a transposed convolution node (1 for any other node)."""
    if node.target not in CONV_TRANSPOSE_OPS:
        return 1
    groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
    return int(groups)


# ---------------------------------------------------------------------------- the quantizer


class NpuQuantizer(Quantizer):
    """Annotates a graph for the NPU's int8 ops (see the module docstring)."""

    def __init__(self, target: Any = None, options: QuantOptions | None = None) -> None:
        super().__init__()
        self.target = target
        self.options = options or QuantOptions()

    def annotate(self, model: GraphModule) -> GraphModule:
        for node in model.graph.nodes:
            if node.op == "call_function" and ANNOTATION_KEY not in node.meta:
                self._annotate(node)
        return model

    def validate(self, model: GraphModule) -> None:
        """NpucError naming the first annotated node whose quantization the NPU cannot run: int8
        activations in [-128, 127] with one scale per tensor; symmetric int8 weights in [-127, 127]
        per tensor or per output channel (axis 0); int32 biases of zero point 0."""
        for node in model.graph.nodes:
            ann = node.meta.get(ANNOTATION_KEY)
            if ann is None:
                continue
            for arg, spec in ann.input_qspec_map.items():
                problem = spec_problem(spec, _role(node, arg), weight_axis(node))
                if problem:
                    raise NpucError(f"node {node.name} ({node.target}): its input {arg.name} is {problem}")
            problem = spec_problem(ann.output_qspec, "activation")
            if problem:
                raise NpucError(f"node {node.name} ({node.target}): its output is {problem}")

    # ------------------------------------------------------------------ per op class

    def _annotate(self, node: Node) -> None:
        t = node.target
        table: list[tuple[dict, Callable[[Node], None]]] = [
            (CONV_OPS, self._weighted), (CONV_TRANSPOSE_OPS, self._weighted), (LINEAR_OPS, self._weighted),
            (BINARY_OPS, self._binary),
            (LUT_OPS, self._unary), (AVERAGE_OPS, self._unary), (FUSABLE_ACTIVATIONS, self._standalone_activation),
            (SHARING_OPS, self._sharing), (CONCAT_OPS, self._concat),
        ]
        for ops, annotate in table:
            if t in ops:
                if ops[t] not in self.options.float_ops:
                    annotate(node)
                return

    def _batch_norm_after(self, node: Node) -> Node | None:
        """The batch norm that is the only user of a convolution (QAT keeps it in the graph
        until convert folds it: it belongs to the convolution, unobserved)."""
        users = list(node.users)
        if (node.target in CONV_OPS or node.target in CONV_TRANSPOSE_OPS) and len(users) == 1 \
                and users[0].target in BATCH_NORMS:
            return users[0]
        return None

    def _output_node(self, node: Node) -> Node:
        """The node whose output is observed: a fusable activation that is the only user of
        ``node`` (or of its QAT batch norm) and is not kept in float, else ``node`` itself (or
        its batch norm)."""
        bn = self._batch_norm_after(node)
        if bn is not None:
            node = bn
        users = list(node.users)
        if len(users) == 1 and users[0].target in FUSABLE_ACTIVATIONS:
            act = users[0]
            if FUSABLE_ACTIVATIONS[act.target] not in self.options.float_ops and ANNOTATION_KEY not in act.meta:
                return act
        return node

    def _finish(self, node: Node, inputs: dict[Node, QuantizationSpecBase]) -> None:
        """Annotate ``node``'s inputs and the output of it (or of its fused activation)."""
        out = self._output_node(node)
        act = activation_spec(self.options)
        if out is node:
            _mark(node, inputs, act)
            return
        _mark(node, inputs, None)
        bn = self._batch_norm_after(node)
        if bn is not None and bn is not out:
            _mark(bn, {}, None)
        _mark(out, {}, act)

    def _weighted(self, node: Node) -> None:
        x, w = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        if not (isinstance(x, Node) and isinstance(w, Node)):
            return
        inputs: dict[Node, QuantizationSpecBase] = {
            x: activation_spec(self.options), w: weight_spec(self.options, weight_axis(node))}
        if isinstance(bias, Node):
            inputs[bias] = bias_spec(node, self.options)
        self._finish(node, inputs)

    def _binary(self, node: Node) -> None:
        a, b = node.args[0], node.args[1]
        if not (isinstance(a, Node) and isinstance(b, Node)) or not _is_float_tensor(a) or not _is_float_tensor(b):
            return  # a scalar operand: the op stays in float
        if node.target in (aten.add.Tensor, aten.add_.Tensor) and node.kwargs.get("alpha", 1) != 1:
            return
        spec = activation_spec(self.options)
        inputs = {a: spec} if a is b else {a: spec, b: activation_spec(self.options)}
        self._finish(node, inputs)

    def _unary(self, node: Node) -> None:
        x = node.args[0]
        if isinstance(x, Node) and _is_float_tensor(x):
            self._finish(node, {x: activation_spec(self.options)})

    def _standalone_activation(self, node: Node) -> None:
        """A relu/clamp that could not be fused: it keeps its input's parameters."""
        x = node.args[0]
        if isinstance(x, Node) and _is_float_tensor(x):
            _mark(node, {x: activation_spec(self.options)}, SharedQuantizationSpec((x, node)))

    def _sharing(self, node: Node) -> None:
        """A data-movement op whose input is quantized shares its parameters."""
        x = node.args[0]
        if isinstance(x, Node) and _is_quantized_output(x) and _is_float_tensor(node):
            shared = SharedQuantizationSpec(x)
            _mark(node, {x: shared}, shared)

    def _concat(self, node: Node) -> None:
        parts = node.args[0]
        if not isinstance(parts, (list, tuple)) or not parts or not all(isinstance(p, Node) for p in parts):
            return
        if not all(_is_float_tensor(p) for p in parts):
            return
        first = parts[0]
        shared = SharedQuantizationSpec((first, node))
        inputs: dict[Node, QuantizationSpecBase] = {first: activation_spec(self.options)}
        for p in parts[1:]:
            inputs.setdefault(p, shared)
        _mark(node, inputs, shared)


def _role(node: Node, arg: Node) -> str:
    """What an input of an annotated node is to the NPU: a weight, a bias or an activation."""
    if node.target in CONV_OPS or node.target in CONV_TRANSPOSE_OPS or node.target in LINEAR_OPS:
        if len(node.args) > 1 and node.args[1] is arg:
            return "weight"
        if len(node.args) > 2 and node.args[2] is arg:
            return "bias"
    return "activation"


def spec_problem(spec: QuantizationSpecBase | None, role: str, axis: int = 0) -> str | None:
    """Why the NPU cannot run a tensor quantized by ``spec`` in ``role`` (None: it can); a
    weight's per-channel scales must lie along ``axis``, its output channels."""
    if spec is None or isinstance(spec, SharedQuantizationSpec):
        return None
    if not isinstance(spec, (QuantizationSpec, DerivedQuantizationSpec)):
        return f"quantized by a {type(spec).__name__}, which npuc does not know"
    want = {"activation": (torch.int8, -128, 127), "weight": (torch.int8, -127, 127),
            "bias": (torch.int32, -(2**31), 2**31 - 1)}[role]
    lo = spec.quant_min if spec.quant_min is not None else torch.iinfo(spec.dtype).min
    hi = spec.quant_max if spec.quant_max is not None else torch.iinfo(spec.dtype).max
    if (spec.dtype, lo, hi) != want and not (role == "weight" and (spec.dtype, lo, hi) == (torch.int8, -128, 127)):
        return (f"a {role} quantized to {spec.dtype} in [{lo}, {hi}]; the NPU's {role}s are {want[0]} "
                f"in [{want[1]}, {want[2]}]")
    per_channel = spec.qscheme in (torch.per_channel_symmetric, torch.per_channel_affine)
    if role == "activation" and per_channel:
        return "an activation quantized per channel; the NPU's activations have one scale per tensor"
    if role != "activation" and spec.qscheme in (torch.per_tensor_affine, torch.per_channel_affine):
        return f"a {role} quantized asymmetrically; the NPU's {role}s have zero point 0"
    if role == "weight" and per_channel and (spec.ch_axis or 0) != axis:
        return (f"a weight quantized per channel along axis {spec.ch_axis}; the NPU scales output channels "
                f"(axis {axis})")
    return None


def _mark(node: Node, inputs: dict[Node, QuantizationSpecBase], output: QuantizationSpecBase | None) -> None:
    node.meta[ANNOTATION_KEY] = QuantizationAnnotation(input_qspec_map=inputs, output_qspec=output, _annotated=True)


def _is_float_tensor(node: Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32


def _is_quantized_output(node: Node) -> bool:
    ann = node.meta.get(ANNOTATION_KEY)
    return ann is not None and ann.output_qspec is not None


__all__ = ["NpuQuantizer", "QuantOptions"]
