"""The .npub loader refuses every malformed container with a BinaryFormatError that says why."""

from __future__ import annotations

import dataclasses
import re
import struct
import zlib

import pytest

from npuc.errors import BinaryFormatError
from npuc.ir.types import DType, QuantParams, TensorType
from npuc.runtime.npub import (
    FORMAT_VERSION,
    Container,
    DebugEntry,
    IOTensor,
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
    encode_sections,
    load_npub,
    no_code_check,
    split_container,
)
from npuc.runtime.npub_example import EXAMPLE_FINGERPRINT, EXAMPLE_TARGET, example_npub

SRC = "model.npub"
GOOD = example_npub().to_bytes()
HEADER_SIZE = struct.unpack_from("<I", GOOD, 24)[0]
COUNT = struct.unpack_from("<I", GOOD, 32)[0]
TABLE_END = HEADER_SIZE + 24 * COUNT


def load(data: bytes, **kw) -> Npub:
    return load_npub(data, decode_code=no_code_check, source=SRC, **kw)


def rejected(data: bytes, pattern: str, **kw) -> str:
    """Assert that ``data`` is refused with a message naming the file and matching ``pattern``."""
    with pytest.raises(BinaryFormatError) as e:
        load(data, **kw)
    msg = str(e.value)
    assert msg.startswith(f"{SRC}: "), msg
    assert re.search(pattern, msg), msg
    return msg


def entry(data: bytes, i: int) -> tuple[int, int, int, int, int]:
    return struct.unpack_from("<HHIQQ", data, HEADER_SIZE + 24 * i)


def entry_index(kind: SectionKind) -> int:
    return next(i for i in range(COUNT) if entry(GOOD, i)[0] == kind)


def fix_checksums(data: bytearray) -> bytes:
    """Recompute the table and header checksums after a patch of the header or the table."""
    header_size, count = struct.unpack_from("<I", data, 24)[0], struct.unpack_from("<I", data, 32)[0]
    table_end = min(header_size + 24 * count, len(data))
    struct.pack_into("<I", data, 36, zlib.crc32(data[header_size:table_end]))
    head = bytearray(data[:header_size])
    struct.pack_into("<I", head, 28, 0)
    struct.pack_into("<I", data, 28, zlib.crc32(head))
    return bytes(data)


def patched(offset: int, fmt: str, value, *, fix: bool = True, data: bytes = GOOD) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return fix_checksums(out) if fix else bytes(out)


def patched_entry(i: int, field: str, value) -> bytes:
    offsets = {"kind": (0, "<H"), "flags": (2, "<H"), "offset": (8, "<Q"), "length": (16, "<Q")}
    delta, fmt = offsets[field]
    return patched(HEADER_SIZE + 24 * i + delta, fmt, value)


def with_sections(fn) -> bytes:
    c = split_container(GOOD)
    return assemble(dataclasses.replace(c, sections=tuple(fn(list(c.sections)))))


def payload(kind: SectionKind) -> bytes:
    return next(s.payload for s in split_container(GOOD).sections if s.kind == kind)


def with_payload(kind: SectionKind, offset: int, fmt: str, value, expect) -> bytes:
    """GOOD with one field of one payload rewritten (checksums right).  ``expect`` guards the place."""
    body = bytearray(payload(kind))
    assert struct.unpack_from(fmt, body, offset)[0] == expect, "the test patches the wrong place"
    struct.pack_into(fmt, body, offset, value)
    return with_sections(lambda ss: [RawSection(s.kind, s.flags, bytes(body)) if s.kind == kind else s for s in ss])


def unchecked(n: Npub) -> bytes:
    """Bytes for ``n`` without the writer's meaning checks, so the loader's are exercised."""
    return assemble(Container(FORMAT_VERSION, n.target_name, n.target_fingerprint, encode_sections(n)))


def replace(**kw) -> Npub:
    return dataclasses.replace(example_npub(), **kw)


# ------------------------------------------------------------------------ magic, truncation


def test_good_container_loads():
    assert load(GOOD) == example_npub()


