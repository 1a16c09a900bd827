"""Vector-unit and data-movement kernels: simulated cycles against their lower bounds.

For representative layer sizes, each kernel is planned, emitted and simulated (timing tier) on a
target.  The lower bound is max(compulsory DRAM bytes / DMA bytes per cycle, essential
lane-operations / vector lanes): the bytes are each distinct input element read once and each
output element written once; the lane-operations are the ones the computation cannot avoid on
this vector unit (listed per kernel below, e.g. exp costs 4).  Prints figures only.

    .venv/bin/python bench/vector_kernels_bench.py [--target npu-mid]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from npuc.codegen.harness import run_kernel
from npuc.codegen.kernel import get_kernel
from npuc.kir.kernel import EpilogueOp, FillAttrs, Kernel, LayerNormAttrs, PoolAttrs, ReduceAttrs, SoftmaxAttrs
from npuc.kir.tensor import NHWC, DramTensor
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.isa.enums import DType
from npuc.targets import load_target

F16 = DType.fp16


def _d(name, shape, order=None):
    return DramTensor.dense(name, shape, F16, order=order)


def cases():
    """(label, kernel, compulsory bytes, essential lane-ops)."""
    out = []
    s = (1, 64, 56, 56)
    n = 64 * 56 * 56
    x, y = _d("x", s, NHWC), _d("y", s, NHWC)
    bias = DramTensor("b", s, F16, 0, (0, 2, 0, 0))
    res = _d("r", s, NHWC)
    out.append(("eltwise relu 64x56x56", Kernel("k", "eltwise", (x,), y, epilogue=(EpilogueOp("relu"),)), 4 * n, n))
    epi = (EpilogueOp("add", operand=bias), EpilogueOp("add", operand=res), EpilogueOp("relu"))
    out.append(("eltwise bias+residual+relu", Kernel("k", "eltwise", (x,), y, epilogue=epi), 6 * n + 128, 3 * n))
    out.append(("eltwise silu 64x56x56", Kernel("k", "eltwise", (x,), y, epilogue=(EpilogueOp("silu"),)), 4 * n, 7 * n))
    out.append(("copy NCHW->NHWC 64x56x56", Kernel("k", "copy", (_d("x", s),), y), 4 * n, 0))
    out.append(("copy NHWC->NCHW 64x56x56", Kernel("k", "copy", (x,), _d("y", s)), 4 * n, 0))
    cat = _d("y", (1, 128, 56, 56), NHWC).slice(1, 0, 64)
    out.append(("copy concat part 64 of 128 ch ", Kernel("k", "copy", (x,), cat), 4 * n, 0))
    up_src = DramTensor("x", (1, 64, 28, 2, 28, 2), F16, 0, (0, 2, 28 * 64 * 2, 0, 64 * 2, 0))
    up_dst = _d("y", (1, 64, 28, 2, 28, 2), (0, 2, 3, 4, 5, 1))
    out.append(("copy upsample x2 to 64x56x56", Kernel("k", "copy", (up_src,), up_dst), 2 * n // 4 + 2 * n, 0))
    out.append(("fill 64x56x56", Kernel("k", "fill", (), y, attrs=FillAttrs(0.0)), 2 * n, 0))
    big = (1, 64, 112, 112)
    po = (1, 64, 56, 56)
    out.append(("maxpool 3x3/2 112->56", Kernel("k", "pool2d", (_d("x", big, NHWC),), _d("y", po, NHWC),
                                                attrs=PoolAttrs("max", (3, 3), (2, 2), (1, 1))), 2 * (4 * n + n), 9 * n))
    g = (1, 2048, 7, 7)
    out.append(("global avgpool 2048x7x7", Kernel("k", "pool2d", (_d("x", g, NHWC),), _d("y", (1, 2048, 1, 1), NHWC),
                                                  attrs=PoolAttrs("avg", (7, 7), (1, 1))), 2 * (2048 * 49 + 2048), 2048 * 49))
    for (c, hw, st) in ((32, 112, 1), (144, 56, 2), (576, 14, 1)):
        ohw = hw // st
        xs, ys = (1, c, hw, hw), (1, c, ohw, ohw)
        k = Kernel("k", "depthwise_conv2d", (_d("x", xs, NHWC), _d("w", (c, 1, 3, 3), (2, 3, 1, 0))), _d("y", ys, NHWC),
                   attrs=Conv2dAttrs((st, st), (1, 1), (1, 1), c),
                   epilogue=(EpilogueOp("add", operand=DramTensor("b", ys, F16, 0, (0, 2, 0, 0))), EpilogueOp("relu")))
        m = c * ohw * ohw
        out.append((f"depthwise 3x3/{st} {c}x{hw}x{hw}", k, 2 * (c * hw * hw + m + 10 * c), 19 * m))
    sm = (12, 197, 197)
    m = 12 * 197 * 197
    out.append(("softmax 12x197x197 (last dim)", Kernel("k", "softmax", (_d("x", sm),), _d("y", sm), attrs=SoftmaxAttrs(2)), 4 * m, 8 * m))
    out.append(("softmax over channels 64x56x56", Kernel("k", "softmax", (x,), y, attrs=SoftmaxAttrs(1)), 4 * n, 8 * n))
    ln = (197, 768)
    m = 197 * 768
    out.append(("layernorm 197x768", Kernel("k", "layernorm", (_d("x", ln), _d("w", (768,)), _d("b", (768,))), _d("y", ln),
                                          attrs=LayerNormAttrs(1, 1e-5)), 4 * m + 3072, 9 * m))
    out.append(("mean over H,W 64x56x56", Kernel("k", "reduce", (x,), _d("y", (1, 64)), attrs=ReduceAttrs("mean", (2, 3), False)),
                2 * n + 128, n))
    out.append(("sum of all 64x56x56", Kernel("k", "reduce", (x,), _d("y", ()), attrs=ReduceAttrs("sum", (0, 1, 2, 3), False)),
                2 * n + 2, n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="npu-mid")
    args = ap.parse_args()
    target = load_target(args.target)
    print(f"target {target.name}: {target.vector.lanes} lanes, {target.dma.bytes_per_cycle} B/cycle DMA, "
          f"{target.scratchpad.size_bytes // 1024} KiB scratchpad")
    head = (f"{'kernel':34s} {'elements':>9s} {'cycles':>9s} {'cyc/elem':>8s} {'bound':>9s} {'ratio':>6s} {'model':>9s} "
            f"{'error':>7s} {'instrs':>6s} {'emit+sim s':>10s}")
    print(head)
    print("-" * len(head))
    ratios, errors = [], []
    for label, k, nbytes, lane_ops in cases():
        impl = get_kernel(k.kind)
        reason = impl.supports(k, target)
        if reason:
            print(f"{label:34s} not supported: {reason}")
            continue
        values = {t.name: np.zeros(t.shape, np.float16) for t in k.tensors() if t.name != k.output.name}
        t0 = time.perf_counter()
        run = run_kernel(k, target, values, functional=False)
        dt = time.perf_counter() - t0
        bound = max(nbytes / target.dma.bytes_per_cycle, lane_ops / target.vector.lanes)
        cyc = run.result.total_cycles
        elems = k.output.numel
        ratios.append(cyc / bound)
        est = run.plan.est_cycles
        errors.append(abs(est - cyc) / cyc)
        print(f"{label:34s} {elems:9d} {cyc:9d} {cyc / elems:8.3f} {bound:9.0f} {cyc / bound:6.2f} {est:9d} "
              f"{(est - cyc) / cyc:+7.1%} {len(run.program):6d} {dt:10.3f}")
    geo = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
    print(f"geometric mean ratio to the lower bound: {geo:.3f}")
    errors.sort()
    print(f"cost model (tile-program walk) against the simulator: median error {errors[len(errors) // 2]:.1%}, "
          f"worst {errors[-1]:.1%}")


if __name__ == "__main__":
    main()
