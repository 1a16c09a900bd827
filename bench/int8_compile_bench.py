"""The int8 compile of a zoo CNN split by stage, and the number of torch.export calls it makes.

One int8 compile, started cold (default: MobileNetV2 on npu-mid, 8 calibration samples), prints
every stage of ``CompileReport.stage_seconds`` (export, quantize = prepare_pt2e + calibration +
convert_pt2e, import, the graph passes, io_edges and the backend) and how many times
``torch.export.export`` ran (npuc imports the converted PT2E module as it is: one export).  The
converted module is then also exported again and decomposed, as a compile that re-exports would
do, to show what that second export costs.  Calibration against PyTorch's own PT2E flow and
observers is ``bench/calibration_time.py``'s.  Prints; asserts nothing.

    python bench/int8_compile_bench.py [--model torchvision:mobilenet_v2] [--target npu-mid] [--calibration 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import npuc  # noqa: E402
from vela_compile_time import ExportClock, cold_start  # noqa: E402
from npuc.zoo import ZOO, load_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="torchvision:mobilenet_v2")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--calibration", type=int, default=8)
    args = ap.parse_args()
    model, example = load_model(args.model)
    samples = [ZOO[args.model].make_inputs(s) for s in range(1, args.calibration + 1)]

    cold_start()
    start = time.perf_counter()
    with ExportClock() as clock:
        art = npuc.compile(model, example, target=args.target, quantize="int8", calibration=samples)
    total = time.perf_counter() - start
    print(f"int8 compile of {args.model} for {args.target}, {args.calibration} calibration samples: "
          f"{total:.2f} s wall, torch.export.export called {clock.calls} time(s) ({clock.cpu:.2f} CPU s)")
    print(f"{'stage':<16}{'seconds':>10}{'share':>8}")
    for name, seconds in art.report.stage_seconds:
        print(f"{name:<16}{seconds:>10.3f}{100 * seconds / total:>7.1f}%")
    front = sum(s for n, s in art.report.stage_seconds if n in ("export", "quantize", "import"))
    print(f"{'front end':<16}{front:>10.3f}{100 * front / total:>7.1f}%   (export + quantize + import)")
    print(f"code bytes {art.report.code_bytes:,}, constant bytes {art.report.constant_bytes:,} "
          f"({100 * art.report.code_bytes / max(art.report.constant_bytes, 1):.1f}% of constants)")

    from npuc.frontend.export import export_program
    from npuc.frontend.pt2e import quantize

    q = quantize(model, example, samples[:1])
    start = time.perf_counter()
    export_program(q.module, example)
    print(f"a second export of the converted module (export + decompose), as a re-exporting compile "
          f"would do: {time.perf_counter() - start:.2f} s, not spent")


if __name__ == "__main__":
    main()