@pytest.mark.parametrize("data", [b"NOTANPUB" + GOOD[8:], b"\x89PNG\r\n\x1a\n" + bytes(100), b"garbage"])
def test_bad_magic(data):
    rejected(data, "not a .npub container")


def test_not_bytes():
    with pytest.raises(BinaryFormatError, match="expected bytes"):
        load_npub("text", decode_code=no_code_check)  # type: ignore[arg-type]


def test_truncated_at_every_length():
    for cut in range(len(GOOD)):
        rejected(GOOD[:cut], "truncated")


@pytest.mark.parametrize("region", ["magic", "version", "fixed header", "target name", "table", "payload"])
def test_truncated_in_each_region(region):
    cuts = {
        "magic": 5,
        "version": 10,
        "fixed header": 50,
        "target name": HEADER_SIZE - 2,
        "table": TABLE_END - 5,
        "payload": entry(GOOD, entry_index(SectionKind.CONSTANTS))[3] + 100,
    }
    rejected(GOOD[: cuts[region]], "truncated")


# HOST_CODE and WEIGHT_STREAMS are not in the example container (tests/host/test_host_code.py and
# tests/codegen/test_weight_compression.py truncate them).
@pytest.mark.parametrize("kind", [k for k in SectionKind
                                  if k not in (SectionKind.CONSTANTS, SectionKind.HOST_CODE, SectionKind.WEIGHT_STREAMS)])
def test_truncated_payload_of_each_section_with_fixed_sizes(kind):
    # A section cut short whose table and checksums were rewritten to match: the payload
    # decoder itself finds the truncation.  (The constants blob has no framing to cut.)
    body = payload(kind)
    data = with_sections(lambda ss: [RawSection(s.kind, s.flags, body[:-3]) if s.kind == kind else s for s in ss])
    rejected(data, f"{kind.name} section: .*(truncated|needs|count)")


def test_trailing_bytes_after_the_file():
    rejected(GOOD + b"\0", "1 extra bytes")


# ------------------------------------------------------------------------------- versions


def test_newer_major_version():
    msg = rejected(patched(8, "<H", 5), r"version 5\.0, a newer major version; this npuc reads version 4\.x")
    assert "header checksum" not in msg


def test_newer_major_version_is_reported_before_the_checksum():
    rejected(patched(8, "<H", 6, fix=False), r"version 6\.0, a newer major version")


def test_older_major_version():
    rejected(patched(8, "<H", 0), "older, unsupported")
    # 1.x: three queues and neighbour-only tokens; 2.x: fixed 32-byte instruction words; 3.x: four
    # queues (8-bit opcodes, 6 dependency flags)
    rejected(patched(8, "<H", 1), r"version 1\.0, an older, unsupported major version; this npuc reads version 4\.x")
    rejected(patched(8, "<H", 2), r"version 2\.0, an older, unsupported major version; this npuc reads version 4\.x")
    rejected(patched(8, "<H", 3), r"version 3\.0, an older, unsupported major version; this npuc reads version 4\.x")


# --------------------------------------------------------------------------------- target


class FakeTarget:
    def __init__(self, name: str, fp: bytes) -> None:
        self.name, self._fp = name, fp

    def fingerprint(self) -> bytes:
        return self._fp


def test_wrong_target_names_both_targets():
    msg = rejected(GOOD, "compiled for target 'npu-mid'", expected_target=FakeTarget("npu-small", bytes(32)))
    assert "not for target 'npu-small'" in msg and EXAMPLE_FINGERPRINT.hex()[:16] in msg


def test_same_target_name_other_configuration():
    rejected(GOOD, "different configuration of target 'npu-mid'", expected_target=FakeTarget(EXAMPLE_TARGET, bytes(32)))


# ------------------------------------------------------------------------------ checksums


def test_bad_header_checksum():
    rejected(patched(HEADER_SIZE - 10, "<B", 0x41, fix=False), "header checksum does not match")


