"""Weight compression: weight loads become DMA_LOAD_DECODE of streams stored in place of the raw weights.

On a target with a weight decoder (``[weight_decoder]``), after every NPU segment is emitted (before
rerolling), each constant of the blob is considered in turn.  A constant qualifies when every
instruction that touches it is a byte-wise ``DMA_LOAD`` into the scratchpad that reads inside it,
and no CPU segment binds it.  Each distinct block such a load reads (its DRAM region: address,
shape, strides) becomes one stream (npuc.isa.weight_codec) of the bytes in the order the load
writes them; the streams are packed, in order of first use, into the constant's own bytes of the
blob, which they replace (the rest of its bytes become zero), so the memory plan does not move.
Consecutive loads of one program that read a block's planes one after another (a block loaded
in pieces over the steps before its use: npuc.schedule.transfers.weight_plan) make one block
together.  Blocks are taken largest first; each becomes a run of the constant's new contents, in the order
its load writes the bytes: a stream of the codec when that saves at least one burst (with stream
buffers, npuc.codegen.constant_streams, any byte: the loads then share the bursts at their seams),
else the raw bytes, contiguous, which a plain DMA_LOAD then reads (so incompressible weights still
stop paying a burst for every short strided run).  A load whose bytes are a block-aligned part of a run
already made (a plane of a tile that is also loaded plane by plane, a piece of a block loaded in
pieces) reads that part of it (every block of a stream decodes on its own).  The constant's runs
are made with the pieces' blocks and without them, and the layout whose loads move fewer bursts
is kept.  The constant is rewritten only when its runs fit in its
bytes and its loads then move fewer bytes, in whole bursts of the memory it lives in, than they
did raw; otherwise it stays as it was.  (A constant rewritten with raw runs only is reordered,
not compressed: the record leaves it out.)

A constant copied whole into a faster memory before its reader (``npuc.codegen.weight_staging``:
staged, or copied kernels ahead) is read by ``DMA_COPY`` slices, not loads, and qualifies when
its copy does (:func:`_staged_copies`): its streams are made from the reader's loads of the copy,
as if they read the constant, and packed at the end of the constant's bytes; the copy's slices
are shrunk to those bytes and the reader's loads read the streams from the copy.  The copy of
a staged constant is issued last slice first, so the reader's first load (of the first bytes)
orders after the whole copy; each slice moves a share of the packed bytes no lower than the
bytes it used to copy, which the slices issued up to it have cleared for writing.

The record of what was compressed (:class:`~npuc.runtime.npub_model.WeightStreams`) goes into the binary's
WEIGHT_STREAMS section (docs/binary-format.md): the profile's compulsory weight bytes and the
per-layer lower bounds read the stored sizes from it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from npuc.isa.enums import Mem, Space
from npuc.isa.instr import Instr
from npuc.isa.region import Region
from npuc.isa.weight_codec import BLOCK, encode_blocks, worth_compressing
from npuc.kir.program import CONSTANT, CpuSegment
from npuc.runtime.npub_model import CompressedConstant, WeightStream, WeightStreams


def _dram_region(ins: Instr):
    for r in ins.defn.regions(ins.args):
        if r.mem is Mem.dram:
            return r
    return None


def _block_key(ins: Instr) -> tuple:
    a = ins.args
    return (a.dram_addr, a.n2, a.n1, a.n0, a.dram_s2, a.dram_s1, a.dram_s0)


def _loadable(ins: Instr) -> bool:
    a = ins.args
    return ins.op == "DMA_LOAD" and a.esize == 1 and a.local is Space.spad


def compress_weight_loads(programs: list[list[Instr]], plan, target,
                          labels: list[tuple[str, ...]] | None = None) -> tuple[list[list[Instr]], bytes, WeightStreams]:
    """The programs with qualifying weight loads decoded, the new constants blob, the record;
    ``labels``: each program's instruction labels (the kernel that emitted each), which let a
    staged constant's copy and its reader's loads be found (:func:`_staged_copies`)."""
    if target.weight_decoder is None or not plan.constants:
        return programs, plan.constants, WeightStreams()
    base = next(off for _, kind, off, _ in plan.regions if kind == "CONSTANTS")
    cpu_bound = {f"#{c}" for s in plan.model.segments if isinstance(s, CpuSegment) for c in s.graph.constants}
    entries = sorted((p.offset, p.buffer.nbytes) for p in plan.placed
                     if p.buffer.kind == CONSTANT and p.buffer.name not in cpu_bound and p.buffer.nbytes)
    starts = [e[0] for e in entries]
    blob_end = base + len(plan.constants)
    users: dict[int, list[tuple[int, int]]] = {}   # entry index -> [(program, instruction)]
    refused: dict[int, set[tuple[int, int]]] = {}  # entry index -> the instructions that keep it raw
    for pi, prog in enumerate(programs):
        for ii, ins in enumerate(prog):
            r = _dram_region(ins)
            if r is None or r.end <= base or r.addr >= blob_end:
                continue
            e = int(np.searchsorted(starts, r.addr, side="right")) - 1
            inside = e >= 0 and r.end <= entries[e][0] + entries[e][1]
            if not inside or not _loadable(ins):
                for j, (off, n) in enumerate(entries):  # every constant this instruction touches stays raw
                    if off < r.end and r.addr < off + n:
                        refused.setdefault(j, set()).add((pi, ii))
                continue
            users.setdefault(e, []).append((pi, ii))
    blob = bytearray(plan.constants)
    view = np.frombuffer(bytes(plan.constants), np.uint8)
    out = [list(p) for p in programs]
    streams: list[WeightStream] = []
    done: list[CompressedConstant] = []
    staged = _staged_copies(programs, labels, plan, entries) if labels is not None else {}
    staged = {e: c for e, c in staged.items() if e not in users and refused.get(e) == set(c.copies)}
    for e in sorted(set(users) | set(staged)):
        if e in refused and e not in staged:
            continue
        if e in staged:
            placed = _compress_staged(programs, staged[e], entries[e], view, base, target, out)
        else:
            tries = [_compress_constant(programs, users[e], entries[e], view, base, target, grouped)
                     for grouped in (True, False)]
            placed = min((x for x in tries if x is not None), key=lambda x: (x.moved, x.stored), default=None)
        if placed is None:
            continue
        off, size = entries[e]
        blob[off - base:off - base + size] = bytes(size)
        for at, parts, decoded in placed.streams:
            data = decoded if parts is None else b"".join(parts)
            blob[at - base:at - base + len(data)] = data
            if parts is not None:
                streams.append(WeightStream(at, len(data), len(decoded), zlib.crc32(decoded)))
        for (pi, ii), (at, nbytes, coded) in placed.loads.items():
            ins = programs[pi][ii]
            at += placed.reads_at - off
            out[pi][ii] = _decode_load(ins, at, nbytes) if coded else _contiguous_load(ins, at)
        if any(parts is not None for _, parts, _ in placed.streams):  # else only reordered: stored raw
            done.append(CompressedConstant(off, size, placed.stored))
    return out, bytes(blob), WeightStreams(tuple(streams), tuple(done))


class _Placed:
    """A constant's new contents: its streams (address, coded blocks or None for a raw run,
    decoded bytes) and each load's (address, bytes, coded) of the run, or of the block-aligned
    part of one, that it reads."""

    def __init__(self) -> None:
        self.streams: list[tuple[int, list[bytes] | None, bytes]] = []
        self.loads: dict[tuple[int, int], tuple[int, int, bool]] = {}
        self.stored = 0
        self.moved = 0  # bytes its loads move, in whole bursts
        self.reads_at = 0  # where the loads read the constant's first byte (its own address, or its staged copy's)


def _addresses(r) -> np.ndarray:
    """The DRAM address of each element of region ``r``, in the order a load writes them."""
    idx = [np.arange(n, dtype=np.int64) * s for n, s in zip(r.shape, r.strides)]
    return (r.addr + idx[0][:, None, None] + idx[1][None, :, None] + idx[2][None, None, :]).ravel()


def _compress_constant(programs, users, entry, view, base, target, grouped: bool = True) -> _Placed | None:
    """The new contents of one constant and where each of its loads reads, or None when they do
    not fit in its bytes or move no fewer whole bursts than the raw loads.

    Each distinct block its loads read, largest first, becomes a run in load order: a stream of
    the codec when that saves at least a burst, else the raw bytes (contiguous, so a plain
    DMA_LOAD reads it in whole bursts).  ``grouped``: the blocks that consecutive loads read
    together (:func:`_grouped_blocks`) count as blocks too.  A load whose bytes are a
    block-aligned part of a run already made (a plane of a tile loaded plane by plane, a piece
    of a block loaded in pieces) reads that part of it."""
    off, size = entry
    burst = target.window_at(off).memory.burst_bytes
    # with stream buffers a constant's loads, read in order, share the bursts at their seams
    # (npuc.codegen.constant_streams): a block then costs its bytes, not its whole bursts
    streamed = target.stream_buffers > 0
    regions = {ref: _dram_region(programs[ref[0]][ref[1]]) for ref in users}
    keys: dict[tuple, object] = {}
    for key, region in _grouped_blocks(programs, users, regions) if grouped else ():
        keys.setdefault(key, region)
    for ref in users:
        keys.setdefault(_block_key(programs[ref[0]][ref[1]]), regions[ref])
    order = sorted(keys, key=lambda k: -keys[k].count)
    runs: list[tuple[np.ndarray, list[bytes] | None, list[int]]] = []  # addresses, coded blocks, block offsets
    starts: dict[int, tuple[int, int]] = {}  # address of a block's first byte -> (run, block)
    where: dict[tuple, tuple[int, int, int]] = {}  # block key -> (run, first block, blocks)
    for k in order:
        a = _addresses(keys[k])
        hit = starts.get(int(a[0]))
        if hit is not None:
            ri, b = hit
            full = runs[ri][0]
            pos = b * BLOCK
            if (pos + a.size <= full.size and (a.size % BLOCK == 0 or pos + a.size == full.size)
                    and np.array_equal(full[pos:pos + a.size], a)):
                where[k] = (ri, b, -(-a.size // BLOCK))
                continue
        parts = encode_blocks(view[a - base])
        if worth_compressing(a.size, sum(len(x) for x in parts), 1 if streamed else burst):
            offsets = np.concatenate([[0], np.cumsum([len(x) for x in parts])]).tolist()
        else:
            parts, offsets = None, [min(j * BLOCK, a.size) for j in range(-(-a.size // BLOCK) + 1)]
        for j in range(-(-a.size // BLOCK)):
            starts.setdefault(int(a[j * BLOCK]), (len(runs), j))
        where[k] = (len(runs), 0, len(offsets) - 1)
        runs.append((a, parts, offsets))
    stored = sum(r[2][-1] for r in runs)
    if stored > size:
        return None
    placed = _Placed()
    placed.reads_at = off
    at = off
    run_at = []
    for a, parts, offsets in runs:
        run_at.append(at)
        placed.streams.append((at, parts, view[a - base].tobytes()))
        at += offsets[-1]
    placed.stored = stored
    raw_moved = new_moved = 0
    for ref in users:
        ri, b, nb = where[_block_key(programs[ref[0]][ref[1]])]
        offsets = runs[ri][2]
        start, nbytes = run_at[ri] + offsets[b], offsets[b + nb] - offsets[b]
        placed.loads[ref] = (start, nbytes, runs[ri][1] is not None)
        if streamed:
            raw_moved += regions[ref].count if regions[ref].dram_runs()[0] == 1 else regions[ref].burst_bytes(burst)
            new_moved += nbytes
        else:
            raw_moved += regions[ref].burst_bytes(burst)
            new_moved += -(-nbytes // burst) * burst
    placed.moved = new_moved
    return placed if new_moved < raw_moved else None


@dataclass(frozen=True)
class _StagedCopy:
    """A constant copied whole into a faster memory before the kernel that reads it
    (``npuc.codegen.weight_staging``): the copy's address, its ``DMA_COPY`` slices and the
    reader's loads of it (program, instruction)."""

    at: int
    copies: tuple[tuple[int, int], ...]
    loads: tuple[tuple[int, int], ...]


