"""Building a :class:`~npuc.kir.tile_program.TileProgram`, and emitting one.

A vector or data-movement kernel describes its schedule by building a tile program: it
allocates named scratchpad buffers (``alloc``), marks which tile-loop iteration it is working on
(``at``), and issues steps (``emit``, with the fields of docs/isa.md, exactly as it would to the
emitter).  ``finish`` returns the description; the kernel's plan reports its footprint and the
cost model's estimate of it, and :func:`emit_program` hands its steps to the emitter.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from npuc.codegen.kernel import SramArena
from npuc.codegen.loop_nest import ANY_FORM, emit_steps
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan
from npuc.kir.tile_program import Buffer, DramName, Step, TileProgram


class TileBuilder:
    """Collects buffers and steps for one kernel (``target`` as the emitter's)."""

    def __init__(self, target: Any, kernel: Kernel) -> None:
        self.target = target
        self.kernel = kernel
        self._arenas = {"spad": SramArena("scratchpad", target.scratchpad.size_bytes, owner=kernel.name),
                        "acc": SramArena("accumulator", target.accumulator.size_bytes, owner=kernel.name)}
        self._buffers: list[Buffer] = []
        self._steps: list[Step] = []
        self._tile = -1

    def alloc(self, nbytes: int, what: str, align: int = 64, mem: str = "spad") -> int:
        """A named buffer of ``nbytes`` in ``mem`` (``spad`` or ``acc``); its address
        (CompileError when it does not fit)."""
        addr = self._arenas[mem].alloc(nbytes, what, align)
        self._buffers.append(Buffer(what, addr, nbytes, mem))
        return addr

    def at(self, tile: int) -> None:
        """The steps issued from now on belong to tile-loop iteration ``tile`` (-1: prologue)."""
        self._tile = tile

    def emit(self, op: str, /, **fields: Any) -> int:
        self._steps.append(Step(op, tuple(fields.items()), self._tile))
        return len(self._steps) - 1

    def finish(self, loop: str, choice: Any = None) -> TileProgram:
        seen: dict[str, DramName] = {}
        for t in self.kernel.tensors():
            seen.setdefault(t.name, DramName(t.name, t.addr, t.span))
        return TileProgram(self.kernel.name, self.kernel.kind, loop, tuple(self._buffers), tuple(self._steps),
                           tuple(seen.values()), choice, self.kernel)


def emit_program(prog: TileProgram, em: Any) -> None:
    """Issue every step of ``prog``, in program order, through the emitter ``em``: the runs of
    iterations that repeat with constant strides as loop nests (:mod:`npuc.codegen.loop_nest`),
    the rest step by step (buffer rotations entered part way: a chunk holds steps of tiles in
    different places of the rotation, :data:`~npuc.codegen.loop_nest.ANY_FORM`)."""
    emit_steps(prog.steps, em, phases=ANY_FORM)


def tile_plan(summary: str, prog: TileProgram, target: Any) -> Plan:
    """The plan of a kernel whose schedule is ``prog``: its footprint and estimated cycles read
    off the description (the estimate by :func:`npuc.schedule.vector_cost.program_cycles`)."""
    from npuc.schedule.vector_cost import program_cycles

    return Plan(summary, prog.spad_bytes, prog.acc_bytes, program_cycles(prog, target), prog)


def placement_free(kernel: Kernel) -> tuple:
    """A key equal for two kernels that differ only in where their tensors are (the repeated
    blocks of a network): every tensor moved to its address modulo 64 (DMA bursts see the
    alignment), the names dropped, and which tensors overlap kept."""
    def moved(t):
        return replace(t, name="", addr=t.addr % 64)

    epilogue = tuple(replace(e, operand=moved(e.operand)) if e.operand is not None else e for e in kernel.epilogue)
    placed = replace(kernel, name="", inputs=tuple(moved(t) for t in kernel.inputs), output=moved(kernel.output),
                     epilogue=epilogue)
    spans = [(t.addr, t.addr + t.span) for t in kernel.tensors()]
    overlaps = tuple((i, j) for i, a in enumerate(spans) for j, b in enumerate(spans[:i]) if a[0] < b[1] and b[0] < a[1])
    return placed, overlaps


def planned_program(kernel: Kernel, plan: Plan, target: Any, build) -> TileProgram:
    """The tile program of ``plan`` for ``kernel``: the planned one, or rebuilt by
    ``build(kernel, choice, target)`` when ``kernel`` is not the one it was planned for (same
    tiling, other addresses)."""
    prog = plan.details
    if not isinstance(prog, TileProgram):
        raise TypeError(f"plan of '{kernel.name}' carries no tile program")
    if prog.built_for is kernel or prog.built_for == kernel:
        return prog
    return build(kernel, prog.choice, target)
