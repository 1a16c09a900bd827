"""The array cost model against the simulator's timing tier, and its building blocks.

The fidelity test prints each layer's error (run with ``-s`` to see the table); it fails when a
layer is off by more than 15%.
"""

from __future__ import annotations


import numpy as np
import pytest

from npuc.codegen.emitter import Emitter
from npuc.codegen.harness import place
from npuc.codegen.kernel import get_kernel
from npuc.kir.kernel import EpilogueOp, Kernel
from npuc.codegen.kernels.array_conv import WEIGHT_ORDER, conv_problem
from npuc.codegen.kernels.array_gemm import gemm_problem
from npuc.kir.tensor import NHWC, DramTensor
from npuc.ir.ops.linalg import Conv2dAttrs, conv_output_size
from npuc.isa.enums import DType
from npuc.isa.instr import Instr
from npuc.runtime.sim import simulate
from npuc.schedule.cost import instr_time, lower_bound
from npuc.targets import load_target

FP16 = DType.fp16
MID = load_target("npu-mid")
LARGE = load_target("npu-large")


def conv(c, hw, o, k, stride=1, pad=0, act=True, name="conv"):
    oh = conv_output_size(hw, k, stride, pad, 1)
    x = DramTensor.dense("x", (1, c, hw, hw), FP16, order=NHWC)
    w = DramTensor.dense("w", (o, c, k, k), FP16, order=WEIGHT_ORDER)
    y = DramTensor.dense("y", (1, o, oh, oh), FP16, order=NHWC)
    epi = [EpilogueOp("add", operand=DramTensor("bias", (1, o, oh, oh), FP16, 0, (0, 2, 0, 0)))]
    if act:
        epi.append(EpilogueOp("relu"))
    return Kernel(name, "conv2d", (x, w), y, Conv2dAttrs((stride, stride), (pad, pad)), tuple(epi), FP16)


def linear(m, k, n, name="linear"):
    a = DramTensor.dense("a", (m, k), FP16)
    b = DramTensor.dense("w", (n, k), FP16).permute((1, 0))
    y = DramTensor.dense("y", (m, n), FP16)
    return Kernel(name, "gemm", (a, b), y, None, (EpilogueOp("gelu"),), FP16)


LAYERS = [
    pytest.param(conv(3, 112, 32, 7, 2, 3), id="stem-7x7-s2"),
    pytest.param(conv(64, 56, 64, 3, 1, 1), id="3x3-64"),
    pytest.param(conv(64, 28, 256, 1), id="1x1-64-256"),
    pytest.param(conv(256, 28, 128, 1, 2, act=False), id="1x1-s2-256-128"),
    pytest.param(conv(256, 14, 256, 3, 1, 1), id="3x3-256"),
    pytest.param(conv(512, 7, 512, 3, 1, 1), id="3x3-512-small-spatial"),
    pytest.param(conv(512, 7, 1024, 1), id="1x1-512-1024-small-spatial"),
    pytest.param(linear(197, 768, 768), id="gemm-197x768x768"),
    pytest.param(linear(8, 512, 512), id="gemm-8x512x512"),
]


def simulate_plan(k: Kernel, target):
    impl = get_kernel(k.kind)
    placed, size = place(k)
    plan = impl.plan(placed, target)
    em = Emitter(target)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    result = simulate(prog, target, np.zeros(size, np.uint8), functional=False)
    return plan, prog, result


@pytest.mark.parametrize("target", [MID, LARGE], ids=["mid", "large"])
@pytest.mark.parametrize("kernel", LAYERS)
def test_cost_model_agrees_with_the_simulator(kernel, target):
    plan, prog, result = simulate_plan(kernel, target)
    sim = result.total_cycles
    err = (plan.est_cycles - sim) / sim
    print(f"{target.name:9s} {kernel.name:8s} simulated {sim:9d} model {plan.est_cycles:9d} error {err:+.1%}  {plan.summary}")
    assert abs(err) < 0.15


@pytest.mark.parametrize("kernel", LAYERS[:4])
def test_model_counts_the_instructions_emitted(kernel):
    """The model walks the same loop nest as the emitter: it counts the same DMAs and MATMULs."""
    from npuc.schedule.cost import estimate

    plan, prog, _ = simulate_plan(kernel, MID)
    placed, _ = place(kernel)
    e = estimate(MID, conv_problem(placed) if kernel.kind == "conv2d" else gemm_problem(placed), plan.details)
    ops = [i.op for i in prog]
    array = ops.count("MATMUL") + ops.count("LOAD_WEIGHTS")
    dmas = ops.count("DMA_LOAD") + ops.count("DMA_STORE")
    assert e.dma > 0 and array > 0
    # relay NOPs and multi-instruction epilogue steps are the only differences
    assert abs(e.instructions - len(prog)) <= 0.05 * len(prog) + 2
    assert dmas <= e.instructions


def test_instruction_times_come_from_the_isa_definitions():
    rows, cols = MID.array.rows, MID.array.cols
    busy, lat = instr_time(MID, "MATMUL", dict(dtype="fp16", k=16, n=16, m0=56, m1=9))
    assert (busy, lat) == (56 * 9 + rows + 16 - 2, 0)
    ins = Instr.make("DMA_LOAD", esize=2, dram_addr=0, local_addr=0, n0=64, n1=10, dram_s1=1000)
    expect = ins.defn.timing(ins.args, MID, ins.defn.regions(ins.args))
    assert instr_time(MID, "DMA_LOAD", dict(esize=2, n0=64, n1=10, dram_s1=1000)) == expect
    # 128-byte runs are two 64-byte bursts each: 10 x 128 bytes at 16 B/cycle
    assert expect == (80, MID.dma.latency_cycles)
    assert cols == 16


def test_lower_bound_is_the_larger_of_compute_and_compulsory_traffic():
    k = conv(64, 56, 64, 3, 1, 1)
    p = conv_problem(place(k)[0])
    macs = 56 * 56 * 64 * 64 * 9
    assert lower_bound(MID, p) == -(-macs // 256)
    g = linear(4, 1024, 1024)
    pg = gemm_problem(place(g)[0])
    bytes_ = (4 * 1024 + 1024 * 1024 + 4 * 1024) * 2
    assert lower_bound(MID, pg) == -(-bytes_ // MID.dma.bytes_per_cycle)


def test_estimate_separates_array_and_dram_time():
    """A weight-streaming GEMV is DRAM-bound, a 3x3 conv array-bound, and the model says so."""
    from npuc.schedule.cost import estimate

    gemv = gemm_problem(place(linear(1, 1024, 1024))[0])
    plan = get_kernel("gemm").plan(place(linear(1, 1024, 1024))[0], MID)
    e = estimate(MID, gemv, plan.details)
    assert e.dma > e.array
    k = conv(64, 28, 64, 3, 1, 1)
    p = conv_problem(place(k)[0])
    e = estimate(MID, p, get_kernel("conv2d").plan(place(k)[0], MID).details)
    assert e.array > 2 * e.dma
    assert e.array >= -(-p.macs // MID.peak_macs_per_cycle)
    assert e.dram_bytes >= (30 * 30 * 64 + 28 * 28 * 64) * 2
