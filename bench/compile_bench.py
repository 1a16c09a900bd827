"""Compiled code quality and compile time: per layer and in total, against the lower bound.

For resnet18, resnet50 and mobilenet_v2 on every preset with fp16, each layer's simulated cycles
are compared with its lower bound max(MACs / PEs, compulsory DRAM bytes / bandwidth) (compulsory
bytes: every tensor the kernel reads or writes, once), and its DRAM traffic with that compulsory
minimum.  Then the compile time of resnet50, split into torch.export + import, graph passes and
each backend stage.  Prints tables and totals; asserts nothing.

    python bench/compile_bench.py [--models resnet18,resnet50,mobilenet_v2] [--totals-only]
"""

from __future__ import annotations

import argparse
import time

from npuc.artifact import compile_graph
from npuc.frontend import import_graph
from npuc.pipeline import StageRecord, run_graph_passes
from npuc.errors import NpucError
from npuc.targets import DEFAULT_TARGET, list_presets, load_target
from npuc.zoo import load_model


def layer_table(prof, show_layers: bool) -> tuple[int, int, int, int]:
    rows = []
    cyc = lb = dram = mind = 0
    for layer in prof.layers:
        bound = layer.lower_bound_cycles
        cyc += layer.cycles
        lb += bound
        dram += layer.dram_bytes
        mind += layer.min_dram_bytes
        if show_layers:
            rows.append((layer.name, layer.op, layer.cycles, bound, layer.cycles / bound if bound else 0.0,
                         layer.dram_bytes / layer.min_dram_bytes if layer.min_dram_bytes else 0.0, layer.bound))
    if show_layers:
        print(f"  {'layer':<28} {'op':<26} {'cycles':>11} {'bound':>11} {'ratio':>6} {'DRAM/min':>8}  limit")
        for name, op, c, b, r, d, lim in rows:
            print(f"  {name:<28} {op[:26]:<26} {c:>11,} {b:>11,} {r:>6.2f} {d:>8.2f}  {lim}")
    return cyc, lb, dram, mind


def quality(models: list[str], show_layers: bool) -> None:
    presets = sorted((p for p in list_presets() if load_target(p).has_fp16), key=lambda p: (p != DEFAULT_TARGET, p))
    skipped = [p for p in list_presets() if p not in presets]
    print(f"presets with fp16: {', '.join(presets)} (skipped, no fp16: {', '.join(skipped) or 'none'})")
    summary = []
    for name in models:
        model, inputs = load_model(f"torchvision:{name}")
        g = run_graph_passes(import_graph(model, inputs, name=name))
        for preset in presets:
            try:
                art = compile_graph(g, preset)
                prof = art.profile(*inputs)
            except NpucError as e:
                print(f"\n{name} on {preset}: FAILED: {e}")
                continue
            print(f"\n{name} on {preset}: {len(prof.layers)} layers")
            cyc, lb, dram, mind = layer_table(prof, show_layers)
            summary.append((name, preset, cyc, lb, dram, mind, prof.latency_s * 1e3, prof.utilization))
            print(f"  total: {cyc:,} cycles, sum of lower bounds {lb:,} (ratio {cyc / lb:.2f}); "
                  f"DRAM {dram:,} bytes, compulsory {mind:,} (ratio {dram / mind:.2f})")
    print("\nsummary")
    print(f"  {'model':<14} {'preset':<10} {'cycles':>13} {'lower bound':>13} {'ratio':>6} {'DRAM/min':>8} "
          f"{'latency ms':>10} {'array util':>10}")
    for name, preset, cyc, lb, dram, mind, ms, util in summary:
        print(f"  {name:<14} {preset:<10} {cyc:>13,} {lb:>13,} {cyc / lb:>6.2f} {dram / mind:>8.2f} {ms:>10.2f} "
              f"{100 * util:>9.1f}%")


def compile_time(name: str = "resnet50", preset: str = "npu-mid") -> None:
    model, inputs = load_model(f"torchvision:{name}")
    t0 = time.perf_counter()
    g = import_graph(model, inputs, name=name)
    t1 = time.perf_counter()
    records: list[StageRecord] = []
    g = run_graph_passes(g, records=records)
    t2 = time.perf_counter()
    art = compile_graph(g, preset)
    t3 = time.perf_counter()
    stages = ", ".join(f"{n} {s:.2f} s" for n, s in art.report.stage_seconds)
    print(f"\ncompile time of {name} for {preset}: torch.export + import {t1 - t0:.2f} s (not counted); "
          f"graph passes {t2 - t1:.2f} s; backend {t3 - t2:.2f} s ({stages}); "
          f"compile without export: {t3 - t1:.2f} s (target < 10 s); {art.report.instructions:,} instructions")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    ap.add_argument("--totals-only", action="store_true", help="leave out the per-layer tables")
    args = ap.parse_args()
    quality(args.models.split(","), not args.totals_only)
    compile_time()


if __name__ == "__main__":
    main()
