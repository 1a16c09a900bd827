"""Preparing a program for a target: every instruction checked and its static facts computed.

All addresses of the instruction set are static, so a program is checked once, before it runs:
the target's constraints (array size, dataflows, dtypes) and every memory region (in bounds,
aligned, written elements written once).  The same pass computes each instruction's timing and
energy actions, which the timing tier then replays without touching data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from npuc.errors import SimulationError
from npuc.isa.actions import Actions
from npuc.isa.enums import Mem, Queue
from npuc.isa.instr import Deps, Instr, InstrDef, program_problem
from npuc.isa.region import Region
from npuc.targets import Target

# Token channels between neighbouring queues, and the channel each flag uses per queue.
CHANNELS = ("load->compute", "compute->load", "compute->store", "store->compute")
_L2C, _C2L, _C2S, _S2C = range(4)
_WAIT = {  # queue -> (channel of wait_prev, channel of wait_next)
    Queue.load: (None, _C2L),
    Queue.compute: (_L2C, _S2C),
    Queue.store: (_C2S, None),
}
_SIGNAL = {  # queue -> (channel of signal_prev, channel of signal_next)
    Queue.load: (None, _L2C),
    Queue.compute: (_C2L, _C2S),
    Queue.store: (_S2C, None),
}


@dataclass(slots=True)
class Step:
    """One instruction prepared for a target: everything the simulator needs to run it.

    Identical instructions of a program (a loop body, unrolled) share one Step (treat it as
    read-only; it is a plain slotted record because programs have many).
    """

    instr: Instr
    defn: InstrDef
    regions: tuple[Region, ...]
    queue: int
    unit: int
    busy: int
    latency: int
    waits: tuple[int, ...]
    signals: tuple[int, ...]
    actions: tuple[int, ...]
    may_follow: tuple[str, ...]


def describe(index: int, ins: Instr) -> str:
    """How errors name an instruction: its index and its text."""
    return f"instruction {index} `{ins}`"


def _channels(deps: Deps, q: Queue, table) -> tuple[int, ...]:
    prev_c, next_c = table[q]
    on = (deps.wait_prev, deps.wait_next) if table is _WAIT else (deps.signal_prev, deps.signal_next)
    return tuple(c for c, flag in zip((prev_c, next_c), on) if flag and c is not None)


# (deps, queue) -> (channels waited on, channels signalled), for every legal combination
_TOKENS = {
    (Deps.from_bits(bits), q): (_channels(Deps.from_bits(bits), q, _WAIT), _channels(Deps.from_bits(bits), q, _SIGNAL))
    for bits in range(16)
    for q in Queue
}


def prepare(instrs: Sequence[Instr], target: Target, dram_size: int | None) -> tuple[list[Step], int]:
    """The Step of every instruction, in program order, after checking ``instrs`` against
    ``target`` and a DRAM of ``dram_size`` bytes (None: as large as the program's DMAs reach);
    SimulationError names the first bad instruction.  Returns the steps and the DRAM size."""
    reason = program_problem(list(instrs))
    if reason:
        raise SimulationError(f"not a complete program: {reason}")
    # Without a DRAM image the DRAM is as large as the DMAs reach, up to the target's DRAM.
    dram_bound = dram_size if dram_size is not None else target.dram.size_bytes
    sizes = {Mem.dram: dram_bound, Mem.spad: target.scratchpad.size_bytes, Mem.acc: target.accumulator.size_bytes}
    cache: dict[Instr, Step] = {}
    steps = []
    dram_top = 1
    for index, ins in enumerate(instrs):
        step = cache.get(ins)
        if step is None:
            step = cache[ins] = _step(index, ins, target, sizes)
            for r in step.regions:
                if r.mem is Mem.dram and r.end > dram_top:
                    dram_top = r.end
        steps.append(step)
    return steps, dram_size if dram_size is not None else dram_top


def _step(index: int, ins: Instr, target: Target, sizes: dict[Mem, int]) -> Step:
    d = ins.defn
    a = ins.args
    reason = d.check(a, target)
    regions = d.regions(a)
    for r in regions:
        reason = reason or r.problem(sizes[r.mem])
    if reason:
        raise SimulationError(f"{describe(index, ins)}: {reason}")
    busy, latency = d.timing(a, target, regions)
    act: Actions = d.actions(a, target, regions)
    return Step(
        ins,
        d,
        regions,
        int(d.queue),
        int(d.unit),
        busy,
        latency,
        *_TOKENS[(ins.deps, d.queue)],
        tuple(vars(act).values()),
        d.may_follow,
    )
