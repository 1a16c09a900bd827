"""A convolution of a one-channel input runs on the array, whatever the strides of that channel.

Found by a real model: wav2vec2's feature extractor starts with a ``Conv1d`` over raw audio
(1 channel), imported as a 2-D convolution between reshapes, whose input keeps the reshape's
NCHW strides.  The conv2d kernel refused it as not channels-last and the layer fell to the CPU,
though a dimension of size 1 is never stepped.  fp16 against eager, int8 bit-exact against the
integer reference, nothing on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from npuc.artifact import compile_graph, quantized_graph
from npuc.interp import interpret
from npuc.pipeline import import_model, run_graph_passes
from npuc.targets import load_target


class Audio(nn.Module):
    """Raw audio -> features, as wav2vec2's first layer (kernel 10, stride 5), then a second conv."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(1, 16, 10, stride=5)
        self.b = nn.Conv1d(16, 8, 3, stride=2)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


class Grey(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(1, 12, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.c(x))


CASES = [(Audio, (1, 1, 397)), (Grey, (1, 1, 13, 11))]


@pytest.mark.parametrize("build,shape", CASES, ids=["conv1d-audio", "conv2d-grey"])
def test_fp16_one_channel_conv_runs_on_the_npu(build, shape):
    torch.manual_seed(0)
    m, x = build().eval(), torch.randn(shape)
    art = compile_graph(import_model(m, (x,)), load_target("npu-mid"))
    assert not [o for o in art.report.cpu_ops if o.op == "conv2d"], art.report.cpu_ops
    with torch.no_grad():
        want = m(x)
    (got,) = art.run(x)
    err = float((got - want).norm() / want.norm())
    assert err < 2e-3, f"relative L2 error {err:.2e} against eager"


@pytest.mark.parametrize("build,shape", CASES, ids=["conv1d-audio", "conv2d-grey"])
def test_int8_one_channel_conv_is_bit_exact(build, shape):
    torch.manual_seed(0)
    m, x = build().eval(), torch.randn(shape)
    tgt = load_target("npu-mid")
    g = run_graph_passes(quantized_graph(m, (x,), tgt, [torch.randn(shape) for _ in range(2)], "one"))
    art = compile_graph(g, tgt, quantize="int8")
    assert not [o for o in art.report.cpu_ops if o.op.startswith("q") or o.op == "conv2d"], art.report.cpu_ops
    got, want = art.run(x)[0], interpret(g, x)[0]
    assert int((got != want).sum()) == 0, f"{int((got != want).sum())} of {want.numel()} values differ"
