"""The in-memory parts of a .npub container: frozen records and the enums of the format.

An :class:`npuc.runtime.npub.Npub` is built from these records.  The numbers of the enums are
part of the file format (docs/binary-format.md): they never change meaning, new members get new
numbers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from npuc.ir.types import DType, TensorType


class SectionKind(enum.IntEnum):
    """The kind of a section, as stored in the section table."""

    CODE = 1
    CONSTANTS = 2
    MEMORY_PLAN = 3
    IO_SIGNATURE = 4
    CPU_FALLBACK = 5
    SEGMENTS = 6
    DEBUG_MAP = 7
    METADATA = 8
    HOST_CODE = 9  # format 2.1: CPU segments compiled ahead of time (npuc.host)
    WEIGHT_STREAMS = 10  # format 3.2: weights stored as streams of the weight codec (npuc.isa.weight_codec)


# Sections a reader must understand (REQUIRED flag set) and that every container holds.
REQUIRED_SECTIONS = (
    SectionKind.CODE,
    SectionKind.CONSTANTS,
    SectionKind.MEMORY_PLAN,
    SectionKind.IO_SIGNATURE,
    SectionKind.CPU_FALLBACK,
    SectionKind.SEGMENTS,
)
# Sections a container may leave out (a stripped build) and a reader may skip.
OPTIONAL_SECTIONS = (SectionKind.DEBUG_MAP, SectionKind.METADATA, SectionKind.HOST_CODE, SectionKind.WEIGHT_STREAMS)
# Optional sections that a reader must still understand when present (REQUIRED flag set): a
# reader that cannot decode the weight streams cannot run the code that reads them.
REQUIRED_WHEN_PRESENT = (SectionKind.WEIGHT_STREAMS,)


class RegionKind(enum.IntEnum):
    """What a region of the DRAM arena holds."""

    CONSTANTS = 1
    ACTIVATIONS = 2
    IO = 3
    SCRATCH = 4


class SegmentKind(enum.IntEnum):
    """Where a segment of the execution order runs."""

    NPU = 1
    CPU = 2


class BindingRole(enum.IntEnum):
    """How a value of a CPU-fallback graph is bound to memory."""

    INPUT = 1  # a graph input read from the DRAM arena
    OUTPUT = 2  # a graph output written to the DRAM arena
    CONSTANT = 3  # a constant of the graph, read from the constants blob


# Element type codes of the format.  Fixed numbers, independent of the order of DType.
DTYPE_CODES: dict[DType, int] = {
    DType.f32: 1,
    DType.f16: 2,
    DType.bf16: 3,
    DType.f64: 4,
    DType.i64: 5,
    DType.i32: 6,
    DType.i16: 7,
    DType.i8: 8,
    DType.u8: 9,
    DType.bool: 10,
}
DTYPE_OF_CODE: dict[int, DType] = {code: dt for dt, code in DTYPE_CODES.items()}

# The most dimensions a tensor type may have (bounds the work of computing a size).
MAX_RANK = 64

# The range of a zero point for each integer element type a tensor can be quantized to.
ZERO_POINT_RANGE: dict[DType, tuple[int, int]] = {
    DType.i8: (-128, 127),
    DType.u8: (0, 255),
    DType.i16: (-(2**15), 2**15 - 1),
    DType.i32: (-(2**31), 2**31 - 1),
}


def freeze_fields(obj: Any, *names: str) -> None:
    """Turn list fields of a frozen record into tuples (so records built from lists compare equal)."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, list):
            object.__setattr__(obj, name, tuple(value))


@dataclass(frozen=True)
class Region:
    """A named range ``[offset, offset + size)`` of the DRAM arena."""

    name: str
    kind: RegionKind
    offset: int
    size: int


@dataclass(frozen=True)
class SramUsage:
    """Peak on-chip memory of one code segment, in bytes."""

    scratchpad_bytes: int
    accumulator_bytes: int


@dataclass(frozen=True)
class MemoryPlan:
    """The DRAM arena (one block the runtime allocates) and its regions; SRAM use per code segment."""

    dram_arena_size: int
    regions: tuple[Region, ...]
    sram: tuple[SramUsage, ...]

    def __post_init__(self) -> None:
        freeze_fields(self, "regions", "sram")


