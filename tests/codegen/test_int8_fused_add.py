"""A residual qadd fused into the int8 convolution that produces one of its summands.

The fused kernel runs the qbinary kernel's integer steps on the conv's requantized tile, so the
network's result equals the integer reference bit for bit, with one kernel less per residual
add.  Cases: the summand on either side of the add (its factors swap), a downsampling branch
(the add fuses into the conv that runs last), a ReLU after the add, small and large scratchpads.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from npuc.artifact import compile_graph, quantized_graph
from npuc.interp import interpret
from npuc.isa.loops import expand
from npuc.kir.kernel import qadd_step
from npuc.kir.text import parse_kernel, print_kernel
from npuc.lower.fusion import fuse
from npuc.lower.io_quant import absorb_io_quantization
from npuc.lower.partition import partition
from npuc.lower.precision import choose_precision
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target


class Residual(nn.Module):
    """conv -> relu -> conv, plus the input (or a 1x1 downsampling conv of it), then relu."""

    def __init__(self, c: int, out: int, stride: int = 1, summand_first: bool = False) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1)
        self.c2 = nn.Conv2d(c, out, 3, stride=stride, padding=1)
        self.down = nn.Conv2d(c, out, 1, stride=stride) if (out != c or stride != 1) else None
        self.summand_first = summand_first

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x)))
        idn = x if self.down is None else self.down(x)
        return torch.relu(idn + y if self.summand_first else y + idn)


def _quantized(m: nn.Module, x: torch.Tensor, target):
    torch.manual_seed(1)
    return run_graph_passes(quantized_graph(m, (x,), target, [torch.randn_like(x) for _ in range(2)], "res"))


CASES = [
    ("npu-mid", 24, 24, 1, False),
    ("npu-mid", 24, 24, 1, True),
    ("npu-mid", 20, 40, 2, False),
    ("u55-like-256", 40, 40, 1, False),
]


@pytest.mark.parametrize("preset,c,out,stride,first", CASES,
                         ids=[f"{p}-{c}-{o}-s{s}{'-first' if f else ''}" for p, c, o, s, f in CASES])
def test_a_fused_residual_qadd_is_bit_exact(preset, c, out, stride, first):
    torch.manual_seed(0)
    m = Residual(c, out, stride, first).eval()
    x = torch.randn(1, c, 16, 16)
    tgt = load_target(preset)
    g = _quantized(m, x, tgt)
    art = compile_graph(g, tgt, quantize="int8")
    convs = 2 if out == c and stride == 1 else 3
    kinds = [lk.kernel.kind for code in art.compiled.codes for lk in code.segment.kernels]
    # no qbinary kernel left (on u55-like-256 weights copied ahead into the SRAM add copy kernels)
    assert [k for k in kinds if k != "copy"] == ["conv2d"] * convs, art.report.explain()
    got, want = art.run(x)[0], interpret(g, x)[0]
    assert int((got != want).sum()) == 0, f"{int((got != want).sum())} of {want.numel()} values differ"


def test_the_fused_step_prints_and_parses_back():
    torch.manual_seed(0)
    m = Residual(16, 16).eval()
    x = torch.randn(1, 16, 8, 8)
    tgt = load_target("npu-mid")
    g = absorb_io_quantization(_quantized(m, x, tgt))
    lowered = fuse(partition(g, tgt, choose_precision(tgt, "int8")))
    fused = [lk for s in lowered.segments for lk in getattr(s, "kernels", ())
             if any(qadd_step(e) is not None for e in lk.kernel.epilogue)]
    assert len(fused) == 1
    k = fused[0].kernel
    assert k.kind == "conv2d" and len(k.inputs) == 5  # x, w, bias, records, the qadd's record
    step = qadd_step(k.epilogue[0])
    assert step.record == 4 and k.inputs[4].shape == (1, 2)
    assert parse_kernel(print_kernel(k)) == k


class MlpResidual(nn.Module):
    """A transformer block's MLP with its residual add: the qadd fuses into the second gemm."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(48, 96), nn.Linear(96, 48)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def test_a_residual_qadd_fuses_into_a_gemm_bit_exactly():
    torch.manual_seed(0)
    m, x = MlpResidual().eval(), torch.randn(1, 20, 48)
    tgt = load_target("npu-mid")
    g = _quantized(m, x, tgt)
    art = compile_graph(g, tgt, quantize="int8")
    assert art.report.kernels == 2, art.report.explain()
    got, want = art.run(x)[0], interpret(g, x)[0]
    assert torch.equal(got, want)


def test_the_fused_add_is_one_qadd_per_tile_and_no_int32_steps():
    torch.manual_seed(0)
    m = Residual(16, 16).eval()
    x = torch.randn(1, 16, 8, 8)
    tgt = load_target("npu-mid")
    art = compile_graph(_quantized(m, x, tgt), tgt, quantize="int8")
    ops = [i for prog in art.programs for i in expand(list(prog.instrs))[0]]
    qadds = [i for i in ops if i.op == "QADD"]
    assert qadds, "the fused residual add emits QADD"
    # nothing widened but the shifts of the REQUANT records (npuc.kir.records)
    assert not [i for i in ops if i.op == "VCVT" and i.args.src_dtype.name == "int8" and i.args.dst_s0 != 8]
    assert not [i for i in ops if i.op == "VUN" and i.args.op.name == "muls"]
    assert sum(i.args.n0 * i.args.n1 for i in qadds) == 16 * 8 * 8  # each element added once


class Bottleneck(nn.Module):
    """ResNet-50's 1x1 expansion with its residual add: a K = 64 conv whose epilogue is the add."""

    def __init__(self) -> None:
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(256, 64, 1), nn.Conv2d(64, 256, 1)

    def forward(self, x):
        return torch.relu(x + self.expand(torch.relu(self.reduce(x))))


def test_the_cost_model_times_the_fused_qadd_as_the_simulator_runs_it():
    from npuc.codegen.emitter import Emitter
    from npuc.codegen.harness import place
    from npuc.codegen.kernel import get_kernel
    from npuc.runtime.sim import simulate
    import numpy as np

    torch.manual_seed(0)
    x = torch.randn(1, 256, 14, 14)
    tgt = load_target("npu-mid")
    g = absorb_io_quantization(_quantized(Bottleneck().eval(), x, tgt))
    lowered = fuse(partition(g, tgt, choose_precision(tgt, "int8")))
    (k,) = [lk.kernel for s in lowered.segments for lk in getattr(s, "kernels", ())
            if any(qadd_step(e) is not None for e in lk.kernel.epilogue)]
    impl = get_kernel(k.kind)
    placed, size = place(k)
    plan = impl.plan(placed, tgt)
    em = Emitter(tgt)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    sim = simulate(prog, tgt, np.zeros(size, np.uint8), functional=False).total_cycles
    assert any(i.op == "QADD" for i in expand(list(prog.instrs))[0])
    print(f"fused 1x1 conv + qadd: model {plan.est_cycles} cycles, simulated {sim}")
    assert abs(plan.est_cycles - sim) / sim <= 0.10, (plan.est_cycles, sim)
