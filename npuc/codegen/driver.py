"""The code generation driver: every kernel of an NPU segment planned and emitted into one program.

Kernels are emitted in program order through one :class:`~npuc.codegen.emitter.Emitter`, each
under its own label (the kernel name), so the emitter orders accesses across kernels (a buffer
reused by liveness is not overwritten before its last reader is done) and the debug map says which
kernel every instruction belongs to.  A plan that cannot fit on chip raises a CompileError that
names the layer and its source location.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.codegen.emitter import Emitter
from npuc.codegen.weight_staging import is_weight_copy
from npuc.codegen.kernel import get_kernel
from npuc.codegen.reroll import roll
from npuc.kir.plan import Plan
from npuc.errors import CompileError
from npuc.isa.enums import Queue
from npuc.isa.instr import Program
from npuc.kir.program import LKernel, NpuSegment
from npuc.runtime.npub_model import DebugEntry


@dataclass(frozen=True, eq=False)
class SegmentCode:
    """One NPU segment compiled: its program, each kernel's plan, the debug map, peak SRAM."""

    segment: NpuSegment
    program: Program
    plans: tuple[Plan, ...]
    debug: tuple[DebugEntry, ...]
    spad_bytes: int
    acc_bytes: int


def plan_kernel(lk: LKernel, target) -> Plan:
    """The kernel's plan; a CompileError names the layer and where it comes from."""
    try:
        return get_kernel(lk.kernel.kind).plan(lk.kernel, target)
    except CompileError as e:
        where = f" (from {lk.loc})" if lk.loc else ""
        raise CompileError(f"layer {lk.name} ({'+'.join(lk.ops)}){where} cannot be compiled: {e}") from None


@dataclass(frozen=True, eq=False)
class EmittedSegment:
    """One NPU segment emitted, before rerolling: its instructions, their labels, the plans, and
    the scratchpad bytes each kernel's plan sits above (prefetch base plus on-chip split)."""

    segment: NpuSegment
    instrs: tuple
    labels: tuple[str, ...]
    plans: tuple[Plan, ...]
    spad_offsets: tuple[int, ...]
    loops: tuple[tuple[int, int, int], ...] = ()  # the loop nests emitted (Emitter.loops)
    loop_moves: tuple[tuple[tuple[int, int, int, int, int], ...], ...] = ()  # their field moves (Emitter.loop_moves)
    acc_offsets: tuple[int, ...] = ()  # the accumulator byte each kernel's plan sits above


def emit_segment(seg: NpuSegment, target, splits: tuple[int, ...] = (), prefetch: bool = False) -> EmittedSegment:
    """Plan and emit every kernel of ``seg`` into one unrolled instruction stream; ``splits``: per
    kernel, the top bytes of the scratchpad that hold the memory plan's on-chip tensors while it
    runs (it plans in the rest and reaches those tensors through
    :class:`~npuc.codegen.local_memory.LocalEmitter`); ``prefetch``: each kernel's scratchpad
    beside the previous one's where both fit, so that its first loads (its weights) run during
    the previous kernel (:mod:`npuc.codegen.prefetch`).  Each kernel's accumulator tiles sit
    beside the previous kernel's where both fit, always, so that its first matrix products do
    not wait for the previous kernel's last epilogue."""
    from npuc.codegen.kernels.fused_chain import with_scratchpad
    from npuc.codegen.local_memory import RESIDENT_BASE, LocalEmitter
    from npuc.codegen.prefetch import ShiftedEmitter, accumulator_bases, scratchpad_bases

    em = Emitter(target)
    size = target.scratchpad.size_bytes
    splits = tuple(splits) or (0,) * len(seg.kernels)
    targets = [with_scratchpad(target, size - r) if r else target for r in splits]
    plans = [plan_kernel(lk, t) for lk, t in zip(seg.kernels, targets)]
    limits = [size - r for r in splits]
    bases = scratchpad_bases([p.spad_bytes for p in plans], limits) if prefetch else [0] * len(plans)
    acc_bases = accumulator_bases([p.acc_bytes for p in plans], target.accumulator.size_bytes)
    top = max(splits, default=0)
    window = [(RESIDENT_BASE + size - top, RESIDENT_BASE + size, -RESIDENT_BASE, "the on-chip tensors")] if top else []
    for lk, plan, base, acc, kt, limit in zip(seg.kernels, plans, bases, acc_bases, targets, limits):
        kem = LocalEmitter(em, kt, window) if window else em
        if is_weight_copy(lk.kernel):
            # a weight copy issued ahead takes the weight memory's port only once the loads of the
            # kernels before it have left, so that it runs in the idle time it was placed in
            em.wait_for(Queue.copy, Queue.load)
        try:
            with em.source(lk.name):
                get_kernel(lk.kernel.kind).emit(lk.kernel, plan, ShiftedEmitter(kem, kt, base, limit, acc)
                                                if base or acc else kem)
        except CompileError as e:
            where = f" (from {lk.loc})" if lk.loc else ""
            raise CompileError(f"layer {lk.name}{where}: {e}") from None
    program, labels = em.finish()
    offsets = tuple(b + r for b, r in zip(bases, splits))
    return EmittedSegment(seg, program.instrs, tuple(labels), tuple(plans), offsets, tuple(em.loops),
                          tuple(em.loop_moves), tuple(acc_bases))


