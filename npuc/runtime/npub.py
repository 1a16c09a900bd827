"""The .npub container: one compiled model for one target, as bytes.

A container is a fixed header, a section table and 64-byte aligned section payloads (code,
constants, memory plan, IO signature, CPU fallback, segments, debug map, metadata).  The layout is
canonical: one :class:`Npub` has exactly one encoding, :meth:`Npub.to_bytes` is deterministic, and
:func:`load_npub` accepts a file of this format version only if re-encoding it gives the same
bytes.  The byte layout is documented in docs/binary-format.md.

The loader checks every length, offset, count, enum, string and checksum before using it, and
raises :class:`npuc.errors.BinaryFormatError` (a sentence naming the file, the field and the
reason) on anything it refuses.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple, Protocol, Sequence

from npuc.errors import BinaryFormatError, NpucError
from npuc.runtime import npub_sections as sec
from npuc.runtime.npub_codec import ByteReader, ByteWriter, align_up, format_error
from npuc.runtime.npub_model import (
    REQUIRED_SECTIONS,
    REQUIRED_WHEN_PRESENT,
    CompressedConstant,
    WeightStream,
    WeightStreams,
    BindingRole,
    CpuBinding,
    CpuSubgraph,
    DebugEntry,
    HostModule,
    IOSignature,
    IOTensor,
    MemoryPlan,
    Metadata,
    Region,
    RegionKind,
    Segment,
    SectionKind,
    SegmentKind,
    SramUsage,
)
from npuc.runtime.npub_validate import FINGERPRINT_SIZE, MAX_TARGET_NAME, check_fits_target, validate_npub

__all__ = [
    "DEPTHWISE_MODE_VERSION",
    "LOOP_EXCEPTION_VERSION",
    "STREAM_BUFFER_VERSION",
    "FORMAT_VERSION",
    "HOST_CODE_VERSION",
    "HostModule",
    "WEIGHT_STREAMS_VERSION",
    "CompressedConstant",
    "WeightStream",
    "WeightStreams",
    "MAGIC",
    "SECTION_ALIGNMENT",
    "BindingRole",
    "Container",
    "CpuBinding",
    "CpuSubgraph",
    "DebugEntry",
    "IOSignature",
    "IOTensor",
    "MemoryPlan",
    "Metadata",
    "Npub",
    "RawSection",
    "Region",
    "RegionKind",
    "SectionKind",
    "Segment",
    "SegmentKind",
    "SramUsage",
    "assemble",
    "check_fits_target",
    "encode_sections",
    "no_code_check",
    "load_npub",
    "read_npub",
    "save_npub",
    "split_container",
]

MAGIC = b"\x89NPUB\r\n\x1a"
FORMAT_VERSION = (4, 0)  # (major, minor) this npuc writes (and reads fully) for a binary without host code; 3: variable-length instructions, LOOP periods; 4: five queues (6-bit opcodes, 8 dependency flags)
HOST_CODE_VERSION = (4, 1)  # a binary with a HOST_CODE section: older 4.x readers skip the section
WEIGHT_STREAMS_VERSION = (4, 2)  # a binary with a WEIGHT_STREAMS section (required: older readers refuse it)
LOOP_PHASE_VERSION = (4, 3)  # a binary whose code has LOOP slots with a phase (older readers refuse the LOOP)
DEPTHWISE_MODE_VERSION = (4, 4)  # a binary whose code has MATMUL_DW (the array's depthwise mode; older readers refuse it)
LOOP_EXCEPTION_VERSION = (4, 5)  # a binary whose code has LOOP flag exceptions (older readers refuse the LOOP)
STREAM_BUFFER_VERSION = (4, 6)  # a binary whose loads use stream buffers (older readers refuse the load)
SECTION_ALIGNMENT = 64
HEADER_ALIGNMENT = 8
FLAG_REQUIRED = 0x1  # section flag: a reader that does not know this kind must refuse the file

# magic, major, minor, flags, file_size, header_size, header_crc32, section_count, table_crc32,
# target_name_length, reserved, target_fingerprint; then the target name, zero-padded to 8.
_HEADER = struct.Struct("<8sHHIQIIIIHH32s")
_HEADER_CRC_OFFSET = 28
_ENTRY = struct.Struct("<HHIQQ")  # kind, flags, crc32, offset, length


class _Header(NamedTuple):
    """The fixed fields of the header, in file order."""

    magic: bytes
    major: int
    minor: int
    flags: int
    file_size: int
    header_size: int
    header_crc: int
    section_count: int
    table_crc: int
    name_len: int
    reserved: int
    fingerprint: bytes


class TargetLike(Protocol):
    """What :func:`load_npub` needs of an expected target: its name and 32-byte fingerprint.

    A :class:`npuc.targets.Target` also describes its memories (``dram``, ``scratchpad``,
    ``accumulator``, each with ``size_bytes``); the loader then checks the memory plan fits.
    """

    name: str

    def fingerprint(self) -> bytes: ...


CodeDecoder = Callable[[bytes], Sequence[object] | None]


@dataclass(frozen=True)
class Npub:
    """A compiled model for one target: everything the runtime needs, and nothing time-dependent.

    ``code_segments`` are the NPU programs (instruction bytes), ``constants`` the packed weight
    blob the CONSTANTS region of the arena is loaded from.  ``debug_map`` (one entry list per
    code segment) and ``metadata`` are None in a stripped container.
    """

    target_name: str
    target_fingerprint: bytes
    code_segments: tuple[bytes, ...] = field(repr=False)
    constants: bytes = field(repr=False)
    memory_plan: MemoryPlan
    io_signature: IOSignature
    segments: tuple[Segment, ...]
    cpu_fallback: tuple[CpuSubgraph, ...] = ()
    debug_map: tuple[tuple[DebugEntry, ...], ...] | None = None
    metadata: Metadata | None = None
    host_code: tuple[HostModule, ...] = ()
    weight_streams: WeightStreams | None = None  # compressed weights (format 3.2); None: every weight raw

    def __post_init__(self) -> None:
        if isinstance(self.constants, (bytearray, memoryview)):
            object.__setattr__(self, "constants", bytes(self.constants))
        if isinstance(self.code_segments, (list, tuple)):
            programs = tuple(bytes(p) if isinstance(p, (bytearray, memoryview)) else p for p in self.code_segments)
            object.__setattr__(self, "code_segments", programs)
        for name in ("segments", "cpu_fallback", "host_code"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if self.debug_map is not None:
            object.__setattr__(self, "debug_map", tuple(tuple(e) for e in self.debug_map))

    @property
    def format_version(self) -> tuple[int, int]:
        """The version this container is written as: the oldest that has every section and
        instruction feature it holds."""
        phases, depthwise, exceptions, streams = _code_features(self.code_segments)
        if streams:
            return STREAM_BUFFER_VERSION
        if exceptions:
            return LOOP_EXCEPTION_VERSION
        if depthwise:
            return DEPTHWISE_MODE_VERSION
        if phases:
            return LOOP_PHASE_VERSION
        if self.weight_streams is not None:
            return WEIGHT_STREAMS_VERSION
        return HOST_CODE_VERSION if self.host_code else FORMAT_VERSION

    def to_bytes(self) -> bytes:
        """The canonical encoding of this container (the same bytes every time)."""
        validate_npub(self)
        return assemble(
            Container(self.format_version, self.target_name, self.target_fingerprint, encode_sections(self))
        )


@dataclass(frozen=True)
class RawSection:
    """A section as stored: its kind number, flags and payload bytes (not yet decoded)."""

    kind: int
    flags: int
    payload: bytes = field(repr=False)


@dataclass(frozen=True)
class Container:
    """The container level of a file: header fields and raw sections, in table order."""

    version: tuple[int, int]
    target_name: str
    target_fingerprint: bytes
    sections: tuple[RawSection, ...]
    flags: int = 0


def section_flags(kind: SectionKind) -> int:
    """The flags a section of a known kind carries."""
    return FLAG_REQUIRED if kind in REQUIRED_SECTIONS or kind in REQUIRED_WHEN_PRESENT else 0


# ------------------------------------------------------------------------------------ write


def encode_sections(n: Npub) -> tuple[RawSection, ...]:
    """The raw sections of ``n``, in kind order.  No meaning check (:meth:`Npub.to_bytes` makes it)."""
    encoders: list[tuple[SectionKind, Callable[[ByteWriter], None]]] = [
        (SectionKind.CODE, lambda w: sec.encode_code(w, n.code_segments)),
        (SectionKind.CONSTANTS, lambda w: w.raw(n.constants)),
        (SectionKind.MEMORY_PLAN, lambda w: sec.encode_memory_plan(w, n.memory_plan)),
        (SectionKind.IO_SIGNATURE, lambda w: sec.encode_io_signature(w, n.io_signature)),
        (SectionKind.CPU_FALLBACK, lambda w: sec.encode_cpu_fallback(w, n.cpu_fallback)),
        (SectionKind.SEGMENTS, lambda w: sec.encode_segments(w, n.segments)),
    ]
    if n.debug_map is not None:
        debug_map = n.debug_map
        encoders.append((SectionKind.DEBUG_MAP, lambda w: sec.encode_debug_map(w, debug_map)))
    if n.metadata is not None:
        metadata = n.metadata
        encoders.append((SectionKind.METADATA, lambda w: sec.encode_metadata(w, metadata)))
    if n.host_code:
        host_code = n.host_code
        encoders.append((SectionKind.HOST_CODE, lambda w: sec.encode_host_code(w, host_code)))
    if n.weight_streams is not None:
        weight_streams = n.weight_streams
        encoders.append((SectionKind.WEIGHT_STREAMS, lambda w: sec.encode_weight_streams(w, weight_streams)))
    out = []
    for kind, encode in encoders:
        w = ByteWriter(None, f"{kind.name} section")
        encode(w)
        out.append(RawSection(int(kind), section_flags(kind), w.getvalue()))
    return tuple(out)


def assemble(c: Container) -> bytes:
    """Lay out header, section table and payloads, with every checksum computed.

    Sections are written in the order given; payloads follow the table, each at the next
    64-byte boundary, the gaps zero.  The content is not checked (tests use this to build
    malformed files whose checksums are right); only values must fit their fields.
    """
    name = c.target_name.encode("utf-8")
    header_size = align_up(_HEADER.size + len(name), HEADER_ALIGNMENT)
    table_end = header_size + _ENTRY.size * len(c.sections)
    table, body = ByteWriter(None, "section table"), ByteWriter(None, "section payloads")
    for i, s in enumerate(c.sections):
        offset = align_up(table_end + body.size, SECTION_ALIGNMENT)
        body.raw(bytes(offset - table_end - body.size))
        table.u16(s.kind, f"entry {i} kind")
        table.u16(s.flags, f"entry {i} flags")
        table.u32(zlib.crc32(s.payload), f"entry {i} crc32")
        table.u64(offset, f"entry {i} offset")
        table.u64(len(s.payload), f"entry {i} length")
        body.raw(s.payload)
    table_bytes = table.getvalue()
    head = _pack_header(c, name, header_size, table_end + body.size, zlib.crc32(table_bytes))
    return head + table_bytes + body.getvalue()


def _pack_header(c: Container, name: bytes, header_size: int, file_size: int, table_crc: int) -> bytes:
    w = ByteWriter(None, "header")
    if len(c.target_fingerprint) != FINGERPRINT_SIZE:
        raise w.error(f"the target fingerprint must be {FINGERPRINT_SIZE} bytes")
    w.raw(MAGIC)
    w.u16(c.version[0], "major version")
    w.u16(c.version[1], "minor version")
    w.u32(c.flags, "flags")
    w.u64(file_size, "file_size")
    w.u32(header_size, "header_size")
    w.u32(0, "header_crc32")  # filled in below
    w.u32(len(c.sections), "section_count")
    w.u32(table_crc, "table_crc32")
    w.u16(len(name), "target name length")
    w.u16(0, "reserved")
    w.raw(c.target_fingerprint)
    w.raw(name)
    w.pad_to(HEADER_ALIGNMENT)
    head = bytearray(w.getvalue())
    struct.pack_into("<I", head, _HEADER_CRC_OFFSET, zlib.crc32(head))
    return bytes(head)


# ------------------------------------------------------------------------------------- read


def _code_features(programs: Sequence[bytes]) -> tuple[bool, bool, bool, bool]:
    """(whether a program writes a LOOP phase: format 3.3, whether one holds a MATMUL_DW: format
    3.4, whether a LOOP has flag exceptions: format 3.5, whether a load uses a stream buffer:
    format 3.6); all False without the ISA package."""
    try:
        from npuc.isa.encoding import LOOP_EXCEPTIONS, STREAM_LOADS, stream_features
    except ImportError:
        return False, False, False, False
    phases = depthwise = exceptions = streams = False
    for p in programs:
        ph, used = stream_features(p)
        phases, depthwise = phases or ph, depthwise or "MATMUL_DW" in used
        exceptions = exceptions or LOOP_EXCEPTIONS in used
        streams = streams or STREAM_LOADS in used
    return phases, depthwise, exceptions, streams


def _fail(source: str | None, where: str, text: str) -> BinaryFormatError:
    return format_error(source, where, text)


def _read_header(data: bytes, source: str | None) -> _Header:
    if data[: len(MAGIC)] != MAGIC[: len(data)]:
        raise _fail(source, "", f"this is not a .npub container: it does not start with the magic bytes {MAGIC!r}")
    if len(data) < 12:
        raise _fail(source, "header", f"the file is truncated: {len(data)} bytes, shorter than the version field")
    major, minor = struct.unpack_from("<HH", data, 8)
    if major != FORMAT_VERSION[0]:
        newer = "a newer" if major > FORMAT_VERSION[0] else "an older, unsupported"
        raise _fail(
            source,
            "header",
            f"the container has format version {major}.{minor}, {newer} major version; this npuc reads "
            f"version {FORMAT_VERSION[0]}.x (up to {FORMAT_VERSION[0]}.{FORMAT_VERSION[1]} fully)",
        )
    if len(data) < _HEADER.size:
        raise _fail(source, "header", f"the file is truncated: {len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    h = _Header._make(_HEADER.unpack_from(data, 0))
    expected = align_up(_HEADER.size + h.name_len, HEADER_ALIGNMENT)
    if h.header_size != expected:
        raise _fail(source, "header", f"header_size is {h.header_size}; with a {h.name_len}-byte target name it must be {expected}")
    if len(data) < h.header_size:
        raise _fail(source, "header", f"the file is truncated: {len(data)} bytes, shorter than its {h.header_size}-byte header")
    head = bytearray(data[: h.header_size])
    struct.pack_into("<I", head, _HEADER_CRC_OFFSET, 0)
    if zlib.crc32(head) != h.header_crc:
        raise _fail(source, "header", "the header checksum does not match; the header is corrupt")
    return h


def _check_header_fields(data: bytes, h: _Header, source: str | None) -> str:
    """Check the header fields after its checksum; return the target name."""
    file_size, flags, reserved, name_len = h.file_size, h.flags, h.reserved, h.name_len
    if file_size != len(data):
        what = "truncated" if len(data) < file_size else f"followed by {len(data) - file_size} extra bytes"
        raise _fail(source, "header", f"the header says the file has {file_size} bytes but it has {len(data)}: it is {what}")
    if flags:
        raise _fail(source, "header", f"flags are {flags:#x}; no flag is defined in format version {FORMAT_VERSION[0]}, they must be 0")
    if reserved:
        raise _fail(source, "header", f"the reserved field is {reserved}; it must be 0")
    raw_name = data[_HEADER.size : _HEADER.size + name_len]
    if any(data[_HEADER.size + name_len : h.header_size]):
        raise _fail(source, "header", "the padding after the target name holds non-zero bytes")
    try:
        name = raw_name.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(source, "header", "the target name is not valid UTF-8") from None
    if not name or name_len > MAX_TARGET_NAME:
        raise _fail(source, "header", f"the target name is {name_len} bytes long; it must be 1 to {MAX_TARGET_NAME}")
    return name


def _kind_name(kind: int) -> str:
    try:
        return SectionKind(kind).name
    except ValueError:
        return f"kind {kind}"


def _check_kind(kind: int, flags: int, previous: int, minor: int, where: str, source: str | None) -> None:
    if kind <= previous:  # previous is -1 before the first entry
        again = "appears twice" if kind == previous else f"comes after {_kind_name(previous)}"
        raise _fail(source, where, f"section {_kind_name(kind)} {again}; sections must be sorted by kind, each once")
    if flags & ~FLAG_REQUIRED:
        raise _fail(source, where, f"section flags are {flags:#x}; only bit 0 (required) is defined")
    if kind == SectionKind.HOST_CODE and minor < HOST_CODE_VERSION[1]:
        raise _fail(source, where, f"section HOST_CODE appears in a format {FORMAT_VERSION[0]}.{minor} file; it exists from format {HOST_CODE_VERSION[0]}.{HOST_CODE_VERSION[1]}")
    if kind == SectionKind.WEIGHT_STREAMS and minor < WEIGHT_STREAMS_VERSION[1]:
        raise _fail(source, where, f"section WEIGHT_STREAMS appears in a format {FORMAT_VERSION[0]}.{minor} file; it exists from format {WEIGHT_STREAMS_VERSION[0]}.{WEIGHT_STREAMS_VERSION[1]}")
    if kind in SectionKind._value2member_map_:
        if flags != section_flags(SectionKind(kind)):
            raise _fail(source, where, f"section {_kind_name(kind)} has flags {flags:#x}, not {section_flags(SectionKind(kind)):#x}")
        return
    if minor <= FORMAT_VERSION[1]:
        raise _fail(source, where, f"section kind {kind} is unknown to format version {FORMAT_VERSION[0]}.{minor}")
    if flags & FLAG_REQUIRED:
        raise _fail(
            source,
            where,
            f"required section kind {kind} of format version {FORMAT_VERSION[0]}.{minor} is unknown to this npuc (it reads "
            f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}); use a newer npuc",
        )


def _read_sections(data: bytes, count: int, header_size: int, minor: int, source: str | None) -> tuple[RawSection, ...]:
    table_end = header_size + _ENTRY.size * count
    previous_kind, previous_end, previous_name = -1, table_end, "the section table"
    out = []
    for i in range(count):
        kind, flags, crc, offset, length = _ENTRY.unpack_from(data, header_size + _ENTRY.size * i)
        where = f"section table entry {i} ({_kind_name(kind)})"
        _check_kind(kind, flags, previous_kind, minor, where, source)
        if offset % SECTION_ALIGNMENT:
            raise _fail(source, where, f"offset {offset} is not a multiple of {SECTION_ALIGNMENT}")
        if offset + length > len(data):
            raise _fail(source, where, f"bytes [{offset}, {offset + length}) extend past the end of the {len(data)}-byte file; it is truncated or corrupt")
        if offset < previous_end:
            raise _fail(source, where, f"bytes [{offset}, {offset + length}) overlap {previous_name} (which ends at {previous_end})")
        expected = align_up(previous_end, SECTION_ALIGNMENT)
        if offset != expected:
            raise _fail(source, where, f"offset {offset} leaves a gap; the payload must start at {expected}")
        if any(data[previous_end:offset]):
            raise _fail(source, where, "the padding before the payload holds non-zero bytes")
        payload = data[offset : offset + length]
        if zlib.crc32(payload) != crc:
            raise _fail(source, where, "the payload checksum does not match; the section is corrupt")
        out.append(RawSection(kind, flags, payload))
        previous_kind, previous_end, previous_name = kind, offset + length, f"section {_kind_name(kind)}"
    if previous_end != len(data):
        raise _fail(source, "", f"{len(data) - previous_end} bytes after the last section belong to no section")
    return tuple(out)


def split_container(data: bytes, source: str | None = None) -> Container:
    """Check the container level of ``data`` (header, table, layout, checksums) and return it.

    Sections are not decoded; sections of unknown kinds that a newer minor version marks
    optional are kept.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _fail(source, "", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    h = _read_header(data, source)
    name = _check_header_fields(data, h, source)
    table_end = h.header_size + _ENTRY.size * h.section_count
    if table_end > len(data):
        raise _fail(
            source,
            "header",
            f"section count {h.section_count} needs a table up to byte {table_end}, past the end of the {len(data)}-byte file",
        )
    if zlib.crc32(data[h.header_size : table_end]) != h.table_crc:
        raise _fail(source, "section table", "the table checksum does not match; the section table is corrupt")
    sections = _read_sections(data, h.section_count, h.header_size, h.minor, source)
    present = {s.kind for s in sections}
    for kind in REQUIRED_SECTIONS:
        if kind not in present:
            raise _fail(source, "", f"the container has no {kind.name} section, which every container needs")
    return Container((h.major, h.minor), name, h.fingerprint, sections, h.flags)


_DECODERS: dict[SectionKind, Callable[[ByteReader], object]] = {
    SectionKind.CODE: sec.decode_code,
    SectionKind.CONSTANTS: lambda r: r.raw(r.remaining, "constants"),
    SectionKind.MEMORY_PLAN: sec.decode_memory_plan,
    SectionKind.IO_SIGNATURE: sec.decode_io_signature,
    SectionKind.CPU_FALLBACK: sec.decode_cpu_fallback,
    SectionKind.SEGMENTS: sec.decode_segments,
    SectionKind.DEBUG_MAP: sec.decode_debug_map,
    SectionKind.METADATA: sec.decode_metadata,
    SectionKind.HOST_CODE: sec.decode_host_code,
    SectionKind.WEIGHT_STREAMS: sec.decode_weight_streams,
}


def _check_target(c: Container, expected: TargetLike, source: str | None) -> None:
    want = expected.fingerprint()
    if want == c.target_fingerprint:
        return
    if expected.name == c.target_name:
        detail = f"a different configuration of target '{c.target_name}'"
    else:
        detail = f"target '{c.target_name}'"
    raise _fail(
        source,
        "header",
        f"the container was compiled for {detail} (fingerprint {c.target_fingerprint.hex()[:16]}), not for "
        f"target '{expected.name}' (fingerprint {want.hex()[:16]}); recompile the model for '{expected.name}'",
    )


def _default_decoder() -> CodeDecoder | None:
    try:
        from npuc.isa import decode_program  # type: ignore[attr-defined]
    except ImportError:
        return None
    return decode_program


def _instruction_counts(programs: tuple[bytes, ...], decode: CodeDecoder, source: str | None) -> list[int] | None:
    counts = []
    for i, p in enumerate(programs):
        try:
            instrs = decode(p)
        except NpucError as e:
            raise _fail(source, "CODE section", f"program {i} is not a valid instruction stream: {e}") from e
        if instrs is None:
            return None
        counts.append(len(instrs))
    return counts


def no_code_check(program: bytes) -> None:
    """A ``decode_code`` for :func:`load_npub` that leaves the instruction bytes unchecked."""
    return None


def load_npub(
    data: bytes,
    *,
    expected_target: TargetLike | None = None,
    decode_code: CodeDecoder | None = None,
    source: str | None = None,
) -> Npub:
    """Validate ``data`` completely and return the container it encodes.

    ``expected_target``: refuse a container compiled for another target (fingerprints differ)
    or whose memory plan does not fit the target's memories.
    ``decode_code``: applied to each program of the CODE section; it raises an
    :class:`NpucError` on a malformed program and returns the decoded instructions (their count
    bounds the debug map) or None.  By default ``npuc.isa.decode_program`` when it is available;
    pass :func:`no_code_check` to skip.  ``source`` names the file in error messages.
    """
    c = split_container(data, source)
    if expected_target is not None:
        _check_target(c, expected_target, source)
    parts: dict[SectionKind, object] = {}
    for s in c.sections:
        if s.kind in SectionKind._value2member_map_:
            kind = SectionKind(s.kind)
            r = ByteReader(s.payload, source, f"{kind.name} section")
            parts[kind] = _DECODERS[kind](r)
    n = Npub(
        c.target_name,
        c.target_fingerprint,
        parts[SectionKind.CODE],  # type: ignore[arg-type]
        parts[SectionKind.CONSTANTS],  # type: ignore[arg-type]
        parts[SectionKind.MEMORY_PLAN],  # type: ignore[arg-type]
        parts[SectionKind.IO_SIGNATURE],  # type: ignore[arg-type]
        parts[SectionKind.SEGMENTS],  # type: ignore[arg-type]
        parts[SectionKind.CPU_FALLBACK],  # type: ignore[arg-type]
        parts.get(SectionKind.DEBUG_MAP),  # type: ignore[arg-type]
        parts.get(SectionKind.METADATA),  # type: ignore[arg-type]
        parts.get(SectionKind.HOST_CODE, ()),  # type: ignore[arg-type]
        parts.get(SectionKind.WEIGHT_STREAMS),  # type: ignore[arg-type]
    )
    decode = decode_code if decode_code is not None else _default_decoder()
    counts = _instruction_counts(n.code_segments, decode, source) if decode is not None else None
    phases, depthwise, exceptions, streams = (_code_features(n.code_segments) if c.version < STREAM_BUFFER_VERSION
                                              else (False, False, False, False))
    if streams:
        raise _fail(source, "CODE section", f"a program loads through stream buffers, which exist from format "
                    f"{STREAM_BUFFER_VERSION[0]}.{STREAM_BUFFER_VERSION[1]}, in a format {c.version[0]}.{c.version[1]} file")
    exceptions = exceptions and c.version < LOOP_EXCEPTION_VERSION
    if exceptions:
        raise _fail(source, "CODE section", f"a program has LOOP flag exceptions, which exist from format "
                    f"{LOOP_EXCEPTION_VERSION[0]}.{LOOP_EXCEPTION_VERSION[1]}, in a format {c.version[0]}.{c.version[1]} file")
    depthwise = depthwise and c.version < DEPTHWISE_MODE_VERSION
    if c.version < LOOP_PHASE_VERSION and phases:
        raise _fail(source, "CODE section", f"a program has LOOP slots with a phase, which exist from format "
                    f"{LOOP_PHASE_VERSION[0]}.{LOOP_PHASE_VERSION[1]}, in a format {c.version[0]}.{c.version[1]} file")
    if depthwise:
        raise _fail(source, "CODE section", f"a program uses the array's depthwise mode (MATMUL_DW), which exists from "
                    f"format {DEPTHWISE_MODE_VERSION[0]}.{DEPTHWISE_MODE_VERSION[1]}, in a format "
                    f"{c.version[0]}.{c.version[1]} file")
    validate_npub(n, source, counts)
    if expected_target is not None:
        check_fits_target(n, expected_target, source)
    return n


def save_npub(npub: Npub, path: str | Path) -> None:
    """Write ``npub`` to ``path`` atomically (npuc.fileio.write_atomic)."""
    from npuc.fileio import write_atomic

    write_atomic(path, npub.to_bytes(), "the container")


def read_npub(
    path: str | Path,
    *,
    expected_target: TargetLike | None = None,
    decode_code: CodeDecoder | None = None,
) -> Npub:
    """Read and validate the container at ``path`` (see :func:`load_npub`)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise BinaryFormatError(f"{path}: cannot read the container: {e.strerror}") from None
    return load_npub(data, expected_target=expected_target, decode_code=decode_code, source=str(path))