def test_bad_table_checksum():
    rejected(patched(HEADER_SIZE + 30, "<B", 0x41, fix=False), "table checksum does not match")


@pytest.mark.parametrize("kind", [k for k in SectionKind if k not in (SectionKind.HOST_CODE, SectionKind.WEIGHT_STREAMS)])  # not in the example: tests/host, tests/codegen
def test_bad_payload_checksum(kind):
    _, _, _, offset, _ = entry(GOOD, entry_index(kind))
    data = bytearray(GOOD)
    data[offset] ^= 0x01
    rejected(bytes(data), rf"entry \d \({kind.name}\): the payload checksum does not match")


# ------------------------------------------------------------------------- header fields


def test_nonzero_header_flags():
    rejected(patched(12, "<I", 4), "flags are 0x4; no flag is defined")


def test_nonzero_reserved():
    rejected(patched(42, "<H", 1), "reserved field is 1")


def test_wrong_header_size():
    rejected(patched(24, "<I", HEADER_SIZE + 8), f"header_size is {HEADER_SIZE + 8}")


def test_target_name_not_utf8():
    rejected(patched(76, "<B", 0xFF), "target name is not valid UTF-8")


def test_file_size_field_disagrees():
    rejected(patched(16, "<Q", len(GOOD) + 1), "truncated")


def test_absurd_section_count():
    rejected(patched(32, "<I", 0xFFFF_FFFF), "section count 4294967295 needs a table")


# -------------------------------------------------------------------------- section table


def test_overlapping_sections():
    _, _, _, code_offset, _ = entry(GOOD, 0)
    rejected(patched_entry(1, "offset", code_offset), r"entry 1 \(CONSTANTS\): .* overlap section CODE")


def test_section_overlapping_the_table():
    rejected(patched_entry(0, "offset", 64), "overlap the section table")


def test_misaligned_section():
    _, _, _, offset, _ = entry(GOOD, 1)
    rejected(patched_entry(1, "offset", offset + 8), "not a multiple of 64")


def test_section_past_the_end():
    rejected(patched_entry(COUNT - 1, "length", 10**6), "extend past the end")


def test_section_length_too_large_for_u64_sum():
    rejected(patched_entry(0, "length", 2**64 - 1), "extend past the end")


def test_gap_between_sections():
    # assemble() always packs payloads, so the gap is made by hand: 64 zero bytes before the last.
    last = COUNT - 1
    offset = entry(GOOD, last)[3]
    data = bytearray(GOOD[:offset] + bytes(64) + GOOD[offset:])
    struct.pack_into("<Q", data, 16, len(data))
    struct.pack_into("<Q", data, HEADER_SIZE + 24 * last + 8, offset + 64)
    rejected(fix_checksums(data), f"offset {offset + 64} leaves a gap")


def test_nonzero_padding_between_sections():
    _, _, _, offset, length = entry(GOOD, 0)
    end = offset + length
    assert end % 64, "the example's CODE section must need padding"
    data = bytearray(GOOD)
    data[end] = 1
    rejected(bytes(data), r"entry 1 \(CONSTANTS\): the padding before the payload holds non-zero bytes")


def test_unknown_section_kind():
    rejected(patched_entry(COUNT - 1, "kind", 99), "section kind 99 is unknown to format version 4.0")


def test_duplicate_section():
    rejected(with_sections(lambda ss: ss[:2] + ss[1:]), "section CONSTANTS appears twice")


def test_unsorted_sections():
    rejected(with_sections(lambda ss: [ss[1], ss[0]] + ss[2:]), "section CODE comes after CONSTANTS")


def test_missing_required_section():
    rejected(with_sections(lambda ss: [s for s in ss if s.kind != SectionKind.SEGMENTS]), "has no SEGMENTS section")


def test_required_flag_cleared_on_a_known_section():
    rejected(patched_entry(0, "flags", 0), "section CODE has flags 0x0, not 0x1")


def test_undefined_section_flag():
    rejected(patched_entry(0, "flags", 3), "only bit 0 .* is defined")


# --------------------------------------------------------------------- payload: syntax

