"""The profile of a compiled model: per layer cycles, MACs, traffic, energy, and totals.

Per-layer attribution rule (so that the layers sum to the total): within an NPU segment the
instructions are ordered by completion time, and the cycles from the previous completion (or the
segment start) up to an instruction's completion are charged to that instruction's layer (its
debug-map label).  Idle stretches therefore go to the instruction that ends them: a layer waiting
for its weights is charged for the wait.  Energy: each instruction's actions (MACs, SRAM and DRAM
bytes, vector work, issue) times the target's energy table, plus static power over the layer's
cycles.  A CPU segment is one row whose time is the CPU model's estimate (npuc.lower.cpu_cost) at
the target's clock and whose energy is the host's power over that time.

MACs are the model's (the compiler's count per kernel, as ``npuc import`` counts them: every
convolution, depthwise ones included, linear and matmul), whichever unit did them; ``array_macs``
is what the systolic array itself did.  ``to_dict`` is the JSON form (``npuc profile --json``);
``npuc.report.csv`` writes the per-layer and summary CSV files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from npuc.isa.actions import Actions, energy_breakdown
from npuc.isa.loops import expand, has_loops
from npuc.lower.cpu_cost import HOST_POWER_W
from npuc.runtime.executor import SegmentRun


@dataclass(frozen=True)
class LayerProfile:
    """One kernel (or one CPU segment) of the run."""

    name: str
    op: str          # graph ops it covers, "+"-joined (or "cpu: ..." for a CPU segment)
    kind: str        # kernel kind, or "cpu"
    segment: str
    source: str      # source location of the first graph op ("" when unknown)
    cycles: int
    macs: int
    dram_bytes: int
    sram_bytes: int
    energy_pj: float
    instructions: int
    min_dram_bytes: int  # compulsory traffic: every tensor read or written once
    peak_macs_per_cycle: int = 1
    dram_bytes_per_cycle: float = 1
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    spad_bytes: int = 0   # scratchpad bytes read and written
    acc_bytes: int = 0    # accumulator bytes read and written
    array_macs: int = 0   # MACs the systolic array did (the rest ran on the vector unit)
    # Per memory of the target (in its order): DMA-side bytes read and written, their energy.
    memory_read_bytes: tuple[int, ...] = ()
    memory_write_bytes: tuple[int, ...] = ()
    memory_energy_pj: tuple[float, ...] = ()
    min_memory_cycles: float = 0  # the compulsory bytes' time on the busiest DMA port (0: unknown)
    # From the start of the layer's first instruction to the end of its last: what its lower bound
    # bounds.  ``cycles`` is the share of the total attributed to it (docstring), which is shorter
    # than the span when the layer overlaps its neighbours.
    span_cycles: int = 0

    @property
    def utilization(self) -> float:
        """The layer's MACs over what the array could do in the layer's cycles."""
        return self.macs / (self.cycles * self.peak_macs_per_cycle) if self.cycles else 0.0

    @property
    def _memory_cycles(self) -> float:
        return self.min_memory_cycles or self.min_dram_bytes / self.dram_bytes_per_cycle

    @property
    def lower_bound_cycles(self) -> int:
        """max(MACs / PEs, the compulsory bytes' time on the busiest DMA port): no schedule can
        beat it.  Compulsory bytes: every tensor read or written once, and of a convolution's or
        pooling's input only the pixels a window reads; each at the bandwidth of the memory it
        lives in, the memories behind one port adding up."""
        return max(-(-self.macs // self.peak_macs_per_cycle), math.ceil(self._memory_cycles - 1e-9))

    @property
    def bound(self) -> str:
        """What limits the layer at its lower bound: "compute" or "memory" ("host" on the CPU)."""
        if self.kind == "cpu":
            return "host"
        return "compute" if self.macs / self.peak_macs_per_cycle >= self._memory_cycles else "memory"

    @property
    def arithmetic_intensity(self) -> float:
        """MACs per DRAM byte moved (0 when the layer moves no DRAM byte)."""
        return self.macs / self.dram_bytes if self.dram_bytes else 0.0

    def to_dict(self) -> dict:
        """The layer as plain JSON-ready values (the keys of LAYER_FIELDS)."""
        return {k: getattr(self, k) for k in LAYER_FIELDS}


LAYER_FIELDS = (
    "name", "op", "kind", "segment", "source", "cycles", "macs", "array_macs", "utilization", "dram_bytes",
    "dram_read_bytes", "dram_write_bytes", "sram_bytes", "spad_bytes", "acc_bytes", "energy_pj", "bound",
    "lower_bound_cycles", "min_dram_bytes", "instructions",
)


@dataclass(frozen=True, eq=False)
class Profile:
    """A whole inference: the layers, the totals and the simulations behind them."""

    model: str
    target: object
    layers: tuple[LayerProfile, ...]
    runs: tuple[SegmentRun, ...] = field(repr=False)
    labels: tuple[tuple[str, ...], ...] = field(repr=False)  # per NPU program, per instruction
    programs: tuple = field(default=(), repr=False)  # every NPU program of the binary (by segment index)
    compulsory: tuple[tuple[str, int], ...] = ()  # (memory, bytes of weights, inputs and outputs in it)

    @property
    def clock_hz(self) -> float:
        return self.target.clock_hz

    @property
    def total_cycles(self) -> int:
        return sum(layer.cycles for layer in self.layers)

    @property
    def npu_cycles(self) -> int:
        return sum(layer.cycles for layer in self.layers if layer.kind != "cpu")

    @property
    def cpu_seconds(self) -> float:
        return sum(r.cpu_seconds for r in self.runs if r.kind == "cpu")

    @property
    def energy_pj(self) -> float:
        return sum(layer.energy_pj for layer in self.layers)

    @property
    def dram_bytes(self) -> int:
        return sum(layer.dram_bytes for layer in self.layers)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def latency_s(self) -> float:
        return self.total_cycles / self.clock_hz

    @property
    def inferences_per_s(self) -> float:
        return 1.0 / self.latency_s if self.latency_s else 0.0

    @property
    def energy_per_inference_j(self) -> float:
        return self.energy_pj * 1e-12

    @property
    def average_power_w(self) -> float:
        return self.energy_per_inference_j / self.latency_s if self.latency_s else 0.0

    @property
    def utilization(self) -> float:
        cap = self.npu_cycles * self.target.peak_macs_per_cycle
        return self.macs / cap if cap else 0.0

    @property
    def lower_bound_cycles(self) -> int:
        """The network's lower bound: max(MACs / PEs, the compulsory bytes (every weight, input
        and output once) at the bandwidth of the memory each lives in, on the busiest DMA port)."""
        return max(-(-self.macs // self.target.peak_macs_per_cycle),
                   math.ceil(memory_bound_cycles(self.target, dict(self.compulsory)) - 1e-9))

    def memory_figures(self) -> list[dict]:
        """Per memory of the target: kind, port, bytes read and written by the DMA, their energy,
        and the bandwidth use (bytes moved over what the memory could move in the NPU cycles)."""
        out = []
        comp = dict(self.compulsory)
        for i, m in enumerate(self.target.memories):
            rd = sum(_at(layer.memory_read_bytes, i) for layer in self.layers)
            wr = sum(_at(layer.memory_write_bytes, i) for layer in self.layers)
            cap = self.npu_cycles * m.bytes_per_cycle
            out.append({"memory": m.name, "kind": m.kind, "port": m.port, "read_bytes": rd, "write_bytes": wr,
                        "energy_pj": sum(_at(layer.memory_energy_pj, i) for layer in self.layers),
                        "bandwidth_use": (rd + wr) / cap if cap else 0.0, "compulsory_bytes": comp.get(m.name, 0)})
        return out

    def totals(self) -> dict[str, float]:
        """The headline figures, by name."""
        return {
            "cycles": self.total_cycles,
            "npu_cycles": self.npu_cycles,
            "cpu_seconds": self.cpu_seconds,
            "latency_ms": self.latency_s * 1e3,
            "inferences_per_s": self.inferences_per_s,
            "energy_mj": self.energy_per_inference_j * 1e3,
            "average_power_mw": self.average_power_w * 1e3,
            "dram_bytes": self.dram_bytes,
            "macs": self.macs,
            "array_utilization": self.utilization,
            "lower_bound_cycles": self.lower_bound_cycles,
        }

    @property
    def sram_bytes(self) -> int:
        return sum(layer.sram_bytes for layer in self.layers)

    def memory_traffic(self) -> dict[str, int]:
        """Bytes moved per memory over the inference (DRAM read and written, scratchpad, accumulator)."""
        return {
            "dram_read": sum(layer.dram_read_bytes for layer in self.layers),
            "dram_write": sum(layer.dram_write_bytes for layer in self.layers),
            "spad": sum(layer.spad_bytes for layer in self.layers),
            "acc": sum(layer.acc_bytes for layer in self.layers),
        }

    def to_dict(self) -> dict:
        """The profile as JSON-ready values: the totals and one record per layer (docs/analysis.md
        lists the keys; ``npuc profile --json`` prints exactly this)."""
        t = self.target
        return {
            "schema": PROFILE_SCHEMA,
            "model": self.model,
            "target": t.name,
            "clock_hz": t.clock_hz,
            "peak_macs_per_cycle": t.peak_macs_per_cycle,
            "dram_bytes_per_cycle": t.dram_bytes_per_cycle,
            "total_cycles": self.total_cycles,
            "npu_cycles": self.npu_cycles,
            "cpu_seconds": self.cpu_seconds,
            "latency_s": self.latency_s,
            "inferences_per_s": self.inferences_per_s,
            "energy_pj": self.energy_pj,
            "energy_per_inference_j": self.energy_per_inference_j,
            "average_power_w": self.average_power_w,
            "dram_bytes": self.dram_bytes,
            "sram_bytes": self.sram_bytes,
            "traffic_bytes": self.memory_traffic(),
            "macs": self.macs,
            "utilization": self.utilization,
            "lower_bound_cycles": self.lower_bound_cycles,
            "memories": self.memory_figures(),
            "layers": [layer.to_dict() for layer in self.layers],
        }

    def write_trace(self, path: str | Path) -> None:
        """A Chrome/Perfetto JSON trace: every NPU instruction on its queue's track (one track per
        in-flight slot), a track of layers, counters of bandwidth per memory and of scratchpad
        occupancy, CPU segments on a host track (npuc.report.trace)."""
        from npuc.report.files import write_report_file
        from npuc.report.trace import profile_trace

        write_report_file(path, json.dumps(profile_trace(self), separators=(",", ":")))


PROFILE_SCHEMA = "npuc.profile/1"


def _at(values: tuple, i: int):
    return values[i] if i < len(values) else 0


def off_chip_bytes(a: Actions, target) -> tuple[int, int]:
    """(read, written) DMA-side bytes of the off-chip memories (kinds flash and dram); bytes
    counted without a memory go to the one that holds activations."""
    rd = wr = 0
    for i, m in enumerate(target.memories):
        if not m.on_chip:
            rd += _at(a.memory_read, i)
            wr += _at(a.memory_write, i)
    if not target.activation_memory.on_chip:
        rd += a.dram_read - sum(a.memory_read)
        wr += a.dram_write - sum(a.memory_write)
    return rd, wr


def memory_bound_cycles(target, per_memory: dict[str, int]) -> float:
    """Cycles the busiest DMA port needs to move ``per_memory`` bytes (memory name -> bytes), each
    memory at its bandwidth, the memories behind one port one after another."""
    ports: dict[str, float] = {}
    for m in target.memories:
        ports[m.port] = ports.get(m.port, 0.0) + per_memory.get(m.name, 0) / m.bytes_per_cycle
    return max(ports.values(), default=0.0)


def compulsory_bytes(npub, target) -> tuple[tuple[str, int], ...]:
    """Per memory: the bytes of the weights (the constants blob), the inputs and the outputs
    that live in it, from the binary's memory plan and IO signature."""
    per: dict[str, int] = {}

    def add(addr: int, n: int) -> None:
        w = target.window_at(addr)
        name = w.memory.name if w is not None else target.activation_memory.name
        per[name] = per.get(name, 0) + n

    from npuc.runtime.npub_model import RegionKind

    saved = npub.weight_streams.saved_bytes if getattr(npub, "weight_streams", None) is not None else 0
    for r in npub.memory_plan.regions:
        if r.kind == RegionKind.CONSTANTS:
            add(r.offset, len(npub.constants) - saved)  # compressed weights count as their streams
    for t in (*npub.io_signature.inputs, *npub.io_signature.outputs):
        add(t.dram_offset, t.type.nbytes)
    return tuple((m.name, per[m.name]) for m in target.memories if m.name in per)


