"""Race detection: two instructions in flight at the same time that touch the same bytes, at
least one of them writing.

Hardware gives such a program no defined result (a DMA may land before or after the compute
that reads its buffer), so the simulator reports it instead of silently choosing an order: the
fix is a dependency token.  Instructions of the load queue (or of the store queue) complete in
order, so pairs within one DMA queue are not races; instructions of an execute queue that
overlap each other (a LOAD_WEIGHTS beside a MATMUL, a MATMUL_OS beside the previous one's drain)
are checked.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from npuc.isa.enums import Queue
from npuc.isa.region import Region
from npuc.runtime.sim.prepare import Step, describe

_EXECUTES = tuple(q.executes for q in Queue)
_VERB = {"r": "reads", "w": "writes", "rw": "reads and writes"}


def _byte_set(r: Region) -> np.ndarray:
    """Every byte address the region touches (sorted, unique)."""
    offs = np.array([r.addr], dtype=np.int64)
    for n, s in zip(r.shape, r.strides):
        offs = np.add.outer(offs, np.arange(n, dtype=np.int64) * s).ravel()
    return np.unique(np.add.outer(offs, np.arange(r.itemsize, dtype=np.int64)).ravel())


def _clash(a: Region, b: Region) -> tuple[int, int] | None:
    """The first and last shared byte of two regions, if they share any and one writes."""
    if a.mem is not b.mem or not (a.writes or b.writes):
        return None
    if a.end <= b.addr or b.end <= a.addr:
        return None
    common = np.intersect1d(_byte_set(a), _byte_set(b), assume_unique=True)
    return (int(common[0]), int(common[-1])) if common.size else None


def _conflict(i: int, si: Step, j: int, sj: Step, origin: Sequence[int] | None) -> str | None:
    for ra in si.regions:
        for rb in sj.regions:
            hit = _clash(ra, rb)
            if hit:
                first, last = hit
                return (
                    f"race on {ra.mem.name.upper()} bytes 0x{first:x}..0x{last:x}: {describe(i, si.instr, origin)} "
                    f"({Queue(si.queue).name} queue) {_VERB[ra.access]} them while {describe(j, sj.instr, origin)} "
                    f"({Queue(sj.queue).name} queue) {_VERB[rb.access]} them, with no dependency token ordering the two"
                )
    return None


def _pipelined(a: Step, b: Step) -> bool:
    """Two MATMULs (or two MATMUL_DWs) in flight together: the array's accumulators take their
    rows in order."""
    return a.instr.op == b.instr.op and a.instr.op in ("MATMUL", "MATMUL_DW")


def find_race(steps: Sequence[Step], starts: Sequence[int], ends: Sequence[int],
              origin: Sequence[int] | None = None) -> str | None:
    """The first race of a scheduled program (by start time), or None; ``origin`` names the
    encoded instructions of a program with LOOPs (see ``describe``)."""
    order = sorted(range(len(steps)), key=lambda i: (starts[i], i))
    active: list[int] = []
    for i in order:
        t = starts[i]
        active = [j for j in active if ends[j] > t]
        si = steps[i]
        for j in active:
            sj = steps[j]
            if si.queue == sj.queue and not _EXECUTES[si.queue]:
                continue
            if _pipelined(si, sj):
                continue
            reason = _conflict(i, si, j, sj, origin)
            if reason:
                return reason
        if ends[i] > t:
            active.append(i)
    return None
