"""The .npub container: round trips, determinism, layout, versioning and the code hook."""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npuc.errors import BinaryFormatError
from npuc.ir.types import DType, QuantParams, TensorType
from npuc.runtime.npub import (
    FORMAT_VERSION,
    MAGIC,
    SECTION_ALIGNMENT,
    BindingRole,
    CpuBinding,
    CpuSubgraph,
    DebugEntry,
    IOSignature,
    IOTensor,
    MemoryPlan,
    Metadata,
    Npub,
    RawSection,
    Region,
    RegionKind,
    SectionKind,
    Segment,
    SegmentKind,
    SramUsage,
    assemble,
    load_npub,
    no_code_check,
    read_npub,
    save_npub,
    split_container,
)
from npuc.runtime.npub_example import EXAMPLE_FINGERPRINT, EXAMPLE_TARGET, example_npub


def load(data: bytes, **kw) -> Npub:
    kw.setdefault("decode_code", no_code_check)
    return load_npub(data, **kw)


def minimal_npub() -> Npub:
    """No code, no constants: the output is the input (an identity model)."""
    x = IOTensor("x", TensorType((2, 3), DType.f32), 0)
    return Npub(
        target_name="t",
        target_fingerprint=bytes(32),
        code_segments=(),
        constants=b"",
        memory_plan=MemoryPlan(24, (), ()),
        io_signature=IOSignature((x,), (x,)),
        segments=(),
    )


# ----------------------------------------------------------------------------- round trips


def test_example_round_trips_to_an_equal_object():
    n = example_npub()
    assert load(n.to_bytes()) == n


def test_to_bytes_is_deterministic():
    data = example_npub().to_bytes()
    assert example_npub().to_bytes() == data
    assert example_npub().to_bytes() == example_npub().to_bytes()


def test_loaded_container_re_encodes_to_the_same_bytes():
    data = example_npub().to_bytes()
    assert load(data).to_bytes() == data


def test_stripped_container_round_trips():
    n = dataclasses.replace(example_npub(), debug_map=None, metadata=None)
    data = n.to_bytes()
    kinds = [s.kind for s in split_container(data).sections]
    assert SectionKind.DEBUG_MAP not in kinds and SectionKind.METADATA not in kinds
    assert load(data) == n


def test_minimal_container_round_trips():
    n = minimal_npub()
    assert load(n.to_bytes()) == n


def test_save_and_read(tmp_path):
    path = tmp_path / "model.npub"
    save_npub(example_npub(), path)
    assert read_npub(path, decode_code=no_code_check) == example_npub()


def test_read_of_a_missing_file_is_a_format_error(tmp_path):
    with pytest.raises(BinaryFormatError, match="cannot read"):
        read_npub(tmp_path / "absent.npub")


def test_example_bytes_are_pinned():
    # The encoding of the example is part of the format: a change here is a format change
    # (update docs/binary-format.md and, when old readers would misread, the version).
    digest = hashlib.sha256(example_npub().to_bytes()).hexdigest()
    assert digest == PINNED_EXAMPLE_SHA256


PINNED_EXAMPLE_SHA256 = "6c6491ea089ec09aeccd40b6a4fef773a8aba86480677531324692688552a439"


# ----------------------------------------------------------------------------------- layout


def test_header_fields_sit_where_the_docs_say():
    data = example_npub().to_bytes()
    assert data[:8] == MAGIC
    assert struct.unpack_from("<HH", data, 8) == FORMAT_VERSION
    assert struct.unpack_from("<Q", data, 16)[0] == len(data)
    assert data[44:76] == EXAMPLE_FINGERPRINT
    name_len = struct.unpack_from("<H", data, 40)[0]
    assert data[76 : 76 + name_len] == EXAMPLE_TARGET.encode()


def test_payloads_are_aligned_and_constants_map_in_place():
    n = example_npub()
    data = n.to_bytes()
    header_size, count = struct.unpack_from("<I", data, 24)[0], struct.unpack_from("<I", data, 32)[0]
    entries = [struct.unpack_from("<HHIQQ", data, header_size + 24 * i) for i in range(count)]
    for kind, _, crc, offset, length in entries:
        assert offset % SECTION_ALIGNMENT == 0
        assert zlib.crc32(data[offset : offset + length]) == crc
    const = next(e for e in entries if e[0] == SectionKind.CONSTANTS)
    assert data[const[3] : const[3] + const[4]] == n.constants


