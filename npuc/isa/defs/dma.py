"""DMA instructions: strided 3-D copies between the system address map (flash, DRAM, shared SRAM:
every memory the DMA reaches, each in its window) and the scratchpad or accumulator.

A transfer's timing and energy come from the memory its DMA-side address falls in
(:meth:`npuc.targets.Target.window_at`); a transfer that spans two windows, leaves every window
or writes a read-only flash is refused before the program runs (``transfer_problem``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from npuc.errors import SimulationError
from npuc.isa.actions import memory_actions
from npuc.isa.defs.common import mem_of
from npuc.isa.enums import Mem, Queue, Space, Unit
from npuc.isa.fields import Derived, addr, choice, count, esize, flag, uint
from npuc.isa.instr import InstrDef, register
from npuc.isa.region import Region
from npuc.isa.widths import DRAM_ADDR_BITS, LOCAL_ADDR_BITS

_RAW = {1: np.dtype(np.uint8), 2: np.dtype("<u2"), 4: np.dtype("<u4")}


def _fields(local_doc: str):
    return (
        choice("local", 1, Space, local_doc, default=Space.spad),
        esize("esize", "element size in bytes (1, 2 or 4)"),
        addr("dram_addr", DRAM_ADDR_BITS, "DRAM byte address of element (0, 0, 0)"),
        addr("local_addr", LOCAL_ADDR_BITS, "scratchpad/accumulator byte address of element (0, 0, 0)"),
        count("n0", "elements per row (innermost dimension)"),
        count("n1", "rows per plane", default=1),
        count("n2", "planes (outermost dimension)", default=1),
        uint("dram_s0", 20, "DRAM byte stride between elements of a row", default=Derived("esize")),
        uint("dram_s1", 32, "DRAM byte stride between rows", default=Derived("n0 * dram_s0")),
        uint("dram_s2", 32, "DRAM byte stride between planes", default=Derived("n1 * dram_s1")),
        uint("local_s1", 24, "local byte stride between rows (elements of a row are contiguous)", default=Derived("n0 * esize")),
        uint("local_s2", 24, "local byte stride between planes", default=Derived("n1 * local_s1")),
    )


def _dram_region(a, access: str) -> Region:
    return Region(Mem.dram, a.dram_addr, (a.n2, a.n1, a.n0), (a.dram_s2, a.dram_s1, a.dram_s0), _RAW[a.esize], access, "dram")


def _local_region(a, access: str) -> Region:
    return Region(
        mem_of(a.local), a.local_addr, (a.n2, a.n1, a.n0), (a.local_s2, a.local_s1, a.esize), _RAW[a.esize], access, "local"
    )


def _validate(a) -> str | None:
    if a.local is Space.acc and a.esize != 4:
        return "transfers to or from ACC move 32-bit words: esize must be 4"
    return None


def _stream_fields():
    return (
        uint("stream", 3, "stream buffer of the constant this load reads (1.."
             "`weight_decoder.stream_buffers`; 0: none): the buffer keeps the last burst the load "
             "reads", default=0),
        flag("held", "the load's first burst is the one its stream buffer holds: it is not fetched again"),
    )


def _stream_check(a, region: Region, target) -> str | None:
    """Why a load's ``stream`` and ``held`` fields are illegal on ``target``, or None."""
    if not a.stream:
        return "`held` needs a stream buffer (`stream` 1 or more)" if a.held else None
    have = target.stream_buffers
    if a.stream > have:
        return (f"stream buffer {a.stream} does not exist: target '{target.name}' has "
                f"{have} (weight_decoder.stream_buffers)")
    if region.dram_runs()[0] != 1:
        return "a load on a stream buffer reads one contiguous run of bytes"
    return None


