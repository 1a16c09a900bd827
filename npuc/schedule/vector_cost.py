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
from npuc.kir.tile_program import Step, TileProgram

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
    used = [False] * _NQ
    last: list[tuple[str, int, int, tuple] | None] = [None] * _NQ  # execute queues: (op, start, own end, regions)
    ufree = [0] * len(Unit)
    port = _Port()
    accesses: dict[int, list[tuple[int, int, int, bool, int]]] = {}  # mem -> (queue, lo, hi, writes, end)
    out: list[Timed] = []
    for n, s in enumerate(steps):
        d = get_def(s.op)
        args = build_args(d, s.kwargs())
        regions = d.regions(args)
        busy, lat = d.timing(args, target, regions)
        q, unit = int(d.queue), int(d.unit)
        t = qfree[q]
        prev = last[q]
        if prev is not None and prev[0] in d.may_follow and not _conflict(prev[3], regions):
            t = prev[1]  # starts beside the previous one (the array's second weight buffer)
        elif prev is not None and prev[0] in d.pipelines_after:
            t = prev[2]  # streams in as soon as the previous one's own work is done
        for r in regions:
            for (aq, lo, hi, w, end) in accesses.get(int(r.mem), ()):
                if aq != q and end > t and (w or r.writes) and lo < r.end and r.addr < hi:
                    t = end
        if unit == _DMA:
            t = port.place(t, busy)
        elif unit != int(Unit.ctrl):
            t = max(t, ufree[unit])
            ufree[unit] = t + busy
        end = t + busy + lat
        if _EXECUTES[q]:
            last[q] = (s.op, t, end, regions)
            end = max(end, qfree[q])
            qfree[q] = end
        else:
            qfree[q] = t + busy
        used[q] = True
        for r in regions:
            accesses.setdefault(int(r.mem), []).append((q, r.addr, r.end, r.writes, end))
        out.append(Timed(q, t, end))
        if n % 64 == 63:
            _prune(accesses, min(qfree[i] for i in range(_NQ) if used[i]))
    return out


def _conflict(a, b) -> bool:
    """True when two region lists touch a common byte with one of them writing."""
    return any(ra.mem == rb.mem and (ra.writes or rb.writes) and ra.addr < rb.end and rb.addr < ra.end
               for ra in a for rb in b)


def _prune(accesses: dict[int, list], horizon: int) -> None:
    """Forget accesses that completed before any queue can next start."""
    for mem, lst in accesses.items():
        accesses[mem] = [a for a in lst if a[4] > horizon]


def program_cycles(prog: TileProgram, target: Any) -> int:
    """Estimated cycles of ``prog`` on ``target``: when its last step completes."""
    return max((t.end for t in timeline(prog.steps, target)), default=0)
