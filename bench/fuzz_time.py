"""Where the CPU time of CI's random-graph set goes (tests/fuzz/test_random_graphs.py: seeds
0..299, every path).  Runs the same checks in this process, with a CPU-time meter around each
phase, and prints the total and the split: eager PyTorch, torch.export, the decomposition to core
ATen, PT2E (prepare, calibration, convert), the interpreter, compiles, simulation; "other" is
the rest (the imports into the graph IR, the graph passes, building the models).  The set's
budget is 2 CPU minutes.

    .venv/bin/python bench/fuzz_time.py [--seed 0] [--count 300]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import time
import warnings

PHASES = {  # phase -> (module, attribute) of the function metered
    "eager PyTorch": ("npuc.report.accuracy", "eager_outputs"),
    "torch.export": ("npuc.frontend.export", "capture_program"),
    "core-ATen decomposition": ("npuc.frontend.export", "decompose_program"),
    "PT2E quantize": ("npuc.frontend.pt2e", "quantize_captured"),
    "interpreter": ("npuc.interp", "interpret"),
    "compile": ("npuc.artifact", "compile_graph"),
    "simulate": ("npuc.artifact", "Artifact.run"),
}


@contextlib.contextmanager
def metered(seconds: collections.Counter):
    """Each function of PHASES wrapped to add its CPU time to ``seconds`` (outermost call only)."""
    import importlib

    saved = []
    depth = [0]
    for phase, (module, attr) in PHASES.items():
        owner = importlib.import_module(module)
        name = attr
        if "." in attr:
            cls, name = attr.split(".")
            owner = getattr(owner, cls)
        fn = getattr(owner, name)

        def wrapper(*a, _fn=fn, _phase=phase, **k):
            if depth[0]:
                return _fn(*a, **k)
            depth[0] += 1
            start = time.process_time()
            try:
                return _fn(*a, **k)
            finally:
                seconds[_phase] += time.process_time() - start
                depth[0] -= 1

        saved.append((owner, name, fn))
        setattr(owner, name, wrapper)
    try:
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=300)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from npuc.fuzz.check import PATHS, check_recipe
    from npuc.fuzz.graphs import random_recipe

    seconds: collections.Counter = collections.Counter()
    outcomes: collections.Counter = collections.Counter()
    start = time.process_time()
    with metered(seconds):
        for s in range(args.seed, args.seed + args.count):
            outcomes.update((p.path, p.status) for p in check_recipe(random_recipe(s), PATHS).results)
    total = time.process_time() - start
    print(f"random graphs {args.seed}..{args.seed + args.count - 1}: {dict(sorted(outcomes.items()))}")
    print(f"CPU time: {total:.1f} s ({total / 60:.2f} min, {1000 * total / args.count:.0f} ms a graph; "
          "budget for CI's 300 graphs: 120 s)")
    for phase, t in seconds.most_common():
        print(f"  {phase:26s} {t:7.1f} s  {100 * t / total:5.1f} %")
    other = total - sum(seconds.values())
    print(f"  {'other':26s} {other:7.1f} s  {100 * other / total:5.1f} %")


if __name__ == "__main__":
    main()
