"""The encoded size of one kernel's schedule, derived from the description the emitter walks.

A schedule's code is what code generation writes for it: the tile program's steps issued
through the emitter (runs of repeating iterations handed over as loop nests,
:mod:`npuc.codegen.loop_nest`), the program rolled into LOOPs (:func:`npuc.codegen.reroll.roll`)
and encoded (:func:`npuc.isa.encoding.encode_program`).  :func:`encoded_bytes` does exactly
that for one kernel alone, so a choice between a kernel's schedules can weigh their code by
what the binary will hold, not by a count written by hand.  A kernel alone encodes a little
differently from the same kernel inside its segment (the variable-length encoding refers to
earlier instructions, and the tokens at a segment's edges differ), by a few bytes: it is the
kernel's own share, which is what a choice between its schedules compares.
"""

from __future__ import annotations

from typing import Any

from npuc.codegen.emitter import Emitter
from npuc.codegen.reroll import roll
from npuc.codegen.tile_builder import emit_program
from npuc.isa.encoding import encode_program
from npuc.kir.tile_program import TileProgram


def encoded_bytes(prog: TileProgram, target: Any) -> int:
    """The bytes the code of ``prog`` takes in a binary for ``target``, rolled into LOOPs."""
    em = Emitter(target)
    with em.source(prog.kernel):
        emit_program(prog, em)
    program, labels = em.finish()
    rolled, _ = roll(program.instrs, labels, em.loops, em.loop_moves)
    return len(encode_program(rolled[:-1]))  # without the END that closes this lone program
