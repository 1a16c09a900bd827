"""Recognition of Q/DQ patterns beyond the layers with weights: a relu that cannot be fused,
data movement on int8 codes (pad with the zero point's code, nearest upsampling, permute), and
parameter changes without an op (requantizing tables)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from quantlib import op_counts, quantize_and_import, step_errors

from npuc.ir.graph import GraphBuilder
from npuc.ir.ops.quantized import QuantizeAttrs
from npuc.ir.types import DType, TensorType
from npuc.frontend.quantized import recognize_quantized
from npuc.interp import interpret
from npuc.quant import arith


class Moves(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(torch.relu(x))
        y = F.pad(y, (1, 1, 2, 0))
        y = F.interpolate(y, scale_factor=2, mode="nearest")
        return y.permute(0, 1, 3, 2)


def test_relu_and_data_movement_stay_int8():
    torch.manual_seed(0)
    samples = [(torch.randn(1, 3, 6, 6),) for _ in range(4)]
    imp = quantize_and_import(Moves().eval(), samples[0], samples[:3])
    counts = op_counts(imp.graph)
    assert counts.get("qclamp") == 1 and counts.get("qconv2d") == 1
    for op in ("pad", "upsample_nearest2d", "permute"):
        node = next(n for n in imp.graph.nodes if n.op == op)
        assert node.outputs[0].type.dtype == DType.i8, op
    clamp = next(n for n in imp.graph.nodes if n.op == "qclamp")
    assert clamp.attrs.qmin == clamp.inputs[0].type.quant.zero_point[0]  # relu: codes below the real zero
    pad = next(n for n in imp.graph.nodes if n.op == "pad")
    assert pad.attrs.value == pad.inputs[0].type.quant.zero_point[0]  # padding with real 0
    errs = step_errors(imp, samples[3])
    assert float(errs.max()) <= 1.0001


def test_quantize_of_dequantize_becomes_the_value_or_a_table():
    b = GraphBuilder("t")
    x = b.input(TensorType((2, 8), DType.f32), "x")
    q = b.add1("quantize", (x,), QuantizeAttrs(0.05, 3))
    d = b.add1("dequantize", (q,))
    same = b.add1("quantize", (d,), QuantizeAttrs(0.05, 3))
    other = b.add1("quantize", (d,), QuantizeAttrs(0.1, -7))
    g = recognize_quantized(b.build([b.add1("dequantize", (same,)), b.add1("dequantize", (other,))]))
    assert op_counts(g) == {"quantize": 1, "dequantize": 2, "qlut": 1}
    xs = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    a, c = interpret(g, xs)
    qx = arith.quantize_tensor(xs, 0.05, 3)
    assert torch.equal(a, arith.dequantize_tensor(qx, 0.05, 3))
    want = arith.quantize_tensor(arith.dequantize_tensor(qx, 0.05, 3).double(), 0.1, -7)
    assert (arith.quantize_tensor(c, 0.1, -7).int() - want.int()).abs().max() <= 1