# Byte offsets inside the example's payloads (each patch checks the value it replaces).
IO_DTYPE = 4 + 4 + 1  # inputs count, name length, "x"
IO_SHAPE0 = IO_DTYPE + 1 + 4
IO_LAYOUT_FLAG = IO_SHAPE0 + 4 * 8
IO_SCALE = IO_LAYOUT_FLAG + 1 + 4 + 4 + 1 + 1 + 4  # layout "NHWC", quant flag, axis flag, count
IO_ZP = IO_SCALE + 8
IO_OFFSET = IO_ZP + 4
CPU_TEXT_LEN = len(example_npub().cpu_fallback[0].graph_text.encode())
CPU_ROLE = 4 + 4 + 4 + 4 + CPU_TEXT_LEN + 4 + 4 + 2  # count, "cpu0", text, binding count, "t0"


def test_dtype_code_out_of_range():
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_DTYPE, "<B", 99, 8), r"inputs\[0\]\.type\.dtype' is 99")


def test_region_kind_out_of_range():
    rejected(with_payload(SectionKind.MEMORY_PLAN, 12, "<B", 9, 1), r"region\[0\]\.kind' is 9, which is not a known RegionKind")


def test_segment_kind_out_of_range():
    rejected(with_payload(SectionKind.SEGMENTS, 4, "<B", 7, 1), "not a known SegmentKind")


def test_binding_role_out_of_range():
    rejected(with_payload(SectionKind.CPU_FALLBACK, CPU_ROLE, "<B", 0, 1), "not a known BindingRole")


def test_flag_byte_out_of_range():
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_LAYOUT_FLAG, "<B", 2, 1), "a flag byte must be 0 or 1")


def test_absurd_io_count():
    rejected(with_payload(SectionKind.IO_SIGNATURE, 0, "<I", 0xFFFF_FFFF, 1), "count 'inputs count' is 4294967295")


def test_absurd_program_count():
    rejected(with_payload(SectionKind.CODE, 0, "<I", 0x1000_0000, 2), "count 'program count' is 268435456")


def test_absurd_string_length():
    rejected(with_payload(SectionKind.IO_SIGNATURE, 4, "<I", 0xFFFF_FFF0, 1), r"'inputs\[0\]\.name' needs 4294967280 bytes")


def test_absurd_rank():
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_DTYPE + 1, "<I", 0x7FFF_FFFF, 4), r"count 'inputs\[0\]\.type\.rank'")


def test_string_not_utf8():
    rejected(with_payload(SectionKind.IO_SIGNATURE, 8, "<B", 0xFF, ord("x")), r"'inputs\[0\]\.name' is not valid UTF-8")


def test_trailing_bytes_in_a_section():
    body = payload(SectionKind.METADATA) + b"\0"
    data = with_sections(lambda ss: [RawSection(s.kind, s.flags, body) if s.kind == SectionKind.METADATA else s for s in ss])
    rejected(data, "METADATA section: 1 unexpected bytes follow the last field")


def test_program_at_a_non_canonical_offset():
    rejected(with_payload(SectionKind.CODE, 4, "<Q", 128, 64), "program 0 starts at offset 128; it must start at 64")


# -------------------------------------------------------------------- payload: meaning


def test_negative_dimension():
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_SHAPE0, "<q", -3, 1), "input 0 'x' has dimension 0 = -3")


def test_io_offset_outside_the_arena():
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_OFFSET, "<Q", 8000, 1088), r"input 0 'x' spans bytes \[8000, 11072\), past the end of the DRAM arena \(8192 bytes\)")


def test_io_offset_that_would_overflow():
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_OFFSET, "<Q", 2**64 - 1, 1088), "past the end of the DRAM arena")


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -1.0, 0.0])
def test_bad_quant_scale(scale):
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_SCALE, "<d", scale, 0.0078125), "scales must be finite and > 0")


def test_zero_point_out_of_range():
    rejected(with_payload(SectionKind.IO_SIGNATURE, IO_ZP, "<i", 200, -1), r"zero point 0 is 200, outside \[-128, 127\] of i8")