def _staged_copies(programs, labels, plan, entries) -> dict[int, _StagedCopy]:
    """Entry index -> its staged copy, for every constant whose staged copy qualifies: the copy
    kernel's instructions are ``DMA_COPY`` slices that copy the constant, each to the same
    offset of the copy, together once; every instruction of its readers that touches the copy
    is a byte-wise ``DMA_LOAD`` into the scratchpad that reads inside it; all in one program;
    and the first of those loads reads bytes of the slice issued last (the copy of a staged
    constant is issued last slice first, ``npuc.codegen.kernels.move_copy``), so every load
    orders after the whole copy and the copied bytes may be repacked."""
    from npuc.codegen.weight_staging import copied_constant, is_weight_copy
    from npuc.kir.program import NpuSegment

    placed = {p.buffer.name: p for p in plan.placed}
    index = {off: e for e, (off, _) in enumerate(entries)}
    writer: dict[str, str] = {}  # kernel -> the staged copy it writes
    readers: dict[str, list[str]] = {}  # kernel -> the staged copies it reads
    for seg in plan.model.segments:
        if not isinstance(seg, NpuSegment):
            continue
        for lk in seg.kernels:
            k = lk.kernel
            if is_weight_copy(k):
                writer[lk.name] = k.output.name
            for name in {x.name for x in k.tensors()} - {k.output.name}:
                if copied_constant(name) is not None:
                    readers.setdefault(lk.name, []).append(name)
    found: dict[str, tuple[list, list]] = {}
    bad: set[str] = set()
    for pi, prog in enumerate(programs):
        for ii, ins in enumerate(prog):
            label = labels[pi][ii]
            name = writer.get(label)
            if name is not None:
                found.setdefault(name, ([], []))[0].append((pi, ii))
                if ins.op != "DMA_COPY":
                    bad.add(name)
                continue
            names = readers.get(label, ())
            regions = ins.defn.regions(ins.args) if names else ()
            for name in names:
                b = placed.get(name)
                if b is None:
                    continue
                lo, hi = b.offset, b.offset + b.buffer.nbytes
                for r in regions:
                    if r.mem is Mem.dram and r.addr < hi and lo < r.end:
                        found.setdefault(name, ([], []))[1].append((pi, ii))
                        if not (_loadable(ins) and lo <= r.addr and r.end <= hi):
                            bad.add(name)
    out: dict[int, _StagedCopy] = {}
    for name, (copies, loads) in found.items():
        c, b = placed.get(copied_constant(name)), placed.get(name)
        if name in bad or not copies or not loads or c is None or b is None or c.buffer.kind != CONSTANT:
            continue
        e = index.get(c.offset)
        if e is None or len({pi for pi, _ in copies + loads}) != 1 or max(copies) > min(loads):
            continue
        slices = sorted((programs[pi][ii].args for pi, ii in copies), key=lambda a: a.dst_addr)
        at = b.offset
        if (any(a.src_addr - c.offset != a.dst_addr - at for a in slices)
                or any(x.dst_addr + x.nbytes != y.dst_addr for x, y in zip(slices, slices[1:]))
                or slices[0].dst_addr != at or slices[-1].dst_addr + slices[-1].nbytes != at + c.buffer.nbytes):
            continue
        last = programs[max(copies)[0]][max(copies)[1]].args
        first = _dram_region(programs[min(loads)[0]][min(loads)[1]])
        if not (first.addr < last.dst_addr + last.nbytes and last.dst_addr < first.end):
            continue
        out[e] = _StagedCopy(at, tuple(copies), tuple(loads))
    return out


