"""Squeeze-and-excitation blocks run as two passes (``npuc/lower/cascade_se.py``, the
``pooled_chain`` kernel): the SE input pooled stripe by stripe and never stored, then computed
again, scaled and projected in one fused chain.  Against PyTorch eager (fp16) and the integer
reference (int8, bit for bit) with stripes that do not divide the heights; the SE input gets no
DRAM; the cost model keeps D stored where recomputing costs more; the pooled chain's estimate
against the simulator; the text form parses back; compiling twice gives the same bytes.  The
simulator's race detector runs on every program (``art.run``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.ops.misc import SqueezeExcitation

import npuc
from npuc.artifact import compile_graph
from npuc.codegen.emitter import Emitter
from npuc.codegen.kernel import get_kernel
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.kir.text import parse_kernel, print_kernel
from npuc.pipeline import run_graph_passes
from npuc.runtime.sim import simulate
from npuc.schedule.cascade_cost import program_estimate
from tests.codegen.test_fused_chain import FP16_TOL, small_spad


class SeBlock(torch.nn.Module):
    """EfficientNet's MBConv: 1x1 expand, depthwise (stride ``stride``), squeeze-excitation, 1x1
    project (+ x); ``hard`` for MobileNetV3's activations (hardswish, relu / hardsigmoid SE)."""

    def __init__(self, c: int = 8, e: int = 32, stride: int = 1, hard: bool = False) -> None:
        super().__init__()
        act = torch.nn.Hardswish if hard else torch.nn.SiLU
        self.expand = torch.nn.Sequential(torch.nn.Conv2d(c, e, 1), torch.nn.BatchNorm2d(e), act())
        self.dw = torch.nn.Sequential(torch.nn.Conv2d(e, e, 3, stride, 1, groups=e), torch.nn.BatchNorm2d(e), act())
        self.se = (SqueezeExcitation(e, e // 4, torch.nn.ReLU, torch.nn.Hardsigmoid) if hard
                   else SqueezeExcitation(e, e // 4, torch.nn.SiLU))
        self.project = torch.nn.Sequential(torch.nn.Conv2d(e, c, 1), torch.nn.BatchNorm2d(c))
        self.residual = stride == 1

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class WideInput(torch.nn.Module):
    """An SE over the output of a strided 3x3 convolution of a wide input: computing it twice
    reads the input (16x larger than the SE input) twice, so storing it is cheaper."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(64, 8, 3, 2, 1)
        self.se = SqueezeExcitation(8, 4)
        self.project = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return self.project(self.se(torch.relu(self.conv(x))))


def _model(make):
    torch.manual_seed(0)
    m = make().eval()
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    return m


def kernels(art):
    return [lk for c in art.compiled.codes for lk in c.segment.kernels]


def _se_input(art) -> str:
    """The name of the tensor the pooled chain pools."""
    (pooled,) = [lk for lk in kernels(art) if lk.kernel.kind == "pooled_chain"]
    return pooled.kernel.attrs.members[-1].inputs[0].name


def _two_passes(art):
    ks = kernels(art)
    first = [lk for lk in ks if lk.kernel.kind == "pooled_chain"]
    second = [lk for lk in ks if lk.kernel.kind == "fused_chain"
              and any(m.output.name == first[0].kernel.attrs.members[-2].output.name for m in lk.kernel.attrs.members)]
    return first, second


@pytest.mark.parametrize("make,shape,kib", [
    (lambda: SeBlock(8, 32, 1), (1, 8, 37, 23), 32),
    (lambda: SeBlock(16, 64, 1), (1, 16, 33, 25), 48),
], ids=["residual", "wider"])
def test_fp16_se_block_recomputes_and_matches_eager(make, shape, kib):
    m = _model(make)
    x = torch.randn(shape)
    target = small_spad(kib)
    fused = npuc.compile(m, (x,), target=target, fuse_layers=True)
    first, second = _two_passes(fused)
    assert len(first) == 1 and len(second) == 1
    assert first[0].kernel.attrs.stripe_rows < first[0].kernel.attrs.members[-2].output.shape[2]  # several stripes
    d = _se_input(fused)
    touched = {t.name for lk in kernels(fused) for t in lk.kernel.tensors()}
    assert d not in touched  # the SE input lives only in scratchpad, in both passes
    (got,) = fused.run(x)
    want = m(x)
    err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert err < FP16_TOL
    unfused = npuc.compile(m, (x,), target=target, fuse_layers=False)
    assert fused.profile(x).dram_bytes < unfused.profile(x).dram_bytes / 2


@pytest.mark.parametrize("make,shape,kib", [
    (lambda: SeBlock(8, 32, 1), (1, 8, 29, 19), 64),
    (lambda: SeBlock(8, 32, 1, hard=True), (1, 8, 33, 21), 64),
], ids=["silu-sigmoid", "hardswish-hardsigmoid"])
def test_int8_se_block_is_bit_exact(make, shape, kib):
    m = _model(make)
    x = torch.randn(shape)
    calib = [(torch.randn(shape),) for _ in range(2)]
    g = run_graph_passes(import_quantized(m, (x,), calib, name="se"))
    (want,) = interpret(g, x)
    fused = compile_graph(g, small_spad(kib), quantize="int8", fuse_layers=True)
    first, second = _two_passes(fused)
    assert len(first) == 1 and len(second) == 1
    (got,) = fused.run(x)
    assert torch.equal(got, want)


def test_stored_se_input_is_kept_where_recompute_costs_more():
    from npuc.lower.cascade import _readers
    from npuc.lower.cascade_se import price_block, se_blocks
    from npuc.lower.fusion import fuse
    from npuc.lower.partition import partition
    from npuc.lower.precision import choose_precision

    m = _model(WideInput)
    x = torch.randn(1, 64, 32, 32)
    target = small_spad(64)
    lowered = fuse(partition(npuc.import_model(m, (x,)), target, choose_precision(target, None)))
    (seg,) = [s for s in lowered.segments if hasattr(s, "kernels")]
    readers, sizes = _readers(lowered), {b.name: b for b in lowered.buffers}
    (block,) = se_blocks(seg.kernels, readers, set(), sizes)
    choice = price_block(seg.kernels, block, target, readers, set(), sizes)
    assert choice.stored.energy_pj < choice.recompute.energy_pj
    art = npuc.compile(m, (x,), target=target, fuse_layers=True)
    assert not [lk for lk in kernels(art) if lk.kernel.kind == "pooled_chain"]
    (got,) = art.run(x)
    want = m(x)
    assert (got - want).abs().max().item() / max(1.0, want.abs().max().item()) < FP16_TOL


def test_pooled_chain_estimate_matches_the_simulator_and_text_round_trips():
    m = _model(lambda: SeBlock(8, 32, 1))
    x = torch.randn(1, 8, 37, 23)
    target = small_spad(32)
    art = npuc.compile(m, (x,), target=target, fuse_layers=True)
    (lk,) = [lk for lk in kernels(art) if lk.kernel.kind == "pooled_chain"]
    assert parse_kernel(print_kernel(lk)) == lk
    impl = get_kernel("pooled_chain")
    plan = impl.plan(lk.kernel, target)
    assert "never stored" in plan.summary and "pooled" in plan.details.text()
    em = Emitter(target)
    impl.emit(lk.kernel, plan, em)
    prog, _ = em.finish()
    size = -(-max(t.addr + t.span for t in lk.kernel.tensors()) // 64) * 64
    r = simulate(prog, target, np.zeros(size, np.uint8), functional=False)
    est = program_estimate(plan.details.program.steps, target)
    assert abs(plan.est_cycles - r.total_cycles) <= 0.10 * r.total_cycles
    assert abs(est.energy_pj - r.energy_pj) <= 0.01 * r.energy_pj
    again = npuc.compile(m, (x,), target=target, fuse_layers=True)
    assert again.to_bytes() == art.to_bytes()
