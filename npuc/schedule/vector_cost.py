"""The cost model of the vector and data-movement kernels: a timeline walk of their tile programs.

A :class:`~npuc.kir.tile_program.TileProgram` lists every step a kernel issues, in program order.
Each step is timed by its instruction's own definition (``InstrDef.timing``: busy cycles on its
unit, then latency; the formulas of docs/isa.md) and run on the simulator's own scheduler
(``npuc.runtime.sim.engine.run``, timing only), so that the queues, units and the DRAM port are
arbitrated by the one rule the machine follows:

* a step starts after the previous step of its queue (the load and store queues pipeline: the
  next transfer starts when the previous one has left its port; the execute queues start when
  the previous instruction has completed, except where the definition's ``may_follow`` or
  ``pipelines_after`` lets it start beside or right behind it: LOAD_WEIGHTS beside a MATMUL,
  MATMUL behind MATMUL);
* after every earlier step of another queue that touches the same bytes with one of the two
  writing has completed (what the emitter's tokens enforce: the walk gives each such pair a
  token, the latest one per queue, leaving out those already implied by earlier ones);
* when its unit is free; the DRAM port (shared by loads and stores) goes to the transfer that
  asked for it first, not to the one first in program order.

The estimate is the time the last step completes.  Nothing is counted by hand: a kernel that
issues fewer or cheaper steps is cheaper because its description says so.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Iterable

from npuc.isa.enums import Mem, Queue, Unit
from npuc.isa.instr import Instr, build_args, get_def
from npuc.kir.tile_program import DRAM_ADDRESS_FIELDS, LOCAL_ADDRESS_FIELDS, Step, TileProgram
from npuc.runtime.sim import engine
from npuc.runtime.sim.prepare import Step as MachineStep
from npuc.runtime.sim.prepare import channel, resource

_NQ = len(Queue)
# the order in which a step looks for the steps it waits on: the execute queues first, whose
# own waits usually imply the transfers' (fewer transfer steps scanned)
_SCAN = (int(Queue.compute), int(Queue.vector), int(Queue.load), int(Queue.store))
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
    """The regions one queue's steps touched in one memory, in program order, with the extent of
    all of them and of the written ones (a region outside it conflicts with none)."""

    __slots__ = ("items", "lo", "hi", "wlo", "whi")

    def __init__(self) -> None:
        self.items: list[tuple[int, int, bool, int]] = []  # (lo, hi, writes, program index)
        self.lo = self.wlo = 1 << 62
        self.hi = self.whi = -1

    def add(self, lo: int, hi: int, writes: bool, index: int) -> None:
        self.items.append((lo, hi, writes, index))
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        if writes:
            self.wlo, self.whi = min(self.wlo, lo), max(self.whi, hi)

    def latest_conflict(self, lo: int, hi: int, writes: bool, after: int) -> int:
        """The program index of the latest step later than ``after`` whose region conflicts
        with [lo, hi) (``writes``: this one writes), or -1."""
        if writes:
            if hi <= self.lo or self.hi <= lo:
                return -1
        elif hi <= self.wlo or self.whi <= lo:
            return -1
        for a, b, w, index in reversed(self.items):
            if index <= after:
                break
            if (w or writes) and a < hi and lo < b:
                return index
        return -1


def machine_steps(steps: Iterable[Step], target: Any) -> list[MachineStep]:
    """``steps`` as the simulator's scheduler takes them: timed by their definitions, on the
    unit or DMA port they occupy, with a token from each step to the later steps of other queues
    that must wait for it (see the module docstring)."""
    accesses: dict[tuple[int, int], _Accesses] = {}  # (mem, queue) -> regions
    implied: list[tuple[int, ...]] = []  # per step: per queue, the latest step complete before it starts
    last_of = [-1] * _NQ  # each queue's latest step
    shapes: dict[tuple, _Shape] = {}
    built: list[list] = []
    for index, s in enumerate(steps):
        key = s.shape_key()
        shape = shapes.get(key)
        if shape is None:
            shape, reusable = _shape(s, target)
            if reusable:
                shapes[key] = shape
        fields = dict(s.fields)
        regions = tuple(Span(mem, lo, lo + span, w) for mem, lo, span, w in
                        ((mem, (fields[f] if f else 0) + off, span, w) for mem, f, off, span, w in shape.regions))
        q = shape.queue
        prev = last_of[q]
        done = list(implied[prev]) if prev >= 0 else list(_NONE)
        waits = []
        for p in _SCAN:
            if p == q:
                continue
            dep = -1
            for r in regions:
                acc = accesses.get((r.mem, p))
                if acc is not None:
                    found = acc.latest_conflict(r.addr, r.end, r.writes, max(dep, done[p]))
                    if found > dep:
                        dep = found
            if dep > done[p]:
                waits.append((p, dep))
                for u, k in enumerate(implied[dep]):
                    if k > done[u]:
                        done[u] = k
                done[p] = dep
        implied.append(tuple(done))
        for r in regions:
            acc = accesses.get((r.mem, q))
            if acc is None:
                acc = accesses[(r.mem, q)] = _Accesses()
            acc.add(r.addr, r.end, r.writes, index)
        last_of[q] = index
        res = shape.resource if shape.unit != int(Unit.dma) else resource(shape.defn, regions, target)
        built.append([shape, regions, res, waits, []])
        for p, dep in waits:
            built[dep][4].append(_CHANNELS[p][q])
    out = []
    for shape, regions, res, waits, signals in built:
        q = shape.queue
        out.append(MachineStep(shape.instr, shape.defn, regions, q, shape.unit, res, shape.busy, shape.latency,
                               tuple(sorted(_CHANNELS[p][q] for p, _ in waits)), tuple(sorted(signals)), (),
                               shape.defn.may_follow, shape.defn.pipelines_after))
    return out


def timeline(steps: Iterable[Step], target: Any) -> list[Timed]:
    """Every step of ``steps`` placed on the four-queue timeline (see the module docstring)."""
    prepared = machine_steps(steps, target)
    sched = engine.run(prepared, None)
    return [Timed(s.queue, a, b) for s, a, b in zip(prepared, sched.starts, sched.ends)]


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
    return max((t.end for t in timeline(prog.steps, target)), default=0)
