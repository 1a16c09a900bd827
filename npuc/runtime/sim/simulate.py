"""``simulate``: run a program on a target, functionally and/or for timing and energy."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from npuc.errors import SimulationError
from npuc.isa.actions import Actions, energy_breakdown
from npuc.isa.enums import Queue, Unit
from npuc.isa.instr import Instr, Program
from npuc.isa.state import MachineState
from npuc.runtime.sim.engine import run
from npuc.runtime.sim.prepare import CHANNELS, port_resource, prepare
from npuc.runtime.sim.races import find_race
from npuc.runtime.sim.result import SimResult
from npuc.targets import Target

DramInit = bytes | bytearray | memoryview | np.ndarray


def simulate(
    program: Program | Sequence[Instr],
    target: Target,
    dram: DramInit | None = None,
    *,
    functional: bool = True,
    dram_size: int | None = None,
    check_races: bool = True,
    observe=None,
) -> SimResult:
    """Simulate ``program`` on ``target``.

    ``dram`` is the initial DRAM image (its length is the DRAM size); without it the DRAM is
    ``dram_size`` zero bytes, or just large enough for every DMA of the program.  With
    ``functional=False`` only timing and energy are computed (no data is touched), which is much
    faster.  Raises :class:`SimulationError` for an illegal program (naming the instruction):
    bad address, misaligned access, deadlock, and (unless ``check_races`` is False) two
    instructions in flight together touching the same bytes without a token ordering them.
    ``observe(index, state)``, when given, sees the machine state after each instruction's
    functional effect, in execution order (the numerical debugger reads kernel outputs so).
    """
    instrs = tuple(program)
    size = memoryview(dram).nbytes if dram is not None else dram_size
    top = target.address_space_bytes
    if size is not None and size > top:
        raise SimulationError(
            f"a DRAM image of {size} bytes exceeds target '{target.name}''s {top}-byte system address map"
        )
    steps, size, origin = prepare(instrs, target, size)
    if size > top:
        raise SimulationError(
            f"the program's DMAs reach byte {size - 1}, beyond target '{target.name}''s {top}-byte system address map"
        )
    state = None
    if functional:
        image = np.zeros(size, np.uint8) if dram is None else np.frombuffer(bytes(dram), dtype=np.uint8).copy()
        spad = np.zeros(target.scratchpad.size_bytes, np.uint8)
        state = MachineState(image, spad, np.zeros(target.accumulator.size_bytes, np.uint8))
    sched = run(steps, state, observe, origin)
    if check_races:
        race = find_race(steps, sched.starts, sched.ends, origin)
        if race:
            raise SimulationError(race)
    return _result(steps, sched, target, state, origin)


def _queue_busy(steps, sched) -> list[int]:
    """Per queue, the cycles during which at least one of its instructions was in flight."""
    busy = [0] * len(Queue)
    reach = [0] * len(Queue)  # end of the union of intervals seen so far (starts are in order per queue)
    for i, s in enumerate(steps):
        start, end = sched.starts[i], sched.ends[i]
        q = s.queue
        busy[q] += max(0, end - max(start, reach[q]))
        reach[q] = max(reach[q], end)
    return busy


def _result(steps, sched, target: Target, state: MachineState | None, origin=None) -> SimResult:
    unit_busy = [0] * len(Unit)
    ports = target.ports
    port_busy = dict.fromkeys(ports, 0)
    resource_port = {port_resource(i): p for i, p in enumerate(ports)}
    for s in steps:
        unit_busy[s.unit] += s.busy
        if s.resource in resource_port and s.unit == Unit.dma:
            port_busy[resource_port[s.resource]] += s.busy
        if s.also is not None:
            port_busy[resource_port[s.also[0]]] += s.also[1]
    queue_busy = _queue_busy(steps, sched)
    n = len(target.memories)
    totals = np.array([s.actions for s in steps], dtype=np.int64).sum(axis=0) if steps else None
    actions = Actions.from_flat(totals, n) if totals is not None else Actions()
    total = max(sched.ends, default=0)
    breakdown = energy_breakdown(actions, target)
    breakdown["static"] = target.static_energy_pj(total)
    return SimResult(
        target=target.name,
        total_cycles=total,
        clock_hz=target.clock_hz,
        instructions=len(steps),
        unit_busy={u.name: unit_busy[u] for u in Unit},
        queue_busy={q.name: queue_busy[q] for q in Queue},
        port_busy=port_busy,
        actions=actions,
        energy_breakdown_pj=breakdown,
        peak_macs_per_cycle=target.peak_macs_per_cycle,
        schedule=(tuple(s.instr.op for s in steps), tuple(s.queue for s in steps), tuple(s.unit for s in steps), sched.starts, sched.ends),
        leftover_tokens={name: n for name, n in zip(CHANNELS, sched.leftover_tokens)},
        origin=origin,
        dram=None if state is None else state.dram.tobytes(),
        spad=None if state is None else state.spad.tobytes(),
        acc=None if state is None else state.acc.tobytes(),
    )
