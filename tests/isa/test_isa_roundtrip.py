"""Encode/decode and assemble/disassemble round trips for every instruction, and the decoder's
refusal of anything the encoder cannot produce."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from npuc.errors import BinaryFormatError
from npuc.isa import (
    INSTR_BYTES,
    Deps,
    FieldError,
    Instr,
    Queue,
    all_defs,
    assemble,
    decode_instr,
    decode_program,
    disassemble,
    encode_instr,
    encode_program,
    format_instr,
)
from npuc.isa.asm import assemble_instr
from npuc.isa.instr import FIELD_BITS, HEADER_BITS, build_args

DEFS = all_defs()


def field_values(f):
    if f.kind == "enum":
        return st.sampled_from(list(f.enum))
    if f.kind == "bool":
        return st.integers(0, 1)
    if f.kind == "log2":
        return st.sampled_from([1, 2, 4])
    if f.kind == "f32":
        return st.floats(width=32, allow_nan=False)
    if f.kind == "sint":
        return st.integers(-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1)
    lo = f.lo or 0
    top = (1 << f.bits) - 1
    # Mostly small values (like real programs), sometimes the extremes of the field.
    return st.one_of(st.integers(lo, min(top, lo + 64)), st.sampled_from([lo, top]), st.integers(lo, top))


def deps_for(queue: Queue):
    others = st.sets(st.sampled_from(queue.others()))
    return st.builds(Deps, others.map(frozenset), others.map(frozenset))


@st.composite
def instrs(draw, d):
    values = {f.name: draw(field_values(f)) for f in d.fields}
    try:
        args = build_args(d, values)
    except FieldError:
        assume(False)
    return Instr(d.name, args, draw(deps_for(d.queue)))


def test_every_definition_fits_and_is_unique():
    assert len({d.opcode for d in DEFS}) == len({d.name for d in DEFS}) == len(DEFS)
    assert all(d.field_bits <= FIELD_BITS for d in DEFS)
    assert FIELD_BITS + HEADER_BITS == INSTR_BYTES * 8
    names = {d.name for d in DEFS}
    for required in ("DMA_LOAD", "DMA_STORE", "LOAD_WEIGHTS", "MATMUL", "VBIN", "VUN", "LUT", "REQUANT", "VCVT", "VREDUCE", "VPOOL", "NOP", "END"):
        assert required in names


@pytest.mark.parametrize("d", DEFS, ids=lambda d: d.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_every_instruction(d, data):
    ins = data.draw(instrs(d))
    raw = encode_instr(ins)
    assert len(raw) == INSTR_BYTES
    assert raw[0] == d.opcode
    assert decode_instr(raw) == ins
    text = format_instr(ins)
    assert assemble_instr(text) == ins
    assert format_instr(assemble_instr(text)) == text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_program_roundtrip(data):
    body = data.draw(st.lists(st.sampled_from([d for d in DEFS if d.name != "END"]), max_size=12))
    prog = [data.draw(instrs(d)) for d in body] + [Instr("END", build_args(DEFS[1], {}))]
    raw = encode_program(prog)
    assert decode_program(raw) == prog
    text = disassemble(prog)
    p2 = assemble(text)
    assert list(p2) == prog
    assert disassemble(p2) == text
    assert p2.encode() == raw


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=8 * INSTR_BYTES))
def test_decode_rejects_garbage_with_binary_format_error_only(data):
    try:
        instrs_ = decode_program(data)
    except BinaryFormatError:
        return
    assert encode_program(instrs_) == data  # whatever decodes re-encodes to the same bytes


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DEFS), st.binary(min_size=INSTR_BYTES - 1, max_size=INSTR_BYTES - 1))
def test_decode_random_fields_of_known_opcode(d, tail):
    raw = bytes([d.opcode]) + tail
    try:
        ins = decode_instr(raw)
    except BinaryFormatError:
        return
    assert encode_instr(ins) == raw


END = encode_program([Instr("END", build_args(DEFS[1], {}))])


def _word(opcode: int, deps: int = 0, fields: int = 0) -> bytes:
    return (opcode | deps << 8 | fields << HEADER_BITS).to_bytes(INSTR_BYTES, "little")


@pytest.mark.parametrize(
    "data,match",
    [
        (b"", "empty"),
        (END[:-1], "not a whole number"),
        (_word(0xEE) + END, "instruction 0 .*unknown opcode 0xee"),
        (_word(0x00) + END, "unknown opcode 0x00"),
        (_word(0x01, fields=1 << 200) + END, "nonzero bits past its last field"),
        ((0x01 | 1 << 14).to_bytes(INSTR_BYTES, "little") + END, "reserved header bits 14-15"),
        ((0x01 | 1 << 15).to_bytes(INSTR_BYTES, "little") + END, "reserved header bits 14-15"),
        (_word(0x01), "does not end with END"),
        (END + _word(0x01) + END, "END at instruction 0 is not the last"),
        (_word(0x01) + END[:INSTR_BYTES - 1] + b"\x01", "instruction 1 .*reserved|nonzero"),
    ],
)
def test_decode_errors_are_precise(data, match):
    with pytest.raises(BinaryFormatError, match=match):
        decode_program(data)


def test_decode_rejects_bad_field_values():
    vbin = next(d for d in DEFS if d.name == "VBIN")
    # op field (3 bits at bit 16) = 7: not a BinOp.
    with pytest.raises(BinaryFormatError, match="VBIN field 'op' must be one of add"):
        decode_program(_word(vbin.opcode, fields=7) + END)
    vfill = next(d for d in DEFS if d.name == "VFILL")
    good = Instr.make("VFILL", dtype="fp16", n0=4, dst=0, value=1.0)
    word = int.from_bytes(encode_instr(good), "little")
    pos = HEADER_BITS + sum(f.bits for f in vfill.fields[:-1])
    nan_bits = struct.unpack("<I", struct.pack("<f", math.nan))[0]
    bad = (word & ~(0xFFFFFFFF << pos)) | nan_bits << pos
    with pytest.raises(BinaryFormatError, match="'value' must be a float \\(not NaN\\)"):
        decode_program(bad.to_bytes(INSTR_BYTES, "little") + END)
    # n0 = 0 is below the count's minimum of 1.
    zero_n0 = word & ~(0xFFFF << (HEADER_BITS + 3))
    with pytest.raises(BinaryFormatError, match="'n0' must be in \\[1, 65535\\]"):
        decode_program(zero_n0.to_bytes(INSTR_BYTES, "little") + END)