def _io(**kw) -> Npub:
    n = example_npub()
    x = dataclasses.replace(n.io_signature.inputs[0], **kw)
    return replace(io_signature=dataclasses.replace(n.io_signature, inputs=(x,)))


@pytest.mark.parametrize(
    "npub, pattern",
    [
        (_io(type=TensorType((1, 32, 32, 3), DType.f32, QuantParams((0.5,), (0,)))), "not an integer type"),
        (_io(type=TensorType((1, 3), DType.i8, QuantParams((0.5,), (0,), axis=2))), "axis 2 is outside its rank 2"),
        (_io(type=TensorType((1, 3), DType.i8, QuantParams((0.5,), (0,), axis=1))), "1 scales for axis 1 of size 3"),
        (_io(type=TensorType((1, 3), DType.i8, QuantParams((0.5, 0.5), (0, 0)))), "per-tensor but has 2 scales"),
        (_io(type=TensorType((2,), DType.i8, None, "")), "layout is ''"),
        (_io(name=""), "name of input 0 is ''"),
    ],
)
def test_bad_io_types(npub, pattern):
    rejected(unchecked(npub), pattern)


def _plan(**kw) -> Npub:
    n = example_npub()
    return replace(memory_plan=dataclasses.replace(n.memory_plan, **kw))


def _segments(*segs: Segment) -> Npub:
    return replace(segments=segs)


NPU0 = Segment(SegmentKind.NPU, "npu0", 0, ("x",), ("features", "t0"))
CPU0 = Segment(SegmentKind.CPU, "cpu0", 0, ("t0",), ("t1",))
NPU1 = Segment(SegmentKind.NPU, "npu1", 1, ("t1",), ("logits",))


@pytest.mark.parametrize(
    "npub, pattern",
    [
        (_plan(regions=example_npub().memory_plan.regions + (Region("more", RegionKind.SCRATCH, 100, 8),)), "regions 'constants' and 'more' overlap"),
        (_plan(regions=(Region("constants", RegionKind.CONSTANTS, 0, 100),)), "1088-byte constants blob needs a CONSTANTS region"),
        (_plan(regions=(Region("c", RegionKind.CONSTANTS, 0, 2000), Region("c2", RegionKind.CONSTANTS, 2000, 8))), "2 CONSTANTS regions"),
        (_plan(regions=(Region("c", RegionKind.CONSTANTS, 8000, 2000),)), r"region 'c' spans bytes \[8000, 10000\)"),
        (_plan(sram=(SramUsage(1, 1),)), "1 SRAM usage entries for 2 code segments"),
        (_segments(CPU0, NPU0, NPU1), "segment 'cpu0' reads 't0', which no model input or earlier segment provides"),
        (_segments(NPU0, CPU0, NPU1, dataclasses.replace(NPU1, name="again")), "writes 'logits', which is already defined"),
        (_segments(NPU0, CPU0), "model output 'logits' is produced by no segment"),
        (_segments(NPU0, CPU0, dataclasses.replace(NPU1, index=5)), "runs code segment 5, but there are 2"),
        (_segments(NPU0, dataclasses.replace(CPU0, index=1), NPU1), "runs subgraph 1, but there are 1"),
        (_segments(NPU0, dataclasses.replace(CPU0, inputs=("t0", "x")), NPU1), "binds 1 inputs and 1 outputs"),
        (_segments(NPU0, CPU0, dataclasses.replace(NPU1, name="npu0")), "segment name 'npu0' appears twice"),
        (replace(debug_map=((DebugEntry(3, "a"), DebugEntry(3, "b")), ())), "instruction index 3, not above 3"),
        (replace(debug_map=((),)), "covers 1 programs, but there are 2 code segments"),
        (replace(metadata=Metadata("0.1", "m", (("b", ""), ("a", "")))), "extra keys must be unique and sorted"),
        (replace(metadata=Metadata("", "m")), "compiler version is ''"),
    ],
)
def test_bad_content(npub, pattern):
    rejected(unchecked(npub), pattern)


