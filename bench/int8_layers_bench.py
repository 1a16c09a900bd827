"""int8 against fp16 layer by layer: where a zoo CNN's int8 cycles go over its fp16 ones.

Compiles the model twice for the default preset (float -> fp16 on the NPU; quantized to int8 by
NpuQuantizer, calibrated on a few samples of the model's input generator), simulates both
(timing only) and prints every layer's cycles side by side with the running sum of the
difference, then the layers that lose most; the totals and their ratio end the table.  Layers
are matched by name (a fused residual add sits in whichever convolution runs last, so a
downsampling branch may swap places).  Asserts nothing.

    python bench/int8_layers_bench.py [--model resnet50] [--calibration 4] [--worst 8]
"""

from __future__ import annotations

import argparse

from npuc.artifact import compile, compile_graph, zero_inputs
from npuc.pipeline import import_model
from npuc.targets import DEFAULT_TARGET, load_target
from npuc.zoo import ZOO, load_model


def layer_cycles(art) -> tuple[dict[str, tuple[str, int]], int]:
    """Per layer (kind, cycles) and the total of a compiled model (timing-only simulation)."""
    prof = art.profile(*zero_inputs(art))
    return {lp.name: (lp.kind, lp.cycles) for lp in prof.layers}, prof.total_cycles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision model of the zoo")
    ap.add_argument("--calibration", type=int, default=4, help="calibration samples (seeds 1..N)")
    ap.add_argument("--worst", type=int, default=8, help="how many of the layers that lose most to list")
    args = ap.parse_args()
    target = load_target(DEFAULT_TARGET)
    name = f"torchvision:{args.model}"
    model, inputs = load_model(name)
    calibration = [ZOO[name].make_inputs(s) for s in range(1, args.calibration + 1)]
    fp16, fp16_total = layer_cycles(compile_graph(import_model(model, inputs, name=name), target))
    int8, int8_total = layer_cycles(compile(model, inputs, target=target, quantize="int8",
                                            calibration=calibration, name=name))
    print(f"{name} on {target.name}: cycles per layer, fp16 and int8")
    print(f"  {'layer':<30} {'kind':<16} {'fp16':>11} {'int8':>11} {'int8-fp16':>11} {'running':>11}")
    running = 0
    diffs = []
    for layer, (kind, c8) in int8.items():
        c16 = fp16.get(layer, (kind, 0))[1]
        running += c8 - c16
        diffs.append((c8 - c16, layer))
        print(f"  {layer:<30} {kind:<16} {c16:>11,} {c8:>11,} {c8 - c16:>+11,} {running:>+11,}")
    for layer in fp16.keys() - int8.keys():
        print(f"  {layer:<30} {fp16[layer][0]:<16} {fp16[layer][1]:>11,} {'(none)':>11}")
    print(f"\n  worst {args.worst}: " + ", ".join(f"{layer} {d:+,}" for d, layer in sorted(diffs, reverse=True)[:args.worst]))
    print(f"  total: fp16 {fp16_total:,}  int8 {int8_total:,}  int8/fp16 {int8_total / fp16_total:.4f}")


if __name__ == "__main__":
    main()
