"""int8 accuracy per zoo model: the signal-to-quantization-noise ratio (dB) of the outputs of
npuc's integer reference against the float model, the same for PyTorch's quantized reference
(the converted PT2E module), and how often npuc's int8 outputs agree with PyTorch's reference
within one quantization step.

    .venv/bin/python bench/quant_accuracy_bench.py [MODEL ...] [--samples N] [--calibration N]

Figures only (no pass/fail): the tests in tests/quant/ hold the thresholds.
"""

from __future__ import annotations

import argparse
import time

import torch

from npuc.frontend.quantized import import_quantized_program
from npuc.interp import interpret
from npuc.ir.verify import verify
from npuc.pipeline import GRAPH_PASSES
from npuc.frontend.pt2e import quantize
from npuc.zoo import ZOO, zoo_names


def sqnr_db(reference: torch.Tensor, approx: torch.Tensor) -> float:
    noise = ((approx - reference) ** 2).sum()
    return float(10 * torch.log10((reference**2).sum() / noise.clamp_min(1e-30)))


def output_scale(g) -> float | None:
    node = next(n for n in g.nodes if g.outputs[0] in n.outputs)
    return node.inputs[0].type.quant.scale[0] if node.op == "dequantize" else None


def measure(name: str, samples: int, calibration: int) -> dict:
    entry = ZOO[name]
    model, example = entry.load()
    start = time.perf_counter()
    q = quantize(model, example, [entry.make_inputs(1 + i) for i in range(calibration)])
    g = import_quantized_program(q.program)
    for p in GRAPH_PASSES:
        g = verify(p(g))
    seconds = time.perf_counter() - start
    floats, ours, refs = [], [], []
    with torch.no_grad():
        for i in range(samples):
            x = entry.make_inputs(100 + i)
            floats.append(model(*x).flatten())
            refs.append(q.module(*x).flatten())
            ours.append(interpret(g, *x)[0].flatten())
    f, o, r = torch.cat(floats), torch.cat(ours), torch.cat(refs)
    scale = output_scale(g)
    steps = (o - r).abs() / scale if scale else None
    float_nodes = sum(1 for n in g.nodes if n.op not in ("const", "quantize", "dequantize") and n.outputs[0].type.dtype.is_float)
    return {
        "model": name,
        "sqnr_npuc": sqnr_db(f, o),
        "sqnr_torch": sqnr_db(f, r),
        "within_1": float((steps <= 1.0001).float().mean()) if steps is not None else float("nan"),
        "worst": float(steps.max()) if steps is not None else float((o - r).abs().max()),
        "float_ops": float_nodes,
        "seconds": seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="zoo names (default: every zoo model)")
    ap.add_argument("--samples", type=int, default=2, help="inputs measured per model")
    ap.add_argument("--calibration", type=int, default=2, help="calibration samples per model")
    args = ap.parse_args()
    names = args.models or zoo_names()
    print(f"{'model':34} {'SQNR npuc':>10} {'SQNR torch':>10} {'<=1 step':>9} {'worst':>8} {'float ops':>9} {'quantize s':>10}")
    for name in names:
        try:
            r = measure(name, args.samples, args.calibration)
        except Exception as e:  # a model that does not quantize is reported, the others go on
            print(f"{name:34} failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
            continue
        print(f"{r['model']:34} {r['sqnr_npuc']:>9.1f}dB {r['sqnr_torch']:>9.1f}dB {r['within_1']:>9.2%} "
              f"{r['worst']:>8.2f} {r['float_ops']:>9d} {r['seconds']:>10.1f}")
    print("SQNR: output signal over (int8 - float) noise; '<=1 step' and 'worst': npuc vs PyTorch's quantized "
          "reference in output quantization steps (absolute difference when the output is a float op).")


if __name__ == "__main__":
    main()
