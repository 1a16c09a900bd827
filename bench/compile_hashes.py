"""The backend compile of zoo models, started cold: CPU seconds per stage and the sha256 of each
``.npub``, so that a change meant to make the compiler faster can be shown to leave every
binary byte for byte the same (run it before and after; the digests must match).

Each model is imported once per precision (fp16: the float graph; int8: quantized with the two
calibration samples of tests/e2e/test_zoo_int8.py); imports are not timed.  Each compile starts
from cold memos (``npuc.memo.forget_all``: tiling choices, prices, depthwise choices...), as a fresh process's
would.  ``--graphs DIR`` keeps the imported graphs there (pickled) so that a second run skips
torch.export and the quantizer.  Prints; asserts nothing.

    python bench/compile_hashes.py [--models vit_b_16,resnet18,resnet50,mobilenet_v2]
        [--precisions fp16,int8] [--target npu-mid] [--graphs /tmp/npuc-graphs]
"""

from __future__ import annotations

import argparse
import copyreg
import hashlib
import io
import pickle
import sys
import time
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vela_compile_time import cold_start  # noqa: E402

from npuc.artifact import compile_graph  # noqa: E402
from npuc.targets import load_target  # noqa: E402
from npuc.zoo import ZOO, load_model  # noqa: E402

CALIBRATION_SEEDS = (1, 2)  # those of tests/e2e/test_zoo_int8.py


def _proxy(d: dict) -> MappingProxyType:
    """A graph's read-only constants, rebuilt from a pickle."""
    return MappingProxyType(d)


def imported(name: str, precision: str, cache: Path | None):
    """The optimized graph of ``torchvision:name`` in ``precision``, from ``cache`` when there."""
    path = None if cache is None else cache / f"{name}-{precision}.pkl"
    if path is not None and path.exists():
        return pickle.loads(path.read_bytes())
    from npuc.pipeline import import_model, run_graph_passes
    from npuc.frontend.quantized import import_quantized

    zoo = f"torchvision:{name}"
    model, inputs = load_model(zoo)
    if precision == "int8":
        calibration = [ZOO[zoo].make_inputs(s) for s in CALIBRATION_SEEDS]
        g = run_graph_passes(import_quantized(model, inputs, calibration, name=zoo))
    else:
        g = import_model(model, inputs, name=zoo)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        buf = io.BytesIO()
        pickler = pickle.Pickler(buf)
        pickler.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: lambda m: (_proxy, (dict(m),))}
        pickler.dump(g)
        tmp.write_bytes(buf.getvalue())
        tmp.replace(path)
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="vit_b_16,resnet18,resnet50,mobilenet_v2")
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--graphs", type=Path, default=None, help="folder keeping the imported graphs")
    args = ap.parse_args()
    target = load_target(args.target)
    print(f"{'model':<14}{'prec':<6}{'CPU s':>8}  {'sha256':<64}  slowest stages (wall s)")
    for name in args.models.split(","):
        for precision in args.precisions.split(","):
            g = imported(name, precision, args.graphs)
            cold_start()
            start = time.process_time()
            art = compile_graph(g, target, quantize="int8" if precision == "int8" else None)
            cpu = time.process_time() - start
            digest = hashlib.sha256(art.to_bytes()).hexdigest()
            top = sorted(art.report.seconds_by_stage().items(), key=lambda kv: -kv[1])[:4]
            stages = ", ".join(f"{n} {s:.1f}" for n, s in top)
            print(f"{name:<14}{precision:<6}{cpu:>8.1f}  {digest}  {stages}", flush=True)


if __name__ == "__main__":
    main()
