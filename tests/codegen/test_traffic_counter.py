"""The network-level memory plan's traffic counter: the array kernels give it their transfers
alone (``moves_only``), and it counts exactly what the whole instruction stream moves."""

from __future__ import annotations

import pytest
import torch

import npuc
from npuc.codegen import resident_plan
from npuc.codegen.resident_plan import kernel_traffic, split_sizes
from npuc.kir.program import NpuSegment
from npuc.lower.precision import choose_precision
from npuc.pipeline import backend_stages
from npuc.targets import load_target

from tests.codegen.test_resident_plan import Residual


def lowered(model, shape, target):
    torch.manual_seed(0)
    g = npuc.import_model(model().eval(), (torch.randn(shape),))
    m = g
    for stage in backend_stages(target, choose_precision(target, None), "m")[:4]:  # up to the memory plan
        m = stage.run(m)
    return m


@pytest.mark.parametrize("target", ["npu-mid"])
def test_moves_only_counts_what_the_whole_stream_moves(target, monkeypatch):
    t = load_target(target)
    m = lowered(Residual, (1, 3, 40, 36), t)
    buffers = {b.name: b for b in m.buffers}
    kernels = [lk.kernel for s in m.segments if isinstance(s, NpuSegment) for lk in s.kernels]
    assert any(k.kind == "conv2d" for k in kernels)
    size = t.scratchpad.size_bytes
    for r in split_sizes(t)[:2]:
        fast = [kernel_traffic(k, m, size - r, buffers) for k in kernels]
        monkeypatch.setattr(resident_plan._Counter, "moves_only", False)
        whole = [kernel_traffic(k, m, size - r, buffers) for k in kernels]
        monkeypatch.undo()
        assert fast == whole