def test_cpu_binding_outside_the_constants_blob():
    n = example_npub()
    sg = n.cpu_fallback[0]
    b = dataclasses.replace(sg.bindings[1], offset=1000)
    bad = replace(cpu_fallback=(dataclasses.replace(sg, bindings=(sg.bindings[0], b, sg.bindings[2])),))
    rejected(unchecked(bad), r"binding 'head.scale' of subgraph 'cpu0' spans bytes \[1000, 1256\), past the end of the constants blob")


def test_cpu_graph_text_missing():
    sg = dataclasses.replace(example_npub().cpu_fallback[0], graph_text="")
    rejected(unchecked(replace(cpu_fallback=(sg,))), "subgraph 'cpu0' has no graph text")


# --------------------------------------------------------------------------------- writer


@pytest.mark.parametrize(
    "npub, pattern",
    [
        (_io(type=TensorType((-1, 3), DType.i8)), "dimension 0 = -1"),
        (replace(target_fingerprint=bytes(31)), "fingerprint must be 32 bytes"),
        (replace(target_name=""), "target name is ''"),
        (_plan(sram=(SramUsage(2**70, 0), SramUsage(0, 0))), r"cannot write: field 'sram\[0\]\.scratchpad_bytes'"),
        (_io(dram_offset=-5), "offset of input 0 'x' is -5"),
    ],
)
def test_writer_refuses_what_the_loader_would_refuse(npub, pattern):
    with pytest.raises(BinaryFormatError, match=pattern):
        npub.to_bytes()


def test_writer_refuses_a_quant_scale_that_is_not_finite():
    bad = _io(type=TensorType((1,), DType.i8, QuantParams((float("nan"),), (0,))))
    with pytest.raises(BinaryFormatError, match="scales must be finite"):
        bad.to_bytes()


def test_writer_output_always_loads():
    io = IOTensor("y", TensorType((0,), DType.bool), 8192)  # empty tensor at the arena's end
    n = replace(io_signature=dataclasses.replace(example_npub().io_signature, inputs=(example_npub().io_signature.inputs[0], io)))
    assert load(n.to_bytes()) == n


def test_container_for_another_preset_target_is_refused():
    from npuc.targets import load_target

    mid, small = load_target("npu-mid"), load_target("npu-small")
    data = replace(target_name=mid.name, target_fingerprint=mid.fingerprint()).to_bytes()
    assert load(data, expected_target=mid).target_name == "npu-mid"
    rejected(data, "compiled for target 'npu-mid' .* not for target 'npu-small'", expected_target=small)


def test_section_kind_zero():
    rejected(patched_entry(0, "kind", 0), "section kind 0 is unknown")


def _for_mid(**kw) -> tuple[bytes, object]:
    from npuc.targets import load_target

    mid = load_target("npu-mid")
    n = replace(target_name=mid.name, target_fingerprint=mid.fingerprint(), **kw)
    return unchecked(n), mid


def test_arena_larger_than_the_target_dram():
    data, mid = _for_mid(memory_plan=dataclasses.replace(example_npub().memory_plan, dram_arena_size=2**40))
    load(data)  # without a target the arena size has no bound but its field
    rejected(data, "DRAM arena of 1099511627776 bytes exceeds the 1073741824-byte DRAM of target 'npu-mid'", expected_target=mid)


def test_sram_use_larger_than_the_target_scratchpad():
    plan = dataclasses.replace(example_npub().memory_plan, sram=(SramUsage(0, 0), SramUsage(2**20, 0)))
    data, mid = _for_mid(memory_plan=plan)
    rejected(data, "code segment 1 uses 1048576 bytes of scratchpad; target 'npu-mid' has 524288", expected_target=mid)


def test_writer_refuses_a_target_name_that_is_not_utf8():
    with pytest.raises(BinaryFormatError, match="target name cannot be encoded as UTF-8"):
        replace(target_name="npu-\udcff").to_bytes()
