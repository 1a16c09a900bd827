"""The int8 epilogue of an array kernel and what runs beside it.

* REQUANT adds the folded bias itself (``add_bias``): an int8 convolution makes no pass over its
  int32 sums before requantizing, and stays bit-exact with the integer reference;
* consecutive kernels' accumulator tiles sit apart where both fit
  (``npuc.codegen.prefetch.accumulator_bases``), so the next kernel's matrix products start while
  the previous kernel's epilogue (REQUANT, the fused residual QADD) still runs on the vector
  queue; the simulator's race detector checks every access of that overlap;
* the cost model times the requantization as the simulator runs it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from npuc.artifact import compile_graph, quantized_graph
from npuc.codegen.prefetch import ShiftedEmitter, accumulator_bases
from npuc.interp import interpret
from npuc.isa.enums import Unit
from npuc.isa.loops import expand
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target

MID = load_target("npu-mid")


class ResidualThenConv(nn.Module):
    """A 1x1 convolution whose epilogue is a residual add (a fused QADD), then another 1x1
    convolution that reads its result."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.expand, self.after = nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        return self.after(torch.relu(x + self.expand(x)))


def _compiled(m: nn.Module, x: torch.Tensor):
    torch.manual_seed(1)
    g = run_graph_passes(quantized_graph(m, (x,), MID, [torch.randn_like(x) for _ in range(2)], "overlap"))
    return g, compile_graph(g, MID, quantize="int8")


def _spans(art) -> dict[str, dict[str, list[tuple[int, int]]]]:
    """Per kernel, per unit: the (start, end) cycles of its instructions, from the simulator."""
    prof = art.profile(*[torch.zeros(1, 64, 8, 8)])
    out: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for run in prof.runs:
        if run.sim is None:
            continue
        ops, queues, units, starts, ends = run.sim.schedule
        labels = prof.labels[run.index]
        origin = run.sim.origin or range(len(ops))
        for k, (unit, s, e) in enumerate(zip(units, starts, ends)):
            name = labels[origin[k]]
            out.setdefault(name, {}).setdefault(Unit(unit).name, []).append((s, e))
    return out


def test_the_next_kernels_products_start_before_the_epilogue_ends_and_nothing_races():
    torch.manual_seed(0)
    m, x = ResidualThenConv().eval(), torch.randn(1, 64, 8, 8)
    g, art = _compiled(m, x)
    assert art.report.kernels == 2, art.report.explain()
    (prog,) = art.programs
    ops, origin = expand(list(prog.instrs))
    assert any(i.op == "QADD" for i in ops)
    labels = art.profile(torch.zeros(1, 64, 8, 8)).labels[0]
    acc: dict[str, list[tuple[int, int]]] = {}  # per kernel: the accumulator bytes its products write
    for i, o in zip(ops, origin):
        if i.op == "MATMUL":
            acc.setdefault(labels[o], []).append((i.args.out_addr, i.args.out_addr + i.args.out_s1 * (i.args.m1 - 1)
                                                  + i.args.out_s0 * (i.args.m0 - 1) + 4 * i.args.n))
    (a_lo, a_hi), (b_lo, b_hi) = [(min(lo for lo, _ in r), max(hi for _, hi in r)) for r in acc.values()]
    assert a_hi <= b_lo or b_hi <= a_lo, acc  # the second kernel's tiles sit beside the first's
    got, want = art.run(x)[0], interpret(g, x)[0]  # functional run: the race detector sees every access
    assert torch.equal(got, want)
    spans = _spans(art)
    first, second = [n for n in spans if n]  # the two kernels, in program order
    epilogue_end = max(e for _, e in spans[first]["vector"])
    products_start = min(s for s, _ in spans[second]["array"])
    assert products_start < epilogue_end, (products_start, epilogue_end)


