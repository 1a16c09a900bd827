"""The cost model of the vector and data-movement kernels: a timeline walk of their tile programs.

A :class:`~npuc.kir.tile_program.TileProgram` lists every step a kernel issues, in program order.
Each step is timed by its instruction's own definition (``InstrDef.timing``: busy cycles on its
unit, then latency; the formulas of docs/isa.md) and placed on a four-queue timeline the way the
machine runs it:

* a step starts after the previous step of its queue (the load and store queues pipeline: the
  next transfer starts when the previous one has left the DRAM port; the execute queues start
  when the previous instruction has completed, except where the definition's ``may_follow`` or
  ``pipelines_after`` lets it start beside or right behind it: LOAD_WEIGHTS beside a MATMUL,
  MATMUL behind MATMUL);
* after every earlier step of another queue that touches the same bytes with one of the two
  writing (what the emitter's tokens enforce), has completed;
* when its unit is free: the vector unit in program order; the DRAM port, shared by loads and
  stores, in the first gap long enough from the moment the step is ready (the simulator grants
  the port to whichever queue is ready first).

The estimate is the time the last step completes.  Nothing is counted by hand: a kernel that
issues fewer or cheaper steps is cheaper because its description says so.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Iterable

from npuc.isa.enums import Queue, Unit
from npuc.isa.instr import build_args, get_def
from npuc.kir.tile_program import DRAM_ADDRESS_FIELDS, LOCAL_ADDRESS_FIELDS, Step, TileProgram

_NQ = len(Queue)
_EXECUTES = tuple(q.executes for q in Queue)
_DMA = int(Unit.dma)


@dataclass(frozen=True)
class Timed:
    """One step placed on the timeline."""

    queue: int
    start: int
    end: int


class _Port:
    """Busy intervals of the DRAM port; a transfer takes the first gap that fits."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def place(self, t: int, busy: int) -> int:
        i = max(0, bisect_right(self.starts, t) - 1)
        while i < len(self.starts):
            if self.ends[i] <= t:
                i += 1
                continue
            if self.starts[i] >= t + busy:
                break
            t = self.ends[i]
            i += 1
        self.starts.insert(i, t)
        self.ends.insert(i, t + busy)
        return t


def timeline(steps: Iterable[Step], target: Any) -> list[Timed]:
    """Every step of ``steps`` placed on the four-queue timeline (see the module docstring)."""
    qfree = [0] * _NQ
    last: list[tuple[str, int, int, tuple] | None] = [None] * _NQ  # execute queues: (op, start, own end, regions)
    ufree = [0] * len(Unit)
    port = _Port()
    accesses: dict[tuple[int, int], list[tuple[int, int, bool, int]]] = {}  # (mem, queue) -> (lo, hi, writes, end)
    out: list[Timed] = []
    shapes: dict[tuple, _Shape] = {}
    for s in steps:
        key = s.shape_key()
        shape = shapes.get(key)
        if shape is None:
            shape, reusable = _shape(s, target)
            if reusable:
                shapes[key] = shape
        d, busy, lat = shape.defn, shape.busy, shape.latency
        fields = dict(s.fields)
        regions = tuple((mem, lo, lo + span, w) for mem, lo, span, w in
                        ((mem, (fields[f] if f else 0) + off, span, w) for mem, f, off, span, w in shape.regions))
        q, unit = int(d.queue), int(d.unit)
        t = qfree[q]
        prev = last[q]
        if prev is not None and prev[0] in d.may_follow and not _conflict(prev[3], regions):
            t = prev[1]  # starts beside the previous one (the array's second weight buffer)
        elif prev is not None and prev[0] in d.pipelines_after:
            t = prev[2]  # streams in as soon as the previous one's own work is done
        for mem, rlo, rhi, rw in regions:
            for p in range(_NQ):
                if p == q:
                    continue
                # a queue's steps complete in order: the latest conflicting one is the one to wait
                # for, and the scan stops at the first step that completes before t
                for lo, hi, w, end in reversed(accesses.get((mem, p), ())):
                    if end <= t:
                        break
                    if (w or rw) and lo < rhi and rlo < hi:
                        t = end
                        break
        if unit == _DMA:
            t = port.place(t, busy)
        elif unit != int(Unit.ctrl):
            t = max(t, ufree[unit])
            ufree[unit] = t + busy
        end = t + busy + lat
        if _EXECUTES[q]:
            last[q] = (s.op, t, t + busy, regions)  # started at t, its own work done at t + busy
            end = max(end, qfree[q])
            qfree[q] = end
        else:
            qfree[q] = t + busy
        for mem, rlo, rhi, rw in regions:
            accesses.setdefault((mem, q), []).append((rlo, rhi, rw, end))
        out.append(Timed(q, t, end))
    return out


def _conflict(a, b) -> bool:
    """True when two region lists touch a common byte with one of them writing."""
    return any(ma == mb and (wa or wb) and la < hb and lb < ha for ma, la, ha, wa in a for mb, lb, hb, wb in b)


@dataclass(frozen=True)
class _Shape:
    """What a step's definition says apart from its addresses: its timing, and each region as
    (memory, the address field it starts at or None, offset from it (or the absolute address),
    extent, writes)."""

    defn: Any
    busy: int
    latency: int
    regions: tuple[tuple[int, str | None, int, int, bool], ...]


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
            out.append((int(r.mem), at[0], 0, r.end - r.addr, r.writes))
        else:  # no single field to follow: this step's own absolute region, not shared
            reusable = False
            out.append((int(r.mem), None, r.addr, r.end - r.addr, r.writes))
    return _Shape(d, busy, lat, tuple(out)), reusable


def program_cycles(prog: TileProgram, target: Any) -> int:
    """Estimated cycles of ``prog`` on ``target``: when its last step completes."""
    return max((t.end for t in timeline(prog.steps, target)), default=0)
