"""The Perfetto (Chrome JSON) trace of a profile: the segments one after the other on one timeline.

Tracks (top to bottom):

* **segments**: one slice per NPU or CPU segment;
* **layers**: the per-layer attribution of the profile (npuc.report.profile: the cycles charged to
  each layer, so the slices of this track are exactly the profile's per-layer cycles);
* one track per instruction queue and unit, and per in-flight slot (npuc.runtime.sim.trace): every
  NPU instruction, named by its layer;
* **host CPU (fallback)**: the CPU segments, as long as the CPU model's estimate.

Counters: the bandwidth of each memory (GB/s: each instruction's bytes in that memory spread
evenly over its run) and the occupancy of each on-chip memory (bytes holding a value that will
still be read: from the write that fills a block of the memory to the end of its last read, in
blocks of :func:`occupancy_block` bytes).  Every track's slices nest; times are microseconds at
the target's clock.
"""

from __future__ import annotations

import numpy as np

from npuc.isa.enums import Mem
from npuc.runtime.sim.trace import TraceBuilder, add_instructions

SEGMENTS, LAYERS, HOST = (0, 0), (0, 1), (9, 0)  # track sort keys around the queue tracks (group 1)


def profile_trace(p, counters: bool = True) -> dict:
    """The trace document (``{"traceEvents": [...]}``) of a :class:`~npuc.report.profile.Profile`
    (``counters=False``: the tracks only)."""
    from npuc.report.profile import attribution_intervals, executed

    b = TraceBuilder(p.clock_hz, f"npuc {p.model} on {p.target.name}")
    offset = 0
    npu_index = 0
    traffic: dict[Mem, list] = {m: [] for m in Mem}
    live: dict[Mem, list] = {m: [] for m in Mem if m is not Mem.dram}
    cpu_layers = {layer.segment: layer for layer in p.layers if layer.kind == "cpu"}
    for r in p.runs:
        if r.kind == "npu":
            labels = p.labels[npu_index]
            npu_index += 1
            sim = r.sim
            _, _, _, starts, ends = sim.schedule
            b.add_slice(SEGMENTS, "segments", r.name, offset, offset + sim.total_cycles, "npu", {"segment": r.name})
            program, run_labels = executed(p.programs[r.index], labels) if p.programs else ((), labels)
            for label, begin, end in attribution_intervals(ends, run_labels):
                b.add_slice(LAYERS, "layers", label or "(program)", offset + begin, offset + end, "layer",
                            {"segment": r.name})
            add_instructions(b, sim.trace_events, {i: lab for i, lab in enumerate(labels) if lab}, offset,
                             {"segment": r.name})
            if p.programs and counters:
                regions = _regions(program)
                _collect_traffic(traffic, regions, starts, ends, offset, p.target.dma.burst_bytes)
                for mem, acc in live.items():
                    acc.append(_live_blocks(regions, starts, ends, offset, mem, occupancy_block(p.target, mem)))
            offset += sim.total_cycles
        else:
            cycles = cpu_layers[r.name].cycles if r.name in cpu_layers else round(r.cpu_seconds * p.clock_hz)
            args = {"segment": r.name, "estimated": True}
            b.add_slice(SEGMENTS, "segments", r.name, offset, offset + cycles, "cpu", args)
            b.add_slice(LAYERS, "layers", r.name, offset, offset + cycles, "cpu", args)
            b.add_slice(HOST, "host CPU (fallback)", r.name, offset, offset + cycles, "cpu", args)
            offset += cycles
    gb_per_s = p.clock_hz / 1e9
    for mem, parts in traffic.items():
        if parts:
            b.add_counter(f"{mem.name} bandwidth", "GB/s", [(t, round(v * gb_per_s, 6)) for t, v in _rate_steps(parts)])
    for mem, parts in live.items():
        if parts:
            block = occupancy_block(p.target, mem)
            b.add_counter(f"{mem.name} occupancy", "bytes", [(t, v * block) for t, v in _occupancy_steps(parts)])
    return b.document()


