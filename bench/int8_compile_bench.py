"""The int8 compile of a zoo CNN split by stage, the number of torch.export calls it makes, and
its calibration against PyTorch's own observers.

One int8 compile (default: MobileNetV2 on npu-mid, 8 calibration samples) prints every stage of
``CompileReport.stage_seconds`` (export, quantize = prepare_pt2e + calibration + convert_pt2e,
import, the graph passes, io_edges and the backend) and how many times ``torch.export.export``
ran (npuc imports the converted PT2E module as it is: one export).  The converted module is then
also exported again and decomposed, as a compile that re-exports would do, to show what that
second export costs.  Calibration is timed three ways on the same samples: npuc's (the model
prepared with NpuQuantizer), PyTorch's own observers (the same model prepared with ExecuTorch's
XNNPACKQuantizer, when executorch is installed) and plain eager inference.  Prints; asserts
nothing.

    python bench/int8_compile_bench.py [--model torchvision:mobilenet_v2] [--target npu-mid] [--calibration 8]
"""

from __future__ import annotations

import argparse
import time

import torch

import npuc
from npuc.quant.calibrate import run_calibration
from npuc.zoo import ZOO, load_model


def count_exports():
    """Wrap torch.export.export to count its calls; returns (calls list, restore function)."""
    calls: list[float] = []
    real = torch.export.export

    def counted(*args, **kwargs):
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - start)

    torch.export.export = counted

    def restore() -> None:
        torch.export.export = real

    return calls, restore


def calibration_seconds(model, example, samples, quantizer) -> float:
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    prepared = prepare_pt2e(torch.export.export(model, example).module(), quantizer)
    start = time.perf_counter()
    run_calibration(prepared, samples)
    return time.perf_counter() - start


def eager_seconds(model, samples) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        for s in samples:
            model(*s)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="torchvision:mobilenet_v2")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--calibration", type=int, default=8)
    args = ap.parse_args()
    model, example = load_model(args.model)
    samples = [ZOO[args.model].make_inputs(s) for s in range(1, args.calibration + 1)]

    calls, restore = count_exports()
    start = time.perf_counter()
    try:
        art = npuc.compile(model, example, target=args.target, quantize="int8", calibration=samples)
    finally:
        restore()
    total = time.perf_counter() - start
    print(f"int8 compile of {args.model} for {args.target}, {args.calibration} calibration samples: "
          f"{total:.2f} s wall, torch.export.export called {len(calls)} time(s) ({sum(calls):.2f} s)")
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

    from npuc.quant.quantizer import NpuQuantizer

    ours = calibration_seconds(model, example, samples, NpuQuantizer())
    eager = eager_seconds(model, samples)
    per = 1e3 / len(samples)
    line = f"calibration per sample: npuc (NpuQuantizer observers) {ours * per:.1f} ms"
    try:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )

        xnn = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        theirs = calibration_seconds(model, example, samples, xnn)
        line += f", PyTorch's observers (XNNPACKQuantizer) {theirs * per:.1f} ms (ratio {ours / theirs:.2f})"
    except ImportError:
        line += ", PyTorch's observers: executorch not installed"
    print(line + f", eager inference {eager * per:.1f} ms")


if __name__ == "__main__":
    main()
