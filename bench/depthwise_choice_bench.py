"""Depthwise convolutions on the vector unit only, against the unit chosen by cost per layer.

MobileNetV2 (and any zoo CNN given) is compiled for npu-mid, fp16 and int8, twice: once with
every depthwise layer on the vector unit (the only schedule npuc had before the array
alternative: ``DepthwiseKernel.alternatives(...)[0]``), once with ``DepthwiseKernel.plan``'s
choice by the cost model (vector unit or array, per layer).  The figures are the simulator's
(timing only): total cycles, the depthwise layers' cycles and their share, how many depthwise
layers went to the array, and the model total over the sum of its per-layer lower bounds with
depthwise MACs counted at the array's peak (issue 8's measure).  Prints a table; asserts
nothing.

    python bench/depthwise_choice_bench.py [--models mobilenet_v2] [--target npu-mid] [--calibration 2] [--no-int8]
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager

from npuc.artifact import compile, compile_graph
from npuc.codegen.kernel import get_kernel
from npuc.pipeline import import_model
from npuc.targets import DEFAULT_TARGET, load_target
from npuc.zoo import ZOO, load_model


@contextmanager
def vector_unit_only():
    """Within the block, every depthwise layer keeps its vector-unit schedule (this benchmark's
    baseline; compiles outside the block are untouched)."""
    impl = get_kernel("depthwise_conv2d")
    cls = type(impl)
    chosen = cls.plan
    cls.plan = lambda self, kernel, target: self.alternatives(kernel, target)[0]
    try:
        yield
    finally:
        cls.plan = chosen


def _inputs(art):
    import torch

    from npuc.runtime.executor import is_quantized, logical_shape

    return tuple(torch.zeros(logical_shape(io.type), dtype=torch.float32 if io.type.dtype.is_float or is_quantized(io.type)
                             else io.type.dtype.torch) for io in art.npub.io_signature.inputs)


def figures(art, target) -> dict:
    prof = art.profile(*_inputs(art))
    dw = [layer for layer in prof.layers if layer.kind == "depthwise_conv2d"]
    bound = sum(max(-(-layer.macs // layer.peak_macs_per_cycle), -(-layer.min_dram_bytes // layer.dram_bytes_per_cycle))
                for layer in prof.layers if layer.kind != "cpu")
    plans = [p for code in art.compiled.codes for p in code.plans] if getattr(art, "compiled", None) else []
    on_array = sum(1 for p in plans if "on the array" in p.summary)
    return {"cycles": prof.npu_cycles, "dw_cycles": sum(layer.cycles for layer in dw), "dw_layers": len(dw),
            "on_array": on_array, "bound": bound}


def row(label: str, f: dict) -> str:
    share = f["dw_cycles"] / max(f["cycles"], 1)
    return (f"  {label:<34} {f['cycles']:>12,} {f['dw_cycles']:>12,} {100 * share:>6.1f}% "
            f"{f['on_array']:>3}/{f['dw_layers']:<3} {f['cycles'] / max(f['bound'], 1):>8.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenet_v2")
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--calibration", type=int, default=2, help="int8 calibration samples (seeds 1..N)")
    ap.add_argument("--no-int8", action="store_true")
    args = ap.parse_args()
    target = load_target(args.target)
    print(f"depthwise layers: vector unit only vs chosen by cost, {target.name} (timing-only simulation)")
    head = (f"  {'':<34} {'NPU cycles':>12} {'depthwise':>12} {'share':>7} {'array':>7} {'/ bound':>9}")
    for short in args.models.split(","):
        name = f"torchvision:{short}"
        model, inputs = load_model(name)
        print(f"\n{name}\n{head}")
        start = time.perf_counter()
        graph = import_model(model, inputs, name=name)
        runs = [("fp16", lambda: compile_graph(graph, target))]
        if not args.no_int8:
            calibration = [ZOO[name].make_inputs(s) for s in range(1, args.calibration + 1)]
            runs.append(("int8", lambda: compile(model, inputs, target=target, quantize="int8", calibration=calibration,
                                                 name=name)))
        for dtype, build in runs:
            with vector_unit_only():
                before = figures(build(), target)
            after = figures(build(), target)
            print(row(f"{dtype} depthwise on the vector unit", before))
            print(row(f"{dtype} depthwise unit chosen by cost", after))
            print(f"  {dtype + ' speed-up':<34} {before['cycles'] / after['cycles']:>12.2f}x "
                  f"{before['dw_cycles'] / max(after['dw_cycles'], 1):>11.2f}x")
        print(f"  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
