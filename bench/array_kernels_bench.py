"""Array kernels on representative layers: simulated cycles against the lower bound and the model.

For each layer (resnet50's 7x7 stem, 3x3 and 1x1 convolutions with bias + ReLU, a strided
downsampling 1x1, a small-spatial layer4 conv, transformer gemms) and each fp16 preset, prints:
simulated cycles (timing tier), the lower bound max(MACs / PEs, compulsory DRAM bytes /
bandwidth), their ratio, the cost model's estimate and its error, the instructions emitted, the
planning time and the chosen tiling.  Figures only, no assertions.

    .venv/bin/python bench/array_kernels_bench.py [--targets npu-mid,npu-large] [--only NAME]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from npuc.codegen.harness import run_kernel
from npuc.kir.kernel import EpilogueOp, Kernel
from npuc.codegen.kernels.array_conv import WEIGHT_ORDER, conv_problem
from npuc.codegen.kernels.array_gemm import gemm_problem
from npuc.kir.tensor import NHWC, DramTensor
from npuc.ir.ops.linalg import Conv2dAttrs, conv_output_size
from npuc.isa.enums import DType
from npuc.schedule.cost import lower_bound
from npuc.targets import load_target

FP16 = DType.fp16


def conv(name: str, c: int, hw: int, o: int, k: int, stride: int = 1, pad: int = 0, relu: bool = True,
         residual: bool = False, n: int = 1) -> Kernel:
    oh = conv_output_size(hw, k, stride, pad, 1)
    x = DramTensor.dense("x", (n, c, hw, hw), FP16, order=NHWC)
    w = DramTensor.dense("w", (o, c, k, k), FP16, order=WEIGHT_ORDER)
    y = DramTensor.dense("y", (n, o, oh, oh), FP16, order=NHWC)
    epi = [EpilogueOp("add", operand=DramTensor("bias", (n, o, oh, oh), FP16, 0, (0, 2, 0, 0)))]
    if residual:
        epi.append(EpilogueOp("add", operand=DramTensor.dense("res", (n, o, oh, oh), FP16, order=NHWC)))
    if relu:
        epi.append(EpilogueOp("relu"))
    return Kernel(name, "conv2d", (x, w), y, Conv2dAttrs((stride, stride), (pad, pad)), tuple(epi), FP16)


def linear(name: str, m: int, k: int, n: int, act: str | None = None) -> Kernel:
    """x [m, k] @ w^T, w stored [n, k] (a linear layer), + bias, optional activation."""
    a = DramTensor.dense("a", (m, k), FP16)
    w = DramTensor.dense("w", (n, k), FP16)
    b = w.permute((1, 0))
    y = DramTensor.dense("y", (m, n), FP16)
    epi = [EpilogueOp("add", operand=DramTensor("bias", (m, n), FP16, 0, (0, 2)))]
    if act:
        epi.append(EpilogueOp(act))
    return Kernel(name, "gemm", (a, b), y, None, tuple(epi), FP16)


def attention_scores(name: str, heads: int, s: int, d: int) -> Kernel:
    """q [h, s, d] @ k^T [h, d, s] (k stored [h, s, d])."""
    q = DramTensor.dense("q", (heads, s, d), FP16)
    kt = DramTensor.dense("k", (heads, s, d), FP16).permute((0, 2, 1))
    y = DramTensor.dense("y", (heads, s, s), FP16)
    return Kernel(name, "gemm", (q, kt), y, None, (), FP16)


LAYERS = [
    conv("r50.stem 7x7/2 3->64 @224", 3, 224, 64, 7, 2, 3),
    conv("r50.l1 1x1 64->64 @56", 64, 56, 64, 1),
    conv("r50.l1 3x3 64->64 @56", 64, 56, 64, 3, 1, 1),
    conv("r50.l1 1x1 64->256 @56 +res", 64, 56, 256, 1, residual=True),
    conv("r50.l1 1x1 256->64 @56", 256, 56, 64, 1),
    conv("r50.l2 3x3 128->128 @28", 128, 28, 128, 3, 1, 1),
    conv("r50.l2 1x1/2 256->512 @56", 256, 56, 512, 1, 2, relu=False),
    conv("r50.l3 3x3 256->256 @14", 256, 14, 256, 3, 1, 1),
    conv("r50.l3 1x1 1024->256 @14", 1024, 14, 256, 1),
    conv("r50.l4 3x3 512->512 @7", 512, 7, 512, 3, 1, 1),
    conv("r50.l4 1x1 512->2048 @7 +res", 512, 7, 2048, 1, residual=True),
    linear("vit.mlp1 197x768->3072 gelu", 197, 768, 3072, "gelu"),
    linear("vit.qkv 197x768->2304", 197, 768, 2304),
    attention_scores("vit.q@kT 12x197x64", 12, 197, 64),
]


def problem_of(k: Kernel):
    return conv_problem(k) if k.kind == "conv2d" else gemm_problem(k)


def zeros_for(k: Kernel) -> dict[str, np.ndarray]:
    vals: dict[str, np.ndarray] = {}
    for t in k.tensors():
        if t.name != k.output.name:
            vals[t.name] = np.zeros(t.shape, np.float16)
    return vals


def run(target_name: str, only: str | None) -> None:
    target = load_target(target_name)
    print(f"\n== {target_name}: {target.array.rows}x{target.array.cols} array, "
          f"{target.scratchpad.size_bytes // 1024} KiB scratchpad, {target.dma.bytes_per_cycle} B/cycle DRAM")
    head = f"{'layer':32s} {'simulated':>10s} {'bound':>10s} {'ratio':>6s} {'model':>10s} {'error':>7s} {'instrs':>7s} {'plan ms':>7s}  tiling"
    print(head)
    tot_sim = tot_lb = 0
    errors = []
    for k in LAYERS:
        if only and only not in k.name:
            continue
        t0 = time.perf_counter()
        from npuc.codegen.kernel import get_kernel
        from npuc.codegen.harness import place
        placed, _ = place(k)
        plan = get_kernel(k.kind).plan(placed, target)
        plan_ms = (time.perf_counter() - t0) * 1000
        r = run_kernel(k, target, zeros_for(k), functional=False)
        sim = r.result.total_cycles
        lb = lower_bound(target, problem_of(r.kernel))
        err = (plan.est_cycles - sim) / sim
        errors.append(abs(err))
        tot_sim += sim
        tot_lb += lb
        print(f"{k.name:32s} {sim:10d} {lb:10d} {sim / lb:6.2f} {plan.est_cycles:10d} {err:+7.1%} "
              f"{len(r.program):7d} {plan_ms:7.1f}  {plan.summary}")
    if errors:
        print(f"{'total':32s} {tot_sim:10d} {tot_lb:10d} {tot_sim / tot_lb:6.2f}   model |error| mean "
              f"{np.mean(errors):.1%}, max {max(errors):.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="npu-mid,npu-large")
    ap.add_argument("--only", default=None, help="run only layers whose name contains this text")
    args = ap.parse_args()
    for name in args.targets.split(","):
        run(name, args.only)


if __name__ == "__main__":
    main()
