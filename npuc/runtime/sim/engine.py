"""The event-driven core: five in-order queues, shared units, dependency tokens.

Each step starts, among the queue heads that are not waiting on an empty token channel, the one
that can start earliest; on a tie the one that has waited longest for its unit goes first (the
DRAM port serves loads and stores in the order they asked for it, so a stream of loads never
starves a store), then the lower queue number (load, compute, store, vector, copy).  A
head can start once

* its queue allows it: on the load, store and copy queues when the previous transfer has left its
  port (transfers are pipelined; a transfer to a memory behind another port may start beside
  the previous one, as a DMA engine with a channel per port does); on an execute queue (compute, vector) when every earlier
  instruction of that queue has completed, except right after an instruction its definition
  ``may_follow`` (or ``pipelines_after``: then it starts when that one's own work is done, its
  busy cycles, while its latency runs: a ``MATMUL`` or ``MATMUL_DW`` streams its inputs while the
  previous one's partial sums drain)
  (``LOAD_WEIGHTS`` after ``MATMUL``: the array's second weight buffer; ``MATMUL_OS`` after
  ``MATMUL_OS``: the previous outputs drain meanwhile), which it may start beside unless the
  two touch the same bytes with one of them writing (the hardware interlocks: an accumulating
  ``MATMUL_OS`` into the tile still draining waits for the drain);
* its unit is free (a DMA's unit is the port of the memory its address falls in: one port is
  shared by loads, stores and copies and by every memory behind it; DMAs on different ports
  overlap; a copy between memories behind two ports starts when its read side's port is free,
  and takes its write side's busy cycles on the other port from when that one is next free);
* the tokens it waits for have arrived (a token arrives when its sender completes).

Instructions of every queue complete in order (an instruction started beside a longer one
retires after it; a transfer from a fast memory after an earlier one from a slow memory), so a
token from one also vouches for every earlier one of its queue.

Start times never decrease from one step to the next, so functional effects applied at start
see every write their tokens order before them.  When no head can start and some queue is not
finished, the program has deadlocked: the error names every stalled instruction.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from npuc.errors import SimulationError
from npuc.isa.enums import Queue, Unit
from npuc.isa.state import MachineState
from npuc.runtime.sim.prepare import CHANNELS, Step, describe

_NQ = len(Queue)
_EXECUTES = tuple(q.executes for q in Queue)
_DMA = int(Unit.dma)


@dataclass(frozen=True)
class Schedule:
    """Start and end cycle of every instruction (program order), and leftover tokens."""

    starts: list[int]
    ends: list[int]
    leftover_tokens: tuple[int, ...]


Observer = Callable[[int, MachineState], None]


def run(steps: Sequence[Step], state: MachineState | None, observe: Observer | None = None,
        origin: Sequence[int] | None = None) -> Schedule:
    """Schedule ``steps`` (and execute them on ``state`` unless it is None); ``observe(index,
    state)`` is called after each instruction's functional effect, in execution order.

    Floating-point overflow, division by zero and invalid operations follow IEEE-754 (inf, nan)
    as on the hardware, so numpy's warnings about them are silenced during the run.
    """
    with np.errstate(all="ignore"):
        return _run(steps, state, observe, origin)


def _run(steps: Sequence[Step], state: MachineState | None, observe: Observer | None = None,
         origin: Sequence[int] | None = None) -> Schedule:
    queues: list[list[int]] = [[] for _ in range(_NQ)]  # program indices per queue
    for i, s in enumerate(steps):
        queues[s.queue].append(i)
    head = [0] * _NQ
    qfree = [0] * _NQ  # earliest start allowed by the queue's order
    qdone = [0] * _NQ  # latest completion so far (the transfer queues retire in order)
    port_left: list[dict[int, int]] = [{} for _ in range(_NQ)]  # per queue, when its last transfer on each port left it
    last_step: list[Step | None] = [None] * _NQ  # each execute queue's last instruction
    last_start = [0] * _NQ  # and its start
    last_own_end = [0] * _NQ  # and when its own work was done (its busy cycles: its latency and in-order retirement may still follow)
    ufree = [0] * max([len(Unit)] + [s.resource + 1 for s in steps])  # units, then the DMA ports beyond the first
    chans: list[deque[int]] = [deque() for _ in CHANNELS]
    starts = [0] * len(steps)
    ends = [0] * len(steps)
    remaining = len(steps)
    while remaining:
        best_t, best_q, best_asked = -1, -1, -1
        for q in range(_NQ):
            if head[q] == len(queues[q]):
                continue
            s = steps[queues[q][head[q]]]
            prev = last_step[q]
            if prev is None:
                t = qfree[q]
            elif prev.instr.op in s.may_follow and not _conflict(prev, s):
                t = last_start[q]
            elif prev.instr.op in s.pipelines_after:
                t = last_own_end[q]
            else:
                t = qfree[q]
            if s.unit == _DMA and s.resource in port_left[q]:
                t = max(t, port_left[q][s.resource])
            ready = True
            for c in s.waits:
                if not chans[c]:
                    ready = False
                    break
                if chans[c][0] > t:
                    t = chans[c][0]
            if not ready:
                continue
            asked = t  # when it could start if its unit were free
            if ufree[s.resource] > t:
                t = ufree[s.resource]
            if best_q < 0 or (t, asked) < (best_t, best_asked):
                best_t, best_q, best_asked = t, q, asked
        if best_q < 0:
            raise SimulationError(_deadlock(steps, queues, head, chans, origin))
        index = queues[best_q][head[best_q]]
        s = steps[index]
        head[best_q] += 1
        remaining -= 1
        for c in s.waits:
            chans[c].popleft()
        if state is not None:
            _execute(index, s, state, origin)
            if observe is not None:
                observe(index, state)
        start = best_t
        issue_end = start + s.busy
        end = issue_end + s.latency
        ufree[s.resource] = issue_end
        if s.also is not None:  # a copy's write side: its cycles on its own port, as soon as that port is free
            r = s.also[0]
            ufree[r] = max(ufree[r], start) + s.also[1]
        if _EXECUTES[best_q]:
            last_own_end[best_q] = issue_end  # its own work: the drain (latency) may overlap the next
            end = max(end, qfree[best_q])  # in-order completion
            qfree[best_q] = end
            last_step[best_q], last_start[best_q] = s, start
        else:
            # The next transfer of the queue starts when this one has left its port: the port's
            # own free time enforces that; a transfer on another port need not wait.  Transfers
            # retire in order (a fast memory's transfer waits for an earlier slow one), so a
            # token still vouches for every earlier transfer of its queue.
            qfree[best_q] = start if s.unit == _DMA else issue_end
            if s.unit == _DMA:
                port_left[best_q][s.resource] = issue_end
            end = max(end, qdone[best_q])
            qdone[best_q] = end
        for c in s.signals:
            chans[c].append(end)
        starts[index] = start
        ends[index] = end
    return Schedule(starts, ends, tuple(len(c) for c in chans))


def _conflict(a: Step, b: Step) -> bool:
    """True when ``a`` and ``b`` touch a common byte and one of them writes it."""
    for ra in a.regions:
        for rb in b.regions:
            if ra.mem == rb.mem and (ra.writes or rb.writes) and ra.addr < rb.end and rb.addr < ra.end:
                return True
    return False


def _execute(index: int, s: Step, state: MachineState, origin: Sequence[int] | None) -> None:
    try:
        s.defn.execute(state, s.instr.args, s.regions)
    except SimulationError as e:
        raise SimulationError(f"{describe(index, s.instr, origin)}: {e}") from None


def _deadlock(steps: Sequence[Step], queues: list[list[int]], head: list[int], chans: list[deque[int]],
              origin: Sequence[int] | None) -> str:
    lines = ["deadlock: no queue can proceed"]
    for q, lst in enumerate(queues):
        if head[q] == len(lst):
            continue
        index = lst[head[q]]
        s = steps[index]
        lines.append(
            f"  the {Queue(q).name} queue stalls at {describe(index, s.instr, origin)}: it waits for a "
            f"token on {' and '.join(CHANNELS[c] for c in s.waits if not chans[c])}, which never arrives"
        )
    return "\n".join(lines)