# ------------------------------------------------------------------------------------ building


def instruction_actions(program, target) -> list[Actions]:
    cache: dict = {}
    out = []
    for ins in program:
        a = cache.get(ins)
        if a is None:
            d = ins.defn
            a = cache[ins] = d.actions(ins.args, target, d.regions(ins.args))
        out.append(a)
    return out


def attribution_intervals(ends, labels) -> list[tuple[str, int, int]]:
    """(label, first cycle, end cycle) stretches by the completion rule of the module docstring:
    disjoint, in time order, covering the program's run (neighbours with one label merged)."""
    out: list[tuple[str, int, int]] = []
    frontier = 0
    for i in sorted(range(len(ends)), key=lambda i: (ends[i], i)):
        if ends[i] > frontier:
            if out and out[-1][0] == labels[i]:
                out[-1] = (labels[i], out[-1][1], ends[i])
            else:
                out.append((labels[i], frontier, ends[i]))
            frontier = ends[i]
    return out


def attribute_cycles(starts, ends, labels) -> dict[str, int]:
    """Cycles per label by the completion rule of the module docstring (they sum to the total)."""
    out: dict[str, int] = {}
    for label, begin, end in attribution_intervals(ends, labels):
        out[label] = out.get(label, 0) + end - begin
    return out


