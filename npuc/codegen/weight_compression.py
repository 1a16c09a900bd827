"""Weight compression: weight loads become DMA_LOAD_DECODE of streams stored in place of the raw weights.

On a target with a weight decoder (``[weight_decoder]``), after every NPU segment is emitted (before
rerolling), each constant of the blob is considered in turn.  A constant qualifies when every
instruction that touches it is a byte-wise ``DMA_LOAD`` into the scratchpad that reads inside it,
and no CPU segment binds it.  Each distinct block such a load reads (its DRAM region: address,
shape, strides) becomes one stream (npuc.isa.weight_codec) of the bytes in the order the load
writes them; the streams are packed, in order of first use, into the constant's own bytes of the
blob, which they replace (the rest of its bytes become zero), so the memory plan does not move.
The constant is compressed only when its streams fit in its bytes and its loads then move fewer
bytes, in whole bursts of the memory it lives in, than they did raw (a strided tile load that
paid partial bursts raw reads one contiguous stream).  Otherwise it stays as it was.

The record of what was compressed (:class:`~npuc.runtime.npub_model.WeightStreams`) goes into the binary's
WEIGHT_STREAMS section (docs/binary-format.md): the profile's compulsory weight bytes and the
per-layer lower bounds read the stored sizes from it.
"""

from __future__ import annotations

import zlib

import numpy as np

from npuc.isa.enums import Mem, Space
from npuc.isa.instr import Instr
from npuc.isa.weight_codec import encode
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


def compress_weight_loads(programs: list[list[Instr]], plan, target) -> tuple[list[list[Instr]], bytes, WeightStreams]:
    """The programs with qualifying weight loads decoded, the new constants blob, the record."""
    if target.weight_decoder is None or not plan.constants:
        return programs, plan.constants, WeightStreams()
    base = next(off for _, kind, off, _ in plan.regions if kind == "CONSTANTS")
    cpu_bound = {f"#{c}" for s in plan.model.segments if isinstance(s, CpuSegment) for c in s.graph.constants}
    entries = sorted((p.offset, p.buffer.nbytes) for p in plan.placed
                     if p.buffer.kind == CONSTANT and p.buffer.name not in cpu_bound and p.buffer.nbytes)
    starts = [e[0] for e in entries]
    blob_end = base + len(plan.constants)
    users: dict[int, list[tuple[int, int]]] = {}   # entry index -> [(program, instruction)]
    refused: set[int] = set()
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
                        refused.add(j)
                continue
            users.setdefault(e, []).append((pi, ii))
    blob = bytearray(plan.constants)
    view = np.frombuffer(bytes(plan.constants), np.uint8)
    out = [list(p) for p in programs]
    streams: list[WeightStream] = []
    done: list[CompressedConstant] = []
    burst = target.weight_memory.burst_bytes
    for e in sorted(users):
        if e in refused:
            continue
        off, size = entries[e]
        coded: dict[tuple, tuple[int, bytes]] = {}
        raw_moved = coded_moved = 0
        for pi, ii in users[e]:
            ins = programs[pi][ii]
            r = _dram_region(ins)
            raw_moved += r.burst_bytes(burst)
            key = _block_key(ins)
            if key not in coded:
                data = np.lib.stride_tricks.as_strided(view[r.addr - base:], r.shape, r.strides).tobytes()
                coded[key] = (len(data), encode(data))
            coded_moved += -(-len(coded[key][1]) // burst) * burst
        stored = sum(len(s) for _, s in coded.values())
        if stored > size or coded_moved >= raw_moved:
            continue
        at = off
        addr_of: dict[tuple, int] = {}
        blob[off - base:off - base + size] = bytes(size)
        for key, (n, s) in coded.items():
            addr_of[key] = at
            blob[at - base:at - base + len(s)] = s
            decoded = _decoded(view, base, key)
            streams.append(WeightStream(at, len(s), n, zlib.crc32(decoded)))
            at += len(s)
        for pi, ii in users[e]:
            ins = programs[pi][ii]
            key = _block_key(ins)
            out[pi][ii] = _decode_load(ins, addr_of[key], len(coded[key][1]))
        done.append(CompressedConstant(off, size, stored))
    return out, bytes(blob), WeightStreams(tuple(streams), tuple(done))


def _decoded(view: np.ndarray, base: int, key: tuple) -> bytes:
    addr, n2, n1, n0, s2, s1, s0 = key
    return np.lib.stride_tricks.as_strided(view[addr - base:], (n2, n1, n0), (s2, s1, s0)).tobytes()


def _decode_load(ins: Instr, stream_addr: int, stream_bytes: int) -> Instr:
    a = ins.args
    return Instr.make("DMA_LOAD_DECODE", deps=ins.deps, dram_addr=stream_addr, stream_bytes=stream_bytes,
                      local_addr=a.local_addr, n0=a.n0, n1=a.n1, n2=a.n2, local_s1=a.local_s1, local_s2=a.local_s2)
