"""CPU time the cost model's timeline walk (``npuc.schedule.vector_cost``: ``timeline`` and
``walk_cycles``) takes in a cold backend compile of zoo models: the compile's CPU seconds, the
walk's share, how many walks and steps it ran, and the sha256 of the ``.npub``.  The graphs are
imported (not timed) as ``bench/compile_hashes.py`` does and can be kept with ``--graphs DIR``.
Prints; asserts nothing.

    python bench/walk_time.py [--models resnet18,mobilenet_v2] [--precisions fp16,int8]
        [--target npu-mid] [--graphs /tmp/npuc-graphs] [--fuse-layers not-slower]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_hashes import _proxy, imported  # noqa: E402,F401  (the kept graphs unpickle _proxy from __main__)
from vela_compile_time import cold_start  # noqa: E402

import npuc.schedule.vector_cost as vector_cost  # noqa: E402
from npuc.artifact import compile_graph  # noqa: E402
from npuc.targets import load_target  # noqa: E402


WALKS = tuple(n for n in ("timeline", "walk_cycles") if hasattr(vector_cost, n))


class _Counts:
    """Calls, steps and CPU seconds of the walks."""

    def __init__(self) -> None:
        self.calls, self.steps, self.cpu = 0, 0, 0.0

    def timed(self, walk):
        def run(steps, target):
            steps = tuple(steps)
            start = time.process_time()
            out = walk(steps, target)
            self.cpu += time.process_time() - start
            self.calls += 1
            self.steps += len(steps)
            return out
        return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--graphs", type=Path, default=None, help="folder keeping the imported graphs")
    ap.add_argument("--fuse-layers", default="false", choices=("false", "true", "not-slower"),
                    help="fuse_layers and resident of the compile")
    args = ap.parse_args()
    target = load_target(args.target)
    mode = {"false": False, "true": True}.get(args.fuse_layers, args.fuse_layers)
    walks = {n: getattr(vector_cost, n) for n in WALKS}
    print(f"{'model':<14}{'prec':<6}{'CPU s':>8}{'walk s':>8}{'share':>7}{'walks':>7}{'steps':>10}  sha256")
    for name in args.models.split(","):
        for precision in args.precisions.split(","):
            g = imported(name, precision, args.graphs)
            cold_start()
            timed = _Counts()
            for n, walk in walks.items():
                setattr(vector_cost, n, timed.timed(walk))
            try:
                start = time.process_time()
                art = compile_graph(g, target, quantize="int8" if precision == "int8" else None,
                                    fuse_layers=mode, resident=mode)
                cpu = time.process_time() - start
            finally:
                for n, walk in walks.items():
                    setattr(vector_cost, n, walk)
            digest = hashlib.sha256(art.to_bytes()).hexdigest()
            print(f"{name:<14}{precision:<6}{cpu:>8.1f}{timed.cpu:>8.2f}{timed.cpu / cpu:>7.1%}{timed.calls:>7}"
                  f"{timed.steps:>10}  {digest}", flush=True)


if __name__ == "__main__":
    main()