def test_code_programs_are_64_byte_aligned_inside_the_section():
    n = example_npub()
    code = next(s for s in split_container(n.to_bytes()).sections if s.kind == SectionKind.CODE)
    count = struct.unpack_from("<I", code.payload, 0)[0]
    for i in range(count):
        offset, length = struct.unpack_from("<QQ", code.payload, 4 + 16 * i)
        assert offset % 64 == 0
        assert code.payload[offset : offset + length] == n.code_segments[i]


def test_required_flags_and_kind_order():
    sections = split_container(example_npub().to_bytes()).sections
    assert [s.kind for s in sections] == sorted(s.kind for s in sections)
    flags = {SectionKind(s.kind): s.flags for s in sections}
    assert flags[SectionKind.CODE] == 1 and flags[SectionKind.DEBUG_MAP] == 0


# ------------------------------------------------------------------------------ versioning


def _with_extra_section(minor: int, kind: int, flags: int) -> bytes:
    c = split_container(example_npub().to_bytes())
    sections = c.sections + (RawSection(kind, flags, b"future data"),)
    return assemble(dataclasses.replace(c, version=(FORMAT_VERSION[0], minor), sections=sections))


def test_newer_minor_with_unknown_optional_section_loads():
    data = _with_extra_section(FORMAT_VERSION[1] + 1, 40, 0)
    assert load(data) == example_npub()


def test_newer_minor_with_unknown_required_section_is_refused():
    data = _with_extra_section(FORMAT_VERSION[1] + 1, 40, 1)
    with pytest.raises(BinaryFormatError, match="newer npuc"):
        load(data)


def test_current_minor_with_unknown_section_is_refused():
    data = _with_extra_section(FORMAT_VERSION[1], 40, 0)
    with pytest.raises(BinaryFormatError, match="unknown to format version 4.0"):
        load(data)


# ---------------------------------------------------------------------------- target check


@dataclasses.dataclass(frozen=True)
class FakeTarget:
    name: str
    fp: bytes

    def fingerprint(self) -> bytes:
        return self.fp


def test_matching_target_is_accepted():
    data = example_npub().to_bytes()
    assert load(data, expected_target=FakeTarget(EXAMPLE_TARGET, EXAMPLE_FINGERPRINT)) == example_npub()


# ------------------------------------------------------------------------------- code hook


def test_decode_hook_sees_every_program():
    seen = []

    def decode(program: bytes):
        seen.append(program)
        return [None] * 100

    load_npub(example_npub().to_bytes(), decode_code=decode)
    assert seen == list(example_npub().code_segments)


def test_decode_hook_counts_bound_the_debug_map():
    # Program 0's debug map names instruction 14; a 10-instruction program cannot hold it.
    with pytest.raises(BinaryFormatError, match="names instruction 14, but the program has 10"):
        load_npub(example_npub().to_bytes(), decode_code=lambda p: [None] * 10)


def test_decode_hook_errors_name_the_program_and_file():
    def decode(program: bytes):
        raise BinaryFormatError("opcode 0xff is unknown")

    with pytest.raises(BinaryFormatError, match=r"^m\.npub: CODE section: program 0 .*opcode 0xff"):
        load_npub(example_npub().to_bytes(), decode_code=decode, source="m.npub")


# ----------------------------------------------------------------------- generated content

_names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)
_int_dtypes = st.sampled_from([DType.i8, DType.u8, DType.i16, DType.i32])


@st.composite
def _tensor_type(draw) -> TensorType:
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    dtype = draw(st.sampled_from(list(DType)))
    quant = None
    if draw(st.booleans()):
        dtype = draw(_int_dtypes)
        lo, hi = {DType.i8: (-128, 127), DType.u8: (0, 255)}.get(dtype, (-1000, 1000))
        axis = draw(st.sampled_from([None] + list(range(len(shape)))))
        n = 1 if axis is None else shape[axis]
        if n == 0:
            axis, n = None, 1
        scales = draw(st.lists(st.floats(1e-6, 1e3), min_size=n, max_size=n))
        zps = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
        quant = QuantParams(tuple(scales), tuple(zps), axis)
    layout = draw(st.sampled_from([None, "NCHW", "NHWC"]))
    return TensorType(shape, dtype, quant, layout)


