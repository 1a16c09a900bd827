"""The cost model of the vector and data-movement kernels: a timeline walk of their tile programs.

A :class:`~npuc.kir.tile_program.TileProgram` lists every step a kernel issues, in program order.
Each step is timed by its instruction's own definition (``InstrDef.timing``: busy cycles on its
unit, then latency; the formulas of docs/isa.md) and run on the simulator's own scheduler
(``npuc.runtime.sim.engine.run``, timing only), so that the queues, units and the DRAM port are
arbitrated by the one rule the machine follows:

* a step starts after the previous step of its queue (the load, store and copy queues pipeline: the
  next transfer starts when the previous one has left its port; the execute queues start when
  the previous instruction has completed, except where the definition's ``may_follow`` or
  ``pipelines_after`` lets it start beside or right behind it: LOAD_WEIGHTS beside a MATMUL,
  MATMUL behind MATMUL);
* after every earlier step of another queue that touches the same bytes with one of the two
  writing has completed (what the emitter's tokens enforce: the walk gives each such pair a
  token, the latest one per queue, leaving out those already implied by earlier ones);
* when its unit is free; the DRAM port (shared by loads, stores and copies) goes to the transfer that
  asked for it first, not to the one first in program order.

The estimate is the time the last step completes.  Nothing is counted by hand: a kernel that
issues fewer or cheaper steps is cheaper because its description says so.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, replace
from typing import Any, Iterable

from npuc.isa.enums import Mem, Queue, Unit
from npuc.isa.instr import Instr, build_args, get_def
from npuc.kir.tile_program import DRAM_ADDRESS_FIELDS, LOCAL_ADDRESS_FIELDS, Step, TileProgram
from npuc.memo import on_forget
from npuc.runtime.sim import engine
from npuc.runtime.sim.prepare import Step as MachineStep
from npuc.runtime.sim.prepare import channel, resource, second_port

_NQ = len(Queue)
# the order in which a step looks for the steps it waits on: the execute queues first, whose
# own waits usually imply the transfers' (fewer transfer steps scanned)
_SCAN = tuple(tuple(p for p in (int(Queue.compute), int(Queue.vector), int(Queue.load), int(Queue.store), int(Queue.copy))
                    if p != q) for q in range(_NQ))
_DMA = int(Unit.dma)
_DRAM_FIELDS = tuple(sorted(DRAM_ADDRESS_FIELDS))
_CHANNELS = tuple(tuple(channel(Queue(p), Queue(q)) if p != q else -1 for q in range(_NQ)) for p in range(_NQ))
_NONE = (-1,) * _NQ

Span = namedtuple("Span", "mem addr end writes")  # a step's region as the scheduler reads it


@dataclass(frozen=True)
class Timed:
    """One step placed on the timeline."""

    queue: int
    start: int
    end: int


class _Accesses:
    """The regions one queue's steps touched in one memory, in program order: all of them, and
    the written ones apart (a read conflicts only with those), each with the extent of its list
    (a region outside it conflicts with none)."""

    __slots__ = ("items", "written", "lo", "hi", "wlo", "whi")

    def __init__(self) -> None:
        self.items: list[tuple[int, int, int]] = []  # (lo, hi, program index)
        self.written: list[tuple[int, int, int]] = []
        self.lo = self.wlo = 1 << 62
        self.hi = self.whi = -1

    def add(self, lo: int, hi: int, writes: bool, index: int) -> None:
        item = (lo, hi, index)
        items = self.items
        last = items[-1] if items else None
        same = last is not None and last[0] == lo and last[1] == hi
        if same and (not writes or (self.written and self.written[-1] is last)):
            # the same region as the last one (written as it was): the later step stands for both
            items[-1] = item
            if writes:
                self.written[-1] = item
            return
        items.append(item)
        if lo < self.lo:
            self.lo = lo
        if hi > self.hi:
            self.hi = hi
        if writes:
            self.written.append(item)
            if lo < self.wlo:
                self.wlo = lo
            if hi > self.whi:
                self.whi = hi

    def latest_conflict(self, lo: int, hi: int, writes: bool, after: int) -> int:
        """The program index of the latest step later than ``after`` whose region conflicts
        with [lo, hi) (``writes``: this one writes), or -1."""
        if hi <= self.lo or self.hi <= lo if writes else hi <= self.wlo or self.whi <= lo:
            return -1
        for a, b, index in reversed(self.items if writes else self.written):
            if index <= after:
                break
            if a < hi and lo < b:
                return index
        return -1


def machine_steps(steps: Iterable[Step], target: Any) -> list[MachineStep]:
    """``steps`` as the simulator's scheduler takes them: timed by their definitions, on the
    unit or DMA port they occupy, with a token from each step to the later steps of other queues
    that must wait for it (see the module docstring).  Steps without tokens that issue the same
    instruction share one record, as the simulator's own preparation shares them."""
    accesses: list[dict[Mem, _Accesses]] = [{} for _ in range(_NQ)]  # per queue, per memory: its regions
    implied: list[tuple[int, ...]] = []  # per step: per queue, the latest step complete before it starts
    last_of = [-1] * _NQ  # each queue's latest step
    placed, shapes = _placements(target)
    out: list[MachineStep] = []
    for index, s in enumerate(steps):
        at = placed.get((s.op, s.fields))
        if at is None:
            at = placed[(s.op, s.fields)] = _place(s, target, shapes)
        shape, regions, _, plain = at
        q = shape.queue
        prev = last_of[q]
        done = implied[prev] if prev >= 0 else _NONE
        waits: tuple[int, ...] = ()
        for p in _SCAN[q]:
            floor = done[p]
            if last_of[p] <= floor:  # every step of p so far is complete before this one starts
                continue
            dep = floor
            mems = accesses[p]
            for mem, lo, hi, writes in regions:
                acc = mems.get(mem)
                if acc is None or (hi <= acc.lo or acc.hi <= lo if writes else hi <= acc.wlo or acc.whi <= lo):
                    continue  # outside every region of p there (written, for a read)
                found = acc.latest_conflict(lo, hi, writes, dep)
                if found > dep:
                    dep = found
            if dep > floor:
                c = _CHANNELS[p][q]
                waits += (c,)
                sender = out[dep]
                out[dep] = _with_tokens(sender, sender.waits, sender.signals + (c,))
                done = tuple(max(a, b) for a, b in zip(done, implied[dep]))
                done = done[:p] + (dep,) + done[p + 1:]
        implied.append(done)
        mems = accesses[q]
        for r in regions:
            acc = mems.get(r.mem)
            if acc is None:
                acc = mems[r.mem] = _Accesses()
            acc.add(r.addr, r.end, r.writes, index)
        last_of[q] = index
        out.append(_with_tokens(plain, waits, ()) if waits else plain)
    return out


