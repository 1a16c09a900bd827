"""Which activations stay in the scratchpad across kernels, and how much of it they take.

The memory plan (``npuc.codegen.memory_plan``) asks :func:`choose_on_chip` before it places the
activations.  A tensor kept on chip takes bytes at the top of the ``S``-byte scratchpad from its
producer to its last consumer; every kernel plans in what the tensors live at its step leave it
(its *split*: the smallest candidate that holds them).  The choice is the cost model's, over the
whole network:

1. **What each kernel moves.**  For every candidate split (none, then 1/8, 1/4, 3/8, 1/2, 5/8,
   3/4 of the scratchpad in whole bank rows), every kernel of every NPU segment is planned on
   ``S - split`` bytes by its own implementation and emitted into a counter
   (:func:`kernel_traffic`): its estimated cycles, and the bytes each of its DMAs moves of each
   tensor (whole bursts of its memory, as the memory charges them), loads and stores apart.  A kernel whose plan at a smaller split already fits keeps it
   (the best tiling of a larger scratchpad that fits a smaller one is the best there too); from
   the first split at which a kernel cannot be planned (a fused chain whose buffers need the
   scratchpad), it gives up no more.
2. **What keeping a tensor on chip saves.**  A candidate is an activation written and read only
   by the kernels of one NPU segment (not a model input or output, not a value a CPU segment
   reads), moved only between the DMA and the scratchpad.  Kept on chip, each of its DMA bytes
   becomes a scratchpad copy (``npuc.codegen.local_memory``): a load saves the memory's read
   energy less a scratchpad read, a store the memory's write energy less a scratchpad write,
   each less the copy's lane-ops; the copies' vector cycles are charged at static power (the DMA
   cycles they free are not credited: a kernel may be compute-bound).
3. **Which tensors.**  For each largest split ``R``, candidates are taken by saving per
   byte-step (their size times their lifetime in steps), each at the lowest offset from the top
   that overlaps no tensor already taken whose lifetime meets its own, within ``R`` and within
   what every kernel of its lifetime can give up; a tensor that fits nowhere stays in its memory.
4. **Which ``R``.**  The one of least estimated network energy: every kernel's DMA bytes at its
   memories' energy per byte and its cycles at static power, each at its own split, less the
   savings.  Keeping nothing is a candidate too, so the plan never costs more than the estimate
   without it.
5. **Not slower** (``cycles_not_worse``, ``resident="not-slower"``): the choices of the splits are
   taken in order of estimated energy (the first ``CHECKED_SPLITS``); every kernel that reaches
   a kept tensor is recorded through the scratchpad copies it will issue and walked
   (:func:`kept_cycles`), every other kernel keeps its estimate at its split, and the tensors
   live at the step of a kernel slower than with no split at all are given up, until none is.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import Any

from npuc.codegen.kernel import get_kernel
from npuc.codegen.memory_plan import ALIGN, align, lifetimes, relocate_kernel
from npuc.errors import CompileError
from npuc.isa.enums import Mem
from npuc.isa.instr import build_args, get_def
from npuc.kir.kernel import Kernel
from npuc.kir.program import ACTIVATION, CONSTANT, LoweredModel, NpuSegment

SPLITS = ((1, 8), (1, 4), (3, 8), (1, 2), (5, 8), (3, 4))  # fractions of the scratchpad a split may take


@dataclass(frozen=True)
class Traffic:
    """What one kernel planned on a part of the scratchpad moves and takes."""

    cycles: int
    spad_bytes: int                                         # what its plan takes
    loads: dict[str, int] = field(default_factory=dict)    # buffer -> bytes the DMA loads of it
    stores: dict[str, int] = field(default_factory=dict)   # buffer -> bytes the DMA stores to it
    elements: dict[str, int] = field(default_factory=dict)  # buffer -> elements moved (copies' lane-ops)
    memory_bytes: dict[str, tuple[int, int]] = field(default_factory=dict)  # memory -> (read, written)
    not_local: frozenset[str] = frozenset()                 # buffers it moves to the accumulator
    planned_on: int = 0                                     # the scratchpad bytes it was planned on


@dataclass(frozen=True)
class OnChip:
    """The choice: ``resident_bytes`` at the top of the scratchpad, each kept tensor's offset in
    them (from the split's start), and the estimates behind it (pJ)."""

    resident_bytes: int
    offsets: dict[str, int]
    saved_pj: dict[str, float]
    energy_pj: float
    baseline_pj: float
    considered: tuple[tuple[int, float], ...]  # (split bytes, estimated energy) of every split tried
    kernel_split: tuple[int, ...] = ()         # per NPU kernel in program order: the bytes it leaves


class _Counter:
    """An emitter that only counts: the DMAs' bytes per tensor (ranges of the synthetic placement).

    ``streamed``: the constants whose byte-wise loads into the scratchpad the program reads as
    streams (a target with a weight decoder: ``npuc.codegen.weight_compression`` stores each
    block's bytes as one contiguous run, compressed or raw), counted as that run in whole
    bursts, not as the strided runs of the raw layout (as ``npuc.schedule.transfers.as_streams``
    prices them).  ``moves_only``: the array engine gives it its transfers without the array's
    instructions."""

    moves_only = True

    def __init__(self, target: Any, ranges: list[tuple[int, int, str]], bursts: dict[str, int],
                 streamed: frozenset[str] = frozenset()) -> None:
        self.target = target
        self.ranges = ranges
        self.bursts = bursts
        self.streamed = streamed
        self.starts = [r[0] for r in ranges]
        self.n = 0
        self.loads: dict[str, int] = {}
        self.stores: dict[str, int] = {}
        self.elements: dict[str, int] = {}
        self.not_local: set[str] = set()

    def source(self, label: str):
        from contextlib import nullcontext

        return nullcontext()

    def __len__(self) -> int:
        return self.n

    def _name(self, addr: int) -> str:
        """The tensor whose synthetic range holds ``addr`` ("?" when none does)."""
        i = bisect.bisect_right(self.starts, addr) - 1
        return self.ranges[i][2] if i >= 0 and addr < self.ranges[i][1] else "?"

    def emit(self, op: str, /, **fields: Any) -> int:
        self.n += 1
        if op == "DMA_COPY":  # memory to memory: a read of its source, a write of its destination
            d = get_def(op)
            for r in d.regions(build_args(d, fields)):
                name = self._name(r.addr)
                table = self.stores if r.writes else self.loads
                table[name] = table.get(name, 0) + r.burst_bytes(self.bursts.get(name, 1))
                self.elements[name] = self.elements.get(name, 0) + r.count
            return self.n - 1
        if op in ("DMA_LOAD", "DMA_STORE"):
            from npuc.codegen.local_memory import dma_bytes

            mv = dma_bytes(op, fields)
            name = self._name(mv.addr)
            d = get_def(op)
            dram = next(r for r in d.regions(build_args(d, fields)) if r.mem is Mem.dram)
            burst = self.bursts.get(name, 1)
            if op == "DMA_LOAD" and name in self.streamed and mv.esize == 1 and mv.on_spad:
                nbytes = -(-mv.nbytes // burst) * burst  # one contiguous run (a stream is never larger)
            else:
                nbytes = dram.burst_bytes(burst)  # what the memory moves: whole bursts
            table = self.loads if op == "DMA_LOAD" else self.stores
            table[name] = table.get(name, 0) + nbytes
            self.elements[name] = self.elements.get(name, 0) + mv.nbytes // mv.esize
            if not mv.on_spad:
                self.not_local.add(name)
        return self.n - 1


def split_sizes(target: Any) -> tuple[int, ...]:
    """The candidate splits in bytes: multiples of the scratchpad's bank rows, 0 first."""
    s = target.scratchpad
    row = s.banks * s.bank_width_bytes
    out = [0]
    for num, den in SPLITS:
        r = s.size_bytes * num // den // row * row
        if 0 < r < s.size_bytes and r not in out:
            out.append(r)
    return tuple(out)


def _synthetic(k: Kernel, m: LoweredModel, buffers: dict) -> tuple[dict[str, int], dict[str, str]]:
    """Disjoint addresses for the buffers ``k`` touches, each in the memory that would hold it
    (constants in the weight memory, the rest in the fastest memory that holds activations and
    has room), so that a DMA's address says which tensor (and memory) it moves."""
    t = m.target
    offs: dict[str, int] = {}
    mem_of: dict[str, str] = {}
    tops: dict[str, int] = {}
    for ten in k.tensors():
        if ten.name in offs:
            continue
        b = buffers[ten.name]
        kinds = [t.weight_memory] if b.kind == CONSTANT else list(t.memories_holding("activations"))
        for mem in kinds:
            top = tops.get(mem.name, 0)
            if top + align(b.nbytes) <= mem.size_bytes or mem is kinds[-1]:
                offs[ten.name] = t.window_of(mem.name).base + top
                mem_of[ten.name] = mem.name
                tops[mem.name] = top + align(b.nbytes)
                break
    return offs, mem_of


def kernel_traffic(k: Kernel, m: LoweredModel, spad_bytes: int, buffers: dict) -> Traffic:
    """Plan ``k`` on ``spad_bytes`` of scratchpad and count what it moves (CompileError when it
    cannot be planned there)."""
    from npuc.codegen.kernels.fused_chain import with_scratchpad

    t = m.target if spad_bytes == m.target.scratchpad.size_bytes else with_scratchpad(m.target, spad_bytes)
    impl = get_kernel(k.kind)
    offs, mem_of = _synthetic(k, m, buffers)
    placed = relocate_kernel(k, offs)
    plan = impl.plan(placed, t)
    ranges = sorted((offs[n], offs[n] + buffers[n].nbytes, n) for n in offs)
    streamed = frozenset(n for n in offs if buffers[n].kind == CONSTANT) if m.target.weight_decoder is not None else frozenset()
    c = _Counter(t, ranges, {n: m.target.memory(mem).burst_bytes for n, mem in mem_of.items()}, streamed)
    impl.emit(placed, plan, c)
    per_mem: dict[str, list[int]] = {}
    for table, side in ((c.loads, 0), (c.stores, 1)):
        for name, n in table.items():
            mem = mem_of.get(name, m.target.activation_memory.name)
            per_mem.setdefault(mem, [0, 0])[side] += n
    return Traffic(plan.est_cycles, plan.spad_bytes, c.loads, c.stores, c.elements,
                   {k_: (v[0], v[1]) for k_, v in per_mem.items()}, frozenset(c.not_local), spad_bytes)


def candidates(m: LoweredModel, life: dict[str, tuple[int, int]]) -> list:
    """Activations written and read only within one NPU segment (not homes, not IO)."""
    homes = {h.buffer for h in m.homes}
    spans: list[tuple[int, int]] = []
    step = 0
    for s in m.segments:
        n = len(s.kernels) if isinstance(s, NpuSegment) else 1
        if isinstance(s, NpuSegment):
            spans.append((step, step + n - 1))
        step += n
    out = []
    for b in m.buffers:
        if b.kind != ACTIVATION or b.name not in life or b.name in homes:
            continue
        first, last = life[b.name]
        if any(a <= first and last <= z for a, z in spans):
            out.append(b)
    return out


def _network_energy(m: LoweredModel, traffic: list[Traffic]) -> float:
    t = m.target
    e = 0.0
    for tr in traffic:
        for mem, (rd, wr) in tr.memory_bytes.items():
            cfg = t.memory(mem)
            e += rd * cfg.read_pj_per_byte + wr * cfg.write_pj_per_byte
        e += t.static_energy_pj(tr.cycles)
    return e


def _savings(m: LoweredModel, traffic: list[Traffic], cands: list, buffers: dict) -> dict[str, float]:
    """What keeping each candidate on chip saves (pJ; <= 0: not worth it or not possible)."""
    t = m.target
    e = t.energy
    lanes = t.vector.lanes
    names = {b.name for b in cands}
    loads: dict[str, int] = {}
    stores: dict[str, int] = {}
    elems: dict[str, int] = {}
    bad: set[str] = set()
    for tr in traffic:
        bad |= tr.not_local
        for table, acc in ((tr.loads, loads), (tr.stores, stores), (tr.elements, elems)):
            for n, v in table.items():
                if n in names:
                    acc[n] = acc.get(n, 0) + v
    out = {}
    for b in cands:
        if b.name in bad or b.name not in elems:
            continue
        mem = _home_memory(m, b)
        ld, st, el = loads.get(b.name, 0), stores.get(b.name, 0), elems[b.name]
        saved = ld * (mem.read_pj_per_byte - e.spad_read_pj_per_byte) + st * (mem.write_pj_per_byte - e.spad_write_pj_per_byte)
        copy_cycles = max(-(-el // lanes), -(-2 * (ld + st) // t.spad_bytes_per_cycle))
        out[b.name] = saved - el * e.vector_lane_op_pj - t.static_energy_pj(copy_cycles)
    return out


def _home_memory(m: LoweredModel, b) -> Any:
    """The memory an activation goes to when not kept on chip (the fastest that holds
    activations and could hold it)."""
    mems = m.target.memories_holding("activations")
    return next((x for x in mems if align(b.nbytes) <= x.size_bytes), mems[-1])


def kernel_steps(m: LoweredModel) -> list[int]:
    """The step (as :func:`~npuc.codegen.memory_plan.lifetimes` counts them) of every NPU
    kernel, in program order."""
    out = []
    step = 0
    for s in m.segments:
        if isinstance(s, NpuSegment):
            out += range(step, step + len(s.kernels))
            step += len(s.kernels)
        else:
            step += 1
    return out


def _traffic_table(m: LoweredModel, kernels: list[Kernel], splits: tuple[int, ...], buffers: dict,
                   needed: list[bool] | None = None) -> list[list[Traffic | None]]:
    """table[i][j]: kernel i planned on the scratchpad less split j (None: it cannot be, nor at
    any larger split); a plan that fits a larger split is kept for it.  A kernel not ``needed``
    at any split but 0 (no candidate for the scratchpad is live at its step: nothing is kept
    beside it, so only its split-0 plan is ever read) gets that plan in every column."""
    size = m.target.scratchpad.size_bytes
    table = []
    for i, k in enumerate(kernels):
        row: list[Traffic | None] = []
        if needed is not None and not needed[i]:
            table.append([kernel_traffic(k, m, size, buffers)] * len(splits))
            continue
        for r in splits:
            prev = row[-1] if row else None
            if row and prev is None:
                row.append(None)
            elif prev is not None and prev.spad_bytes <= size - r:
                row.append(prev)
            else:
                try:
                    row.append(kernel_traffic(k, m, size - r, buffers))
                except CompileError:
                    if not row:
                        raise
                    row.append(None)
        table.append(row)
    return table


def _pack_under(order: list, life: dict[str, tuple[int, int]], room: int, cap: dict[int, int]) -> dict[str, int]:
    """Offsets from the top of the scratchpad in ``room`` bytes, taking buffers in the order
    given, lowest free offset each, a buffer's end never past ``cap[step]`` at any step of its
    lifetime (what the kernel of that step can give up)."""
    done: list[tuple[int, int, int, int]] = []
    offsets: dict[str, int] = {}
    for b in order:
        first, last = life[b.name]
        size = align(b.nbytes)
        limit = min([room] + [cap[s] for s in range(first, last + 1) if s in cap])
        busy = sorted((o, e) for o, e, f, l in done if f <= last and first <= l)
        at = 0
        for o, e in busy:
            if at + size <= o:
                break
            at = max(at, e)
        if at + size > limit:
            continue
        offsets[b.name] = at
        done.append((at, at + size, first, last))
    return offsets


def kernel_splits(offsets: dict[str, int], life: dict[str, tuple[int, int]], buffers: dict, steps: list[int],
                  splits: tuple[int, ...]) -> list[int]:
    """Per NPU kernel, the scratchpad bytes it leaves to the tensors kept on chip: the smallest
    split that holds every one live at its step."""
    out = []
    for st in steps:
        top = max((offsets[n] + align(buffers[n].nbytes) for n in offsets if life[n][0] <= st <= life[n][1]), default=0)
        out.append(next(r for r in splits if r >= top))
    return out


def kept_cycles(k: Kernel, m: LoweredModel, spad_bytes: int, buffers: dict, kept: dict[str, int]) -> int:
    """Cycles of ``k`` planned on ``spad_bytes`` of scratchpad with the tensors ``kept`` (name ->
    scratchpad address) in the scratchpad: its emission recorded through the
    :class:`~npuc.codegen.local_memory.LocalEmitter` the code generator gives it (their DMAs
    become scratchpad copies) and walked on the queue timeline, as every tile program's
    estimate is."""
    from npuc.codegen.kernels.fused_chain import kernel_steps, with_scratchpad
    from npuc.codegen.local_memory import RESIDENT_BASE
    from npuc.schedule.vector_cost import walk_cycles

    t = m.target if spad_bytes == m.target.scratchpad.size_bytes else with_scratchpad(m.target, spad_bytes)
    offs, _ = _synthetic(k, m, buffers)
    offs.update({n: RESIDENT_BASE + a for n, a in kept.items() if n in offs})
    steps = kernel_steps(relocate_kernel(k, offs), t, through_on_chip=True)
    return walk_cycles(steps, t)


def _slower_kernels(m: LoweredModel, kernels: list[Kernel], traffic: list[Traffic], base: list[Traffic],
                    offsets: dict[str, int], buffers: dict, memo: dict) -> list[int]:
    """The kernels (indices) that a choice makes slower than they are without any tensor kept on
    chip: each at its split, walked with the kept tensors it touches in the scratchpad (``memo``:
    the walks already done, by kernel, split and kept tensors)."""
    size = m.target.scratchpad.size_bytes
    addr = {n: size - o - align(buffers[n].nbytes) for n, o in offsets.items()}
    out = []
    for i, (k, tr, b0) in enumerate(zip(kernels, traffic, base)):
        mine = {t.name: addr[t.name] for t in k.tensors() if t.name in addr}
        if mine:
            key = (i, tr.planned_on, tuple(sorted(mine.items())))
            if key not in memo:
                memo[key] = kept_cycles(k, m, tr.planned_on, buffers, mine)
            cycles = memo[key]
        else:
            cycles = tr.cycles
        if cycles > b0.cycles:
            out.append(i)
    return out


NOT_SLOWER = "not-slower"  # fuse_layers= / resident=: only what the checked cost model finds takes no cycles
CHECKED_SPLITS = 2  # with cycles_not_worse: the splits of least energy checked for cycles, in order


def choose_on_chip(m: LoweredModel, cycles_not_worse: bool = False) -> OnChip:
    """The split and the tensors kept on chip (module docstring); with ``cycles_not_worse`` only
    a choice under which no kernel is slower than without it (each kernel that reaches a kept
    tensor walked with its scratchpad copies, :func:`kept_cycles`): the splits' choices are taken
    in order of estimated energy (the first ``CHECKED_SPLITS`` of them), the tensors a slower
    kernel lives beside given up until none is, and the first choice left with a tensor wins."""
    life = lifetimes(m)
    buffers = {b.name: b for b in m.buffers}
    cands = candidates(m, life)
    kernels = [lk.kernel for s in m.segments if isinstance(s, NpuSegment) for lk in s.kernels]
    steps = kernel_steps(m)
    splits = split_sizes(m.target)
    # only a kernel beside a candidate is ever read at a split but 0 (by _pack_under's caps, the
    # savings of the tensors it touches, and the energy and cycles at the splits of a choice)
    needed = [any(life[b.name][0] <= st <= life[b.name][1] for b in cands) for st in steps]
    table = _traffic_table(m, kernels, splits, buffers, needed)
    baseline = _network_energy(m, [row[0] for row in table])
    considered = [(0, baseline)]
    choices = []
    for j, r in enumerate(splits):
        if not r:
            continue
        cap = {}
        for st, row in zip(steps, table):
            cap[st] = max(splits[i] for i in range(j + 1) if row[i] is not None)
        at_r = [row[max(i for i in range(j + 1) if row[i] is not None)] for row in table]
        s = _savings(m, at_r, cands, buffers)
        worth = [b for b in cands if s.get(b.name, 0.0) > 0]
        worth.sort(key=lambda b: (-s[b.name] / (align(b.nbytes) * (life[b.name][1] - life[b.name][0] + 1)), b.name))
        choice = _choice(m, table, splits, buffers, life, steps, _pack_under(worth, life, r, cap), baseline)
        if choice is not None:
            considered.append((r, choice.energy_pj))
            choices.append((choice.energy_pj, r, worth, cap))
    best = OnChip(0, {}, {}, baseline, baseline, (), ())
    memo: dict = {}
    choices.sort(key=lambda c: (c[0], c[1]))
    if not cycles_not_worse:
        choices = choices[:1]
    for energy, r, worth, cap in choices[:CHECKED_SPLITS]:
        offsets = _pack_under(worth, life, r, cap)
        given_up: set[str] = set()
        while cycles_not_worse and offsets:
            per_kernel = kernel_splits(offsets, life, buffers, steps, splits)
            traffic = [row[splits.index(x)] for row, x in zip(table, per_kernel)]
            slow = _slower_kernels(m, kernels, traffic, [row[0] for row in table], offsets, buffers, memo)
            if not slow:
                break
            given_up |= {n for i in slow for n in offsets if life[n][0] <= steps[i] <= life[n][1]}
            offsets = _pack_under([b for b in worth if b.name not in given_up], life, r, cap)
        choice = _choice(m, table, splits, buffers, life, steps, offsets, baseline)
        if choice is not None and choice.energy_pj < best.energy_pj:
            best = choice
            break
    return replace(best, considered=tuple(considered))


def _choice(m: LoweredModel, table, splits, buffers, life, steps, offsets: dict[str, int], baseline: float
            ) -> OnChip | None:
    """The tensors at ``offsets`` kept on chip with their estimated energy, None when none is."""
    if not offsets:
        return None
    per_kernel = kernel_splits(offsets, life, buffers, steps, splits)
    traffic = [row[splits.index(x)] for row, x in zip(table, per_kernel)]
    saved = _savings(m, traffic, [buffers[n] for n in offsets], buffers)
    saved = {n: saved.get(n, 0.0) for n in offsets}
    energy = _network_energy(m, traffic) - sum(saved.values())
    return OnChip(max(per_kernel), offsets, saved, energy, baseline, (), tuple(per_kernel))


__all__ = ["ALIGN", "OnChip", "Traffic", "choose_on_chip", "kernel_traffic", "split_sizes"]
