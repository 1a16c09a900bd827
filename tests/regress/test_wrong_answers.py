"""Regression tests of silent wrong answers found from outside (issue 14): each compiles a model
the way a user would and checks the NPU's outputs against PyTorch eager."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import npuc
from npuc.report.accuracy import check_output, eager_outputs, rel_l2


def _npu_error(model: nn.Module, *inputs: torch.Tensor) -> float:
    model = model.eval()
    art = npuc.compile(model, inputs, target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    (out,) = art.run(*inputs)
    with torch.no_grad():
        ref = model(*inputs)
    return rel_l2(out, ref)


class Recurrent(nn.Module):
    def __init__(self, cell: type, layers: int) -> None:
        super().__init__()
        self.rnn = cell(8, 16, num_layers=layers, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


@pytest.mark.parametrize("cell,layers,bidirectional", [(nn.LSTM, 1, False), (nn.LSTM, 2, False), (nn.GRU, 2, False),
                                                       (nn.GRU, 1, True)])
def test_recurrent_layers_match_pytorch(cell, layers, bidirectional):
    # The fused cell update of the last time step read a gate computed after it.
    torch.manual_seed(0)
    m = Recurrent(cell, layers)
    if bidirectional:
        m.rnn = cell(8, 16, num_layers=layers, batch_first=True, bidirectional=True)
    assert _npu_error(m, torch.randn(1, 5, 8)) < 5e-3


class MatmulThen(nn.Module):
    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.register_buffer("b", torch.rand(4, 4) + 0.5)

    def forward(self, x, w):
        y = x @ w
        return {"div": y / self.b, "mul": y * self.b, "rdiv": self.b / y}[self.op]


@pytest.mark.parametrize("op", ["div", "mul"])
def test_batched_matmul_then_broadcast_constant(op):
    # The divisor, kept on chip for the second batch, was inverted a second time.
    torch.manual_seed(0)
    x, w = torch.randn(3, 4, 8), torch.randn(8, 4)
    assert _npu_error(MatmulThen(op), x, w) < 5e-3


def test_nan_fp16_reference_is_not_a_silent_pass():
    ref = torch.tensor([1.0, 2.0, 3.0])
    c = check_output(ref.clone(), ref, torch.tensor([1.0, math.nan, 3.0]))
    assert c.tolerance == pytest.approx(1e-2) and c.ok and "fp16" in c.note
    c = check_output(torch.tensor([1.0, math.nan, 3.0]), ref, ref)
    assert not c.ok and "NaN" in c.note
    c = check_output(ref.clone(), torch.tensor([1.0, math.inf, 3.0]), ref)
    assert not c.ok and "fp32" in c.note


def test_fp16_overflow_of_pytorch_is_reported():
    class Big(nn.Module):
        def forward(self, x):
            return x * 1e5

    x = torch.ones(1, 4)
    (r,), (r16,) = eager_outputs(Big(), (x,)), eager_outputs(Big(), (x,), half=True)
    c = check_output(r.clone(), r, r16)
    assert not math.isfinite(c.fp16_rel_error) and c.note