_PLACED: dict[Any, tuple[dict, dict]] = {}  # size-free target -> ((op, fields) -> placement, shape key -> shape)
_PLACED_KEPT = 1 << 16  # placements kept per target before they are forgotten
_SIZE_FREE: dict[Any, Any] = {}  # target -> its key in _PLACED (_size_free)


def _size_free(target: Any) -> Any:
    """``target`` with a scratchpad of 0 bytes: what a step's placement depends on.  A placement
    (the step's timing, its regions and the unit or DMA port it occupies) reads the target's
    units, bandwidths and memory windows but never how large the scratchpad is, and the cost
    model walks the same steps on many sizes of it (each split of the on-chip plan, the members'
    part of every chain it prices): keyed by the whole target, the four kept here were forgotten
    at nearly every chain."""
    got = _SIZE_FREE.get(target)
    if got is None:
        if len(_SIZE_FREE) >= 1024:
            _SIZE_FREE.clear()
        pad = getattr(target, "scratchpad", None)
        got = _SIZE_FREE[target] = replace(target, scratchpad=replace(pad, size_bytes=0)) if pad is not None else target
    return got


def _placements(target: Any) -> tuple[dict, dict]:
    """The placements (``_place``'s results, by op and fields) and shapes worked out so far for
    ``target``: a pure function of the step and the target less its scratchpad's size
    (:func:`_size_free`), shared by every walk (the programs the cost model compares share most
    of their steps)."""
    key = _size_free(target)
    got = _PLACED.get(key)
    if got is None or len(got[0]) > _PLACED_KEPT:
        if len(_PLACED) >= 4:
            _PLACED.clear()
        got = _PLACED[key] = ({}, {})
    return got


@on_forget
def clear_memo() -> None:
    """Forget the placements and walks memoised so far (a cold start, as a fresh process's)."""
    global _walked
    _PLACED.clear()
    _SIZE_FREE.clear()
    _WALKS.clear()
    _walked = 0


