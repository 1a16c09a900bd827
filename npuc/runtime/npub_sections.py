"""Encoding and decoding of each section payload of a .npub container.

One ``encode_*``/``decode_*`` pair per section kind; the byte layouts are described in
docs/binary-format.md.  Decoders check the syntax (bounds, counts, enums, UTF-8, canonical
padding, no trailing bytes); the meaning (shapes, offsets inside the arena, dataflow order) is
checked by :mod:`npuc.runtime.npub_validate`, once, for the writer and the loader alike.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from npuc.ir.types import QuantParams, TensorType
from npuc.runtime.npub_codec import STRING_PREFIX, ByteReader, ByteWriter, align_up
from npuc.runtime.npub_model import (
    HostModule,
    CompressedConstant,
    WeightStream,
    WeightStreams,
    DTYPE_CODES,
    DTYPE_OF_CODE,
    MAX_RANK,
    BindingRole,
    CpuBinding,
    CpuSubgraph,
    DebugEntry,
    IOSignature,
    IOTensor,
    MemoryPlan,
    Metadata,
    Region,
    RegionKind,
    Segment,
    SegmentKind,
    SramUsage,
)

CODE_ALIGNMENT = 64  # each program of the CODE section starts at a multiple of this
_CODE_ENTRY = 16  # u64 offset + u64 length

E = TypeVar("E")


def _enum(r: ByteReader, cls: Callable[[int], E], field: str) -> E:
    v = r.u8(field)
    try:
        return cls(v)
    except ValueError:
        raise r.error(f"field '{field}' is {v}, which is not a known {cls.__name__}") from None


def _opt_string(r: ByteReader, field: str) -> str | None:
    return r.string(field) if r.flag(f"{field} present") else None


def _put_opt_string(w: ByteWriter, s: str | None, field: str) -> None:
    w.flag(s is not None, f"{field} present")
    if s is not None:
        w.string(s, field)


def _strings(r: ByteReader, field: str) -> tuple[str, ...]:
    n = r.count(f"{field} count", STRING_PREFIX)
    return tuple(r.string(f"{field}[{i}]") for i in range(n))


def _put_strings(w: ByteWriter, items: tuple[str, ...], field: str) -> None:
    w.u32(len(items), f"{field} count")
    for i, s in enumerate(items):
        w.string(s, f"{field}[{i}]")


# ------------------------------------------------------------------------------------- CODE


def encode_code(w: ByteWriter, programs: tuple[bytes, ...]) -> None:
    """u32 count, count x (u64 offset, u64 length), then each program 64-byte aligned."""
    w.u32(len(programs), "program count")
    offset = align_up(4 + _CODE_ENTRY * len(programs), CODE_ALIGNMENT)
    for i, p in enumerate(programs):
        w.u64(offset, f"program[{i}] offset")
        w.u64(len(p), f"program[{i}] length")
        offset = align_up(offset + len(p), CODE_ALIGNMENT)
    for p in programs:
        w.pad_to(CODE_ALIGNMENT)
        w.raw(p)


def decode_code(r: ByteReader) -> tuple[bytes, ...]:
    n = r.count("program count", _CODE_ENTRY)
    entries = [(r.u64(f"program[{i}] offset"), r.u64(f"program[{i}] length")) for i in range(n)]
    programs = []
    for i, (offset, length) in enumerate(entries):
        expected = align_up(r.pos, CODE_ALIGNMENT)
        if offset != expected:
            raise r.error(
                f"program {i} starts at offset {offset}; it must start at {expected}, the next "
                f"{CODE_ALIGNMENT}-byte boundary after the previous program"
            )
        r.zeros(expected - r.pos, f"padding before program {i}")
        programs.append(r.raw(length, f"program[{i}] bytes"))
    r.end()
    return tuple(programs)


# -------------------------------------------------------------------------------- CONSTANTS
# The CONSTANTS payload is the blob itself: no framing, so it can be mapped in place.

# ------------------------------------------------------------------------------ tensor type

_TENSOR_TYPE_MIN = 1 + 4 + 1 + 1  # dtype, rank, layout flag, quant flag
_QUANT_PAIR = 8 + 4  # f64 scale, i32 zero point


def encode_tensor_type(w: ByteWriter, t: TensorType, field: str) -> None:
    if t.dtype not in DTYPE_CODES:
        raise w.error(f"field '{field}' has element type {t.dtype!r}, which has no code")
    w.u8(DTYPE_CODES[t.dtype], f"{field}.dtype")
    w.u32(len(t.shape), f"{field}.rank")
    for i, d in enumerate(t.shape):
        w.i64(d, f"{field}.shape[{i}]")
    _put_opt_string(w, t.layout, f"{field}.layout")
    w.flag(t.quant is not None, f"{field}.quant present")
    if t.quant is not None:
        _encode_quant(w, t.quant, f"{field}.quant")


def _encode_quant(w: ByteWriter, q: QuantParams, field: str) -> None:
    if len(q.scale) != len(q.zero_point):
        raise w.error(
            f"field '{field}' has {len(q.scale)} scales but {len(q.zero_point)} zero points"
        )
    w.flag(q.axis is not None, f"{field}.axis present")
    if q.axis is not None:
        w.u32(q.axis, f"{field}.axis")
    w.u32(len(q.scale), f"{field}.count")
    for i, (s, z) in enumerate(zip(q.scale, q.zero_point)):
        w.f64(s, f"{field}.scale[{i}]")
        w.i32(z, f"{field}.zero_point[{i}]")


def decode_tensor_type(r: ByteReader, field: str) -> TensorType:
    code = r.u8(f"{field}.dtype")
    if code not in DTYPE_OF_CODE:
        raise r.error(f"field '{field}.dtype' is {code}, which is not a known element type code")
    rank = r.count(f"{field}.rank", 8)
    if rank > MAX_RANK:
        raise r.error(f"field '{field}.rank' is {rank}; a tensor has at most {MAX_RANK} dimensions")
    shape = tuple(r.i64(f"{field}.shape[{i}]") for i in range(rank))
    layout = _opt_string(r, f"{field}.layout")
    quant = None
    if r.flag(f"{field}.quant present"):
        axis = r.u32(f"{field}.quant.axis") if r.flag(f"{field}.quant.axis present") else None
        n = r.count(f"{field}.quant.count", _QUANT_PAIR)
        pairs = [(r.f64(f"{field}.quant.scale[{i}]"), r.i32(f"{field}.quant.zero_point[{i}]")) for i in range(n)]
        quant = QuantParams(tuple(s for s, _ in pairs), tuple(z for _, z in pairs), axis)
    return TensorType(shape, DTYPE_OF_CODE[code], quant, layout)


# ----------------------------------------------------------------------------- MEMORY_PLAN

_REGION_MIN = 1 + STRING_PREFIX + 8 + 8
_SRAM_ENTRY = 8 + 8


def encode_memory_plan(w: ByteWriter, m: MemoryPlan) -> None:
    w.u64(m.dram_arena_size, "dram_arena_size")
    w.u32(len(m.regions), "region count")
    for i, reg in enumerate(m.regions):
        w.u8(int(RegionKind(reg.kind)), f"region[{i}].kind")
        w.string(reg.name, f"region[{i}].name")
        w.u64(reg.offset, f"region[{i}].offset")
        w.u64(reg.size, f"region[{i}].size")
    w.u32(len(m.sram), "sram count")
    for i, s in enumerate(m.sram):
        w.u64(s.scratchpad_bytes, f"sram[{i}].scratchpad_bytes")
        w.u64(s.accumulator_bytes, f"sram[{i}].accumulator_bytes")


def decode_memory_plan(r: ByteReader) -> MemoryPlan:
    arena = r.u64("dram_arena_size")
    regions = []
    for i in range(r.count("region count", _REGION_MIN)):
        kind = _enum(r, RegionKind, f"region[{i}].kind")
        name = r.string(f"region[{i}].name")
        regions.append(Region(name, kind, r.u64(f"region[{i}].offset"), r.u64(f"region[{i}].size")))
    sram = tuple(
        SramUsage(r.u64(f"sram[{i}].scratchpad_bytes"), r.u64(f"sram[{i}].accumulator_bytes"))
        for i in range(r.count("sram count", _SRAM_ENTRY))
    )
    r.end()
    return MemoryPlan(arena, tuple(regions), sram)


# ---------------------------------------------------------------------------- IO_SIGNATURE

_IO_MIN = STRING_PREFIX + _TENSOR_TYPE_MIN + 8


def _encode_io(w: ByteWriter, t: IOTensor, field: str) -> None:
    w.string(t.name, f"{field}.name")
    encode_tensor_type(w, t.type, f"{field}.type")
    w.u64(t.dram_offset, f"{field}.dram_offset")


def _decode_io(r: ByteReader, field: str) -> IOTensor:
    name = r.string(f"{field}.name")
    ty = decode_tensor_type(r, f"{field}.type")
    return IOTensor(name, ty, r.u64(f"{field}.dram_offset"))


def encode_io_signature(w: ByteWriter, sig: IOSignature) -> None:
    for group, items in (("inputs", sig.inputs), ("outputs", sig.outputs)):
        w.u32(len(items), f"{group} count")
        for i, t in enumerate(items):
            _encode_io(w, t, f"{group}[{i}]")


def decode_io_signature(r: ByteReader) -> IOSignature:
    groups = []
    for group in ("inputs", "outputs"):
        n = r.count(f"{group} count", _IO_MIN)
        groups.append(tuple(_decode_io(r, f"{group}[{i}]") for i in range(n)))
    r.end()
    return IOSignature(groups[0], groups[1])


# ---------------------------------------------------------------------------- CPU_FALLBACK

_BINDING_MIN = STRING_PREFIX + 1 + 8 + _TENSOR_TYPE_MIN
_SUBGRAPH_MIN = STRING_PREFIX * 2 + 4


def encode_cpu_fallback(w: ByteWriter, subgraphs: tuple[CpuSubgraph, ...]) -> None:
    w.u32(len(subgraphs), "subgraph count")
    for i, sg in enumerate(subgraphs):
        f = f"subgraph[{i}]"
        w.string(sg.name, f"{f}.name")
        w.string(sg.graph_text, f"{f}.graph_text")
        w.u32(len(sg.bindings), f"{f}.binding count")
        for j, b in enumerate(sg.bindings):
            w.string(b.value, f"{f}.binding[{j}].value")
            w.u8(int(BindingRole(b.role)), f"{f}.binding[{j}].role")
            w.u64(b.offset, f"{f}.binding[{j}].offset")
            encode_tensor_type(w, b.type, f"{f}.binding[{j}].type")


def _decode_binding(r: ByteReader, field: str) -> CpuBinding:
    value = r.string(f"{field}.value")
    role = _enum(r, BindingRole, f"{field}.role")
    offset = r.u64(f"{field}.offset")
    return CpuBinding(value, role, offset, decode_tensor_type(r, f"{field}.type"))


def decode_cpu_fallback(r: ByteReader) -> tuple[CpuSubgraph, ...]:
    out = []
    for i in range(r.count("subgraph count", _SUBGRAPH_MIN)):
        f = f"subgraph[{i}]"
        name = r.string(f"{f}.name")
        text = r.string(f"{f}.graph_text")
        n = r.count(f"{f}.binding count", _BINDING_MIN)
        bindings = tuple(_decode_binding(r, f"{f}.binding[{j}]") for j in range(n))
        out.append(CpuSubgraph(name, text, bindings))
    r.end()
    return tuple(out)


# ------------------------------------------------------------------------------- HOST_CODE

_HOST_MIN = 4 + STRING_PREFIX + 8


def encode_host_code(w: ByteWriter, modules: tuple[HostModule, ...]) -> None:
    w.u32(len(modules), "module count")
    for i, m in enumerate(modules):
        w.u32(m.subgraph, f"module[{i}].subgraph")
        w.string(m.triple, f"module[{i}].triple")
        w.u64(len(m.code), f"module[{i}].size")
        w.raw(m.code)


def decode_host_code(r: ByteReader) -> tuple[HostModule, ...]:
    out = []
    for i in range(r.count("module count", _HOST_MIN)):
        f = f"module[{i}]"
        sub = r.u32(f"{f}.subgraph")
        triple = r.string(f"{f}.triple")
        size = r.u64(f"{f}.size")
        if size > r.remaining:
            raise r.error(f"{f}.size is {size} bytes, but only {r.remaining} remain")
        out.append(HostModule(sub, triple, r.raw(size, f"{f}.code")))
    r.end()
    return tuple(out)


# -------------------------------------------------------------------------- WEIGHT_STREAMS


def encode_weight_streams(w: ByteWriter, ws: WeightStreams) -> None:
    w.u32(len(ws.streams), "stream count")
    for i, s in enumerate(ws.streams):
        w.u64(s.offset, f"stream[{i}].offset")
        w.u32(s.stream_bytes, f"stream[{i}].stream_bytes")
        w.u32(s.decoded_bytes, f"stream[{i}].decoded_bytes")
        w.u32(s.crc32, f"stream[{i}].crc32")
    w.u32(len(ws.constants), "constant count")
    for i, c in enumerate(ws.constants):
        w.u64(c.offset, f"constant[{i}].offset")
        w.u64(c.raw_bytes, f"constant[{i}].raw_bytes")
        w.u64(c.stored_bytes, f"constant[{i}].stored_bytes")


def decode_weight_streams(r: ByteReader) -> WeightStreams:
    streams = tuple(WeightStream(r.u64(f"stream[{i}].offset"), r.u32(f"stream[{i}].stream_bytes"),
                                 r.u32(f"stream[{i}].decoded_bytes"), r.u32(f"stream[{i}].crc32"))
                    for i in range(r.count("stream count", 20)))
    constants = tuple(CompressedConstant(r.u64(f"constant[{i}].offset"), r.u64(f"constant[{i}].raw_bytes"),
                                         r.u64(f"constant[{i}].stored_bytes"))
                      for i in range(r.count("constant count", 24)))
    r.end()
    return WeightStreams(streams, constants)


# -------------------------------------------------------------------------------- SEGMENTS

_SEGMENT_MIN = 1 + STRING_PREFIX + 4 + 4 + 4


def encode_segments(w: ByteWriter, segments: tuple[Segment, ...]) -> None:
    w.u32(len(segments), "segment count")
    for i, s in enumerate(segments):
        w.u8(int(SegmentKind(s.kind)), f"segment[{i}].kind")
        w.string(s.name, f"segment[{i}].name")
        w.u32(s.index, f"segment[{i}].index")
        _put_strings(w, s.inputs, f"segment[{i}].inputs")
        _put_strings(w, s.outputs, f"segment[{i}].outputs")


def decode_segments(r: ByteReader) -> tuple[Segment, ...]:
    out = []
    for i in range(r.count("segment count", _SEGMENT_MIN)):
        f = f"segment[{i}]"
        kind = _enum(r, SegmentKind, f"{f}.kind")
        name = r.string(f"{f}.name")
        index = r.u32(f"{f}.index")
        inputs = _strings(r, f"{f}.inputs")
        out.append(Segment(kind, name, index, inputs, _strings(r, f"{f}.outputs")))
    r.end()
    return tuple(out)


# ------------------------------------------------------------------------------- DEBUG_MAP

_DEBUG_ENTRY_MIN = 4 + STRING_PREFIX + 1


def encode_debug_map(w: ByteWriter, debug_map: tuple[tuple[DebugEntry, ...], ...]) -> None:
    w.u32(len(debug_map), "program count")
    for i, entries in enumerate(debug_map):
        w.u32(len(entries), f"program[{i}] entry count")
        for j, e in enumerate(entries):
            f = f"program[{i}].entry[{j}]"
            w.u32(e.instr_index, f"{f}.instr_index")
            w.string(e.op, f"{f}.op")
            _put_opt_string(w, e.loc, f"{f}.loc")


def decode_debug_map(r: ByteReader) -> tuple[tuple[DebugEntry, ...], ...]:
    out = []
    for i in range(r.count("program count", 4)):
        entries = []
        for j in range(r.count(f"program[{i}] entry count", _DEBUG_ENTRY_MIN)):
            f = f"program[{i}].entry[{j}]"
            index = r.u32(f"{f}.instr_index")
            op = r.string(f"{f}.op")
            entries.append(DebugEntry(index, op, _opt_string(r, f"{f}.loc")))
        out.append(tuple(entries))
    r.end()
    return tuple(out)


# -------------------------------------------------------------------------------- METADATA


def encode_metadata(w: ByteWriter, m: Metadata) -> None:
    w.string(m.compiler_version, "compiler_version")
    w.string(m.model_name, "model_name")
    w.u32(len(m.extra), "extra count")
    for i, (k, v) in enumerate(m.extra):
        w.string(k, f"extra[{i}].key")
        w.string(v, f"extra[{i}].value")


def decode_metadata(r: ByteReader) -> Metadata:
    version = r.string("compiler_version")
    model = r.string("model_name")
    n = r.count("extra count", 2 * STRING_PREFIX)
    extra = tuple((r.string(f"extra[{i}].key"), r.string(f"extra[{i}].value")) for i in range(n))
    r.end()
    return Metadata(version, model, extra)
