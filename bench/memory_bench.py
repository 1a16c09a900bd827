"""Off-chip traffic and energy per inference, per memory, on the zoo CNNs.

For MobileNetV2, ResNet-18, MobileNetV3-small and EfficientNet-B0 (zoo, random weights) on
npu-mid fp16 and int8 and on the Ethos-U-like systems u55-like-256 and u65-like-256 (int8),
compiles, profiles (timing tier) and prints per run: cycles and the network lower bound, the
off-chip bytes (every memory the DMA reaches, flash included: ``Profile.dram_bytes``) over the
compulsory bytes (weights, inputs and outputs once), the energy per inference, and for each memory
its bytes, energy and bandwidth use.  Each model and configuration is compiled in each of the
``--modes``: ``plain`` (every layer its own kernel, every activation in its memory), ``resident``
(the memory plan keeps activations in the scratchpad across kernels: ``resident=True``), ``fused``
(``fuse_layers=True``: every chain that saves energy, slower or not), ``fused+resident`` and
``not-slower`` (only the chains and on-chip tensors that cost no cycles);
a summary table at the end sets them side by side.
The issue's reference figure: MobileNetV2 fp16 on npu-mid used 1.796 mJ before memories were
data.  Figures only, no assertions.

    .venv/bin/python bench/memory_bench.py [--models mobilenet_v2,resnet18] [--configs npu-mid:fp16,u55-like-256:int8]
        [--modes plain,resident,fused,fused+resident,not-slower]
        [--scratchpad-kib 128]   # the same targets with another scratchpad size (the architect's question)
        [--resident-kib 128,256] # and, plain, with that much of the scratchpad a memory of its own (one run each)
        [--actions]              # and each run's energy per action (MACs, scratchpad, accumulator, each memory,
                                 # vector lane-ops, instructions, static) and per instruction kind
"""

from __future__ import annotations

import argparse
import math
import time

import npuc
from npuc.targets import load_target, target_from_dict
from npuc.targets.resident import with_resident
from npuc.zoo import ZOO, load_model

MODELS = ("mobilenet_v2", "resnet18", "mobilenet_v3_small", "efficientnet_b0")
CONFIGS = ("npu-mid:fp16", "npu-mid:int8", "u55-like-256:int8", "u65-like-256:int8")
MODES = {"plain": (False, False), "resident": (False, True), "fused": (True, False), "fused+resident": (True, True),
         "not-slower": ("not-slower", "not-slower")}


def resized(target: str, spad_kib: int | None):
    """The preset, or the preset with a scratchpad of ``spad_kib`` KiB."""
    t = load_target(target)
    if spad_kib is None:
        return t
    doc = t.document()
    doc["scratchpad"]["size_bytes"] = spad_kib * 1024
    doc["name"] = f"{t.name}-spad{spad_kib}k"
    return target_from_dict(doc, f"{t.name} with a {spad_kib} KiB scratchpad")


def run(model: str, target, dtype: str, mode: str = "plain"):
    name = f"torchvision:{model}"
    m, inputs = load_model(name)
    quantize = "int8" if dtype == "int8" else None
    calibration = [ZOO[name].make_inputs(s) for s in (1, 2)] if quantize else None
    fuse, resident = MODES[mode]
    start = time.perf_counter()
    art = npuc.compile(m, inputs, target=target, quantize=quantize, calibration=calibration, fuse_layers=fuse,
                       resident=resident)
    compiled = time.perf_counter() - start
    return art.profile(*inputs), compiled


def report(model: str, target: str, dtype: str, p, seconds: float, mode: str = "plain") -> None:
    comp = sum(b for _, b in p.compulsory)
    print(f"{model:<19} {target:<24} {dtype:<5} {mode:<15} cycles {p.total_cycles:>12,} (bound {p.lower_bound_cycles:>11,}, "
          f"{p.total_cycles / max(p.lower_bound_cycles, 1):.2f}x)  off-chip {p.dram_bytes:>12,} B / compulsory "
          f"{comp:>11,} B = {p.dram_bytes / comp:.2f}x  energy {p.energy_per_inference_j * 1e3:.3f} mJ  "
          f"[compile {seconds:.0f} s]")
    for f in p.memory_figures():
        print(f"    {f['memory']:<6} {f['kind']:<5} {f['port']:<5} read {f['read_bytes']:>12,} B  written "
              f"{f['write_bytes']:>11,} B  compulsory {f['compulsory_bytes']:>11,} B  {f['energy_pj'] / 1e6:9.1f} uJ  "
              f"bandwidth use {100 * f['bandwidth_use']:5.1f}%")
    other = p.energy_pj - sum(f["energy_pj"] for f in p.memory_figures())
    print(f"    on-chip work (MACs, scratchpad, accumulator, vector, issue, static): {other / 1e6:.1f} uJ")


