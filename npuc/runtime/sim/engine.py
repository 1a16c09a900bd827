"""The event-driven core: three in-order queues, shared units, dependency tokens.

Each step starts, among the three queue heads that are not waiting on an empty token channel,
the one that can start earliest (ties go to the load, then compute, then store queue).  A head
can start once

* its queue allows it: on the load and store queues when the previous transfer has left the
  DRAM port (transfers are pipelined); on the compute queue when every earlier compute
  instruction has completed, except right after an instruction its definition ``may_follow``
  (``LOAD_WEIGHTS`` after ``MATMUL``: the array's second weight buffer; ``MATMUL_OS`` after
  ``MATMUL_OS``: the previous outputs drain meanwhile), which it may start beside unless the
  two touch the same bytes with one of them writing (the hardware interlocks: an accumulating
  ``MATMUL_OS`` into the tile still draining waits for the drain);
* its unit is free (the DRAM port is shared by loads and stores);
* the tokens it waits for have arrived (a token arrives when its sender completes).

Compute instructions complete in order (an instruction started beside a longer one retires
after it), so a token from a compute instruction also vouches for every earlier one.

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

_COMPUTE = int(Queue.compute)


@dataclass(frozen=True)
class Schedule:
    """Start and end cycle of every instruction (program order), and leftover tokens."""

    starts: list[int]
    ends: list[int]
    leftover_tokens: tuple[int, ...]


Observer = Callable[[int, MachineState], None]


def run(steps: Sequence[Step], state: MachineState | None, observe: Observer | None = None) -> Schedule:
    """Schedule ``steps`` (and execute them on ``state`` unless it is None); ``observe(index,
    state)`` is called after each instruction's functional effect, in execution order.

    Floating-point overflow, division by zero and invalid operations follow IEEE-754 (inf, nan)
    as on the hardware, so numpy's warnings about them are silenced during the run.
    """
    with np.errstate(all="ignore"):
        return _run(steps, state, observe)


def _run(steps: Sequence[Step], state: MachineState | None, observe: Observer | None = None) -> Schedule:
    queues: list[list[int]] = [[], [], []]  # program indices per queue
    for i, s in enumerate(steps):
        queues[s.queue].append(i)
    head = [0, 0, 0]
    qfree = [0, 0, 0]  # earliest start allowed by the queue's order
    last_step, last_start = None, 0  # the compute queue's last instruction and its start
    ufree = [0] * len(Unit)
    chans: list[deque[int]] = [deque() for _ in CHANNELS]
    starts = [0] * len(steps)
    ends = [0] * len(steps)
    remaining = len(steps)
    while remaining:
        best_t, best_q = -1, -1
        for q in range(3):
            if head[q] == len(queues[q]):
                continue
            s = steps[queues[q][head[q]]]
            beside = q == _COMPUTE and last_step is not None and last_step.instr.op in s.may_follow
            t = last_start if beside and not _conflict(last_step, s) else qfree[q]
            ready = True
            for c in s.waits:
                if not chans[c]:
                    ready = False
                    break
                if chans[c][0] > t:
                    t = chans[c][0]
            if not ready:
                continue
            if ufree[s.unit] > t:
                t = ufree[s.unit]
            if best_q < 0 or t < best_t:
                best_t, best_q = t, q
        if best_q < 0:
            raise SimulationError(_deadlock(steps, queues, head, chans))
        index = queues[best_q][head[best_q]]
        s = steps[index]
        head[best_q] += 1
        remaining -= 1
        for c in s.waits:
            chans[c].popleft()
        if state is not None:
            _execute(index, s, state)
            if observe is not None:
                observe(index, state)
        start = best_t
        issue_end = start + s.busy
        end = issue_end + s.latency
        ufree[s.unit] = issue_end
        if best_q == _COMPUTE:
            end = max(end, qfree[best_q])  # in-order completion
            qfree[best_q] = end
            last_step, last_start = s, start
        else:
            qfree[best_q] = issue_end
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


def _execute(index: int, s: Step, state: MachineState) -> None:
    try:
        s.defn.execute(state, s.instr.args, s.regions)
    except SimulationError as e:
        raise SimulationError(f"{describe(index, s.instr)}: {e}") from None


def _deadlock(steps: Sequence[Step], queues: list[list[int]], head: list[int], chans: list[deque[int]]) -> str:
    lines = ["deadlock: no queue can proceed"]
    for q, lst in enumerate(queues):
        if head[q] == len(lst):
            continue
        index = lst[head[q]]
        s = steps[index]
        lines.append(
            f"  the {Queue(q).name} queue stalls at {describe(index, s.instr)}: it waits for a "
            f"token on {' and '.join(CHANNELS[c] for c in s.waits if not chans[c])}, which never arrives"
        )
    return "\n".join(lines)