def program_labels(debug, n: int) -> tuple[str, ...]:
    """The label of each of ``n`` instructions from a debug map's entries."""
    labels = [""] * n
    entries = list(debug)
    for j, e in enumerate(entries):
        end = entries[j + 1].instr_index if j + 1 < len(entries) else n
        for i in range(e.instr_index, min(end, n)):
            labels[i] = e.op
    if entries and entries[0].instr_index > 0:
        for i in range(entries[0].instr_index):
            labels[i] = entries[0].op
    return tuple(labels)


def build_profile(npub, target, programs, runs: list[SegmentRun]) -> Profile:
    """The profile of one run (timing or functional) of ``npub``."""
    from npuc.runtime.npub_meta import profile_metadata

    pm = profile_metadata(npub)
    layer_meta, cpu_meta = pm.layers, pm.cpu
    layers: list[LayerProfile] = []
    all_labels = []
    for r in runs:
        if r.kind == "cpu":
            cycles = round(r.cpu_seconds * target.clock_hz)
            ops = cpu_meta[r.index][4] if r.index < len(cpu_meta) else []
            names = "+".join(o[1] for o in ops)
            layers.append(LayerProfile(r.name, f"cpu: {names}", "cpu", r.name, "", cycles, 0, 0, 0,
                                       r.cpu_seconds * HOST_POWER_W * 1e12, 0, 0,
                                       target.peak_macs_per_cycle, target.dram_bytes_per_cycle))
            continue
        layers.extend(_npu_layers(r, npub, target, programs[r.index], layer_meta, all_labels))
    return Profile(npub.metadata.model_name if npub.metadata else "", target, tuple(layers), tuple(runs),
                   tuple(all_labels), tuple(programs), compulsory_bytes(npub, target))


