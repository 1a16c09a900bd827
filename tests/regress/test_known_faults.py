"""Faults found, each as the smallest reproducer.  An open one is marked strict xfail: the day a fix
lands the test passes, pytest reports it, the mark comes off and the test stays as a regression test."""

import pytest
import torch
import torch.nn as nn

from npuc.artifact import compile_graph, quantized_graph
from npuc.interp import interpret
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target


def test_int8_pointwise_conv_with_a_reduction_tail_on_u55_like():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(144, 32, 1)).eval()
    x = torch.randn(1, 144, 28, 28)
    tgt = load_target("u55-like-256")
    g = run_graph_passes(quantized_graph(m, (x,), tgt, [torch.randn(1, 144, 28, 28) for _ in range(2)], "pw"))
    art = compile_graph(g, tgt, quantize="int8")
    # fixed: the LOOP rerolled over the 32-channel reduction blocks took in the 16-channel tail
    # block's input load (a field moving for the first time went unseen while two others came
    # back to their first value); tests/regress/test_small_scratchpad_tiling.py sweeps the kind
    assert torch.equal(art.run(x)[0], interpret(g, x)[0])