@dataclass(frozen=True)
class IOTensor:
    """A model input or output: its type (shape, dtype, layout, quantization) and DRAM offset."""

    name: str
    type: TensorType
    dram_offset: int


@dataclass(frozen=True)
class IOSignature:
    """The model's inputs and outputs, in call order."""

    inputs: tuple[IOTensor, ...]
    outputs: tuple[IOTensor, ...]

    def __post_init__(self) -> None:
        freeze_fields(self, "inputs", "outputs")


@dataclass(frozen=True)
class CpuBinding:
    """Where a value of a CPU-fallback graph lives.

    ``value`` names a graph input or output (``x`` for ``%x``) or a constant (``conv.weight`` for
    ``@"conv.weight"``).  ``offset`` is into the DRAM arena for inputs and outputs and into the
    constants blob for constants.
    """

    value: str
    role: BindingRole
    offset: int
    type: TensorType


@dataclass(frozen=True)
class CpuSubgraph:
    """A subgraph that runs on the host CPU: graph IR text and the memory bindings of its values."""

    name: str
    graph_text: str
    bindings: tuple[CpuBinding, ...]

    def __post_init__(self) -> None:
        freeze_fields(self, "bindings")


@dataclass(frozen=True)
class HostModule:
    """A CPU-fallback subgraph compiled ahead of time for a host CPU: an IREE module (llvm-cpu)
    whose function ``main`` takes and returns the subgraph's inputs and outputs in order."""

    subgraph: int
    triple: str
    code: bytes


@dataclass(frozen=True)
class WeightStream:
    """One stream of the weight codec in the constants blob: its address (system address map),
    its bytes, the bytes it decodes to, and the CRC-32 of those."""

    offset: int
    stream_bytes: int
    decoded_bytes: int
    crc32: int


@dataclass(frozen=True)
class CompressedConstant:
    """A constant of the blob whose raw bytes were replaced by streams: its address, its raw size
    and the bytes its streams take (the rest of its bytes are zero)."""

    offset: int
    raw_bytes: int
    stored_bytes: int


@dataclass(frozen=True)
class WeightStreams:
    """The WEIGHT_STREAMS section: every stream and every constant they replace."""

    streams: tuple[WeightStream, ...] = ()
    constants: tuple[CompressedConstant, ...] = ()

    @property
    def saved_bytes(self) -> int:
        """Bytes of the constants no longer stored (raw minus stream bytes)."""
        return sum(c.raw_bytes - c.stored_bytes for c in self.constants)

    def stored_fraction(self, addr: int) -> float:
        """Stored over raw bytes of the constant at ``addr`` (1.0 when it is not compressed)."""
        for c in self.constants:
            if c.offset <= addr < c.offset + c.raw_bytes:
                return c.stored_bytes / c.raw_bytes
        return 1.0


@dataclass(frozen=True)
class Segment:
    """One step of the execution order.

    ``index`` selects a code segment (NPU) or a CPU-fallback subgraph (CPU).  ``inputs`` and
    ``outputs`` name the model-level tensors the step reads and writes: a model input or a tensor
    an earlier step wrote.
    """

    kind: SegmentKind
    name: str
    index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def __post_init__(self) -> None:
        freeze_fields(self, "inputs", "outputs")


@dataclass(frozen=True)
class DebugEntry:
    """Instructions from ``instr_index`` up to the next entry come from source op ``op`` at ``loc``."""

    instr_index: int
    op: str
    loc: str | None = None


@dataclass(frozen=True)
class Metadata:
    """What compiled the container and from which model.  Never a time stamp.

    ``extra`` holds further ``(key, value)`` pairs, sorted by key, keys unique (a dict given
    here is turned into its sorted items).
    """

    compiler_version: str
    model_name: str
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        extra = sorted(self.extra.items()) if isinstance(self.extra, dict) else self.extra
        object.__setattr__(self, "extra", tuple(tuple(kv) for kv in extra))
