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
from npuc.isa.defs.dma import copy_sides, stream_problem, transfer_problem
from npuc.isa.enums import Mem, Queue, Unit
from npuc.isa.instr import Deps, FieldError, Instr, InstrDef, program_problem
from npuc.isa.loops import expand, has_loops
from npuc.isa.region import Region
from npuc.targets import Target

# One token channel for every ordered pair of queues: CHANNELS[c] names channel c.
_PAIRS = tuple((src, dst) for src in Queue for dst in Queue if src is not dst)
CHANNELS = tuple(f"{src.name}->{dst.name}" for src, dst in _PAIRS)
_CHANNEL = {pair: c for c, pair in enumerate(_PAIRS)}


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
    resource: int  # what it occupies while busy: its unit, or (a DMA) the port of its memory
    busy: int
    latency: int
    waits: tuple[int, ...]
    signals: tuple[int, ...]
    actions: tuple[int, ...]
    may_follow: tuple[str, ...]
    pipelines_after: tuple[str, ...]
    also: tuple[int, int] | None = None  # (resource, busy cycles) it takes on a second port: a copy's write side (second_port)


def describe(index: int, ins: Instr, origin: Sequence[int] | None = None) -> str:
    """How errors name an instruction: its index in the encoded program and its text.  In a
    program with LOOPs, ``origin`` maps the expanded stream's ``index`` to the encoded
    instruction, and the message says which step of the expanded stream it was."""
    if origin is None or origin[index] == index:
        return f"instruction {index} `{ins}`"
    return f"instruction {origin[index]} `{ins}` (step {index} of the stream its LOOPs expand to)"


def channel(src: Queue, dst: Queue) -> int:
    """The token channel from queue ``src`` to queue ``dst``."""
    return _CHANNEL[(src, dst)]


def tokens(deps: Deps, q: Queue) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(channels waited on, channels signalled) of an instruction of queue ``q``."""
    waits = tuple(sorted(_CHANNEL[(src, q)] for src in deps.waits))
    signals = tuple(sorted(_CHANNEL[(q, dst)] for dst in deps.signals))
    return waits, signals


_TOKENS: dict[tuple[Deps, Queue], tuple[tuple[int, ...], tuple[int, ...]]] = {}


def _tokens(deps: Deps, q: Queue) -> tuple[tuple[int, ...], tuple[int, ...]]:
    key = (deps, q)
    hit = _TOKENS.get(key)
    if hit is None:
        hit = _TOKENS[key] = tokens(deps, q)
    return hit


def prepare(
    instrs: Sequence[Instr], target: Target, dram_size: int | None
) -> tuple[list[Step], int, tuple[int, ...] | None]:
    """The Step of every dynamic instruction (LOOPs expanded), in program order, after checking
    ``instrs`` against ``target`` and a DRAM of ``dram_size`` bytes (None: as large as the
    program's DMAs reach); SimulationError names the first bad instruction.  Returns the steps,
    the DRAM size and the encoded index of each step (None: no LOOP, the identity)."""
    reason = program_problem(list(instrs))
    if reason:
        raise SimulationError(f"not a complete program: {reason}")
    origin = None
    if has_loops(instrs):
        try:
            instrs, expanded_from = expand(instrs)
        except FieldError as e:
            raise SimulationError(str(e)) from None
        origin = tuple(expanded_from)
    # Without a DRAM image the DRAM is as large as the DMAs reach, up to the end of the system
    # address map (each DMA-side region is checked against the map's windows).
    dram_bound = dram_size if dram_size is not None else target.address_space_bytes
    sizes = {Mem.dram: dram_bound, Mem.spad: target.scratchpad.size_bytes, Mem.acc: target.accumulator.size_bytes}
    cache: dict[Instr, Step] = {}
    steps = []
    dram_top = 1
    for index, ins in enumerate(instrs):
        step = cache.get(ins)
        if step is None:
            step = cache[ins] = _step(index if origin is None else origin[index], ins, target, sizes)
            for r in step.regions:
                if r.mem is Mem.dram and r.end > dram_top:
                    dram_top = r.end
        steps.append(step)
    if target.stream_buffers:
        bad = stream_problem(((st.instr, st.regions[0] if st.regions else None) for st in steps), target)
        if bad is not None:
            raise SimulationError(f"{describe(bad[0], instrs[bad[0]], origin)}: {bad[1]}")
    return steps, dram_size if dram_size is not None else dram_top, origin


def port_resource(port: int) -> int:
    """The resource index of DMA port ``port`` (port 0 is the DMA unit itself)."""
    return int(Unit.dma) if port == 0 else len(Unit) + port - 1


def resource(d: InstrDef, regions: tuple[Region, ...], target: Target) -> int:
    """What an instruction of ``d`` with ``regions`` occupies while busy: its unit, or (a DMA)
    the port of the memory its DRAM side falls in (a copy's: the side it reads)."""
    if d.unit is not Unit.dma:
        return int(d.unit)
    side = next((r for r in regions if r.mem is Mem.dram), None)
    if side is None:
        return int(Unit.dma)
    w = target.window_at(side.addr, side.end)
    if w is None:  # not a transfer the checks let run (``transfer_problem``): the first port
        return int(Unit.dma)
    return port_resource(target.ports.index(w.memory.port))


def second_port(d: InstrDef, regions: tuple[Region, ...], target: Target) -> tuple[int, int] | None:
    """(resource, busy cycles) an instruction takes on a port besides its ``resource``: a copy
    between memories behind two ports, its write side's (None for every other instruction)."""
    if d.queue is not Queue.copy:
        return None
    (rp, _, _), (wp, wb, _) = copy_sides(regions, target)
    return (port_resource(wp), wb) if wp != rp else None


def _step(index: int, ins: Instr, target: Target, sizes: dict[Mem, int]) -> Step:
    d = ins.defn
    a = ins.args
    reason = d.check(a, target)
    regions = d.regions(a)
    for r in regions:
        if r.mem not in d.queue.reaches:
            reason = reason or f"internal error: an instruction of the {d.queue.name} queue touches {r.mem.name}"
        reason = reason or r.problem(sizes[r.mem])
        if r.mem is Mem.dram and not reason:
            reason = transfer_problem(r, target)
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
        resource(d, regions, target),
        busy,
        latency,
        *_tokens(ins.deps, d.queue),
        act.flat(len(target.memories)),
        d.may_follow,
        d.pipelines_after,
        second_port(d, regions, target),
    )