def executed(program, labels: tuple[str, ...]) -> tuple[list, tuple[str, ...]]:
    """The instructions of ``program`` as the simulator runs them (its schedule's order and length),
    and the label of each, from the encoded instructions' ``labels``.  The one place that maps the
    encoded program to the executed stream: the profile, the trace and the debugger use it."""
    program = list(program)
    if has_loops(program):  # one label per dynamic instruction, from the encoded one it repeats
        dynamic, origin = expand(program)
        return dynamic, tuple(labels[o] for o in origin)
    return program, tuple(labels)


def _npu_layers(r: SegmentRun, npub, target, program, layer_meta, all_labels) -> list[LayerProfile]:
    sim = r.sim
    _, _, _, starts, ends = sim.schedule
    labels = program_labels(npub.debug_map[r.index] if npub.debug_map else (), len(program))
    all_labels.append(labels)  # by encoded instruction, as trace events name them
    program, labels = executed(program, labels)
    cycles = attribute_cycles(starts, ends, labels)
    spans: dict[str, list[int]] = {}
    for lab, st, en in zip(labels, starts, ends):
        sp = spans.get(lab)
        if sp is None:
            spans[lab] = [st, en]
        else:
            sp[0], sp[1] = min(sp[0], st), max(sp[1], en)
    acts: dict[str, Actions] = {}
    count: dict[str, int] = {}
    for lab, a in zip(labels, instruction_actions(program, target)):
        acts[lab] = acts[lab] + a if lab in acts else a
        count[lab] = count.get(lab, 0) + 1
    info = {row[0]: row for row in (layer_meta[r.index] if r.index < len(layer_meta) else [])}
    order = list(dict.fromkeys(labels))
    out = []
    static_pj_per_cycle = target.static_energy_pj(1)
    for lab in order:
        a = acts.get(lab, Actions())
        row = info.get(lab, [lab, "", [], "", a.macs, 0])
        breakdown = energy_breakdown(a, target)
        energy = sum(breakdown.values()) + static_pj_per_cycle * cycles.get(lab, 0)
        per_memory = dict(row[6]) if len(row) > 6 else None
        nmem = len(target.memories)
        off_rd, off_wr = off_chip_bytes(a, target)
        out.append(LayerProfile(
            name=lab or "(program)", op="+".join(row[2]), kind=row[1], segment=r.name, source=row[3],
            cycles=cycles.get(lab, 0), macs=int(row[4]) if lab in info else a.macs, dram_bytes=off_rd + off_wr,
            sram_bytes=a.spad_read + a.spad_write + a.acc_read + a.acc_write, energy_pj=energy,
            instructions=count.get(lab, 0), min_dram_bytes=int(row[5]),
            peak_macs_per_cycle=target.peak_macs_per_cycle, dram_bytes_per_cycle=target.dram_bytes_per_cycle,
            dram_read_bytes=off_rd, dram_write_bytes=off_wr, spad_bytes=a.spad_read + a.spad_write,
            acc_bytes=a.acc_read + a.acc_write, array_macs=a.macs,
            memory_read_bytes=(a.memory_read + (0,) * nmem)[:nmem], memory_write_bytes=(a.memory_write + (0,) * nmem)[:nmem],
            memory_energy_pj=tuple(breakdown[m.name] for m in target.memories),
            min_memory_cycles=memory_bound_cycles(target, per_memory) if per_memory else 0,
            span_cycles=spans[lab][1] - spans[lab][0] if lab in spans else 0,
        ))
    return out