def _place(s: Step, target: Any, shapes: dict[tuple, "_Shape"]) -> tuple["_Shape", tuple[Span, ...], int, MachineStep]:
    """The step's shape (shared by the steps that differ from it only in addresses, in the same
    memories), its regions at its addresses, the resource it occupies, and its record for the
    scheduler without tokens."""
    fields = dict(s.fields)
    key = s.shape_key()
    sides = [f for f in _DRAM_FIELDS if f in fields]
    if sides:  # a transfer's time depends on the memory its DRAM side (a copy's: each side) is in
        windows = [target.window_at(fields[f]) for f in sides]
        key = (key, tuple(w.index if w is not None else -1 for w in windows))
    shape = shapes.get(key)
    if shape is None:
        shape, reusable = _shape(s, target)
        if reusable:
            shapes[key] = shape
    spans = []
    for mem, f, off, span, w in shape.regions:
        lo = fields[f] + off if f else off
        spans.append(Span(mem, lo, lo + span, w))
    regions = tuple(spans)
    d = shape.defn
    res = shape.resource if shape.unit != _DMA else resource(d, regions, target)
    also = second_port(d, d.regions(build_args(d, fields)), target) if d.queue is Queue.copy else None
    plain = MachineStep(shape.instr, d, regions, shape.queue, shape.unit, res, shape.busy, shape.latency, (), (), (),
                        d.may_follow, d.pipelines_after, also)
    return shape, regions, res, plain


def _with_tokens(m: MachineStep, waits: tuple[int, ...], signals: tuple[int, ...]) -> MachineStep:
    return MachineStep(m.instr, m.defn, m.regions, m.queue, m.unit, m.resource, m.busy, m.latency, waits, signals,
                       m.actions, m.may_follow, m.pipelines_after, m.also)


def timeline(steps: Iterable[Step], target: Any) -> list[Timed]:
    """Every step of ``steps`` placed on the queue timeline (see the module docstring)."""
    prepared = machine_steps(steps, target)
    sched = engine.run(prepared, None)
    return [Timed(s.queue, a, b) for s, a, b in zip(prepared, sched.starts, sched.ends)]


_WALKS: dict[tuple, int] = {}  # (target, steps) -> cycles
_WALKS_KEPT = 1 << 20  # steps of the programs kept before they are forgotten
_walked = 0


def walk_cycles(steps: Iterable[Step], target: Any) -> int:
    """When the last of ``steps`` completes on the timeline (0 for none).  Memoised per target
    and steps: the cascade stage, the depthwise choice and the memory plan price many
    schedules that come out step for step the same."""
    global _walked
    steps = tuple(steps)
    key = (target, steps)
    got = _WALKS.get(key)
    if got is None:
        if _walked + len(steps) > _WALKS_KEPT:
            _WALKS.clear()
            _walked = 0
        got = _WALKS[key] = max(engine.run(machine_steps(steps, target), None).ends, default=0)
        _walked += len(steps)
    return got


@dataclass(frozen=True)
class _Shape:
    """What a step's definition says apart from its addresses: its timing, and each region as
    (memory, the address field it starts at or None, offset from it (or the absolute address),
    extent, writes); ``instr`` the first such step, for the scheduler, which reads only its op."""

    defn: Any
    instr: Instr
    queue: int
    unit: int
    resource: int  # the unit it occupies (a DMA's port depends on its address: worked out per step)
    busy: int
    latency: int
    regions: tuple[tuple[Mem, str | None, int, int, bool], ...]


def _shape(s: Step, target: Any) -> tuple[_Shape, bool]:
    """The step's shape, and whether steps with the same fields but other addresses share it
    (every region starts at exactly one address field; else it is worked out per step)."""
    d = get_def(s.op)
    fields = s.kwargs()
    args = build_args(d, fields)
    regions = d.regions(args)
    busy, lat = d.timing(args, target, regions)
    addr_fields = [(k, v) for k, v in fields.items() if k in LOCAL_ADDRESS_FIELDS or k in DRAM_ADDRESS_FIELDS]
    out, reusable = [], True
    for r in regions:
        at = [k for k, v in addr_fields if v == r.addr]
        if len(at) == 1:
            out.append((r.mem, at[0], 0, r.end - r.addr, r.writes))
        else:  # no single field to follow: this step's own absolute region, not shared
            reusable = False
            out.append((r.mem, None, r.addr, r.end - r.addr, r.writes))
    return _Shape(d, Instr(s.op, args), int(d.queue), int(d.unit), int(d.unit), busy, lat, tuple(out)), reusable


def program_cycles(prog: TileProgram, target: Any) -> int:
    """Estimated cycles of ``prog`` on ``target``: when its last step completes."""
    return walk_cycles(prog.steps, target)
