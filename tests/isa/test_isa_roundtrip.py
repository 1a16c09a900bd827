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
from npuc.isa.encoding import max_bytes
from npuc.isa.instr import HEADER_BITS, MAX_FIELD_BITS, OPCODE_BITS, build_args

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
def loop_values(draw):
    """LOOP fields that fit together: some stride slots used, the rest unused (at their defaults)."""
    from npuc.isa.loops import MAX_BODY, MAX_PERIOD, SLOTS

    body = draw(st.integers(1, MAX_BODY))
    values = {"n": draw(st.integers(1, 65535)), "body": body}
    for k in draw(st.sets(st.integers(0, SLOTS - 1), max_size=SLOTS)):
        i = draw(st.integers(0, body - 1))
        r = draw(st.integers(1, body - i))
        d = draw(st.integers(1, max(1, (body - 1 - i) // max(1, r - 1))))
        values.update({f"i{k}": i, f"r{k}": r, f"d{k}": d, f"f{k}": draw(st.integers(0, 31)),
                       f"p{k}": (p := draw(st.sampled_from([0, *range(2, MAX_PERIOD + 1)]))),
                       f"ph{k}": draw(st.integers(0, max(0, p - 1))),
                       f"s{k}": draw(st.integers(-(1 << 31), (1 << 31) - 1).filter(bool))})
    return values


@st.composite
def instrs(draw, d):
    values = draw(loop_values()) if d.name == "LOOP" else {f.name: draw(field_values(f)) for f in d.fields}
    try:
        args = build_args(d, values)
    except FieldError:
        assume(False)
    return Instr(d.name, args, draw(deps_for(d.queue)))


def test_every_definition_fits_and_is_unique():
    assert len({d.opcode for d in DEFS}) == len({d.name for d in DEFS}) == len(DEFS)
    assert all(d.field_bits <= MAX_FIELD_BITS for d in DEFS)
    names = {d.name for d in DEFS}
    for required in ("DMA_LOAD", "DMA_STORE", "LOAD_WEIGHTS", "MATMUL", "VBIN", "VUN", "LUT", "REQUANT", "VCVT", "VREDUCE", "VPOOL", "NOP", "END"):
        assert required in names


@pytest.mark.parametrize("d", DEFS, ids=lambda d: d.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_every_instruction(d, data):
    ins = data.draw(instrs(d))
    raw = encode_instr(ins)
    assert len(raw) <= max_bytes(d)
    assert raw[0] & (1 << OPCODE_BITS) - 1 == d.opcode
    assert decode_instr(raw) == (ins, len(raw))
    history = data.draw(st.lists(instrs(d), max_size=4))  # earlier ones of its mnemonic: fields taken from one
    after = encode_instr(ins, history)
    assert decode_instr(after, history=history) == (ins, len(after))
    assert len(encode_instr(ins, [*history, ins])) == 2 + (d.mask_length_bits > 0)  # nothing changed: no field
    text = format_instr(ins)
    assert assemble_instr(text) == ins
    assert format_instr(assemble_instr(text)) == text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_program_roundtrip(data):
    body = data.draw(st.lists(st.sampled_from([d for d in DEFS if d.name not in ("END", "LOOP")]), max_size=12))
    prog = [data.draw(instrs(d)) for d in body] + [Instr("END", build_args(DEFS[1], {}))]
    raw = encode_program(prog)
    assert decode_program(raw) == prog
    text = disassemble(prog)
    p2 = assemble(text)
    assert list(p2) == prog
    assert disassemble(p2) == text
    assert p2.encode() == raw


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_the_phase_scan_walks_every_instruction_length(data):
    # uses_loop_phases finds instruction boundaries without decoding: over any stream of
    # instructions (LOOPs with and without phases among them) it answers what decoding would
    from npuc.isa.encoding import uses_loop_phases
    from npuc.isa.loops import uses_phase

    kinds = data.draw(st.lists(st.sampled_from([d for d in DEFS if d.name != "END"]), min_size=1, max_size=10))
    seq = [data.draw(instrs(d)) for d in kinds]
    assert uses_loop_phases(encode_program(seq)) == uses_phase(seq)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256))
def test_decode_rejects_garbage_with_binary_format_error_only(data):
    try:
        instrs_ = decode_program(data)
    except BinaryFormatError:
        return
    assert encode_program(instrs_) == data  # whatever decodes re-encodes to the same bytes


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DEFS), st.data())
def test_decode_random_fields_of_known_opcode(d, data):
    tail = data.draw(st.binary(min_size=max_bytes(d) - 1, max_size=max_bytes(d) - 1))
    raw = bytes([d.opcode | data.draw(st.integers(0, 3)) << OPCODE_BITS]) + tail  # the first byte's top bits: two wait flags
    try:
        ins, n = decode_instr(raw)
    except BinaryFormatError:
        return
    assert encode_instr(ins) == raw[:n]


END = encode_program([Instr("END", build_args(DEFS[1], {}))])
NOP = encode_program([Instr("NOP", build_args(DEFS[0], {}))])


