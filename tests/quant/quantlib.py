"""Helpers of the quantization tests: quantize a model once, import it, and measure how npuc's
integer results agree with PyTorch's quantized reference (the converted PT2E module)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from npuc.frontend.quantized import import_quantized_program
from npuc.interp import interpret
from npuc.ir.graph import Graph
from npuc.ir.verify import verify
from npuc.pipeline import GRAPH_PASSES
from npuc.frontend.pt2e import QuantizedModel, quantize
from npuc.quant.quantizer import QuantOptions


@dataclass(frozen=True, eq=False)
class Imported:
    """A model quantized once: PyTorch's converted reference and npuc's optimized graph."""

    model: torch.nn.Module
    quantized: QuantizedModel
    graph: Graph


def quantize_and_import(model: torch.nn.Module, example: tuple, calibration: list, options: QuantOptions | None = None) -> Imported:
    q = quantize(model, example, calibration, options=options)
    g = import_quantized_program(q.program, float_ops=(options or QuantOptions()).float_ops)
    for p in GRAPH_PASSES:
        g = verify(p(g))
    return Imported(model, q, g)


def output_scale(g: Graph) -> float:
    """The scale of the int8 value the graph's (single) output dequantizes."""
    out = g.outputs[0]
    node = next(n for n in g.nodes if out in n.outputs)
    assert node.op == "dequantize"
    return node.inputs[0].type.quant.scale[0]


def step_errors(imp: Imported, inputs: tuple) -> torch.Tensor:
    """|npuc - PyTorch's quantized reference| per output element, in output quantization steps."""
    ours = interpret(imp.graph, *inputs)[0]
    with torch.no_grad():
        ref = imp.quantized.module(*inputs)
    return ((ours - ref).abs() / output_scale(imp.graph)).flatten()


def op_counts(g: Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in g.nodes:
        counts[n.op] = counts.get(n.op, 0) + 1
    return counts


def sqnr_db(reference: torch.Tensor, approx: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio of ``approx`` against ``reference`` in dB."""
    noise = ((approx - reference) ** 2).sum()
    return float(10 * torch.log10((reference**2).sum() / noise.clamp_min(1e-30)))
