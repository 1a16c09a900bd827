"""Binary encoding: each instruction a whole number of bytes; a field is written only when it changes.

An instruction is a little-endian bit string:

- bits 0-5: the opcode; bits 6-13: the dependency flags (a wait bit for each other queue,
  then a signal bit for each: :meth:`Deps.to_bits`); bits 14-15: the *reference*, which of the last
  :data:`HISTORY` instructions of the same mnemonic in the stream the fields are taken from
  (0 = the most recent; 0 when there is none);
- from bit 16, the mask length ``L`` in ``bit_length(number of fields)`` bits, then ``L`` mask
  bits, one per field in definition order (bit ``L - 1`` set: fields after it are all left
  out), set when the field is written out;
- each field written out, in definition order, each in its own width -- except that an
  integer field of at least :data:`SHORT_FROM` bits, in an instruction with a reference, starts
  with a flag: 1, then its change from the reference as a signed number of half its width
  (when the change fits; the encoder then always uses it), or 0, then the full value;
- zero bits up to the next byte boundary, where the next instruction starts.

A field that is left out holds its value in the reference instruction, or, when the stream has
no earlier instruction of the mnemonic, its default (:attr:`npuc.isa.fields.Field.default`: a
constant or a function of earlier fields; a field without one is always written then).  This is
how a command stream that sets registers works (Ethos-U's): a MATMUL after a MATMUL writes only
the addresses that moved, a weight load after a weight load only its address, a LOOP after a
LOOP only the strides that differ.  The encoder writes exactly the fields that differ from the
reference and picks the reference that gives the fewest bytes (the most recent of those), so
the encoding of a program is unique.  The length of an instruction follows from its opcode and
its mask, so a decoder reads the stream front to back.

The decoder accepts only what the encoder can produce: a known opcode, flags legal for the
queue, a reference that exists and is the encoder's choice, a mask whose last bit is set, every
field value legal, a field written only when it differs from its reference value, zero padding,
and exactly one END, last.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from npuc.errors import BinaryFormatError
from npuc.isa.instr import (
    DEP_BITS,
    HEADER_BITS,
    OPCODE_BITS,
    Deps,
    FieldError,
    Instr,
    InstrDef,
    build_args,
    def_by_opcode,
    get_def,
    program_problem,
)

SHORT_FROM = 12  # integer fields at least this wide may be written as a change from their reference
HISTORY = 4  # earlier instructions of a mnemonic a field may be taken from (the 2-bit reference)
_REF_SHIFT = OPCODE_BITS + DEP_BITS
_OPCODE_MASK = (1 << OPCODE_BITS) - 1


def _len_bits(d: InstrDef) -> int:
    return d.mask_length_bits


_MAX_BYTES: dict[str, tuple[InstrDef, int]] = {}


def max_bytes(d: InstrDef) -> int:
    """The most bytes an instruction of ``d`` takes (every field written out in full)."""
    hit = _MAX_BYTES.get(d.name)
    if hit is None or hit[0] is not d:
        flags = sum(1 for f in d.fields if _short_bits(f))
        hit = _MAX_BYTES[d.name] = (d, -(-(HEADER_BITS + _len_bits(d) + len(d.fields) + d.field_bits + flags) // 8))
    return hit[1]


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


def _short_bits(f) -> int:
    """The width of the short form of an integer field written against an earlier instruction
    (a signed change from its value there: half the field's width), or 0 when it has none."""
    return f.bits // 2 if f.bits >= SHORT_FROM and f.kind in ("uint", "sint") else 0


def _eq(f, v: Any, r: Any) -> bool:
    """Whether two legal values of field ``f`` are the same bits (fp32: -0.0 is not 0.0)."""
    return v == r and (f.kind != "f32" or f.to_bits(v) == f.to_bits(r))


def _fields(d: InstrDef, ins: Instr, prev: Instr | None) -> tuple[int, int]:
    """(bits, value) of the length, mask and fields of ``ins`` against reference ``prev``."""
    mask, body, pos, length = 0, 0, 0, 0
    if prev is not None:
        for k, (f, v, r) in enumerate(zip(d.fields, ins.args, prev.args)):
            if v == r and (f.kind != "f32" or f.to_bits(v) == f.to_bits(r)):
                continue
            mask |= 1 << k
            length = k + 1
            short = _short_bits(f)
            if short:  # a flag, then the change from the reference in half the width, when it fits
                delta = v - r
                if -(1 << (short - 1)) <= delta < (1 << (short - 1)):
                    body |= (1 | (delta & ((1 << short) - 1)) << 1) << pos
                    pos += 1 + short
                    continue
                pos += 1  # flag 0: the full value follows
            body |= f.to_bits(v) << pos
            pos += f.bits
    else:
        values: dict[str, Any] = {}
        for k, (f, v) in enumerate(zip(d.fields, ins.args)):
            if not _same(f, v, _reference(f, k, None, values)):
                mask |= 1 << k
                body |= f.to_bits(v) << pos
                pos += f.bits
                length = k + 1
            values[f.name] = v
    lb = _len_bits(d)
    return lb + length + pos, length | mask << lb | body << (lb + length)


def _choice(d: InstrDef, ins: Instr, history: list[Instr]) -> tuple[int, int, int]:
    """(reference, bits, value) the encoder writes: the reference with the fewest bytes."""
    best = None
    for r, prev in enumerate(history[::-1] or [None]):
        bits, value = _fields(d, ins, prev)
        nbytes = -(-(HEADER_BITS + bits) // 8)
        if best is None or nbytes < best[0]:
            best = (nbytes, r, bits, value)
            if bits == _len_bits(d):  # nothing written: none is shorter
                break
    return best[1], best[2], best[3]


def encode_instr(ins: Instr, history: Iterable[Instr] = ()) -> bytes:
    """The bytes of one instruction; ``history`` holds the earlier instructions of its mnemonic
    in the stream, oldest first (only the last :data:`HISTORY` count)."""
    d = get_def(ins.op)
    hist = list(history)[-HISTORY:]
    ref, bits, value = _choice(d, ins, hist)
    word = d.opcode | ins.deps.to_bits(d.queue) << OPCODE_BITS | ref << _REF_SHIFT | value << HEADER_BITS
    return word.to_bytes(-(-(HEADER_BITS + bits) // 8), "little")


def encode_program(instrs: Iterable[Instr]) -> bytes:
    """The code section of ``instrs`` (a list or a :class:`Program`)."""
    last: dict[str, list[Instr]] = {}
    out = []
    for ins in instrs:
        hist = last.setdefault(ins.op, [])
        out.append(encode_instr(ins, hist))
        hist.append(ins)
        if len(hist) > HISTORY:
            del hist[0]
    return b"".join(out)


def decode_instr(data: bytes, index: int = 0, offset: int = 0, history: Iterable[Instr] = ()) -> tuple[Instr, int]:
    """Decode the instruction at byte ``offset`` of ``data``: (instruction, its length in bytes);
    ``history`` holds the earlier instructions of its mnemonic, oldest first (the caller tracks
    them: decode_program).  Raises BinaryFormatError naming ``index`` and the offset."""
    where = f"instruction {index} (byte offset {offset})"
    if offset >= len(data):
        raise BinaryFormatError(f"{where}: the code ends here")
    d = def_by_opcode(data[offset] & _OPCODE_MASK)
    if d is None:
        raise BinaryFormatError(f"{where}: unknown opcode 0x{data[offset] & _OPCODE_MASK:02x}")
    hist = list(history)[-HISTORY:]
    if hist and hist[-1].op != d.name:
        raise ValueError(f"decode_instr: the history given holds other instructions than {d.name}")
    chunk = data[offset:offset + max_bytes(d)]
    word = int.from_bytes(chunk, "little")
    avail = len(chunk) * 8
    if avail < HEADER_BITS:
        raise BinaryFormatError(f"{where}: {d.name} is cut off in its header (the code ends)")
    deps = Deps.from_bits((word >> OPCODE_BITS) & ((1 << DEP_BITS) - 1), d.queue)
    reason = deps.problem(d.queue)
    if reason:
        raise BinaryFormatError(f"{where}: {d.name} dependency flags: {reason}")
    ref = word >> _REF_SHIFT & ((1 << (HEADER_BITS - _REF_SHIFT)) - 1)
    if ref >= max(1, len(hist)):
        raise BinaryFormatError(f"{where}: {d.name} takes its fields from earlier {d.name} number {ref} (0 = the "
                                f"latest), but the stream has {len(hist)} earlier ones")
    prev = hist[-1 - ref] if hist else None
    lb = _len_bits(d)
    pos = HEADER_BITS + lb
    if pos > avail:
        raise BinaryFormatError(f"{where}: {d.name} is cut off in its mask length (the code ends)")
    length = word >> HEADER_BITS & ((1 << lb) - 1)
    if length > len(d.fields):
        raise BinaryFormatError(f"{where}: {d.name} has a mask of {length} bits, but only {len(d.fields)} fields")
    if pos + length > avail:
        raise BinaryFormatError(f"{where}: {d.name} is cut off in its presence mask (the code ends)")
    mask = word >> pos & ((1 << length) - 1)
    if length and not mask >> (length - 1):
        raise BinaryFormatError(f"{where}: {d.name} has a mask of {length} bits whose last bit is clear")
    pos += length
    values: dict[str, Any] = {}
    for k, f in enumerate(d.fields):
        r = prev.args[k] if prev is not None else _reference(f, k, None, values)
        if mask >> k & 1:
            short = _short_bits(f) if prev is not None else 0
            if short:
                if pos + 1 > avail:
                    raise BinaryFormatError(f"{where}: {d.name} is cut off in field '{f.name}' (the code ends)")
                pos += 1
            if short and word >> (pos - 1) & 1:
                if pos + short > avail:
                    raise BinaryFormatError(f"{where}: {d.name} is cut off in field '{f.name}' (the code ends)")
                raw = (word >> pos) & ((1 << short) - 1)
                pos += short
                v = r + (raw - (1 << short) if raw >> (short - 1) else raw)
            else:
                if pos + f.bits > avail:
                    raise BinaryFormatError(f"{where}: {d.name} is cut off in field '{f.name}' (the code ends)")
                v = f.from_bits((word >> pos) & ((1 << f.bits) - 1))
                pos += f.bits
                if short and -(1 << (short - 1)) <= v - r < (1 << (short - 1)):
                    raise BinaryFormatError(f"{where}: {d.name} writes field '{f.name}' in full although its change "
                                            f"from the reference fits the short form")
            reason = f.problem(v)
            if reason:
                raise BinaryFormatError(f"{where}: {d.name} field '{f.name}' {reason}")
            if (_eq(f, v, r) if prev is not None else _same(f, v, r)):
                raise BinaryFormatError(f"{where}: {d.name} writes out field '{f.name}' although it holds its "
                                        f"reference value (such a field is left out)")
        else:
            if prev is None and (r is None or f.problem(r) is not None):
                raise BinaryFormatError(f"{where}: {d.name} leaves out field '{f.name}', which has no earlier "
                                        f"value or legal default to take")
            v = r
        values[f.name] = v
    nbytes = -(-pos // 8)
    if (word >> pos) & ((1 << (nbytes * 8 - pos)) - 1):
        raise BinaryFormatError(f"{where}: {d.name} has nonzero padding bits past its last field (bit {pos} on)")
    try:
        args = build_args(d, values)
    except FieldError as e:
        raise BinaryFormatError(f"{where}: {e}") from None
    ins = Instr(d.name, args, deps)
    if len(hist) > 1 and _choice(d, ins, hist)[0] != ref:
        raise BinaryFormatError(f"{where}: {d.name} takes its fields from earlier {d.name} number {ref}, but another "
                                f"gives fewer bytes (or as few, and is more recent)")
    return ins, nbytes


def _decode_all(data: bytes) -> Iterator[tuple[Instr, int, int]]:
    last: dict[str, list[Instr]] = {}
    offset = 0
    index = 0
    while offset < len(data):
        d = def_by_opcode(data[offset] & _OPCODE_MASK)
        hist = last.setdefault(d.name, []) if d is not None else []
        ins, n = decode_instr(data, index, offset, hist)
        hist.append(ins)
        if len(hist) > HISTORY:
            del hist[0]
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


_LAYOUT: dict[int, tuple] = {}


def _layout(opcode: int) -> tuple | None:
    """(definition, mask length bits, (bits, short bits) per field) of an opcode, or None."""
    d = def_by_opcode(opcode)
    if d is None:
        return None
    hit = _LAYOUT.get(opcode)
    if hit is None or hit[0] is not d:
        hit = _LAYOUT[opcode] = (d, _len_bits(d), tuple((f.bits, _short_bits(f)) for f in d.fields))
    return hit


def _heads(data: bytes) -> Iterator[tuple[InstrDef, int, int]]:
    """(definition, mask length, mask) of each instruction of a code section, front to back, from the
    instruction lengths alone (the fields are not decoded); stops early where the stream does
    not parse (:func:`decode_program` refuses it there)."""
    seen: set[int] = set()
    offset, end = 0, len(data)
    while offset < end:
        lay = _layout(data[offset] & _OPCODE_MASK)
        if lay is None:
            return
        d, lb, fields = lay
        word = int.from_bytes(data[offset:offset + max_bytes(d)], "little")
        length = word >> HEADER_BITS & ((1 << lb) - 1)
        if length > len(fields):
            return
        mask = word >> (HEADER_BITS + lb) & ((1 << length) - 1)
        yield d, length, mask
        pos = HEADER_BITS + lb + length
        ref = d.opcode in seen
        k = 0
        while mask:
            if mask & 1:
                bits, short = fields[k]
                if ref and short:
                    pos += 1 + (short if word >> pos & 1 else bits)
                else:
                    pos += bits
            mask >>= 1
            k += 1
        seen.add(d.opcode)
        offset += -(-pos // 8)


def stream_features(data: bytes) -> tuple[bool, frozenset[str]]:
    """(whether a LOOP writes a phase, the mnemonics used) of a code section, in one walk of its
    instruction lengths: what the container's format version depends on (a LOOP that writes a
    flag exception is named ``LOOP+x`` among the mnemonics, a load that writes its stream buffer
    fields ``DMA+stream``).  Phases and flag exceptions are
    fields that a LOOP without them never writes: they follow every other field, so the mask
    reaches them only then.  A stream that does not parse is left to :func:`decode_program` to
    refuse (this reports what precedes the fault)."""
    loop = get_def("LOOP")
    first_phase = next(k for k, f in enumerate(loop.fields) if f.name.startswith("ph"))
    first_exception = next(k for k, f in enumerate(loop.fields) if f.name == "x0")
    phase_bits = ((1 << first_exception) - 1) & ~((1 << first_phase) - 1)
    streamed = {get_def(name): next(k for k, f in enumerate(get_def(name).fields) if f.name == "stream")
                for name in ("DMA_LOAD", "DMA_LOAD_DECODE")}
    phases, used = False, set()
    for d, length, mask in _heads(data):
        used.add(d.name)
        if d is loop and length > first_phase:
            phases = phases or bool(mask & phase_bits)
            if length > first_exception:
                used.add(LOOP_EXCEPTIONS)
        elif d in streamed and length > streamed[d]:
            used.add(STREAM_LOADS)
    return phases, frozenset(used)


LOOP_EXCEPTIONS = "LOOP+x"  # stream_features' name for a LOOP with flag exceptions
# stream_features' name for a load on a stream buffer (its ``stream`` and ``held`` fields follow
# every other: a program's first such load writes them, so its mask reaches them)
STREAM_LOADS = "DMA+stream"


def uses_loop_phases(data: bytes) -> bool:
    """Whether a LOOP of a code section writes a phase (:func:`stream_features`)."""
    return stream_features(data)[0]


def uses_instruction(data: bytes, mnemonic: str) -> bool:
    """Whether a code section holds an instruction ``mnemonic`` (:func:`stream_features`)."""
    return mnemonic in stream_features(data)[1]
