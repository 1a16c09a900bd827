"""The host back-end against interpretation: latency of the CPU segments of the zoo's transformers.

ViT-B/16 keeps the guards of its masked softmax on the CPU; the tiny transformers, whose embedding
is now an NPU gather, have no CPU segment in fp16 on npu-mid (in int8 or on targets without fp16
they do).
Each model is compiled for npu-mid with ``host_code=True``; every CPU segment is then run on the
same inputs (random, of the segment's input types; token ids in range) through the reference
interpreter (PyTorch, op by op) and through its host module (IREE llvm-cpu, compiled ahead of
time), and the outputs are compared.  Figures are the median of ``--repeat`` runs in
microseconds, and the speedup is interpreted / native.

    python bench/host_backend_bench.py [--repeat N] [MODEL ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

import npuc
from npuc.host.aot import cpu_graph
from npuc.interp import interpret
from npuc.runtime.host_code import IreeModule
from npuc.zoo import zoo_entry

TRANSFORMERS = ("transformers:bert-tiny", "transformers:gpt2-tiny", "transformers:llama-tiny", "torchvision:vit_b_16")


def median_us(repeat: int, fn) -> float:
    fn()  # warm up (first-call allocations, thread pools)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def segment_inputs(g) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for v in g.inputs:
        dt = v.type.dtype.torch
        if dt.is_floating_point:
            out.append(torch.randn(v.type.shape, generator=gen).to(dt))
        else:
            out.append(torch.randint(0, 2, v.type.shape, generator=gen).to(dt))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(TRANSFORMERS))
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    header = (f"{'model':26} {'segment':8} {'ops':>4} {'interpreted us':>14} {'native us':>10} {'speedup':>8} "
              f"{'max |diff|':>10} {'AOT s':>6}")
    print(header)
    print("-" * len(header))
    for name in args.models:
        model, inputs = zoo_entry(name).load()
        start = time.perf_counter()
        art = npuc.compile(model, inputs, host_code=True)
        aot = dict(art.report.stage_seconds).get("host_code", time.perf_counter() - start)
        for m in art.npub.host_code:
            g = cpu_graph(art.npub, m.subgraph)
            xs = segment_inputs(g)
            native = IreeModule(m.code)
            t_interp = median_us(args.repeat, lambda: interpret(g, *xs))
            t_native = median_us(args.repeat, lambda: native.run(*xs))
            diff = max(float((a.double() - b.double()).abs().max()) for a, b in zip(native.run(*xs), interpret(g, *xs)))
            ops = sum(1 for n in g.nodes if n.op != "const")
            print(f"{name:26} {art.npub.cpu_fallback[m.subgraph].name:8} {ops:>4} {t_interp:>14.1f} {t_native:>10.1f} "
                  f"{t_interp / t_native:>7.2f}x {diff:>10.2g} {aot:>6.1f}")


if __name__ == "__main__":
    main()
