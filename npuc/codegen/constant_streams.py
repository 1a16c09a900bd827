"""Constant streams: loads that read a constant piece after piece share the bursts at their seams.

A layer reads its constants (weights, bias, requantization records) in pieces, a channel block
at a time, and each piece's run rarely ends on a burst boundary: read on its own, every piece
pays for its last burst whole, and the next piece fetches that same burst again.  On a target
with stream buffers (``weight_decoder.stream_buffers``; DMA_LOAD and DMA_LOAD_DECODE's ``stream``
and ``held`` fields, docs/isa.md), the DMA keeps the last burst each buffer's loads read, so a
load that starts inside it does not fetch it again: a constant read in order costs its bytes in
whole bursts once, as a weight stream read from one base address does on Arm's Ethos-U.

:func:`assign_streams` runs after weight compression (which packs each constant's blocks in
their order of first use, so consecutive pieces are contiguous) on the flat programs, in program
order (the order the load queue runs them).  Every load of one contiguous run inside the
constants is given a buffer: the constant keeps the buffer it had while it is among the
``stream_buffers`` constants used last, else it takes the one used longest ago.  The load is
marked ``held`` when its first byte is in the burst its buffer holds, or starts a burst (nothing
to hold: the mark then changes nothing, and keeps the loads of a loop alike).  The simulator
checks every ``held`` by the same rule (:class:`npuc.isa.defs.dma.StreamBuffers`) before a
program runs.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

from npuc.isa.defs.dma import StreamBuffers
from npuc.isa.enums import Mem
from npuc.isa.instr import Instr
from npuc.kir.program import CONSTANT

_LOADS = frozenset({"DMA_LOAD", "DMA_LOAD_DECODE"})


def assign_streams(programs: list[list[Instr]], plan, target) -> list[list[Instr]]:
    """``programs`` with the stream buffer and ``held`` mark of every load that reads a constant
    in one contiguous run (the programs unchanged on a target without stream buffers)."""
    buffers = target.stream_buffers
    if not buffers or not plan.constants:
        return programs
    base = next(off for _, kind, off, _ in plan.regions if kind == "CONSTANTS")
    end = base + len(plan.constants)
    starts = sorted(p.offset for p in plan.placed if p.buffer.kind == CONSTANT and p.buffer.nbytes)
    return [_assign(prog, base, end, starts, buffers, target) for prog in programs]


def _assign(prog: list[Instr], base: int, end: int, starts: list[int], buffers: int, target) -> list[Instr]:
    out = list(prog)
    owner: dict[int, int] = {}  # buffer -> constant (its first byte's address)
    recent: OrderedDict[int, None] = OrderedDict((s, None) for s in range(1, buffers + 1))  # least recent first
    taken: dict[int, int] = {}  # constant -> buffer
    held = StreamBuffers(target)
    for i, ins in enumerate(prog):
        if ins.op not in _LOADS:
            continue
        r = ins.defn.regions(ins.args)[0]
        if r.mem is not Mem.dram or r.addr < base or r.end > end or r.dram_runs()[0] != 1:
            continue
        k = bisect.bisect_right(starts, r.addr) - 1
        constant = starts[k] if k >= 0 else base
        s = taken.get(constant)
        if s is None:
            s = next(iter(recent))
            old = owner.get(s)
            if old is not None:
                del taken[old]
            owner[s], taken[constant] = constant, s
            held.forget(s)
        recent.move_to_end(s)
        mark = held.may_hold(s, r)
        held.read(s, r)
        out[i] = Instr(ins.op, ins.args._replace(stream=s, held=int(mark)), ins.deps)
    return out


__all__ = ["assign_streams"]