def _legal(f):
    if f.kind == "enum":
        return list(f.enum)[0]
    return {"log2": 1, "f32": 1.0, "bool": 0}.get(f.kind, f.min_value)


def _raw(name: str, fields: dict[str, int], deps: int = 0) -> bytes:
    """The first instruction of ``name`` in a stream, writing out the raw bits of ``fields``
    and of every required field (a legal value unless given); the others are left out."""
    d = next(d for d in DEFS if d.name == name)
    mask = body = pos = length = 0
    for k, f in enumerate(d.fields):
        if f.name in fields or f.default is None:
            mask |= 1 << k
            body |= fields.get(f.name, f.to_bits(_legal(f))) << pos
            pos += f.bits
            length = k + 1
    lb = d.mask_length_bits
    word = d.opcode | deps << OPCODE_BITS | (length | mask << lb | body << (lb + length)) << HEADER_BITS
    return word.to_bytes(-(-(HEADER_BITS + lb + length + pos) // 8), "little")


def _padded() -> bytes:
    """A VFILL whose encoding has padding bits, with its top padding bit set."""
    raw = encode_instr(Instr.make("VFILL", dtype="fp16", n0=4, dst=0, value=1.0))
    bits = int.from_bytes(raw, "little").bit_length()
    assert bits < len(raw) * 8
    return (int.from_bytes(raw, "little") | 1 << (len(raw) * 8 - 1)).to_bytes(len(raw), "little")


@pytest.mark.parametrize(
    "data,match",
    [
        (b"", "empty"),
        (END[:-1], "cut off"),
        (b"\x2e\x00" + END, "instruction 0 .*unknown opcode 0x2e"),
        (b"\x00\x00" + END, "unknown opcode 0x00"),
        (_padded() + END, "nonzero padding bits"),
        ((0x01 | 1 << 14).to_bytes(2, "little") + END, "earlier NOP number 1 .* the stream has 0 earlier ones"),
        (NOP + (0x01 | 3 << 14).to_bytes(2, "little") + END, "earlier NOP number 3 .* the stream has 1 earlier"),
        (NOP + NOP + (0x01 | 1 << 14).to_bytes(2, "little") + END, "another gives fewer bytes"),
        (NOP, "does not end with END"),
        (END + NOP + END, "END at instruction 0 is not the last"),
        (NOP + END[:1], "instruction 1 .*cut off"),
    ],
)
def test_decode_errors_are_precise(data, match):
    with pytest.raises(BinaryFormatError, match=match):
        decode_program(data)


def test_a_left_out_field_takes_the_previous_value_of_its_mnemonic():
    a = Instr.make("LOAD_WEIGHTS", dtype="int8", addr=0x100, k=16, n=16)
    b = Instr.make("LOAD_WEIGHTS", dtype="int8", addr=0x200, k=16, n=16)
    code = encode_program([a, b, Instr.make("END")])
    second = encode_instr(b, [a])
    assert len(second) < len(encode_instr(b)) and code.endswith(second + END)
    assert decode_program(code) == [a, b, Instr.make("END")]


def test_decode_refuses_what_the_encoder_does_not_write():
    d = next(d for d in DEFS if d.name == "LOAD_WEIGHTS")
    # a required field left out of the first instruction of its mnemonic: nothing to take it from
    lb = d.mask_length_bits
    dtype = d.fields[0]
    other = next(m for m in dtype.enum if m != dtype.default)
    word = d.opcode | (1 | 1 << lb | dtype.to_bits(other) << (lb + 1)) << HEADER_BITS
    with pytest.raises(BinaryFormatError, match="leaves out field 'addr', which has no earlier value"):
        decode_program(word.to_bytes(-(-(HEADER_BITS + lb + 1 + 3) // 8), "little") + END)
    # a mask whose last bit is clear (its length says one field more than it writes)
    word = d.opcode | (2 | 1 << lb) << HEADER_BITS
    with pytest.raises(BinaryFormatError, match="last bit is clear"):
        decode_program(word.to_bytes(4, "little") + END)
    # a field written out at its reference value (the default: s_n = the element size)
    size = d.field("dtype").default.size
    with pytest.raises(BinaryFormatError, match="writes out field 's_n' although it holds its reference value"):
        decode_program(_raw("LOAD_WEIGHTS", {"s_n": size}) + END)


def test_decode_rejects_bad_field_values():
    # op field = 7: not a BinOp.
    with pytest.raises(BinaryFormatError, match="VBIN field 'op' must be one of add"):
        decode_program(_raw("VBIN", {"op": 7}) + END)
    nan_bits = struct.unpack("<I", struct.pack("<f", math.nan))[0]
    with pytest.raises(BinaryFormatError, match="'value' must be a float \\(not NaN\\)"):
        decode_program(_raw("VFILL", {"value": nan_bits}) + END)
    # n0 = 0 is below the count's minimum of 1.
    with pytest.raises(BinaryFormatError, match="'n0' must be in \\[1, 65535\\]"):
        decode_program(_raw("VFILL", {"n0": 0}) + END)