def _regions(program) -> list:
    cache: dict = {}
    out = []
    for ins in program:
        regs = cache.get(ins)
        if regs is None:
            regs = cache[ins] = tuple(ins.defn.regions(ins.args))
        out.append(regs)
    return out


def _collect_traffic(traffic: dict, regions, starts, ends, offset: int, burst: int) -> None:
    """(start, end, bytes) per instruction and memory, appended to ``traffic[mem]``."""
    for regs, s, e in zip(regions, starts, ends):
        if e <= s:
            continue
        per_mem: dict[Mem, int] = {}
        for r in regs:
            n = r.burst_bytes(burst) if r.mem is Mem.dram else r.nbytes
            per_mem[r.mem] = per_mem.get(r.mem, 0) + n * (r.reads + r.writes)
        for mem, n in per_mem.items():
            traffic[mem].append((offset + s, offset + e, n))


def _rate_steps(parts) -> list[tuple[int, float]]:
    """(cycle, bytes per cycle) steps of the sum of ``parts`` ((start, end, bytes) spread evenly)."""
    delta: dict[int, float] = {}
    for s, e, n in parts:
        rate = n / (e - s)
        delta[s] = delta.get(s, 0.0) + rate
        delta[e] = delta.get(e, 0.0) - rate
    out: list[tuple[int, float]] = []
    level = 0.0
    for t in sorted(delta):
        level += delta[t]
        value = max(0.0, level) if abs(level) > 1e-9 else 0.0
        if not out or out[-1][1] != value:
            out.append((t, value))
    return out


def occupancy_block(target, mem: Mem) -> int:
    """The granule of the occupancy counter of ``mem``: 64 bytes, or 1/4096 of the memory if larger."""
    size = target.scratchpad.size_bytes if mem is Mem.spad else target.accumulator.size_bytes
    return max(64, size // 4096)


def _live_blocks(regions, starts, ends, offset: int, mem: Mem, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(open, close) cycles of every stretch in which a block of ``mem`` holds a value still to be
    read: a write opens it (closing the previous one), reads extend it to their end."""
    accesses = []
    for i, regs in enumerate(regions):
        for r in regs:
            if r.mem is mem:
                accesses.append((starts[i], ends[i], r.addr // block, (r.end - 1) // block + 1, r.access))
    if not accesses:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n = max(a[3] for a in accesses)
    opened = np.full(n, -1, np.int64)
    last_use = np.zeros(n, np.int64)
    opens, closes = [], []
    for s, e, lo, hi, access in sorted(accesses, key=lambda a: (a[0], a[1])):
        if access == "w":
            live = opened[lo:hi] >= 0
            if live.any():
                opens.append(opened[lo:hi][live])
                closes.append(last_use[lo:hi][live])
            opened[lo:hi] = s
            last_use[lo:hi] = e
        else:
            fresh = opened[lo:hi] < 0
            opened[lo:hi][fresh] = s
            np.maximum(last_use[lo:hi], e, out=last_use[lo:hi])
    live = opened >= 0
    opens.append(opened[live])
    closes.append(last_use[live])
    o, c = np.concatenate(opens) + offset, np.concatenate(closes) + offset
    return o, np.maximum(c, o)


def _occupancy_steps(parts) -> list[tuple[int, int]]:
    """(cycle, live blocks) steps."""
    opens = np.concatenate([o for o, _ in parts])
    closes = np.concatenate([c for _, c in parts])
    return _step_counts(opens, closes)


def _step_counts(opens: np.ndarray, closes: np.ndarray) -> list[tuple[int, int]]:
    times = np.concatenate([opens, closes])
    deltas = np.concatenate([np.ones_like(opens), -np.ones_like(closes)])
    uniq, inv = np.unique(times, return_inverse=True)
    level = np.cumsum(np.bincount(inv, weights=deltas, minlength=len(uniq))).round().astype(np.int64)
    out: list[tuple[int, int]] = []
    for t, v in zip(uniq.tolist(), level.tolist()):
        if not out or out[-1][1] != v:
            out.append((t, v))
    return out
