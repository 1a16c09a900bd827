"""The meaning checks of a .npub container, shared by the writer and the loader.

Decoding (:mod:`npuc.runtime.npub_sections`) guarantees well-formed bytes; this module checks that
the content makes sense: shapes and quantization, offsets inside the DRAM arena and the constants
blob, regions that do not overlap, an execution order whose every input was produced before, a
debug map that matches the code.  The writer runs it before writing (so npuc never writes a file it
would refuse) and the loader after decoding.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from npuc.errors import BinaryFormatError
from npuc.ir.types import DType, TensorType
from npuc.runtime.npub_codec import format_error
from npuc.runtime.npub_model import (
    MAX_RANK,
    ZERO_POINT_RANGE,
    BindingRole,
    CpuSubgraph,
    DebugEntry,
    IOTensor,
    MemoryPlan,
    Metadata,
    RegionKind,
    Segment,
    SegmentKind,
)

if TYPE_CHECKING:
    from npuc.runtime.npub import Npub

FINGERPRINT_SIZE = 32
MAX_TARGET_NAME = 255  # bytes of UTF-8


class _Check:
    """Raises errors about one section of one container."""

    def __init__(self, source: str | None, where: str) -> None:
        self.source = source
        self.where = where

    def fail(self, text: str) -> BinaryFormatError:
        return format_error(self.source, self.where, text)

    def name(self, s: object, field: str) -> str:
        if not isinstance(s, str) or not s:
            raise self.fail(f"{field} is {s!r}; it must be a non-empty string")
        return s

    def unique(self, names: Sequence[str], field: str) -> None:
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise self.fail(f"{field} '{n}' appears twice; names must be unique")
            seen.add(n)

    def index(self, v: object, field: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.fail(f"{field} is {v!r}; it must be an integer >= 0")
        return v

    def kind(self, v: object, cls: type, field: str) -> None:
        if not isinstance(v, cls):
            raise self.fail(f"{field} is {v!r}, which is not a {cls.__name__}")


def validate_npub(n: "Npub", source: str | None = None, instr_counts: Sequence[int] | None = None) -> None:
    """Check the meaning of every part of ``n``; raise :class:`BinaryFormatError` on the first fault.

    ``instr_counts`` (one per code segment), when known from decoding the code, bounds the
    instruction indices of the debug map.
    """
    _check_header(n, _Check(source, "header"))
    for i, p in enumerate(n.code_segments):
        if not isinstance(p, bytes):
            raise _Check(source, "CODE section").fail(f"program {i} is {type(p).__name__}, not bytes")
    if not isinstance(n.constants, bytes):
        raise _Check(source, "CONSTANTS section").fail("the constants blob is not bytes")
    _check_memory_plan(n.memory_plan, len(n.code_segments), len(n.constants), _Check(source, "MEMORY_PLAN section"))
    arena = n.memory_plan.dram_arena_size
    c = _Check(source, "IO_SIGNATURE section")
    _check_io(n.io_signature.inputs, "input", arena, c)
    _check_io(n.io_signature.outputs, "output", arena, c)
    _check_cpu_fallback(n.cpu_fallback, arena, len(n.constants), _Check(source, "CPU_FALLBACK section"))
    _check_host_code(n, _Check(source, "HOST_CODE section"))
    if getattr(n, "weight_streams", None) is not None:
        _check_weight_streams(n, _Check(source, "WEIGHT_STREAMS section"))
    _check_segments(n, _Check(source, "SEGMENTS section"))
    if n.debug_map is not None:
        _check_debug_map(n.debug_map, len(n.code_segments), instr_counts, _Check(source, "DEBUG_MAP section"))
    if n.metadata is not None:
        _check_metadata(n.metadata, _Check(source, "METADATA section"))


def _check_header(n: "Npub", c: _Check) -> None:
    name = c.name(n.target_name, "the target name")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise c.fail("the target name cannot be encoded as UTF-8") from None
    if len(encoded) > MAX_TARGET_NAME:
        raise c.fail(f"the target name is longer than {MAX_TARGET_NAME} bytes")
    fp = n.target_fingerprint
    if not isinstance(fp, bytes) or len(fp) != FINGERPRINT_SIZE:
        raise c.fail(f"the target fingerprint must be {FINGERPRINT_SIZE} bytes, got {fp!r}")


def check_tensor_type(t: TensorType, field: str, c: _Check) -> None:
    """Element type known, dimensions >= 0, layout a non-empty name, quantization consistent."""
    if not isinstance(t, TensorType):
        raise c.fail(f"{field} is {t!r}, not a TensorType")
    c.kind(t.dtype, DType, f"{field} element type")
    if len(t.shape) > MAX_RANK:
        raise c.fail(f"{field} has rank {len(t.shape)}; a tensor has at most {MAX_RANK} dimensions")
    for i, d in enumerate(t.shape):
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise c.fail(f"{field} has dimension {i} = {d!r}; dimensions must be integers >= 0")
    if t.layout is not None:
        c.name(t.layout, f"{field} layout")
    if t.quant is not None:
        _check_quant(t, field, c)


def _check_quant(t: TensorType, field: str, c: _Check) -> None:
    q = t.quant
    if q is None:
        return
    if t.dtype not in ZERO_POINT_RANGE:
        raise c.fail(f"{field} is quantized but its element type {t.dtype.value} is not an integer type")
    if len(q.scale) != len(q.zero_point) or not q.scale:
        raise c.fail(f"{field} quantization has {len(q.scale)} scales and {len(q.zero_point)} zero points")
    if q.axis is None and len(q.scale) != 1:
        raise c.fail(f"{field} quantization is per-tensor but has {len(q.scale)} scales")
    if q.axis is not None:
        if not 0 <= q.axis < len(t.shape):
            raise c.fail(f"{field} quantization axis {q.axis} is outside its rank {len(t.shape)}")
        if len(q.scale) != t.shape[q.axis]:
            raise c.fail(
                f"{field} quantization has {len(q.scale)} scales for axis {q.axis} of size {t.shape[q.axis]}"
            )
    lo, hi = ZERO_POINT_RANGE[t.dtype]
    for i, (s, z) in enumerate(zip(q.scale, q.zero_point)):
        if not isinstance(s, float) or not math.isfinite(s) or s <= 0:
            raise c.fail(f"{field} quantization scale {i} is {s!r}; scales must be finite and > 0")
        if isinstance(z, bool) or not isinstance(z, int) or not lo <= z <= hi:
            raise c.fail(f"{field} quantization zero point {i} is {z!r}, outside [{lo}, {hi}] of {t.dtype.value}")


def _check_span(offset: int, size: int, limit: int, what: str, space: str, c: _Check) -> None:
    c.index(offset, f"the offset of {what}")
    if offset + size > limit:
        raise c.fail(f"{what} spans bytes [{offset}, {offset + size}), past the end of the {space} ({limit} bytes)")


def _check_memory_plan(m: MemoryPlan, n_code: int, n_constants: int, c: _Check) -> None:
    if not isinstance(m, MemoryPlan):
        raise c.fail(f"the memory plan is {m!r}, not a MemoryPlan")
    c.index(m.dram_arena_size, "the DRAM arena size")
    for i, r in enumerate(m.regions):
        c.kind(r.kind, RegionKind, f"region {i} kind")
        c.name(r.name, f"the name of region {i}")
        c.index(r.size, f"the size of region '{r.name}'")
        _check_span(r.offset, r.size, m.dram_arena_size, f"region '{r.name}'", "DRAM arena", c)
    c.unique([r.name for r in m.regions], "region name")
    ordered = sorted((r for r in m.regions if r.size > 0), key=lambda r: (r.offset, r.name))
    for a, b in zip(ordered, ordered[1:]):
        if b.offset < a.offset + a.size:
            raise c.fail(f"regions '{a.name}' and '{b.name}' overlap in the DRAM arena")
    const_regions = [r for r in m.regions if r.kind == RegionKind.CONSTANTS]
    if len(const_regions) > 1:
        raise c.fail(f"there are {len(const_regions)} CONSTANTS regions; at most one is allowed")
    if n_constants and (not const_regions or const_regions[0].size < n_constants):
        raise c.fail(f"the {n_constants}-byte constants blob needs a CONSTANTS region at least that large")
    if len(m.sram) != n_code:
        raise c.fail(f"there are {len(m.sram)} SRAM usage entries for {n_code} code segments")
    for i, s in enumerate(m.sram):
        c.index(s.scratchpad_bytes, f"the scratchpad bytes of code segment {i}")
        c.index(s.accumulator_bytes, f"the accumulator bytes of code segment {i}")


def _check_io(items: tuple[IOTensor, ...], role: str, arena: int, c: _Check) -> None:
    for i, t in enumerate(items):
        c.name(t.name, f"the name of {role} {i}")
        what = f"{role} {i} '{t.name}'"
        check_tensor_type(t.type, what, c)
        _check_span(t.dram_offset, t.type.nbytes, arena, what, "DRAM arena", c)
    c.unique([t.name for t in items], f"{role} name")


def _check_host_code(n, c: _Check) -> None:
    seen = set()
    for i, m in enumerate(n.host_code):
        if m.subgraph >= len(n.cpu_fallback):
            raise c.fail(f"module {i} is the code of CPU subgraph {m.subgraph}, but there are {len(n.cpu_fallback)}")
        if m.subgraph in seen:
            raise c.fail(f"CPU subgraph {m.subgraph} has two host modules")
        if not m.triple or not m.code:
            raise c.fail(f"module {i} has an empty target triple or no code")
        seen.add(m.subgraph)


def _check_weight_streams(n, c: _Check) -> None:
    """Every stream inside the constants blob, in address order, not overlapping, decoding to its
    stated bytes with its CRC; every compressed constant inside the blob, holding its streams."""
    import zlib

    from npuc.isa.weight_codec import WeightStreamError, decode
    from npuc.runtime.npub_model import RegionKind

    ws = n.weight_streams
    base = next((r.offset for r in n.memory_plan.regions if r.kind == RegionKind.CONSTANTS), 0)
    end = base + len(n.constants)
    previous = base
    for i, s in enumerate(ws.streams):
        if s.offset < previous or s.offset + s.stream_bytes > end:
            raise c.fail(f"stream {i} at 0x{s.offset:x} ({s.stream_bytes} bytes) is not inside the constants blob "
                         f"[0x{base:x}, 0x{end:x}) after the stream before it")
        data = n.constants[s.offset - base:s.offset - base + s.stream_bytes]
        try:
            decoded = decode(data, s.decoded_bytes)
        except WeightStreamError as e:
            raise c.fail(f"stream {i} at 0x{s.offset:x} does not decode to its {s.decoded_bytes} bytes: {e}") from None
        if zlib.crc32(decoded) != s.crc32:
            raise c.fail(f"stream {i} at 0x{s.offset:x} decodes to bytes whose CRC-32 is 0x{zlib.crc32(decoded):08x}, "
                         f"not the 0x{s.crc32:08x} recorded")
        previous = s.offset + s.stream_bytes
    for i, k in enumerate(ws.constants):
        if k.offset < base or k.offset + k.raw_bytes > end or k.stored_bytes > k.raw_bytes:
            raise c.fail(f"compressed constant {i} at 0x{k.offset:x} ({k.raw_bytes} raw bytes, {k.stored_bytes} stored) "
                         f"is not inside the constants blob [0x{base:x}, 0x{end:x}) or stores more than it replaces")


def _check_cpu_fallback(subgraphs: tuple[CpuSubgraph, ...], arena: int, n_constants: int, c: _Check) -> None:
    for i, sg in enumerate(subgraphs):
        c.name(sg.name, f"the name of subgraph {i}")
        if not isinstance(sg.graph_text, str) or not sg.graph_text.startswith("graph "):
            raise c.fail(f"subgraph '{sg.name}' has no graph text (it must start with 'graph ')")
        for j, b in enumerate(sg.bindings):
            c.name(b.value, f"the value of binding {j} of subgraph '{sg.name}'")
            what = f"binding '{b.value}' of subgraph '{sg.name}'"
            c.kind(b.role, BindingRole, f"the role of {what}")
            check_tensor_type(b.type, what, c)
            if b.role == BindingRole.CONSTANT:
                _check_span(b.offset, b.type.nbytes, n_constants, what, "constants blob", c)
            else:
                _check_span(b.offset, b.type.nbytes, arena, what, "DRAM arena", c)
        c.unique([b.value for b in sg.bindings], f"binding of subgraph '{sg.name}'")
    c.unique([sg.name for sg in subgraphs], "subgraph name")


def _check_segments(n: "Npub", c: _Check) -> None:
    defined = {t.name for t in n.io_signature.inputs}
    arity = [_cpu_arity(sg) for sg in n.cpu_fallback]
    for i, s in enumerate(n.segments):
        c.kind(s.kind, SegmentKind, f"segment {i} kind")
        c.name(s.name, f"the name of segment {i}")
        _check_segment_target(n, s, arity, c)
        for x in s.inputs:
            c.name(x, f"an input of segment '{s.name}'")
            if x not in defined:
                raise c.fail(f"segment '{s.name}' reads '{x}', which no model input or earlier segment provides")
        for x in s.outputs:
            c.name(x, f"an output of segment '{s.name}'")
            if x in defined:
                raise c.fail(f"segment '{s.name}' writes '{x}', which is already defined")
            defined.add(x)
    c.unique([s.name for s in n.segments], "segment name")
    # the same value returned twice: the second output is stored where the first is
    stored = {(t.dram_offset, t.type) for t in n.io_signature.outputs if t.name in defined}
    for t in n.io_signature.outputs:
        if t.name not in defined and (t.dram_offset, t.type) not in stored:
            raise c.fail(f"model output '{t.name}' is produced by no segment")


def _cpu_arity(sg: CpuSubgraph) -> tuple[int, int]:
    """How many inputs and outputs a CPU-fallback subgraph binds."""
    n_in = sum(b.role == BindingRole.INPUT for b in sg.bindings)
    return n_in, sum(b.role == BindingRole.OUTPUT for b in sg.bindings)


def _check_segment_target(n: "Npub", s: Segment, arity: list[tuple[int, int]], c: _Check) -> None:
    c.index(s.index, f"the index of segment '{s.name}'")
    if s.kind == SegmentKind.NPU:
        if s.index >= len(n.code_segments):
            raise c.fail(f"NPU segment '{s.name}' runs code segment {s.index}, but there are {len(n.code_segments)}")
        return
    if s.index >= len(n.cpu_fallback):
        raise c.fail(f"CPU segment '{s.name}' runs subgraph {s.index}, but there are {len(n.cpu_fallback)}")
    sg = n.cpu_fallback[s.index]
    n_in, n_out = arity[s.index]
    if (len(s.inputs), len(s.outputs)) != (n_in, n_out):
        raise c.fail(
            f"CPU segment '{s.name}' has {len(s.inputs)} inputs and {len(s.outputs)} outputs, but its "
            f"subgraph '{sg.name}' binds {n_in} inputs and {n_out} outputs"
        )


def _check_debug_map(
    debug_map: tuple[tuple[DebugEntry, ...], ...], n_code: int, instr_counts: Sequence[int] | None, c: _Check
) -> None:
    if len(debug_map) != n_code:
        raise c.fail(f"the debug map covers {len(debug_map)} programs, but there are {n_code} code segments")
    for i, entries in enumerate(debug_map):
        previous = -1
        for j, e in enumerate(entries):
            c.index(e.instr_index, f"entry {j} of program {i}")
            if e.instr_index <= previous:
                raise c.fail(f"entry {j} of program {i} has instruction index {e.instr_index}, not above {previous}")
            if instr_counts is not None and e.instr_index >= instr_counts[i]:
                raise c.fail(
                    f"entry {j} of program {i} names instruction {e.instr_index}, but the program has {instr_counts[i]}"
                )
            previous = e.instr_index
            c.name(e.op, f"the op of entry {j} of program {i}")
            if e.loc is not None:
                c.name(e.loc, f"the location of entry {j} of program {i}")


def _check_metadata(m: Metadata, c: _Check) -> None:
    c.name(m.compiler_version, "the compiler version")
    if not isinstance(m.model_name, str):
        raise c.fail(f"the model name is {m.model_name!r}, not a string")
    keys = [k for k, _ in m.extra]
    for k, v in m.extra:
        c.name(k, "an extra key")
        if not isinstance(v, str):
            raise c.fail(f"the value of extra key '{k}' is {v!r}, not a string")
    if keys != sorted(set(keys)):
        raise c.fail("the extra keys must be unique and sorted, so that the bytes are deterministic")


def check_fits_target(n: "Npub", target: object, source: str | None = None) -> None:
    """Check that the memory plan fits the memories of ``target`` (a :class:`npuc.targets.Target`).

    The DRAM arena must fit in the target's DRAM and each code segment's SRAM use in its
    scratchpad and accumulator.  Memories the target object does not describe are not checked.
    """
    c = _Check(source, "MEMORY_PLAN section")
    name = getattr(target, "name", "?")
    window_at = getattr(target, "window_at", None)
    if window_at is not None:  # a Target: the arena is the used part of its system address map
        top = target.address_space_bytes
        if n.memory_plan.dram_arena_size > top:
            what = "DRAM" if len(target.memories) == 1 else "system address map"
            raise c.fail(f"the DRAM arena of {n.memory_plan.dram_arena_size} bytes exceeds the {top}-byte {what} "
                         f"of target '{name}'")
        for r in n.memory_plan.regions:
            if r.size and window_at(r.offset, r.offset + r.size) is None:
                raise c.fail(f"region '{r.name}' [0x{r.offset:x}, 0x{r.offset + r.size:x}) is not inside one memory of "
                             f"target '{name}''s system address map")
    dram = _memory_size(target, "dram") if window_at is None else None
    if dram is not None and n.memory_plan.dram_arena_size > dram:
        raise c.fail(
            f"the DRAM arena of {n.memory_plan.dram_arena_size} bytes exceeds the {dram}-byte DRAM of target '{name}'"
        )
    spad, acc = _memory_size(target, "scratchpad"), _memory_size(target, "accumulator")
    for i, s in enumerate(n.memory_plan.sram):
        for used, size, memory in ((s.scratchpad_bytes, spad, "scratchpad"), (s.accumulator_bytes, acc, "accumulator")):
            if size is not None and used > size:
                raise c.fail(f"code segment {i} uses {used} bytes of {memory}; target '{name}' has {size}")


def _memory_size(target: object, memory: str) -> int | None:
    size = getattr(getattr(target, memory, None), "size_bytes", None)
    return size if isinstance(size, int) else None
