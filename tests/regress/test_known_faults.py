"""Faults found and not yet fixed, each as the smallest reproducer, marked strict xfail: the day a
fix lands the test passes, pytest reports it, and the mark comes off."""

import pytest
import torch
import torch.nn as nn

from npuc.artifact import compile_graph, quantized_graph
from npuc.interp import interpret
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target


@pytest.mark.xfail(strict=True, reason="open: int8 1x1 conv tiled c32 with a 16-channel tail on a 32 KiB scratchpad "
                                       "differs from the integer reference")
def test_int8_pointwise_conv_with_a_reduction_tail_on_u55_like():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(144, 32, 1)).eval()
    x = torch.randn(1, 144, 28, 28)
    tgt = load_target("u55-like-256")
    g = run_graph_passes(quantized_graph(m, (x,), tgt, [torch.randn(1, 144, 28, 28) for _ in range(2)], "pw"))
    art = compile_graph(g, tgt, quantize="int8")
    assert torch.equal(art.run(x)[0], interpret(g, x)[0])