def test_an_int8_convolution_requantizes_with_the_bias_on_the_pre_adder():
    torch.manual_seed(0)
    m, x = ResidualThenConv().eval(), torch.randn(1, 64, 8, 8)
    g, art = _compiled(m, x)
    ops = [i for prog in art.programs for i in expand(list(prog.instrs))[0]]
    requants = [i for i in ops if i.op == "REQUANT"]
    assert requants and all(i.args.add_bias for i in requants)
    assert not [i for i in ops if i.op == "VBIN" and i.args.dst_space.name == "acc"]  # no pass over the sums
    assert sum(i.args.n0 * i.args.n1 for i in requants) == 2 * 64 * 8 * 8  # each output requantized once
    assert torch.equal(art.run(x)[0], interpret(g, x)[0])


def test_accumulator_bases_keep_consecutive_kernels_apart_where_both_fit():
    size = 65536
    sizes = [16384, 16384, 57344, 28672, 8192, 0, 40000]
    bases = accumulator_bases(sizes, size)
    assert bases == [0, 16384, 0, 0, 28672, 0, 0]  # 57344 + 16384 and 28672 + 57344 do not fit
    spans = [(b, b + n) for b, n in zip(bases, sizes)]
    assert all(hi <= size for _, hi in spans)
    for i in (1, 4):  # where the two fit, the kernel's bytes are not the previous one's
        (a0, a1), (b0, b1) = spans[i - 1], spans[i]
        assert b1 <= a0 or a1 <= b0


def test_the_shifted_emitter_moves_accumulator_fields_and_loop_bodies():
    from npuc.codegen.emitter import Emitter
    from npuc.codegen.loop_nest import LoopNest, Move
    from npuc.kir.tile_program import Step

    em = Emitter(MID)
    sh = ShiftedEmitter(em, MID, 0, MID.scratchpad.size_bytes, acc_base=0x4000)
    assert sh.nests
    sh.emit("MATMUL", dtype="int8", acc=False, k=16, n=16, in_addr=0x40, m0=4, m1=1, in_s0=16, in_s1=64,
            out_addr=0x100, out_s0=64, out_s1=256)
    step = Step("REQUANT", (("n0", 16), ("n1", 4), ("src_space", "acc"), ("src", 0x100), ("dst", 0x800),
                            ("qparams", 0x900)), 0)
    sh.emit_loop(LoopNest((step,), 3, (Move(0, "dst", 64),)))
    prog, _ = em.finish()
    mm, *rq = [i for i in expand(list(prog.instrs))[0] if i.op != "END"]
    assert mm.args.out_addr == 0x4100 and mm.args.in_addr == 0x40  # the scratchpad input does not move
    assert [(i.args.src, i.args.dst) for i in rq] == [(0x4100, 0x800 + 64 * k) for k in range(3)]
    assert em.loops  # handed on as a loop nest, not flattened


def test_the_cost_model_times_the_requantization_as_the_simulator_runs_it():
    from npuc.codegen.emitter import Emitter
    from npuc.codegen.harness import place
    from npuc.codegen.kernel import get_kernel
    from npuc.runtime.sim import simulate

    torch.manual_seed(0)
    m, x = ResidualThenConv().eval(), torch.randn(1, 64, 28, 28)
    torch.manual_seed(1)
    g = run_graph_passes(quantized_graph(m, (x,), MID, [torch.randn_like(x) for _ in range(2)], "overlap"))
    from npuc.lower.fusion import fuse
    from npuc.lower.io_quant import absorb_io_quantization
    from npuc.lower.partition import partition
    from npuc.lower.precision import choose_precision

    lowered = fuse(partition(absorb_io_quantization(g), MID, choose_precision(MID, "int8")))
    for lk in [lk for s in lowered.segments for lk in getattr(s, "kernels", ())]:
        impl = get_kernel(lk.kernel.kind)
        placed, size = place(lk.kernel)
        plan = impl.plan(placed, MID)
        em = Emitter(MID)
        impl.emit(placed, plan, em)
        prog, _ = em.finish()
        sim = simulate(prog, MID, np.zeros(size, np.uint8), functional=False).total_cycles
        assert abs(plan.est_cycles - sim) / sim <= 0.10, (lk.name, plan.est_cycles, sim)
