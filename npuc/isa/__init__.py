"""The NPU instruction set: definitions (encoding, semantics, timing, energy), binary form and
assembly text.

Every instruction is defined once in :mod:`npuc.isa.defs` as an :class:`InstrDef`; the encoder,
decoder, assembler, disassembler, simulator and cost model read those definitions.
"""

from __future__ import annotations

from npuc.isa.actions import Actions
from npuc.isa.asm import assemble, assemble_instr, disassemble, format_instr
from npuc.isa.encoding import decode_instr, decode_program, encode_instr, encode_program, instruction_spans
from npuc.isa.enums import BinOp, DType, Mem, PoolOp, Queue, ReduceOp, Space, UnOp, Unit
from npuc.isa.instr import Deps, FieldError, Instr, InstrDef, Program, all_defs, get_def
from npuc.isa.region import Region

__all__ = [
    "Actions",
    "BinOp",
    "DType",
    "Deps",
    "FieldError",
    "Instr",
    "InstrDef",
    "Mem",
    "PoolOp",
    "Program",
    "Queue",
    "ReduceOp",
    "Region",
    "Space",
    "UnOp",
    "Unit",
    "all_defs",
    "assemble",
    "assemble_instr",
    "decode_instr",
    "decode_program",
    "disassemble",
    "encode_instr",
    "encode_program",
    "format_instr",
    "get_def",
    "instruction_spans",
]
