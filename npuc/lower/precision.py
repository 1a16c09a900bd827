"""Precision: which element type the NPU computes a graph in, in one place.

A float graph runs on the NPU in fp16 (weights converted at compile time, fp32 accumulation in the
array); the API's inputs and outputs stay fp32 and are converted at the edges.  A target without
fp16 runs a float graph on the CPU until it is quantized; ``quantize="int8"`` computes the
quantized graph ops in int8 (int32 accumulators, REQUANT), the integer arithmetic of
``npuc.quant.arith``.
"""

from __future__ import annotations

import torch

from npuc.errors import NpucError
from npuc.ir.types import DType as IRType
from npuc.isa.enums import DType
from npuc.kir.program import Precision

NO_FP16_REASON = "target has no fp16 path; quantize to int8 (--quantize int8)"


def choose_precision(target, quantize: str | None) -> Precision:
    """The precision a graph compiles to on ``target`` (``quantize``: None or "int8").

    int8: every target has an int8 array and integer vector unit; the NPU takes the quantized
    graph ops (docs/quantization.md) and ops that only move int8 data, the float islands the
    quantizer left run on the CPU."""
    if quantize == "int8":
        if "int8" not in target.array.dtypes:
            return Precision(None, f"target '{target.name}' has no int8 array")
        return Precision(DType.int8)
    if quantize is not None:
        raise NpucError(f"quantize={quantize!r} is not a quantization npuc knows; use None or 'int8'")
    if not target.has_fp16:
        return Precision(None, NO_FP16_REASON)
    return Precision(DType.fp16)


def is_float(t: IRType) -> bool:
    return t.is_float


def pack_constant(tensor: torch.Tensor, dtype: DType, order: tuple[int, ...] | None) -> bytes:
    """The bytes of ``tensor`` (logical shape) converted to ``dtype``, dims stored in ``order``."""
    t = tensor.detach().to(torch.float32)
    if order is not None and t.dim() > 0:
        t = t.permute(order)
    arr = t.contiguous().numpy().astype(dtype.np)
    return arr.tobytes()


FLOAT_ISLAND_REASON = "kept in float by the quantizer"


def int8_value_reason(node, const_values) -> str | None:
    """Why ``node`` stays on the CPU in an int8 compile because of its values, or None: every
    non-constant value the NPU touches must be an int8 activation; float values belong to the
    islands the quantizer kept in float (docs/quantization.md, "Placement")."""
    from npuc.lower.rules_gather import index_operand

    indices = index_operand(node)  # a gather's integer indices are read, not computed
    for v in list(node.inputs) + list(node.outputs):
        if v in const_values or v is indices:
            continue
        if v.type.dtype.is_float:
            if node.op == "quantize":
                return f"quantize of a float result: {FLOAT_ISLAND_REASON} (the island runs in fp32 on the CPU)"
            if node.op == "dequantize":
                return f"dequantize into a float op {FLOAT_ISLAND_REASON} (the island runs in fp32 on the CPU)"
            return f"{node.op}: {FLOAT_ISLAND_REASON}"
        if v.type.dtype != IRType.i8:
            return f"{node.op} on {v.type.dtype.value} values: the int8 NPU path holds int8 activations only"
    return None
