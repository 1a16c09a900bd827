"""The 56x56x64 3x3 convolution on the array: cycles, lower bound, MAC use and DRAM traffic.

The layer is ResNet's first 3x3 block (x: 1x64x56x56, 64 output channels, pad 1, bias + ReLU in
fp16; folded bias + REQUANT in int8).  For npu-mid and npu-large, fp16 and int8, prints the
simulated cycles (timing tier), the lower bound max(MACs / PEs, compulsory DRAM bytes /
bandwidth), cycles over that bound, MAC use (MACs over the array's capacity in the run), the
DRAM bytes the simulator counted (whole bursts) over the compulsory bytes (input, weights,
output, bias and REQUANT records once each), the cost model's estimate and the chosen tiling;
"before" is the tiling the planner chose at commit 4944dc3 (no input bands, no wide weight
blocks) emitted by today's engine (so its first weight block is loaded by planes: at 4944dc3 itself
the four rows measured 457,238 / 455,524 / 125,626 / 127,162 cycles with the same DRAM bytes),
"after" today's choice.  Then the same figures for ResNet's three compute-bound 3x3 layers
(56x56x64, 28x28x128, 14x14x256) under today's choice.  Figures only, no assertions.

    .venv/bin/python bench/conv_transfers.py [--targets npu-mid,npu-large] [--dtypes fp16,int8]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from npuc.codegen.emitter import Emitter
from npuc.codegen.harness import place
from npuc.codegen.kernel import get_kernel
from npuc.codegen.kernels.array_conv import WEIGHT_ORDER, conv_problem
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.isa.enums import DType
from npuc.kir.kernel import EpilogueOp, Kernel, QuantAttrs
from npuc.kir.tensor import NHWC, DramTensor
from npuc.runtime.sim import simulate
from npuc.schedule.cost import compulsory_bytes, estimate, lower_bound
from npuc.schedule.problem import ArrayTiling
from npuc.targets import load_target


def conv56(dtype: DType, c: int = 64, hw: int = 56, o: int = 64) -> Kernel:
    """The layer: 3x3, stride 1, pad 1; fp16 with bias + ReLU, int8 with the folded bias + REQUANT."""
    x = DramTensor.dense("x", (1, c, hw, hw), dtype, order=NHWC)
    w = DramTensor.dense("w", (o, c, 3, 3), dtype, order=WEIGHT_ORDER)
    y = DramTensor.dense("y", (1, o, hw, hw), dtype, order=NHWC)
    attrs = Conv2dAttrs((1, 1), (1, 1))
    if dtype is DType.int8:
        ins = (x, w, DramTensor.dense("b", (o,), DType.int32), DramTensor.dense("r", (o, 2), DType.int32))
        return Kernel("conv56", "conv2d", ins, y, attrs, (), dtype, quant=QuantAttrs(3, -5, -128, 127))
    bias = DramTensor("bias", (1, o, hw, hw), dtype, 0, (0, dtype.size, 0, 0))
    return Kernel("conv56", "conv2d", (x, w), y, attrs, (EpilogueOp("add", operand=bias), EpilogueOp("relu")), dtype)


# The tilings npuc's planner chose for this layer before input bands, wide weight blocks, the
# accumulator fix and the traffic-aware choice (commit 4944dc3): simulated here as "before".
BEFORE = {
    ("npu-mid", "fp16"): ArrayTiling(3, 56, 32, 32, w_slots=4, acc_slots=2),
    ("npu-mid", "int8"): ArrayTiling(1, 56, 64, 32, unfold=True, acc_slots=2),
    ("npu-large", "fp16"): ArrayTiling(7, 56, 32, 32, x_slots=16, w_slots=4, acc_slots=2),
    ("npu-large", "int8"): ArrayTiling(7, 56, 32, 32, x_slots=16, w_slots=4, acc_slots=2),
}


def simulate_with(k: Kernel, target, tiling: ArrayTiling | None):
    """(simulation, plan) of ``k`` under the planner's tiling or ``tiling``."""
    impl = get_kernel(k.kind)
    placed, size = place(k)
    plan = impl.plan(placed, target)
    if tiling is not None:
        plan = dataclasses.replace(plan, summary=str(tiling), est_cycles=estimate(target, conv_problem(placed), tiling).cycles,
                                   details=tiling)
    em = Emitter(target)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    return simulate(prog, target, np.zeros(size, np.uint8), functional=False), plan


def measure(target_name: str, dtype: DType, when: str) -> str:
    target = load_target(target_name)
    k = conv56(dtype)
    sim, plan = simulate_with(k, target, BEFORE[(target_name, dtype.name)] if when == "before" else None)
    p = conv_problem(place(k)[0])
    lb = lower_bound(target, p)
    dram = sim.dram_bytes_read + sim.dram_bytes_written
    comp = compulsory_bytes(p)
    err = (plan.est_cycles - sim.total_cycles) / sim.total_cycles
    return (f"{target_name:10s} {dtype.name:5s} {when:6s} {sim.total_cycles:10,d} {lb:10,d} {sim.total_cycles / lb:6.3f} "
            f"{sim.mac_utilization:6.1%} {dram:11,d} {comp:11,d} {dram / comp:6.2f} {plan.est_cycles:10,d} {err:+6.1%}  "
            f"{plan.summary}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="npu-mid,npu-large")
    ap.add_argument("--dtypes", default="fp16,int8")
    args = ap.parse_args()
    print("conv 3x3 64->64 @56x56 pad 1 (x: 1x64x56x56)")
    print(f"{'target':10s} {'dtype':5s} {'':6s} {'cycles':>10s} {'bound':>10s} {'ratio':>6s} {'MACuse':>6s} "
          f"{'DRAM B':>11s} {'compuls. B':>11s} {'x':>6s} {'model':>10s} {'error':>6s}  tiling")
    for t in args.targets.split(","):
        for d in args.dtypes.split(","):
            for when in ("before", "after"):
                print(measure(t, DType[d], when), flush=True)
    print("\ncompute-bound 3x3 layers of ResNet (C -> C, pad 1), today's tiling")
    print(f"{'target':10s} {'dtype':5s} {'layer':10s} {'cycles':>10s} {'bound':>10s} {'MACuse':>6s} {'DRAM x':>6s} "
          f"{'model':>10s} {'error':>6s}  tiling")
    for t in args.targets.split(","):
        target = load_target(t)
        for d in args.dtypes.split(","):
            for c, hw in RESNET_3X3:
                k = conv56(DType[d], c=c, hw=hw, o=c)
                sim, plan = simulate_with(k, target, None)
                p = conv_problem(place(k)[0])
                dram = (sim.dram_bytes_read + sim.dram_bytes_written) / compulsory_bytes(p)
                err = (plan.est_cycles - sim.total_cycles) / sim.total_cycles
                print(f"{t:10s} {d:5s} {f'{hw}x{hw}x{c}':10s} {sim.total_cycles:10,d} {lower_bound(target, p):10,d} "
                      f"{sim.mac_utilization:6.1%} {dram:6.2f} {plan.est_cycles:10,d} {err:+6.1%}  {plan.summary}", flush=True)


RESNET_3X3 = ((64, 56), (128, 28), (256, 14))


if __name__ == "__main__":
    main()
