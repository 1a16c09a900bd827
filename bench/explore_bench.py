"""Design-space exploration at scale: 216 designs each of MobileNetV2 and ResNet-18, cold and warm.

The space around npu-mid: array rows (8, 16, 32) and columns (16, 32), scratchpad (128 KiB, 512 KiB,
2 MiB), DMA bandwidth (8, 16, 32 B/cycle), vector lanes (8, 32) and the dataflows (weight
stationary alone, or both): 216 designs, objectives latency, energy and area.  Each model is swept
twice with the same cache folder: cold (every design screened, the front simulated) and warm
(everything from the cache).  Prints wall time and designs per second of both, what was computed,
the two tiers' disagreement, the Pareto front, and what each swept key is worth (the median
latency of the feasible designs at each of its values).  Asserts nothing.

    python bench/explore_bench.py [--models torchvision:mobilenet_v2,torchvision:resnet18] [--jobs N]
                                  [--small] [--out DIR] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import npuc
from npuc.dse.space import format_value
from npuc.zoo import load_model

SPACE = {
    "array.rows": [8, 16, 32],
    "array.cols": [16, 32],
    "scratchpad.size_bytes": [128 * 1024, 512 * 1024, 2048 * 1024],
    "dma.bytes_per_cycle": [8, 16, 32],
    "vector.lanes": [8, 32],
    "array.dataflows": [["weight_stationary"], ["weight_stationary", "output_stationary"]],
}
SMALL = {"array.rows": [8, 16], "array.cols": [16, 32], "dma.bytes_per_cycle": [8, 32]}


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the worker processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def sweep(model: str, space: dict, jobs: int | None, cache: Path, out: Path | None):
    module, inputs = load_model(model)
    t0, c0 = time.perf_counter(), _cpu_s()
    res = npuc.explore(module, inputs, base="npu-mid", sweep=space, jobs=jobs, cache_dir=cache, name=model,
                       out=out)
    return res, time.perf_counter() - t0, _cpu_s() - c0


def worth(res) -> list[str]:
    """The median latency of the feasible designs at each value of each swept key."""
    lines = []
    live = [r for r in res.rows if r["feasible"]]
    for d in res.dimensions:
        parts = []
        for v in d.values:
            lat = [r["latency_s"] for r in live if r[d.key] == v]
            parts.append(f"{short(v)}: {statistics.median(lat) * 1e3:.3g} ms" if lat else f"{short(v)}: -")
        lines.append(f"    {d.key:<24} " + ", ".join(parts))
    return lines


def short(v) -> str:
    """A swept value for a narrow column (dataflows as WS / OS)."""
    return format_value(v).replace("weight_stationary", "WS").replace("output_stationary", "OS")


def front_table(res, limit: int = 12) -> list[str]:
    keys = [d.key for d in res.dimensions]
    lines = ["    " + "  ".join(f"{k.split('.')[-1]:>14}" for k in keys) + f"  {'ms':>8} {'mJ':>7} {'mm^2':>6} {'DRAM MB':>8}"]
    for r in sorted(res.front, key=lambda r: r["latency_s"])[:limit]:
        lines.append("    " + "  ".join(f"{short(r[k]):>14}" for k in keys)
                     + f"  {r['latency_s'] * 1e3:>8.3f} {r['energy_j'] * 1e3:>7.3f} {r['area_mm2']:>6.3f}"
                     f" {r['dram_bytes'] / 1e6:>8.2f}")
    if len(res.front) > limit:
        lines.append(f"    ... {len(res.front) - limit} more on the front (results.csv)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="torchvision:mobilenet_v2,torchvision:resnet18")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per CPU)")
    ap.add_argument("--small", action="store_true", help="an 8-design space, to try the benchmark quickly")
    ap.add_argument("--out", type=Path, default=None, help="write each model's results and report under DIR/<model>")
    ap.add_argument("--cache", type=Path, default=None,
                    help="keep the cache in DIR (cold only when DIR is empty; default: a fresh temporary folder)")
    args = ap.parse_args()
    space = SMALL if args.small else SPACE
    print(f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), jobs {args.jobs or os.cpu_count()}; space: "
          + " x ".join(f"{k} ({len(v)})" for k, v in space.items()))
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="npuc-explore-bench-") as tmp:
            cache = args.cache or Path(tmp) / "cache"
            out = args.out / model.replace(":", "_") if args.out else None
            cold, cold_s, cold_cpu = sweep(model, space, args.jobs, cache, out)
            warm, warm_s, warm_cpu = sweep(model, space, args.jobs, cache, None)
        n = len(cold.rows)
        feasible = sum(1 for r in cold.rows if r["feasible"])
        c = cold.stats["computed"]
        d = cold.disagreement
        print(f"\n{model}: {n} designs, {feasible} feasible, {len(cold.front)} on the Pareto front")
        print(f"  cold cache: {cold_s:7.1f} s wall, {n / cold_s:6.2f} designs/s, {cold_cpu:7.1f} CPU s "
              f"({c['analytical']} screened, {c['simulated']} simulated)")
        print(f"  warm cache: {warm_s:7.1f} s wall, {n / warm_s:6.2f} designs/s, {warm_cpu:7.1f} CPU s "
              f"(computed {sum(warm.stats['computed'].values())}, {sum(warm.stats['cached'].values())} from the cache;"
              " the model is still exported and imported once)")
        if d.get("designs_compared"):
            print(f"  analytical vs simulated on {d['designs_compared']} designs: latency median "
                  f"{100 * d['latency_s']['median_abs']:.1f}% / max {100 * d['latency_s']['max_abs']:.1f}%, energy "
                  f"median {100 * d['energy_j']['median_abs']:.1f}% (signed mean {100 * d['energy_j']['mean']:+.1f}%); "
                  f"screen front {d['screen_front']}, confirmed {d['confirmed_front']}, both {d['front_overlap']}")
        print("  median latency of the feasible designs by value:")
        print("\n".join(worth(cold)))
        print("  Pareto front (fastest first):")
        print("\n".join(front_table(cold)))
        if out:
            print(f"  wrote {out}/results.csv, results.json, report.html")


if __name__ == "__main__":
    main()