def finish_segment(e: EmittedSegment, instrs=None) -> SegmentCode:
    """The emitted segment (with ``instrs`` in place of its own: the same count, labels
    unchanged) rolled into its program: its loop nests written as LOOPs, the rest rerolled
    (:func:`npuc.codegen.reroll.roll`, which checks every nest against the instructions, so an
    instruction rewritten in place only ends a LOOP early)."""
    seg, plans = e.segment, e.plans
    if instrs is None:
        instrs, rewritten = e.instrs, ()
    else:  # weight compression rewrote these in place (every other instruction is the emitted one)
        rewritten = tuple(i for i, (a, b) in enumerate(zip(instrs, e.instrs)) if a is not b)
    rolled, labels = roll(instrs, e.labels, e.loops, e.loop_moves, rewritten)
    program = Program(tuple(rolled))
    locs = {lk.name: lk.loc for lk in seg.kernels}
    debug = debug_entries(labels, locs)
    spad = max((p.spad_bytes + off for p, off in zip(plans, e.spad_offsets)), default=0)
    acc = max((p.acc_bytes + off for p, off in zip(plans, e.acc_offsets or (0,) * len(plans))), default=0)
    return SegmentCode(seg, program, tuple(plans), debug, spad, acc)


def compile_segment(seg: NpuSegment, target, splits: tuple[int, ...] = (), prefetch: bool = False) -> SegmentCode:
    """Plan and emit every kernel of ``seg`` into one program (no weight compression)."""
    return finish_segment(emit_segment(seg, target, splits, prefetch))


def debug_entries(labels: tuple[str, ...], locs: dict[str, str | None]) -> tuple[DebugEntry, ...]:
    """One entry per run of instructions with the same label (unlabelled ones join the run before)."""
    out: list[DebugEntry] = []
    current = None
    for i, label in enumerate(labels):
        if not label or label == current:
            continue
        out.append(DebugEntry(i, label, locs.get(label)))
        current = label
    if not out and labels:
        out.append(DebugEntry(0, "program", None))
    return tuple(out)


def code_text(codes: tuple[SegmentCode, ...]) -> str:
    """One line per kernel, ``Kernel.__str__`` and its plan (for --print-after codegen)."""
    lines = []
    for c in codes:
        lines.append(f"npu segment {c.segment.name}: {len(c.program)} instructions, "
                     f"scratchpad {c.spad_bytes:,} B, accumulator {c.acc_bytes:,} B")
        for lk, plan in zip(c.segment.kernels, c.plans):
            lines.append(f"  {lk.kernel}")
            lines.append(f"      plan: {plan}")
            if hasattr(plan.details, "text"):  # a tile program (npuc.kir.tile_program): its loop nest
                lines.append(plan.details.text(indent="      "))
    return "\n".join(lines) + "\n"
