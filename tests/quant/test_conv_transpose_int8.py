"""int8 transposed convolutions: NpuQuantizer scales their weights ``[I, O/groups, kh, kw]`` per
output channel along axis 1 (the bias per output channel, the scales repeated once per group),
the frontend recognizes ``qconv_transpose2d``, and the NPU runs it as a stride-1 convolution over
a buffer filled with the input zero point's code.  Each case: npuc's integer reference within
one output step of PyTorch's quantized decomposition (the converted PT2E module), the NPU equal
to the integer reference bit for bit, no CPU op."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from quantlib import op_counts, quantize_and_import, step_errors
from torch import nn

from npuc.artifact import compile_graph
from npuc.interp import interpret
from npuc.quant.quantizer import QuantOptions

# (in channels, out channels, kernel, stride, padding, output padding, dilation, groups, input H x W)
CASES = [
    (3, 4, (3, 3), 2, 1, 1, 1, 1, (4, 4)),  # the usual decoder upsampling
    (4, 4, (2, 2), 2, 0, 0, 1, 1, (3, 5)),  # U-Net's 2x2 / 2
    (2, 3, (3, 1), 1, 1, 0, 1, 1, (5, 3)),  # stride 1, equal border: the conv pads with the zero point
    (3, 3, (1, 3), 2, 0, 1, 2, 3, (2, 4)),  # depthwise (one channel per group), dilated, output padding
    (2, 2, (3, 3), 3, 2, 2, 1, 2, (3, 2)),  # grouped, padding larger than the border: crops
    (1, 2, (4, 4), 2, 3, 0, 1, 1, (5, 5)),  # crops on both sides
    (4, 2, (3, 2), 1, 0, 0, 2, 2, (1, 3)),  # one input row, dilated, grouped
    (6, 9, (3, 3), (2, 3), (1, 0), (1, 2), 1, 3, (3, 7)),  # unequal strides, 3 channels per group
]


def _ids(c):
    return "c{}o{}k{}s{}p{}op{}d{}g{}".format(*c[:2], "x".join(map(str, c[2])), *c[3:8])


def _check(model: nn.Module, shape: tuple, options: QuantOptions | None = None, seed: int = 0):
    """Quantize, import and compile ``model``; return the imported graph after the checks."""
    gen = torch.Generator().manual_seed(seed)
    samples = [(torch.randn(shape, generator=gen),) for _ in range(4)]
    imp = quantize_and_import(model.eval(), samples[0], samples[:3], options)
    assert float(step_errors(imp, samples[3]).max()) <= 1.0001  # within one step of PyTorch's reference
    art = compile_graph(imp.graph, "npu-mid", quantize="int8")
    assert not art.report.cpu_ops, art.report.explain()
    for x in samples[2:]:
        assert torch.equal(art.run(*x)[0], interpret(imp.graph, *x)[0])
    return imp.graph


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_int8_conv_transpose2d_bit_exact_with_no_cpu_op(case):
    c, o, k, s, p, op, d, g, (h, w) = case
    torch.manual_seed(sum(k) + g)
    m = nn.ConvTranspose2d(c, o, k, stride=s, padding=p, output_padding=op, dilation=d, groups=g)
    graph = _check(m, (2, c, h, w))
    (node,) = [n for n in graph.nodes if n.op == "qconv_transpose2d"]
    wq = node.inputs[1].type.quant
    assert wq.axis == 1 and len(wq.scale) == o // g  # per output channel of a group
    assert node.inputs[2].type.shape == (o,)


def test_per_tensor_weights_without_bias_and_a_fused_relu():
    m = nn.Sequential(nn.ConvTranspose2d(3, 5, 3, stride=2, padding=1, bias=False), nn.ReLU())
    graph = _check(m, (1, 3, 5, 5), QuantOptions(per_channel=False), seed=1)
    (node,) = [n for n in graph.nodes if n.op == "qconv_transpose2d"]
    assert node.inputs[1].type.quant.axis is None and len(node.inputs) == 2
    assert node.attrs.qmin == node.attrs.out_zero_point  # the relu is the clamp at the real zero


def test_symmetric_activations_and_an_odd_prime_sized_input():
    m = nn.ConvTranspose2d(5, 7, (5, 3), stride=(3, 2), padding=(2, 1), output_padding=(1, 0))
    graph = _check(m, (1, 5, 7, 11), QuantOptions(symmetric_activations=True), seed=2)
    assert op_counts(graph).get("qconv_transpose2d") == 1


@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
def test_1d_convolutions_and_transposed_convolutions_run_int8(per_channel):
    """A 1-D (transposed) convolution imports as a 2-D one between reshapes; the reshapes move to
    the int8 side, so the int8 op is recognized (grouped, with a relu between)."""
    m = nn.Sequential(nn.Conv1d(4, 6, 3, groups=2), nn.ReLU(),
                      nn.ConvTranspose1d(6, 4, 4, stride=3, padding=1, output_padding=2, groups=2))
    graph = _check(m, (1, 4, 9), QuantOptions(per_channel=per_channel), seed=5)
    counts = op_counts(graph)
    assert counts.get("qconv2d") == 1 and counts.get("qconv_transpose2d") == 1


class _Decoder(nn.Module):
    """A tiny U-Net of the ops int8 runs on the NPU: convolutions, max pooling, transposed
    convolutions (one followed by a batch norm, which PT2E folds into it), skip concatenations."""

    def __init__(self) -> None:
        super().__init__()
        self.d1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.d2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.bottom = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.u2 = nn.Sequential(nn.ConvTranspose2d(16, 16, 2, stride=2), nn.BatchNorm2d(16), nn.ReLU())
        self.u1 = nn.ConvTranspose2d(32, 8, 4, stride=2, padding=1)
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(a)
        u = torch.cat([self.u2(self.bottom(b)), b], 1)
        return self.head(torch.cat([F.relu(self.u1(u)), a], 1))


def test_tiny_unet_int8_runs_with_no_cpu_op():
    torch.manual_seed(3)
    m = _Decoder().eval()
    with torch.no_grad():  # batch-norm statistics that are not the identity
        bn = m.u2[1]
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
    graph = _check(m, (1, 3, 12, 12), seed=3)
    counts = op_counts(graph)
    assert counts.get("qconv_transpose2d") == 2 and "batch_norm" not in counts


def test_a_user_quantizer_with_weights_scaled_along_axis_0_is_refused_in_words():
    from npuc.quant.quantizer import spec_problem, weight_spec

    spec = weight_spec(QuantOptions(), axis=0)
    assert spec_problem(spec, "weight", 1) == (
        "a weight quantized per channel along axis 0; the NPU scales output channels (axis 1)")
    assert spec_problem(weight_spec(QuantOptions(), axis=1), "weight", 1) is None


def test_bench_tiny_unet_int8_keeps_only_the_float_by_design_ops_on_the_cpu():
    """bench/real_models.py's TinyUNet (group norm, instance norm, ELU, transposed convolutions,
    bilinear resizing): its instance norm imports from the training IR (a batch norm of the
    input's own statistics), its transposed convolutions run int8 on the NPU, and only the ops
    docs/quantization.md keeps in float by design go to the CPU."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from real_models import TinyUNet

    import npuc

    torch.manual_seed(0)
    m = TinyUNet().eval()
    gen = torch.Generator().manual_seed(4)
    calib = [(torch.randn(1, 3, 16, 16, generator=gen),) for _ in range(3)]
    art = npuc.compile(m, calib[0], target="npu-mid", quantize="int8", calibration=calib)
    cpu = {o.op for o in art.report.cpu_ops}
    assert cpu == {"group_norm", "upsample_bilinear2d", "quantize", "dequantize"}, art.report.explain()
    y = art.run(*calib[0])[0]
    assert float((y - m(*calib[0])).norm() / m(*calib[0]).norm()) < 0.1
