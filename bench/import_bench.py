"""Import time per zoo model: torch.export (+ decompositions) apart from npuc's own import + passes.

Prints one row per model; npuc's part (FX graph -> npuc graph, then the graph passes) is the figure
npuc answers for (target: under 1 s for torchvision:resnet50).  Each figure is the best of
``--repeat`` runs (``--export-repeat`` for torch.export), as a shared machine is noisy.

    python bench/import_bench.py [--repeat N] [--export-repeat N] [MODEL ...]
"""

from __future__ import annotations

import argparse
import time
import warnings

from npuc.frontend.export import export_program
from npuc.frontend.importer import import_program
from npuc.pipeline import run_graph_passes
from npuc.zoo import zoo_entry, zoo_names


def best_of(repeat: int, fn):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench(name: str, repeat: int, export_repeat: int) -> tuple[str, float, float, float, int, int]:
    model, inputs = zoo_entry(name).load()
    t_export, ep = best_of(export_repeat, lambda: export_program(model, inputs))
    t_import, raw = best_of(repeat, lambda: import_program(ep, name=name))
    t_passes, opt = best_of(repeat, lambda: run_graph_passes(raw))
    return name, t_export, t_import, t_passes, len(raw.nodes), len(opt.nodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=zoo_names())
    parser.add_argument("--repeat", type=int, default=5, help="runs of npuc's import and passes (best kept)")
    parser.add_argument("--export-repeat", type=int, default=1, help="runs of torch.export (slow)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    header = f"{'model':32} {'export+decomp s':>15} {'npuc import s':>13} {'passes s':>9} {'npuc total s':>12} {'nodes raw -> opt':>17}"
    print(header)
    print("-" * len(header))
    for name in args.models:
        n, te, ti, tp, raw, opt = bench(name, args.repeat, args.export_repeat)
        print(f"{n:32} {te:15.3f} {ti:13.3f} {tp:9.3f} {ti + tp:12.3f} {raw:>8} -> {opt:<6}", flush=True)


if __name__ == "__main__":
    main()