def _compress_staged(programs, sc: _StagedCopy, entry, view, base, target, out) -> _Placed | None:
    """A staged constant's new contents (as :func:`_compress_constant` makes them from its
    reader's loads of the copy), packed at the end of its bytes, and its copy's slices (in
    ``out``) rewritten to copy only those: the copy then reads fewer bytes of the slow memory.
    The slices keep their count and order, each copying an even share of the packed bytes in
    whole bursts, none below its old first byte (a slice writes only bytes that the slices
    issued up to it already cleared for writing); the reader's loads order after the whole
    copy (:func:`_staged_copies`).  None when the packed bytes save no whole burst of the copy."""
    off, size = entry
    delta = off - sc.at
    shadow: dict[int, dict[int, Instr]] = {}
    for pi, ii in sc.loads:
        ins = programs[pi][ii]
        shadow.setdefault(pi, {})[ii] = Instr(ins.op, ins.args._replace(dram_addr=ins.args.dram_addr + delta), ins.deps)
    tries = [_compress_constant(shadow, list(sc.loads), entry, view, base, target, grouped) for grouped in (True, False)]
    placed = min((x for x in tries if x is not None), key=lambda x: (x.stored, x.moved), default=None)
    if placed is None:
        return None
    burst = target.window_at(off).memory.burst_bytes
    shift = (size - placed.stored) // burst * burst
    copies = sorted(sc.copies, key=lambda ref: programs[ref[0]][ref[1]].args.dst_addr)
    n, total = len(copies), size - shift
    bursts = -(-total // burst)
    if shift == 0 or bursts < n:
        return None
    bounds = [shift + (j * bursts // n) * burst for j in range(n)] + [size]
    if any(bounds[j] < programs[pi][ii].args.dst_addr - sc.at for j, (pi, ii) in enumerate(copies)):
        return None
    for j, (pi, ii) in enumerate(copies):
        ins = programs[pi][ii]
        out[pi][ii] = Instr(ins.op, ins.args._replace(src_addr=off + bounds[j], dst_addr=sc.at + bounds[j],
                                                      nbytes=bounds[j + 1] - bounds[j]), ins.deps)
    placed.streams = [(at + shift, parts, decoded) for at, parts, decoded in placed.streams]
    placed.loads = {ref: (at + shift, nbytes, coded) for ref, (at, nbytes, coded) in placed.loads.items()}
    placed.reads_at = sc.at
    return placed


def _grouped_blocks(programs, users, regions) -> list[tuple[tuple, Region]]:
    """The blocks that runs of consecutive loads of one constant make together: loads of one
    program, one after another among the constant's loads, each reading the planes (outermost
    dimension) that follow the last one's, with the same rows (a block loaded a plane or a few
    at a time, spread over the steps before its use).  Each group of two or more loads whose
    parts, but the last, are whole codec blocks is one block (key, region), so its bytes become
    one run: one stream, of which each load reads its part."""
    out: list[tuple[tuple, Region]] = []
    group: list[tuple[int, int]] = []

    def close() -> None:
        if len(group) > 1:
            first = programs[group[0][0]][group[0][1]].args
            n2 = sum(programs[pi][ii].args.n2 for pi, ii in group)
            key = (first.dram_addr, n2) + _block_key(programs[group[0][0]][group[0][1]])[2:]
            r = regions[group[0]]
            out.append((key, r._replace(shape=(n2,) + r.shape[1:], strides=(first.dram_s2,) + r.strides[1:])))

    for ref in users:
        a = programs[ref[0]][ref[1]].args
        if group:
            p = programs[group[-1][0]][group[-1][1]].args
            follows = (ref[0] == group[-1][0]
                       and _block_key(programs[ref[0]][ref[1]])[2:] == _block_key(programs[group[-1][0]][group[-1][1]])[2:]
                       and a.dram_addr == p.dram_addr + p.n2 * p.dram_s2 and regions[group[-1]].count % BLOCK == 0)
            if not follows:
                close()
                group = []
        group.append(ref)
    close()
    return out


def _contiguous_load(ins: Instr, addr: int) -> Instr:
    """The load reading its bytes, in its order, from one contiguous run at ``addr``."""
    a = ins.args
    return Instr.make("DMA_LOAD", deps=ins.deps, local=a.local, esize=1, dram_addr=addr, local_addr=a.local_addr,
                      n0=a.n0, n1=a.n1, n2=a.n2, dram_s0=1, dram_s1=a.n0, dram_s2=a.n0 * a.n1,
                      local_s1=a.local_s1, local_s2=a.local_s2)


def _decode_load(ins: Instr, stream_addr: int, stream_bytes: int) -> Instr:
    a = ins.args
    return Instr.make("DMA_LOAD_DECODE", deps=ins.deps, dram_addr=stream_addr, stream_bytes=stream_bytes,
                      local_addr=a.local_addr, n0=a.n0, n1=a.n1, n2=a.n2, local_s1=a.local_s1, local_s2=a.local_s2)
