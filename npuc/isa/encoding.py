"""Binary encoding: every instruction is 32 bytes, a little-endian 256-bit word.

Bits 0-7 hold the opcode, bits 8-13 the dependency flags (a wait bit, then a signal bit, for each
other queue: :meth:`Deps.to_bits`), bits 14-15 are zero, and the instruction's fields follow from bit 16 in the order
of its definition, each in its own width; unused high bits are zero.  The decoder accepts only
what the encoder can produce: a known opcode, flags legal for the queue, every field value legal,
every reserved bit zero, and exactly one END, last.
"""

from __future__ import annotations

from typing import Iterable

from npuc.errors import BinaryFormatError
from npuc.isa.instr import (
    DEP_BITS,
    HEADER_BITS,
    INSTR_BYTES,
    Deps,
    FieldError,
    Instr,
    build_args,
    def_by_opcode,
    get_def,
    program_problem,
)


def encode_instr(ins: Instr) -> bytes:
    """The 32 bytes of one instruction."""
    d = get_def(ins.op)
    word = d.opcode | ins.deps.to_bits(d.queue) << 8
    pos = HEADER_BITS
    for f, v in zip(d.fields, ins.args):
        word |= f.to_bits(v) << pos
        pos += f.bits
    return word.to_bytes(INSTR_BYTES, "little")


def encode_program(instrs: Iterable[Instr]) -> bytes:
    """Concatenated encodings of ``instrs`` (a list or a :class:`Program`)."""
    return b"".join(encode_instr(i) for i in instrs)


def decode_instr(chunk: bytes, index: int = 0) -> Instr:
    """Decode one 32-byte instruction; raises BinaryFormatError naming ``index``."""
    word = int.from_bytes(chunk, "little")
    opcode = word & 0xFF
    d = def_by_opcode(opcode)
    where = f"instruction {index} (byte offset {index * INSTR_BYTES})"
    if d is None:
        raise BinaryFormatError(f"{where}: unknown opcode 0x{opcode:02x}")
    if (word >> (8 + DEP_BITS)) & ((1 << (HEADER_BITS - 8 - DEP_BITS)) - 1):
        raise BinaryFormatError(f"{where}: {d.name} has reserved header bits {8 + DEP_BITS}-{HEADER_BITS - 1} set")
    deps = Deps.from_bits((word >> 8) & ((1 << DEP_BITS) - 1), d.queue)
    reason = deps.problem(d.queue)
    if reason:
        raise BinaryFormatError(f"{where}: {d.name} dependency flags: {reason}")
    pos = HEADER_BITS
    values = {}
    for f in d.fields:
        values[f.name] = f.from_bits((word >> pos) & ((1 << f.bits) - 1))
        pos += f.bits
    if word >> pos:
        raise BinaryFormatError(f"{where}: {d.name} has nonzero bits past its last field (bit {pos} on)")
    try:
        args = build_args(d, values)
    except FieldError as e:
        raise BinaryFormatError(f"{where}: {e}") from None
    return Instr(d.name, args, deps)


def decode_program(data: bytes) -> list[Instr]:
    """Decode a code section into instructions, validating everything; BinaryFormatError if not."""
    data = bytes(data)
    if len(data) % INSTR_BYTES != 0:
        raise BinaryFormatError(
            f"code section of {len(data)} bytes is not a whole number of {INSTR_BYTES}-byte instructions"
        )
    instrs = [decode_instr(data[o : o + INSTR_BYTES], o // INSTR_BYTES) for o in range(0, len(data), INSTR_BYTES)]
    reason = program_problem(instrs)
    if reason:
        raise BinaryFormatError(f"code section: {reason}")
    return instrs
