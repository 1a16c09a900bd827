"""What the quantization flow refuses (calibration that does not fit the model) and what it
leaves in float (ops named in QuantOptions.float_ops, ops without an int8 form)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from quantlib import op_counts, quantize_and_import

from npuc.errors import NpucError
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.frontend.pt2e import quantize
from npuc.quant.quantizer import QuantOptions


class Counting(nn.Module):
    """A conv model that counts its forward calls (nothing may run before the checks)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return F.relu(self.conv(x))


X = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "calibration,words",
    [
        ([(torch.randn(1, 3, 9, 8),)], r"calibration sample 0 is a torch.float32 tensor of shape \[1, 3, 9, 8\]"),
        ([(X,), (X.double(),)], r"input 0 of calibration sample 1 is a torch.float64 tensor"),
        ([(X, X)], r"calibration sample 0 has 2 inputs; the model takes 1"),
        ([], r"at least one sample"),
        (X, r"calibration must be a list of samples"),
        ([("not a tensor",)], r"is a str, not a tensor"),
    ],
)
def test_bad_calibration_is_refused_before_anything_runs(calibration, words):
    model = Counting().eval()
    with pytest.raises(NpucError, match=words):
        quantize(model, (X,), calibration)
    assert model.calls == 0


def test_bad_options_are_refused():
    with pytest.raises(NpucError, match="observer"):
        QuantOptions(observer="percentile")


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.sigmoid(self.conv(x))
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return F.softmax(self.fc(y), dim=-1)


def test_float_ops_stay_float_between_dequantize_and_quantize():
    torch.manual_seed(0)
    model = Gated().eval()
    samples = [(torch.randn(1, 3, 8, 8),) for _ in range(4)]
    imp = quantize_and_import(model, samples[0], samples, QuantOptions(float_ops=("sigmoid", "softmax", "layer_norm")))
    g = imp.graph
    counts = op_counts(g)
    assert counts.get("sigmoid") == 1 and counts.get("softmax") == 1 and "qlut" not in counts
    producers = {v: n for n in g.nodes for v in n.outputs}
    sig = next(n for n in g.nodes if n.op == "sigmoid")
    assert producers[sig.inputs[0]].op == "dequantize"  # dequantized before ...
    users = [n for n in g.nodes if sig.output in n.inputs]
    assert [n.op for n in users] == ["quantize"]  # ... and quantized after
    soft = next(n for n in g.nodes if n.op == "softmax")
    assert producers[soft.inputs[0]].op == "dequantize" and soft.output is g.outputs[0]
    assert "qconv2d" in counts and "qlinear" in counts
    with torch.no_grad():
        ref = imp.quantized.module(*samples[1])
    assert float((interpret(g, *samples[1])[0] - ref).abs().max()) < 0.02  # probabilities


def test_default_options_make_sigmoid_a_table():
    torch.manual_seed(0)
    model = Gated().eval()
    samples = [(torch.randn(1, 3, 8, 8),) for _ in range(2)]
    g = import_quantized(model, samples[0], samples)
    counts = op_counts(g)
    assert counts.get("qlut") == 1 and "sigmoid" not in counts and counts.get("softmax") == 1