# ------------------------------------------------------------------------------------ text


def profile_rows(p: Profile) -> list[list[str]]:
    """Table rows: layer, op, cycles, share, utilization, DRAM, SRAM, energy, bound."""
    total = p.total_cycles or 1
    rows = []
    for layer in p.layers:
        rows.append([
            layer.name, layer.op, f"{layer.cycles:,}", f"{100 * layer.cycles / total:.1f}%",
            f"{100 * layer.utilization:.0f}%" if layer.macs else "", f"{layer.dram_bytes:,}",
            f"{layer.sram_bytes:,}", f"{layer.energy_pj / 1e6:.3f}", layer.bound,
        ])
    return rows


PROFILE_COLUMNS = ("layer", "op", "cycles", "share", "array util", "DRAM B", "SRAM B", "energy uJ", "bound")


def totals_text(p: Profile) -> str:
    t = p.totals()
    return (
        f"total: {p.total_cycles:,} cycles ({p.npu_cycles:,} on the NPU, {p.cpu_seconds * 1e3:.3f} ms on the CPU) "
        f"= {t['latency_ms']:.3f} ms at {p.target.clock.mhz:g} MHz, {t['inferences_per_s']:.1f} inferences/s; "
        f"energy {t['energy_mj']:.3f} mJ per inference, average power {t['average_power_mw']:.1f} mW; "
        f"DRAM {p.dram_bytes:,} bytes; {p.macs:,} MACs, array utilization {100 * p.utilization:.1f}%; "
        f"network lower bound {p.lower_bound_cycles:,} cycles\n" + memory_text(p)
    )


def memory_text(p: Profile) -> str:
    """One line per memory: bytes read and written, energy, bandwidth use, compulsory bytes."""
    lines = []
    for f in p.memory_figures():
        lines.append(f"  {f['memory']} ({f['kind']}, {f['port']}): read {f['read_bytes']:,} B, written {f['write_bytes']:,} B, "
                     f"{f['energy_pj'] / 1e6:.3f} uJ, bandwidth use {100 * f['bandwidth_use']:.1f}%, "
                     f"compulsory {f['compulsory_bytes']:,} B")
    return "\n".join(lines)


def profile_text(p: Profile) -> str:
    """The profile as plain text (one line per layer, then the totals)."""
    rows = [list(PROFILE_COLUMNS)] + profile_rows(p)
    widths = [max(len(r[i]) for r in rows) for i in range(len(PROFILE_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines + [totals_text(p)]) + "\n"
