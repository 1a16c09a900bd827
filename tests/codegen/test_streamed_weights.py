"""int8 1x1 expansions whose weights the tiling search streams rather than keeps resident
(``npuc.schedule.search.streamed_variant``): the compiled network equals the integer reference
bit for bit (the race detector runs on every ``art.run``)."""

from __future__ import annotations

import torch

from npuc.artifact import compile_graph
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.pipeline import run_graph_passes


class Expansion(torch.nn.Module):
    """A ResNet-50 stage-3 ending: 256 -> 1024 channels at 14x14 plus a projected residual."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(256, 1024, 1)
        self.proj = torch.nn.Conv2d(256, 1024, 1)

    def forward(self, x):
        x = torch.relu(x)
        return torch.relu(self.conv(x) + self.proj(x))


def test_streamed_int8_expansion_is_bit_exact():
    torch.manual_seed(3)
    m = Expansion().eval()
    x = torch.randn(1, 256, 14, 14)
    g = run_graph_passes(import_quantized(m, (x,), [(torch.randn(1, 256, 14, 14),)], name="expansion"))
    art = compile_graph(g, "npu-mid", quantize="int8")
    tilings = [p.details for c in art.compiled.codes for p in c.plans if hasattr(p.details, "w_slots")]
    streamed = [t for t in tilings if t.order == "n_outer" and t.w_slots == -(-256 // t.tc) and not t.wide_weights]
    assert streamed, [str(t) for t in tilings]
    (want,) = interpret(g, x)
    (got,) = art.run(x)
    assert torch.equal(got, want)