def _kind(ins) -> str:
    """An instruction's kind for the energy table: its mnemonic, a vector op's op, a copy's shape
    class (a copy of one contiguous block, or strided)."""
    name = ins.defn.name
    op = getattr(ins.args, "op", None)
    if op is None:
        return name
    op = getattr(op, "name", op)
    if name == "VUN" and op == "copy":
        regions = ins.defn.regions(ins.args)
        dense = all(r.end - r.addr == r.itemsize * math.prod(r.shape) for r in regions)
        return "VUN copy (contiguous)" if dense else "VUN copy (strided)"
    return f"{name} {op}"


def energy_by_action(p) -> tuple[dict[str, float], dict[str, float]]:
    """The run's energy (pJ) by action (the profile's energy table: MACs, scratchpad, accumulator,
    each memory, vector lane-ops, instructions, and static power over the cycles) and its dynamic
    energy by instruction kind (:func:`_kind`), from every executed NPU instruction's actions."""
    from npuc.isa.actions import energy_breakdown
    from npuc.report.profile import executed, instruction_actions

    by_action: dict[str, float] = {}
    by_kind: dict[str, float] = {}
    cache: dict = {}
    for prog, labels in zip(p.programs, p.labels):
        dynamic, _ = executed(prog, labels)
        for ins, a in zip(dynamic, instruction_actions(dynamic, p.target)):
            got = cache.get(ins)
            if got is None:
                got = cache[ins] = (_kind(ins), energy_breakdown(a, p.target))
            kind, parts = got
            for k, v in parts.items():
                by_action[k] = by_action.get(k, 0.0) + v
            by_kind[kind] = by_kind.get(kind, 0.0) + sum(parts.values())
    by_action["static (and CPU)"] = p.energy_pj - sum(by_action.values())
    return by_action, by_kind


def print_actions(p) -> None:
    by_action, by_kind = energy_by_action(p)
    total = p.energy_pj
    print("    energy per action:  " + "  ".join(f"{k} {v / 1e6:.1f} uJ" for k, v in by_action.items() if v))
    top = sorted(by_kind.items(), key=lambda kv: -kv[1])[:10]
    print("    dynamic energy per instruction kind:  " + "  ".join(f"{k} {v / 1e6:.1f} uJ ({100 * v / total:.0f}%)"
                                                               for k, v in top))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", default=",".join(CONFIGS), help="TARGET:DTYPE pairs (dtype fp16 or int8)")
    ap.add_argument("--scratchpad-kib", type=int, default=None, help="give every target this scratchpad size")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--resident-kib", default="", help="comma list: plain runs with that much of the scratchpad a "
                                                       "memory of its own (a fixed split)")
    ap.add_argument("--actions", action="store_true", help="print each run's energy per action and per instruction kind")
    args = ap.parse_args()
    residents = [int(r) for r in args.resident_kib.split(",") if r]
    modes = [x for x in args.modes.split(",") if x]
    bad = [x for x in modes if x not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {', '.join(bad)}; the modes are {', '.join(MODES)}")
    rows = []
    for model in args.models.split(","):
        for cfg in args.configs.split(","):
            name, dtype = cfg.split(":")
            base = resized(name, args.scratchpad_kib)
            runs = [(base, mode) for mode in modes] + [(with_resident(base, r * 1024), "plain") for r in residents]
            for target, mode in runs:
                p, seconds = run(model, target, dtype, mode)
                report(model, target.name, dtype, p, seconds, mode)
                if args.actions:
                    print_actions(p)
                rows.append((model, target.name, dtype, mode, p))
    summary(rows)


def summary(rows) -> None:
    """One line per run: off-chip bytes over compulsory, cycles, energy; beside the plain run."""
    print()
    print(f"{'model':<19} {'target':<24} {'dtype':<5} {'mode':<15} {'off-chip MB':>11} {'ratio':>6} "
          f"{'cycles':>11} {'x plain':>7} {'energy mJ':>9} {'x plain':>7}")
    plain = {(m, t, d): p for m, t, d, mode, p in rows if mode == "plain"}
    for m, t, d, mode, p in rows:
        comp = sum(b for _, b in p.compulsory)
        base = plain.get((m, t, d))
        rc = f"{p.total_cycles / base.total_cycles:7.2f}" if base else f"{'':>7}"
        re = f"{p.energy_pj / base.energy_pj:7.2f}" if base else f"{'':>7}"
        print(f"{m:<19} {t:<24} {d:<5} {mode:<15} {p.dram_bytes / 1e6:11.2f} {p.dram_bytes / comp:6.2f} "
              f"{p.total_cycles:11,} {rc} {p.energy_per_inference_j * 1e3:9.3f} {re}")


if __name__ == "__main__":
    main()
