"""Fusion across layers: DRAM bytes, cycles and energy per inference, fused against unfused.

Each zoo CNN is compiled for npu-mid (or ``--target``) in fp16 and int8 (NpuQuantizer, calibrated
on a few samples of the model's input generator), once with the cascade stage
(``fused_chain`` kernels, docs/compiler.md) and once without (``fuse_layers=False``), and
profiled on the simulator (timing only).  Per row: DRAM bytes per inference, the ratio to the
compulsory bytes (weights and other constants + inputs + outputs), cycles, energy, how many
kernels are fused chains and how many layers they hold.  Prints a table; asserts nothing.

    python bench/fusion_bench.py [--models mobilenet_v2,resnet18] [--dtypes fp16,int8] [--target npu-mid]
"""

from __future__ import annotations

import argparse
import time

from npuc.artifact import compile_graph
from npuc.frontend.quantized import import_quantized
from npuc.pipeline import import_model, run_graph_passes
from npuc.targets import load_target
from npuc.zoo import ZOO, load_model

CNNS = ("mobilenet_v2", "resnet18", "mobilenet_v3_small", "efficientnet_b0")


def _inputs(art):
    import torch

    from npuc.runtime.executor import is_quantized, logical_shape

    return tuple(torch.zeros(logical_shape(io.type), dtype=torch.float32 if io.type.dtype.is_float or is_quantized(io.type)
                             else io.type.dtype.torch) for io in art.npub.io_signature.inputs)


def compulsory_bytes(art) -> int:
    """Constants (weights, biases, records) + model inputs + outputs, as the binary stores them."""
    sig = art.npub.io_signature
    return len(art.npub.constants) + sum(io.type.nbytes for io in sig.inputs + sig.outputs)


def figures(art) -> dict:
    prof = art.profile(*_inputs(art))
    kernels = [lk for c in art.compiled.codes for lk in c.segment.kernels] if art.compiled else []
    chains = [lk for lk in kernels if lk.kernel.kind in ("fused_chain", "pooled_chain")]
    return {
        "dram": prof.dram_bytes,
        "ratio": prof.dram_bytes / compulsory_bytes(art),
        "cycles": prof.total_cycles,
        "energy_mj": prof.energy_pj * 1e-9,
        "chains": len(chains),
        "layers": sum(len(lk.kernel.attrs.members) for lk in chains),
        "kernels": len(kernels),
    }


def row(label: str, f: dict) -> str:
    return (f"  {label:<14} {f['dram'] / 1e6:>9.2f} {f['ratio']:>6.2f} {f['cycles']:>12,} {f['energy_mj']:>9.3f} "
            f"{f['chains']:>4} / {f['layers']:<4} {f['kernels']:>5}")


def graph_of(name: str, dtype: str, calibration: int):
    model, inputs = load_model(name)
    if dtype == "fp16":
        return import_model(model, inputs, name=name)
    samples = [ZOO[name].make_inputs(s) for s in range(1, calibration + 1)]
    return run_graph_passes(import_quantized(model, inputs, samples, name=name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(CNNS))
    ap.add_argument("--dtypes", default="fp16,int8")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--calibration", type=int, default=2)
    args = ap.parse_args()
    target = load_target(args.target)
    print(f"fusion across layers on {target.name}: DRAM per inference, its ratio to weights + inputs + outputs, "
          "cycles, energy, fused chains / layers in them, kernels")
    head = f"  {'':<14} {'DRAM MB':>9} {'ratio':>6} {'cycles':>12} {'mJ':>9} {'chains':>11} {'kern':>5}"
    for short in args.models.split(","):
        name = short if ":" in short else f"torchvision:{short}"
        for dtype in args.dtypes.split(","):
            start = time.perf_counter()
            g = graph_of(name, dtype, args.calibration)
            q = "int8" if dtype == "int8" else None
            unfused = figures(compile_graph(g, target, quantize=q, fuse_layers=False))
            fused = figures(compile_graph(g, target, quantize=q, fuse_layers=True))
            print(f"\n{name} {dtype}\n{head}")
            print(row("unfused", unfused))
            print(row("fused", fused))
            print(f"  {'fused/unfused':<14} {fused['dram'] / unfused['dram']:>9.2f} {'':>6} "
                  f"{fused['cycles'] / unfused['cycles']:>12.2f} {fused['energy_mj'] / unfused['energy_mj']:>9.2f}"
                  f"   ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