def fetched(a, region: Region, target) -> Region | None:
    """The part of a load's DMA side that it fetches from memory: all of it, but for a load
    whose first burst its stream buffer holds (``held``), which fetches from the next burst
    boundary on (None: nothing, the whole load lies in the held burst)."""
    w = target.window_at(region.addr) if a.stream and a.held else None
    if w is None:
        return region
    b = w.memory.burst_bytes
    start = w.base + -(-(region.addr - w.base) // b) * b
    n = region.end - start
    return Region(Mem.dram, start, (1, 1, n), (n, n, 1), _RAW[1], "r", "dram") if n > 0 else None


class StreamBuffers:
    """What each stream buffer holds: the (window, burst) of the last byte its last load read.
    The one rule by which the simulator checks a ``held`` mark and the compiler sets it
    (npuc.codegen.constant_streams)."""

    def __init__(self, target) -> None:
        self.target = target
        self.held: dict[int, tuple[int, int]] = {}

    def burst_of(self, addr: int) -> tuple[int, int, int]:
        """(window index, burst number, offset in the burst) of a byte inside a window."""
        w = self.target.window_at(addr)
        b = w.memory.burst_bytes
        return w.index, (addr - w.base) // b, (addr - w.base) % b

    def may_hold(self, s: int, region: Region) -> bool:
        """Whether a load of ``region`` on buffer ``s`` may be marked ``held``: its first byte
        starts a burst (nothing to hold) or lies in the burst ``s`` holds."""
        win, burst, offset = self.burst_of(region.addr)
        return offset == 0 or self.held.get(s) == (win, burst)

    def read(self, s: int, region: Region) -> None:
        """A load of ``region`` on buffer ``s``: the buffer now holds its last byte's burst."""
        win, burst, _ = self.burst_of(region.end - 1)
        self.held[s] = (win, burst)

    def forget(self, s: int) -> None:
        self.held.pop(s, None)

    def what(self, s: int) -> str:
        got = self.held.get(s)
        return "nothing" if got is None else f"burst {got[1]} of memory '{self.target.windows[got[0]].memory.name}'"


def stream_problem(loads, target) -> tuple[int, str] | None:
    """(index, reason) of the first of ``loads`` ((instruction, DMA-side region) of a program's
    instructions, LOOPs expanded: loads run in this order on the load queue) that says its first
    burst is held (``held``) when its stream buffer does not hold it, or None."""
    buffers = StreamBuffers(target)
    for i, (ins, region) in enumerate(loads):
        a = ins.args
        if ins.op not in _STREAMED or not a.stream:
            continue
        if a.held and not buffers.may_hold(a.stream, region):
            win, burst, _ = buffers.burst_of(region.addr)
            return i, (f"its first burst (burst {burst} of memory '{target.windows[win].memory.name}') is not "
                       f"the one stream buffer {a.stream} holds ({buffers.what(a.stream)}), yet `held` is set")
        buffers.read(a.stream, region)
    return None


def transfer_problem(region: Region, target) -> str | None:
    """Why the DMA side ``region`` of a transfer is illegal on ``target``'s address map, or None."""
    w = target.window_at(region.addr, region.end)
    if w is None:
        inside = target.window_at(region.addr)
        where = (f"starts in memory '{inside.memory.name}' [0x{inside.base:x}, 0x{inside.end:x}) and runs past its end"
                 if inside is not None else "falls in no memory's window")
        return (f"the DMA side 0x{region.addr:x}..0x{region.end - 1:x} {where}; the system address map is "
                + ", ".join(f"{x.memory.name} [0x{x.base:x}, 0x{x.end:x})" for x in target.windows))
    if region.writes and not w.memory.writable:
        return f"a DMA may not write memory '{w.memory.name}': it is a read-only {w.memory.kind}"
    return None


def transfer_cycles(region: Region, target) -> tuple[int, int]:
    """(busy cycles on the memory's port, latency) of a transfer whose DMA side is ``region``.

    The simulator checks every region first (``transfer_problem``); an estimate of a region that
    is not inside one window (the cost model's tile shapes) takes the memory its first byte is in,
    or the memory that holds activations."""
    w = target.window_at(region.addr, region.end) or target.window_at(region.addr)
    m = w.memory if w is not None else target.activation_memory
    moved = region.burst_bytes(m.burst_bytes)
    return -int(-moved // m.bytes_per_cycle), m.latency_cycles


def _timing(a, target, regions) -> tuple[int, int]:
    return transfer_cycles(next(r for r in regions if r.mem is Mem.dram), target)


def _actions(a, target, regions):
    return memory_actions(regions, target)


def _fetched_regions(a, target, regions) -> tuple[Region, ...]:
    """``regions`` with the DMA side cut to what the load fetches (:func:`fetched`)."""
    out = []
    for r in regions:
        if r.mem is Mem.dram:
            r = fetched(a, r, target)
            if r is None:
                continue
        out.append(r)
    return tuple(out)


def _load_timing(a, target, regions) -> tuple[int, int]:
    side = fetched(a, regions[0], target)
    return (0, 0) if side is None else transfer_cycles(side, target)


def _load_actions(a, target, regions):
    return memory_actions(_fetched_regions(a, target, regions), target)


def _load_check(a, target) -> str | None:
    return _stream_check(a, _dram_region(a, "r"), target)


def _copy(st, a, regions) -> None:
    src, dst = (r for r in regions if r.reads), (r for r in regions if r.writes)
    st.write(next(dst), st.read(next(src)))


_TIMING_DOC = (
    "The DRAM side (`dram_addr`: an address of the system address map) falls in one memory's "
    "window, `memory.NAME`; it is cut into contiguous runs (dimensions merged from the innermost "
    "while their stride equals the bytes spanned so far); each run is rounded up to whole "
    "`memory.NAME.burst_bytes` bursts. busy = ceil(burst bytes / memory.NAME.bytes_per_cycle) "
    "cycles on that memory's port (`memory.NAME.port`: shared by the load and store queues and by "
    "every memory behind the same port; transfers on different ports overlap), then "
    "`memory.NAME.latency_cycles` of latency before the data is complete. Transfers are "
    "pipelined: the next DMA of the same queue may start when its port is free, before this one "
    "completes. A DRAM side that spans two windows or leaves every window, and a store to a "
    "flash memory, are refused before the program runs."
)
_STREAM_DOC = (
    " Stream buffers (`weight_decoder.stream_buffers`, for the constants a program reads in "
    "order): a load with `stream` s >= 1 reads one contiguous run and leaves the burst of its "
    "last byte in buffer s; with `held` set, its first burst is the one buffer s holds, so it "
    "fetches only from the next burst boundary (bursts counted from the start of the memory's "
    "window), and a load that ends inside the held burst fetches nothing (busy 0, no latency). "
    "Loads run in program order on the load queue; a program whose `held` load starts inside "
    "a burst that its buffer does not hold is refused before it runs."
)
_ENERGY_DOC = (
    "DRAM-side bytes: the burst-rounded bytes above, counted for the memory they fall in "
    "(`memory.NAME.read_pj_per_byte` for a load, `write_pj_per_byte` for a store); scratchpad or "
    "accumulator bytes: n0 x n1 x n2 x esize."
)

register(
    InstrDef(
        name="DMA_LOAD",
        opcode=0x10,
        queue=Queue.load,
        unit=Unit.dma,
        summary="Copy a strided 3-D block from DRAM into the scratchpad or the accumulator.",
        fields=_fields("memory written: spad or acc") + _stream_fields(),
        regions=lambda a: (_dram_region(a, "r"), _local_region(a, "w")),
        execute=_copy,
        timing=_load_timing,
        actions=_load_actions,
        check=_load_check,
        validate=_validate,
        semantics_doc="For every (i2, i1, i0) < (n2, n1, n0): the `esize` bytes at DRAM "
        "`dram_addr + i2*dram_s2 + i1*dram_s1 + i0*dram_s0` are copied to `local` at "
        "`local_addr + i2*local_s2 + i1*local_s1 + i0*esize`. A DRAM-side `dram_s0` different "
        "from `esize` gathers (a transpose, a channel slice); a DRAM stride of 0 repeats data.",
        timing_doc=_TIMING_DOC + _STREAM_DOC,
        energy_doc=_ENERGY_DOC + " A load whose first burst is held counts only the bursts it fetches.",
    )
)

register(
    InstrDef(
        name="DMA_STORE",
        opcode=0x11,
        queue=Queue.store,
        unit=Unit.dma,
        summary="Copy a strided 3-D block from the scratchpad or the accumulator to DRAM.",
        fields=_fields("memory read: spad or acc"),
        regions=lambda a: (_local_region(a, "r"), _dram_region(a, "w")),
        execute=_copy,
        timing=_timing,
        actions=_actions,
        validate=_validate,
        semantics_doc="The reverse of DMA_LOAD: element (i2, i1, i0) of the local block "
        "(`local_addr + i2*local_s2 + i1*local_s1 + i0*esize`) is written to DRAM at "
        "`dram_addr + i2*dram_s2 + i1*dram_s1 + i0*dram_s0`. The DRAM block must not write an "
        "address twice.",
        timing_doc=_TIMING_DOC,
        energy_doc=_ENERGY_DOC,
    )
)


# ------------------------------------------------------------------------------------ DMA_GATHER
def _gather_regions(a):
    return (
        Region(Mem.spad, a.idx, (a.n1,), (a.idx_s,), np.dtype("<i4"), "r", "idx"),
        Region(Mem.dram, a.dram_addr, (a.table_rows, a.n0), (a.dram_s1, a.dram_s0), _RAW[a.esize], "r", "table"),
        Region(Mem.spad, a.local_addr, (a.n1, a.n0), (a.local_s1, a.esize), _RAW[a.esize], "w", "local"),
    )


def _gathered(a) -> Region:
    """What the transfer moves: n1 rows of n0 elements, each row its own run (its address is
    computed), counted as if at row 0 (a row's bursts do not depend on which row it is)."""
    return Region(Mem.dram, a.dram_addr, (a.n1, a.n0), (0, a.dram_s0), _RAW[a.esize], "r", "rows")


def _gather_exec(st, a, regions) -> None:
    idx_r, table_r, dst = regions
    idx = st.read(idx_r).astype(np.int64)
    bad = np.flatnonzero((idx < 0) | (idx >= a.table_rows))
    if bad.size:
        i = int(bad[0])
        raise SimulationError(f"DMA_GATHER row index {int(idx[i])} (index {i}) is outside the table's "
                              f"{a.table_rows} rows (a gather index out of range)")
    st.write(dst, st.read(table_r)[idx])


# ----------------------------------------------------------------------------- decoded loads


def _stream_region(a) -> Region:
    return Region(Mem.dram, a.dram_addr, (1, 1, a.stream_bytes), (a.stream_bytes, a.stream_bytes, 1), _RAW[1], "r", "dram")


def _decoded_region(a) -> Region:
    return Region(Mem.spad, a.local_addr, (a.n2, a.n1, a.n0), (a.local_s2, a.local_s1, 1), _RAW[1], "w", "local")


def _decode_fields():
    return (
        addr("dram_addr", DRAM_ADDR_BITS, "byte address of the compressed stream (system address map)"),
        uint("stream_bytes", 24, "bytes of the compressed stream"),
        addr("local_addr", LOCAL_ADDR_BITS, "scratchpad byte address of decoded byte (0, 0, 0)"),
        count("n0", "decoded bytes per row (innermost dimension)"),
        count("n1", "rows per plane", default=1),
        count("n2", "planes (outermost dimension)", default=1),
        uint("local_s1", 24, "scratchpad byte stride between rows", default=Derived("n0")),
        uint("local_s2", 24, "scratchpad byte stride between planes", default=Derived("n1 * local_s1")),
    ) + _stream_fields()


def _decode_check(a, target) -> str | None:
    if target.weight_decoder is None:
        return (f"target '{target.name}' has no weight decoder ([weight_decoder] in its target file), "
                "so it cannot run DMA_LOAD_DECODE")
    return _stream_check(a, _stream_region(a), target)


def decode_cycles(stream: Region | None, decoded_bytes: int, target) -> tuple[int, int]:
    """(busy, latency) of a decoded load: the stream's bursts on its memory's port or the
    decoder's output rate, whichever is slower; the memory's latency plus the decoder's
    (``stream`` None: every byte was in a held burst)."""
    busy, latency = (0, 0) if stream is None else transfer_cycles(stream, target)
    dec = target.weight_decoder
    if dec is None:  # the simulator refuses the instruction first (_decode_check); estimates count it raw
        return busy, latency
    return max(busy, -int(-decoded_bytes // dec.bytes_per_cycle)), latency + dec.latency_cycles


def _decode_timing(a, target, regions) -> tuple[int, int]:
    return decode_cycles(fetched(a, regions[0], target), a.n0 * a.n1 * a.n2, target)


def _decode_actions(a, target, regions):
    base = memory_actions(_fetched_regions(a, target, regions), target)
    return base if target.weight_decoder is None else dataclasses.replace(
        base, decoded_bytes=a.n0 * a.n1 * a.n2)


def _decode(st, a, regions) -> None:
    from npuc.isa.weight_codec import WeightStreamError, decode

    stream, out = regions
    try:
        data = decode(st.read(stream).tobytes(), out.count)
    except WeightStreamError as e:
        raise SimulationError(f"the weight stream at 0x{stream.addr:x} ({stream.count} bytes) does not decode: {e}") from None
    st.write(out, np.frombuffer(data, np.uint8).reshape(out.shape))


register(
    InstrDef(
        name="DMA_GATHER",
        opcode=0x12,
        queue=Queue.load,
        unit=Unit.dma,
        summary="Copy rows of a table in DRAM, picked by int32 row indices in the scratchpad, into the scratchpad.",
        fields=(
            esize("esize", "element size in bytes (1, 2 or 4)"),
            addr("dram_addr", DRAM_ADDR_BITS, "DRAM byte address of element 0 of table row 0"),
            addr("local_addr", LOCAL_ADDR_BITS, "scratchpad byte address of the first gathered row"),
            count("n0", "elements per row"),
            count("n1", "rows gathered (one per index)"),
            addr("idx", LOCAL_ADDR_BITS, "scratchpad byte address of the n1 int32 row indices"),
            uint("idx_s", 16, "byte stride between row indices", default=Derived("4")),
            uint("table_rows", 24, "rows of the table (an index must be below it)"),
            uint("dram_s0", 20, "DRAM byte stride between elements of a row", default=Derived("esize")),
            uint("dram_s1", 32, "DRAM byte stride between table rows", default=Derived("n0 * dram_s0")),
            uint("local_s1", 24, "scratchpad byte stride between gathered rows", default=Derived("n0 * esize")),
        ),
        regions=_gather_regions,
        execute=_gather_exec,
        timing=lambda a, target, regions: transfer_cycles(_gathered(a), target),
        actions=lambda a, target, regions: memory_actions((regions[0], _gathered(a), regions[2]), target),
        semantics_doc="For i1 < n1, i0 < n0: the `esize` bytes at DRAM `dram_addr + idx[i1]*dram_s1 + "
        "i0*dram_s0` are copied to the scratchpad at `local_addr + i1*local_s1 + i0*esize`, where "
        "idx[i1] is the int32 at scratchpad `idx + i1*idx_s` (an embedding lookup, a gather of rows "
        "too large for the scratchpad). An index outside [0, table_rows) stops the simulator with an "
        "error (a gather sends an index out of its dim's range to row table_rows). For ordering, the "
        "whole table counts as read.",
        timing_doc="As DMA_LOAD, for n1 runs of one row each (n0 elements at `dram_s0`): every row is "
        "rounded up to whole bursts of the memory the table is in, whichever row it is. " + _TIMING_DOC,
        energy_doc="DRAM-side bytes: the burst-rounded bytes of the n1 rows (not the whole table); "
        "scratchpad bytes: the indices read (4 x n1) and n0 x n1 x esize written.",
    )
)


register(
    InstrDef(
        name="DMA_LOAD_DECODE",
        opcode=0x13,
        queue=Queue.load,
        unit=Unit.dma,
        summary="Read a compressed weight stream through the weight decoder into a 3-D block of the scratchpad.",
        fields=_decode_fields(),
        regions=lambda a: (_stream_region(a), _decoded_region(a)),
        execute=_decode,
        timing=_decode_timing,
        actions=_decode_actions,
        check=_decode_check,
        semantics_doc="The `stream_bytes` bytes at `dram_addr` are a weight stream (npuc.isa.weight_codec: "
        "blocks of 128 decoded bytes, each Rice-coded around a centre, constant or raw); they decode to "
        "exactly n0 x n1 x n2 bytes, which are written in row-major order to the scratchpad at "
        "`local_addr + i2*local_s2 + i1*local_s1 + i0`. A stream that does not decode to exactly that many "
        "bytes stops the simulation with the reason.",
        timing_doc="The stream is read as one contiguous run of whole `memory.NAME.burst_bytes` bursts of the "
        "memory it falls in (as DMA_LOAD, stream buffers included). busy = max(ceil(burst bytes / memory.NAME.bytes_per_cycle), "
        "ceil(n0 x n1 x n2 / weight_decoder.bytes_per_cycle)) cycles on the memory's port; the data is "
        "complete `memory.NAME.latency_cycles + weight_decoder.latency_cycles` after that. Refused on a "
        "target without `[weight_decoder]`.",
        energy_doc="The stream's burst bytes at `memory.NAME.read_pj_per_byte`, n0 x n1 x n2 decoded bytes at "
        "`weight_decoder.pj_per_byte`, and the same bytes written to the scratchpad.",
    )
)


_STREAMED = frozenset({"DMA_LOAD", "DMA_LOAD_DECODE"})  # the instructions with stream buffers


# ------------------------------------------------------------------------------------- DMA_COPY
def _copy_regions(a) -> tuple[Region, Region]:
    n = a.nbytes
    return (Region(Mem.dram, a.src_addr, (1, 1, n), (n, n, 1), _RAW[1], "r", "src"),
            Region(Mem.dram, a.dst_addr, (1, 1, n), (n, n, 1), _RAW[1], "w", "dst"))


def copy_sides(regions: tuple[Region, ...], target) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """((port index, busy, latency) of the read side, the same of the write side) of a
    memory-to-memory copy whose system-address-map regions are ``regions`` (source first)."""
    out = []
    for r in regions:
        w = target.window_at(r.addr, r.end) or target.window_at(r.addr)
        m = w.memory if w is not None else target.activation_memory
        busy, latency = transfer_cycles(r, target)
        out.append((target.ports.index(m.port), busy, latency))
    return out[0], out[1]


def _copy_timing(a, target, regions) -> tuple[int, int]:
    """(busy, latency): the read side's busy cycles on its port (the write side holds its own
    port beside it: ``copy_sides``), or both sides' when they share a port; the two latencies."""
    (rp, rb, rl), (wp, wb, wl) = copy_sides(regions, target)
    return (rb + wb if rp == wp else rb), rl + wl


register(
    InstrDef(
        name="DMA_COPY",
        opcode=0x14,
        queue=Queue.copy,
        unit=Unit.dma,
        summary="Copy a run of bytes from one memory of the system address map to another, on the background copy queue.",
        fields=(
            addr("src_addr", DRAM_ADDR_BITS, "byte address of the first byte read (system address map)"),
            addr("dst_addr", DRAM_ADDR_BITS, "byte address of the first byte written (system address map)"),
            uint("nbytes", 24, "bytes copied", lo=1),
        ),
        regions=_copy_regions,
        execute=_copy,
        timing=_copy_timing,
        actions=_actions,
        semantics_doc="The `nbytes` bytes at `src_addr` are copied to `dst_addr` (the two runs must not "
        "overlap). Both sides are addresses of the system address map: a copy stages weights from "
        "the flash into the shared SRAM while the load and store queues serve the kernels, so the "
        "layer that reads them later loads them at the SRAM's rate.",
        timing_doc="Each side is a contiguous run in one memory's window, rounded up to whole bursts "
        "of that memory. The copy starts when the read side's port is free and holds it for ceil(burst bytes / "
        "`memory.SRC.bytes_per_cycle`) cycles; the write side takes ceil(burst bytes / "
        "`memory.DST.bytes_per_cycle`) cycles of its own port from when that port is next free "
        "(the writes are buffered; both sides are counted on one port when the two memories share it); it completes `memory.SRC.latency_cycles + "
        "memory.DST.latency_cycles` after the read side is done. Copies of the copy queue are "
        "pipelined and retire in order, as the transfers of the load and store queues. A side that "
        "spans two windows or leaves every window, and a write to a flash memory, are refused "
        "before the program runs.",
        energy_doc="The burst-rounded bytes of each side, counted for the memory it falls in "
        "(`memory.SRC.read_pj_per_byte`, `memory.DST.write_pj_per_byte`); no scratchpad bytes.",
        validate=lambda a: ("the source and destination runs overlap" if a.src_addr < a.dst_addr + a.nbytes
                            and a.dst_addr < a.src_addr + a.nbytes else None),
    )
)
