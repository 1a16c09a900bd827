"""Where a fused chain's cycles go: an inverted-residual block run as its layers and as one chain.

An inverted-residual block (1x1 expansion, 3x3 depthwise, 1x1 projection, each with its batch
norm; ReLU6 after the first two), built in PyTorch at the shape given, compiled for one target
with its layers one by one and fused (``fuse_layers=True``: the cascade stage's chain of least
energy), both simulated.  For each it prints the cycles, the off-chip bytes, every kernel's
plan with the cost model's estimate, every kernel's cycles, and for every queue and instruction
kind the cycles its instructions occupied their unit (``busy``, from each executed instruction's
own timing, docs/isa.md): the sum over a queue against the run's cycles says how well the
array, the vector unit and the DMA overlap.  ``--windows N`` prints, for each run, when that
happens: the run cut into N windows of equal length, and per window the share of its cycles
each unit was busy, the DMA per memory port (a port idle while the array waits is time a
prefetch could take).  The two runs' outputs are compared (int8: bit for bit, as a chain
computes what its members do).

    .venv/bin/python bench/chain_busy.py                        # 56x56: 24 -> 144 -> /2 -> 32, int8, u65-like-256
    .venv/bin/python bench/chain_busy.py --target npu-mid --precision fp16 --block 28,32,192,32,1
    .venv/bin/python bench/chain_busy.py --target u55-like-256 --block 14,64,384,64,1 --windows 16
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn

import npuc
from npuc.isa.enums import Mem, Unit
from npuc.report.profile import executed


def block(cin: int, mid: int, cout: int, stride: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                         nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                         nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)).eval()


def executed_busy(art, p):
    """Every executed instruction of the run's NPU programs, in order: (instruction, its regions,
    its busy cycles, its start in the run).  One pass that both tables below read."""
    offset = 0
    for prog, run in zip(art.programs, (r for r in p.runs if r.sim is not None)):
        dynamic, _ = executed(prog, tuple("" for _ in prog))
        for ins, start in zip(dynamic, run.sim.schedule[3]):
            d = ins.defn
            regions = d.regions(ins.args)
            busy, _ = d.timing(ins.args, p.target, regions)
            yield ins, regions, busy, offset + start
        offset += run.sim.total_cycles


def busy_by_kind(runs) -> dict[tuple[str, str], tuple[int, int]]:
    """(queue, instruction kind) -> (busy cycles, dynamic instructions) over every NPU program."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for ins, _, busy, _ in runs:
        d = ins.defn
        op = getattr(ins.args, "op", None)
        kind = d.name if op is None else f"{d.name} {getattr(op, 'name', op)}"
        c, n = out.get((d.queue.name, kind), (0, 0))
        out[(d.queue.name, kind)] = (c + busy, n + 1)
    return out


def lane(ins, regions, target) -> str:
    """Where an executed instruction spends its busy cycles: its unit, or for a transfer the
    port of the memory its DMA side lies in."""
    d = ins.defn
    if d.unit is not Unit.dma:
        return d.unit.name
    side = next((r for r in regions if r is not None and r.mem is Mem.dram), None)
    w = target.window_at(side.addr) if side is not None else None
    if w is None:
        return "dma"
    names = "+".join(m.name for m in target.memories if m.port == w.memory.port)
    return f"port {w.memory.port} ({names})"


def timeline(runs, p, windows: int) -> None:
    """Per window of the run, the share of its cycles each lane (:func:`lane`) was busy."""
    width = p.total_cycles / windows
    busy: dict[str, list[float]] = {}
    for ins, regions, b, start in runs:
        row = busy.setdefault(lane(ins, regions, p.target), [0.0] * windows)
        t, end = start, start + b
        while t < end:
            w = min(int(t // width), windows - 1)
            step = min(end, (w + 1) * width) - t if w < windows - 1 else end - t
            row[w] += step
            t += step
    print(f"    busy per window of {width:,.0f} cycles (% of the window):")
    for name, row in sorted(busy.items()):
        if any(row):
            print(f"      {name:<28} " + " ".join(f"{v / width * 100:4.0f}" for v in row))


def report(label: str, art, x: torch.Tensor, windows: int = 0) -> np.ndarray:
    p = art.profile(x)
    print(f"{label}: {p.total_cycles:,} cycles, off-chip {p.dram_bytes:,} B")
    for c in art.compiled.codes:
        for lk, plan in zip(c.segment.kernels, c.plans):
            print(f"    plan {lk.name}: est {plan.est_cycles:,}: {plan.summary}")
    for lp in p.layers:
        print(f"    {lp.kind:<18} {lp.cycles:>10,} cycles  {lp.name}")
    runs = list(executed_busy(art, p))
    kinds = busy_by_kind(runs)
    queues: dict[str, int] = {}
    for (q, _), (c, _) in kinds.items():
        queues[q] = queues.get(q, 0) + c
    print("    busy per queue: " + ", ".join(f"{q} {c:,} ({c / p.total_cycles:.0%} of the run)"
                                          for q, c in sorted(queues.items(), key=lambda kv: -kv[1])))
    for (q, kind), (c, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:8]:
        print(f"      {q:<8} {kind:<20} busy {c:>10,}  ({n:,} instructions)")
    if windows:
        timeline(runs, p, windows)
    return art.run(x)[0].numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="u65-like-256")
    ap.add_argument("--precision", choices=("int8", "fp16"), default="int8")
    ap.add_argument("--block", default="56,24,144,32,2", help="H,CIN,MID,COUT,STRIDE (input HxH)")
    ap.add_argument("--windows", type=int, default=0, help="and when each unit and port is busy, in this many windows")
    args = ap.parse_args()
    h, cin, mid, cout, stride = (int(v) for v in args.block.split(","))
    torch.manual_seed(0)
    m = block(cin, mid, cout, stride)
    x = torch.randn(1, cin, h, h)
    quantize = "int8" if args.precision == "int8" else None
    calibration = [(torch.randn(1, cin, h, h),) for _ in range(4)] if quantize else None
    print(f"inverted-residual block {h}x{h}: {cin} -> {mid} -> 3x3/{stride} -> {cout}, {args.precision}, {args.target}")
    outs = []
    for label, fuse in (("layers one by one", False), ("fused", True)):
        art = npuc.compile(m, (x,), target=args.target, quantize=quantize, calibration=calibration, fuse_layers=fuse)
        outs.append(report(label, art, x, args.windows))
    diff = float(np.abs(outs[0].astype(np.float64) - outs[1].astype(np.float64)).max())
    print(f"largest difference between the two runs' outputs: {diff:g}")


if __name__ == "__main__":
    main()