@st.composite
def _npub(draw) -> Npub:
    programs = tuple(draw(st.lists(st.binary(max_size=80), max_size=3)))
    constants = draw(st.binary(max_size=100))
    arena = 4096
    in_types = draw(st.lists(_tensor_type(), min_size=1, max_size=3))
    inputs = tuple(IOTensor(f"in{i}", t, 128 * i) for i, t in enumerate(in_types))
    regions = (Region("constants", RegionKind.CONSTANTS, 3072, 1024),)
    sram = tuple(SramUsage(draw(st.integers(0, 2**40)), draw(st.integers(0, 2**20))) for _ in programs)
    segs = []
    produced: list[IOTensor] = []
    for i in range(len(programs)):
        out = IOTensor(f"out{i}", draw(_tensor_type()), 1024 + 128 * i)
        segs.append(Segment(SegmentKind.NPU, draw(_names) + f"#{i}", i, (inputs[0].name,), (out.name,)))
        produced.append(out)
    graph = "graph @" + draw(_names)
    binding = CpuBinding("a", BindingRole.CONSTANT, 0, TensorType((len(constants),), DType.u8))
    cpu = (CpuSubgraph("cpu", graph, (binding,)),) if draw(st.booleans()) else ()
    debug = tuple(
        tuple(DebugEntry(k * 3, draw(_names), draw(st.none() | _names)) for k in range(draw(st.integers(0, 3))))
        for _ in programs
    )
    keys = sorted(set(draw(st.lists(_names, max_size=3))))
    meta = Metadata(draw(_names), draw(st.text(max_size=5)), tuple((k, k * 2) for k in keys))
    return Npub(
        target_name=draw(_names),
        target_fingerprint=draw(st.binary(min_size=32, max_size=32)),
        code_segments=programs,
        constants=constants,
        memory_plan=MemoryPlan(arena, regions, sram),
        io_signature=IOSignature(inputs, tuple(produced) or (inputs[0],)),
        segments=tuple(segs),
        cpu_fallback=cpu,
        debug_map=draw(st.sampled_from([None, debug])),
        metadata=draw(st.sampled_from([None, meta])),
    )


@settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(_npub())
def test_generated_containers_round_trip(n: Npub):
    data = n.to_bytes()
    loaded = load(data)
    assert loaded == n
    assert loaded.to_bytes() == data


def test_records_built_from_lists_equal_the_loaded_tuples():
    n = example_npub()
    from_lists = dataclasses.replace(
        n,
        code_segments=list(n.code_segments),
        segments=[dataclasses.replace(s, inputs=list(s.inputs)) for s in n.segments],
        debug_map=[list(e) for e in n.debug_map],
        metadata=Metadata("0.1.0", "tiny_cnn", {"quantization": "int8", "opt_level": "2"}),
    )
    assert from_lists == n
    assert load(from_lists.to_bytes()) == n


# ------------------------------------------------------------------------ real ISA programs


def _isa():
    isa = pytest.importorskip("npuc.isa")
    if not hasattr(isa, "decode_program"):
        pytest.skip("npuc.isa has no decode_program yet")
    return isa


def test_real_program_is_decoded_by_default():
    _isa()
    from npuc.runtime.npub_example import relu_npub

    n = relu_npub()
    assert load_npub(n.to_bytes()) == n


def test_debug_map_past_the_real_program_is_refused_by_default():
    _isa()
    from npuc.runtime.npub_example import relu_npub

    n = dataclasses.replace(relu_npub(), debug_map=((DebugEntry(0, "a"), DebugEntry(4, "b")),))
    with pytest.raises(BinaryFormatError, match="names instruction 4, but the program has 4"):
        load_npub(n.to_bytes())


def test_malformed_real_program_is_refused_by_default():
    _isa()
    from npuc.runtime.npub_example import relu_npub

    n = relu_npub()
    bad = bytearray(n.code_segments[0])
    bad[len(bad) - 2] = 0xFF  # the opcode byte of END, the last instruction (2 bytes)
    data = dataclasses.replace(n, code_segments=(bytes(bad),)).to_bytes()
    with pytest.raises(BinaryFormatError, match=r"^f\.npub: CODE section: program 0 is not a valid instruction stream"):
        load_npub(data, source="f.npub")
    assert load_npub(data, decode_code=no_code_check).code_segments == (bytes(bad),)
