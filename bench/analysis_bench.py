"""What the analysis tools cost and give on one model: profile, trace, CSV/JSON, report, debugger.

For a zoo model on a target (default MobileNetV2 on the default preset): the time to compile, to
profile (timing simulation), to build the Perfetto trace and its size (slices, tracks, counter
points, and partial overlaps: 0 expected), the HTML report's size, and the numerical debugger's
time and verdict (fp16 against the fp32 interpreter; ``--int8`` also runs it on the int8 model,
with each layer's cost quantized alone).  Prints figures; asserts nothing.

    python bench/analysis_bench.py [--model torchvision:mobilenet_v2] [--target npu-mid] [--int8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import npuc  # noqa: E402
from npuc.report.trace import profile_trace  # noqa: E402
from npuc.zoo import ZOO, load_model  # noqa: E402
from tests.report.tracecheck import partial_overlaps  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="torchvision:mobilenet_v2")
    ap.add_argument("--target", default=None)
    ap.add_argument("--int8", action="store_true")
    args = ap.parse_args()
    model, inputs = load_model(args.model)
    art, t_compile = timed(lambda: npuc.compile(model, inputs, target=args.target, name=args.model))
    prof, t_prof = timed(lambda: art.profile(*inputs))
    doc, t_trace = timed(lambda: profile_trace(prof))
    kinds = Counter(e["ph"] for e in doc["traceEvents"])
    tracks = sum(1 for e in doc["traceEvents"] if e.get("name") == "thread_name")
    size = len(json.dumps(doc, separators=(",", ":")))
    print(f"{args.model} on {art.target.name}: compile {t_compile:.1f} s, profile {t_prof:.2f} s, "
          f"{prof.total_cycles:,} cycles, {prof.macs:,} MACs")
    print(f"trace: built in {t_trace:.2f} s, {size / 1e6:.1f} MB, {kinds['X']:,} slices on {tracks} tracks, "
          f"{kinds['C']:,} counter points, {len(partial_overlaps(doc))} partial overlaps")
    with tempfile.TemporaryDirectory() as d:
        from npuc.report.model_report import model_report

        path = Path(d) / "r.html"
        _, t_rep = timed(lambda: model_report(prof, art.npub).write(path))
        print(f"report: {path.stat().st_size / 1e6:.1f} MB in {t_rep:.2f} s")
    rep, t_dbg = timed(lambda: npuc.debug(model, inputs, target=args.target, name=args.model))
    worst = max((r for r in rep.layers if r.compared), key=lambda r: r.rel_l2)
    print(f"debug fp16: {len(rep.layers)} values in {t_dbg:.1f} s, first divergent: "
          f"{rep.first_divergent.name if rep.first_divergent else None}; worst rel L2 {worst.rel_l2:.2e} at {worst.name}")
    if args.int8:
        calib = [ZOO[args.model].make_inputs(s) for s in range(1, 5)] if args.model in ZOO else None
        rep8, t8 = timed(lambda: npuc.debug(model, inputs, target=args.target, quantize="int8", calibration=calib,
                                            name=args.model))
        exact = sum(1 for r in rep8.layers if r.compared and r.max_abs == 0)
        print(f"debug int8: {len(rep8.layers)} values in {t8:.1f} s, {exact} bit-exact, output SQNR against float "
              f"{rep8.float_outputs[0][2]:.1f} dB; noise by op {[(op, round(s, 3)) for op, _, s in rep8.op_noise_share[:4]]}; "
              f"suggested float_ops {rep8.suggested_float_ops}")


if __name__ == "__main__":
    main()
