"""int8 against fp16: cycles, DRAM traffic and energy per inference of the zoo CNNs, side by side.

Each CNN is compiled twice for the default preset: as a float model (fp16 on the NPU) and
quantized to int8 (NpuQuantizer, calibrated on a few samples of the model's input generator);
then int8 once more for npu-small, the glasses part without fp16 (a float model runs there on
the CPU only).  The figures are the simulator's (timing only: ``art.profile``): total cycles,
latency, DRAM bytes, energy per inference and its share spent on DRAM, MACs; int8 / fp16 ratios
follow.  Prints a table; asserts nothing.

    python bench/int8_vs_fp16_bench.py [--models resnet18,mobilenet_v2] [--calibration 4] [--no-small]
"""

from __future__ import annotations

import argparse
import time

from npuc.artifact import compile, compile_graph
from npuc.errors import NpucError
from npuc.pipeline import import_model
from npuc.targets import DEFAULT_TARGET, load_target
from npuc.zoo import ZOO, load_model

CNNS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0")


def figures(art) -> dict:
    """The per-inference figures of one compiled model (timing-only simulation)."""
    prof = art.profile(*_inputs(art))
    sims = [r.sim for r in prof.runs if r.sim is not None]
    dram_pj = sum(s.energy_breakdown_pj.get("dram", 0.0) for s in sims) if sims else None
    return {
        "cycles": prof.total_cycles,
        "latency_ms": prof.latency_s * 1e3,
        "dram_mb": prof.dram_bytes / 1e6,
        "energy_uj": prof.energy_pj / 1e6,
        "dram_share": None if dram_pj is None else dram_pj / max(prof.energy_pj, 1e-9),
        "gmacs": prof.macs / 1e9,
        "cpu_ops": len(art.report.cpu_ops) if art.report else 0,
    }


def _inputs(art):
    import torch

    from npuc.runtime.executor import is_quantized, logical_shape

    return tuple(torch.zeros(logical_shape(io.type), dtype=torch.float32 if io.type.dtype.is_float or is_quantized(io.type)
                             else io.type.dtype.torch) for io in art.npub.io_signature.inputs)


def row(label: str, f: dict) -> str:
    share = "" if f["dram_share"] is None else f"{100 * f['dram_share']:5.1f}%"
    return (f"  {label:<22} {f['cycles']:>13,} {f['latency_ms']:>9.2f} {f['dram_mb']:>9.2f} "
            f"{f['energy_uj']:>10.1f} {share:>6} {f['gmacs']:>6.2f} {f['cpu_ops']:>4}")


def ratio(a: dict, b: dict) -> str:
    return (f"  {'int8 / fp16':<22} {a['cycles'] / b['cycles']:>13.2f} {'':>9} {a['dram_mb'] / b['dram_mb']:>9.2f} "
            f"{a['energy_uj'] / b['energy_uj']:>10.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(CNNS))
    ap.add_argument("--calibration", type=int, default=4, help="calibration samples (seeds 1..N)")
    ap.add_argument("--no-small", action="store_true", help="skip int8 on npu-small")
    args = ap.parse_args()
    mid, small = load_target(DEFAULT_TARGET), load_target("npu-small")
    print(f"int8 vs fp16 per inference, default preset {mid.name} ({mid.clock_hz / 1e6:.0f} MHz); "
          f"int8 also on {small.name} ({small.clock_hz / 1e6:.0f} MHz, no fp16)")
    head = f"  {'':<22} {'cycles':>13} {'ms':>9} {'DRAM MB':>9} {'energy uJ':>10} {'DRAM':>6} {'GMACs':>6} {'cpu':>4}"
    for short in args.models.split(","):
        name = f"torchvision:{short}"
        model, inputs = load_model(name)
        calibration = [ZOO[name].make_inputs(s) for s in range(1, args.calibration + 1)]
        print(f"\n{name}\n{head}")
        start = time.perf_counter()
        fp16 = figures(compile_graph(import_model(model, inputs, name=name), mid))
        print(row(f"fp16 {mid.name}", fp16))
        int8_art = compile(model, inputs, target=mid, quantize="int8", calibration=calibration, name=name)
        int8 = figures(int8_art)
        print(row(f"int8 {mid.name}", int8))
        print(ratio(int8, fp16))
        if not args.no_small:
            try:
                g_small = compile(model, inputs, target=small, quantize="int8", calibration=calibration, name=name)
                print(row(f"int8 {small.name}", figures(g_small)))
            except NpucError as e:
                print(f"  int8 {small.name}: {e}")
        print(f"  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
