"""Quantized models end to end: NpuQuantizer + calibration + import, interpreted with npuc's
integer reference, against PyTorch's own quantized reference (the converted PT2E module run in
PyTorch): per output element within one int8 step for >= 99% of the elements."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from quantlib import op_counts, output_scale, quantize_and_import, step_errors

from npuc.interp import interpret
from npuc.ir.text import graphs_equal, parse_graph, print_graph
from npuc.zoo import ZOO

INT8_OPS = {"quantize", "dequantize", "qconv2d", "qlinear", "qmatmul", "qadd", "qmul", "qlut", "qavg_pool2d",
            "qmean", "qclamp", "const", "reshape", "permute", "slice", "select", "concat", "pad", "expand",
            "upsample_nearest2d", "max_pool2d"}


class SmallCNN(nn.Module):
    """Conv/BN/ReLU, ReLU6, a residual add, hardswish and sigmoid gates, concat, pools, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.c3 = nn.Conv2d(16, 8, 1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = F.relu(self.bn(self.c1(x)))
        z = F.relu6(self.c2(y))
        y = torch.cat([y + z, torch.sigmoid(z) * z], 1)
        y = F.hardswish(self.c3(F.max_pool2d(y, 2)))
        y = F.avg_pool2d(y, 2, ceil_mode=True)
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


def small_cnn():
    torch.manual_seed(0)
    m = SmallCNN().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    g = torch.Generator().manual_seed(1)
    samples = [(torch.randn(1, 3, 12, 12, generator=g),) for _ in range(8)]
    return m, samples


@pytest.fixture(scope="module")
def small():
    m, samples = small_cnn()
    return quantize_and_import(m, samples[0], samples[:4])


def test_small_cnn_is_all_int8(small):
    counts = op_counts(small.graph)
    assert set(counts) <= INT8_OPS, counts
    assert counts["quantize"] == 1 and counts["dequantize"] == 1  # only at the edges
    for op in ("qconv2d", "qadd", "qmul", "qlut", "concat", "max_pool2d", "qavg_pool2d", "qmean", "qlinear"):
        assert counts.get(op, 0) >= 1, op


def test_small_cnn_agrees_with_pytorch_reference(small):
    _, samples = small_cnn()
    errs = torch.cat([step_errors(small, s) for s in samples[4:]])
    assert float((errs <= 1.0001).float().mean()) >= 0.99
    assert float(errs.max()) <= 2.0001


def test_relu_fuses_into_the_producers_clamp(small):
    conv = [n for n in small.graph.nodes if n.op == "qconv2d"]
    first = conv[0]
    zp = first.attrs.out_zero_point
    assert first.attrs.qmin == max(-128, zp)  # relu: the real zero
    # relu6 after c2: qmax is the code of 6.0 (or 127 when 6 is beyond the range)
    second = conv[1]
    six = round(6.0 / second.attrs.out_scale) + second.attrs.out_zero_point
    assert second.attrs.qmax == min(127, six)


def test_graph_passes_and_text_keep_quantized_graph_exact(small):
    from npuc.frontend.quantized import import_quantized_program

    raw = import_quantized_program(small.quantized.program)
    _, samples = small_cnn()
    for s in samples[4:6]:
        assert torch.equal(interpret(raw, *s)[0], interpret(small.graph, *s)[0])
    again = parse_graph(print_graph(small.graph), small.graph.constants)
    assert graphs_equal(again, small.graph)


def test_weights_are_int8_constants_with_channel_scales(small):
    conv = next(n for n in small.graph.nodes if n.op == "qconv2d")
    w, b = conv.inputs[1], conv.inputs[2]
    assert w.type.dtype.value == "i8" and w.type.quant.axis == 0 and len(w.type.quant.scale) == 8
    assert b.type.dtype.value == "i32" and set(b.type.quant.zero_point) == {0}
    sx = conv.inputs[0].type.quant.scale[0]
    assert all(abs(bs - sx * ws) <= 1e-6 * bs for bs, ws in zip(b.type.quant.scale, w.type.quant.scale))
    consts = {n.attrs.name for n in small.graph.nodes if n.op == "const"}
    assert "c1.weight" in consts and "fc.bias" in consts


# ------------------------------------------------------------------------------------ zoo CNNs

ZOO_CNNS = ["torchvision:resnet18", "torchvision:mobilenet_v2", "torchvision:mobilenet_v3_small",
            "torchvision:efficientnet_b0"]


@pytest.mark.parametrize("name", ZOO_CNNS)
def test_zoo_cnn_agrees_with_pytorch_reference(name, record_property):
    entry = ZOO[name]
    model, example = entry.load()
    imp = quantize_and_import(model, example, [entry.make_inputs(i) for i in (1, 2)])
    counts = op_counts(imp.graph)
    assert set(counts) <= INT8_OPS, counts
    assert counts["quantize"] == 1 and counts["dequantize"] == 1
    errs = step_errors(imp, entry.make_inputs(7))
    within = float((errs <= 1.0001).float().mean())
    record_property("within_one_step", within)
    record_property("worst_steps", float(errs.max()))
    assert within >= 0.99, (name, within, float(errs.max()))
    assert output_scale(imp.graph) > 0
