"""Binary encoding: each instruction a whole number of bytes; a field is written only when it changes.

An instruction is a little-endian bit string.  Bits 0-7 hold the opcode, bits 8-13 the
dependency flags (a wait bit, then a signal bit, for each other queue: :meth:`Deps.to_bits`),
bits 14-15 are zero.  From bit 16 comes the *presence mask*: one bit per field of the
instruction, in definition order, set when the field is written out.  Then every field that is
written, in definition order, each in its own width.  The instruction ends at the next byte
boundary; the bits up to it are zero.  Its length follows from its opcode and its mask, so a
decoder reads the stream front to back.

A field that is left out holds its *reference value*: its value in the previous instruction of
the same mnemonic in the stream, or, for the first one, its default
(:attr:`npuc.isa.fields.Field.default`: a constant or a function of earlier fields; a field
without a default is always written in the first instruction of its mnemonic).  This is how a
command stream that sets registers works (Ethos-U's): a MATMUL after a MATMUL writes only the
addresses that moved, a LOOP after a LOOP only the strides that differ.  A field is left out
exactly when it equals its reference value, so the encoding of a program is unique.

The decoder accepts only what the encoder can produce: a known opcode, flags legal for the
queue, every field value legal, a field written only when it differs from its reference value,
zero padding, every reserved bit zero, and exactly one END, last.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from npuc.errors import BinaryFormatError
from npuc.isa.instr import (
    DEP_BITS,
    HEADER_BITS,
    Deps,
    FieldError,
    Instr,
    InstrDef,
    build_args,
    def_by_opcode,
    get_def,
    program_problem,
)


def max_bytes(d: InstrDef) -> int:
    """The most bytes an instruction of ``d`` takes (every field written out)."""
    return -(-(HEADER_BITS + len(d.fields) + d.field_bits) // 8)


def _reference(f, k: int, prev: Instr | None, values: dict[str, Any]) -> Any:
    """What field ``f`` (number ``k``) holds when it is left out; None when it cannot be."""
    if prev is not None:
        return prev.args[k]
    if f.default is None:
        return None
    return f.default(values) if callable(f.default) else f.default


def _same(f, v: Any, ref: Any) -> bool:
    """Whether ``v`` is ``ref``, bit for bit (and ``ref`` is a legal value)."""
    return ref is not None and f.problem(ref) is None and f.to_bits(v) == f.to_bits(ref)


def encode_instr(ins: Instr, prev: Instr | None = None) -> bytes:
    """The bytes of one instruction; ``prev`` is the previous instruction of the same mnemonic
    in the stream (None for the first)."""
    d = get_def(ins.op)
    values: dict[str, Any] = {}
    mask, body, pos = 0, 0, 0
    for k, (f, v) in enumerate(zip(d.fields, ins.args)):
        if not _same(f, v, _reference(f, k, prev, values)):
            mask |= 1 << k
            body |= f.to_bits(v) << pos
            pos += f.bits
        values[f.name] = v
    nmask = len(d.fields)
    word = d.opcode | ins.deps.to_bits(d.queue) << 8 | mask << HEADER_BITS | body << (HEADER_BITS + nmask)
    return word.to_bytes(-(-(HEADER_BITS + nmask + pos) // 8), "little")


def encode_program(instrs: Iterable[Instr]) -> bytes:
    """The code section of ``instrs`` (a list or a :class:`Program`)."""
    last: dict[str, Instr] = {}
    out = []
    for ins in instrs:
        out.append(encode_instr(ins, last.get(ins.op)))
        last[ins.op] = ins
    return b"".join(out)


def decode_instr(data: bytes, index: int = 0, offset: int = 0, prev: Instr | None = None) -> tuple[Instr, int]:
    """Decode the instruction at byte ``offset`` of ``data``: (instruction, its length in bytes);
    ``prev`` is the previous instruction of its mnemonic (the caller tracks it: decode_program).
    Raises BinaryFormatError naming ``index`` and the offset."""
    where = f"instruction {index} (byte offset {offset})"
    if offset >= len(data):
        raise BinaryFormatError(f"{where}: the code ends here")
    d = def_by_opcode(data[offset])
    if d is None:
        raise BinaryFormatError(f"{where}: unknown opcode 0x{data[offset]:02x}")
    if prev is not None and prev.op != d.name:
        raise ValueError(f"decode_instr: the previous instruction given is a {prev.op}, not a {d.name}")
    chunk = data[offset:offset + max_bytes(d)]
    word = int.from_bytes(chunk, "little")
    if (word >> (8 + DEP_BITS)) & ((1 << (HEADER_BITS - 8 - DEP_BITS)) - 1):
        raise BinaryFormatError(f"{where}: {d.name} has reserved header bits {8 + DEP_BITS}-{HEADER_BITS - 1} set")
    deps = Deps.from_bits((word >> 8) & ((1 << DEP_BITS) - 1), d.queue)
    reason = deps.problem(d.queue)
    if reason:
        raise BinaryFormatError(f"{where}: {d.name} dependency flags: {reason}")
    nmask = len(d.fields)
    mask = (word >> HEADER_BITS) & ((1 << nmask) - 1)
    pos = HEADER_BITS + nmask
    if pos > len(chunk) * 8:
        raise BinaryFormatError(f"{where}: {d.name} is cut off in its presence mask (the code ends)")
    values: dict[str, Any] = {}
    for k, f in enumerate(d.fields):
        ref = _reference(f, k, prev, values)
        if mask >> k & 1:
            if pos + f.bits > len(chunk) * 8:
                raise BinaryFormatError(f"{where}: {d.name} is cut off in field '{f.name}' (the code ends)")
            v = f.from_bits((word >> pos) & ((1 << f.bits) - 1))
            pos += f.bits
            reason = f.problem(v)
            if reason:
                raise BinaryFormatError(f"{where}: {d.name} field '{f.name}' {reason}")
            if _same(f, v, ref):
                raise BinaryFormatError(f"{where}: {d.name} writes out field '{f.name}' although it holds its "
                                        f"reference value (such a field is left out)")
        else:
            if ref is None or f.problem(ref) is not None:
                raise BinaryFormatError(f"{where}: {d.name} leaves out field '{f.name}', which has no earlier "
                                        f"value or legal default to take")
            v = ref
        values[f.name] = v
    nbytes = -(-pos // 8)
    if (word >> pos) & ((1 << (nbytes * 8 - pos)) - 1):
        raise BinaryFormatError(f"{where}: {d.name} has nonzero padding bits past its last field (bit {pos} on)")
    try:
        args = build_args(d, values)
    except FieldError as e:
        raise BinaryFormatError(f"{where}: {e}") from None
    return Instr(d.name, args, deps), nbytes


def _decode_all(data: bytes) -> Iterator[tuple[Instr, int, int]]:
    last: dict[str, Instr] = {}
    offset = 0
    index = 0
    while offset < len(data):
        d = def_by_opcode(data[offset])
        ins, n = decode_instr(data, index, offset, last.get(d.name) if d is not None else None)
        last[ins.op] = ins
        yield ins, offset, n
        offset += n
        index += 1


def instruction_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """(byte offset, length) of each instruction of a code section, front to back; raises
    BinaryFormatError where the stream cannot be read."""
    for _, offset, n in _decode_all(bytes(data)):
        yield offset, n


def decode_program(data: bytes) -> list[Instr]:
    """Decode a code section into instructions, validating everything; BinaryFormatError if not."""
    instrs = [ins for ins, _, _ in _decode_all(bytes(data))]
    reason = program_problem(instrs)
    if reason:
        raise BinaryFormatError(f"code section: {reason}")
    return instrs
