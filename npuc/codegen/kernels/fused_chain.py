"""``fused_chain``: member kernels run depth-first in stripes, intermediates kept on chip.

The tile program of a chain (``ChainAttrs``; chosen by ``npuc.lower.cascade``): the constants of
every member are loaded once into the scratchpad when they are resident; then, for each stripe
of the last member's output rows, every member computes its band of rows
(``npuc.schedule.cascade_cost.chain_stripes``: the rows the later members need, the halo
recomputed) with its own kernel implementation, planned and emitted unchanged on a band kernel
(``band_kernel``) inside the lower part of the scratchpad.  The chain owns the upper part: one
buffer per intermediate tensor holding the rows of the current stripe, and the resident
constants.

The members' implementations address DRAM as always; the one hook is the emitter they are given
(:class:`npuc.codegen.local_memory.LocalEmitter`, shared with the memory plan's on-chip
tensors): a DMA whose DRAM side lies in an intermediate (placed at a virtual address above any
DRAM) or in a resident constant becomes a scratchpad-to-scratchpad VUN copy of the same
elements, so an intermediate's bytes never travel to DRAM.  Every other instruction passes
through to the real emitter, which orders the accesses (dependency tokens) as for any kernel.  int8 members requantize exactly as they do alone (the same kernels, the same
constants), so a chain is bit-exact against the integer reference.

A chain with ``sram_bytes`` keeps its intermediates' stripes in a block of the on-chip SRAM (its
last input) instead: the same emitter re-addresses the members' DMAs of an intermediate's rows to
the block (``LocalEmitter.moves``), and the scratchpad holds only the staged inputs and resident
constants above the members' part.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from contextlib import nullcontext
from typing import Any

from npuc.codegen.epilogue import dma_nd
from npuc.codegen.kernel import get_kernel, register_kernel
from npuc.codegen.kernels.chain_copies import elide_copies
from npuc.codegen.local_memory import RESIDENT_BASE, LocalEmitter, is_resident_address
from npuc.codegen.memory_plan import relocate_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program
from npuc.errors import CompileError
from npuc.isa.widths import DRAM_ADDR_BITS
from npuc.kir.kernel import ChainAttrs, Kernel
from npuc.kir.plan import Plan
from npuc.isa.enums import Mem
from npuc.kir.tile_program import Buffer, Step, TileProgram, address_memories
from npuc.memo import Memo
from npuc.schedule.cascade_cost import (
    SECOND,
    ChainLayout,
    Stripe,
    band_kernel,
    chain_inputs,
    chain_layout,
    stripes_of,
    constant_inputs,
    Estimate,
    constant_loads_streamed,
    externals,
    program_estimate,
    row_bytes,
    sram_layout,
    staged_of,
)
from npuc.schedule.vector_cost import walk_cycles

def with_scratchpad(target: Any, nbytes: int) -> Any:
    """``target`` with a scratchpad of ``nbytes`` (the part of it the members plan in)."""
    return replace(target, scratchpad=replace(target.scratchpad, size_bytes=nbytes))


def virtual_bases(k: Kernel, target: Any) -> dict[str, int]:
    """DRAM-side addresses of the intermediates: past the end of the target's system address map
    (every memory's window), where no real tensor lies, so that the members' transfers to them are
    recognised (and never issued)."""
    a: ChainAttrs = k.attrs
    producers = {m.output.name: m.output for m in a.members}
    top = -(-target.address_space_bytes // 64) * 64
    out = {}
    for name in a.intermediates:
        out[name] = top
        top += -(-producers[name].nbytes // 64) * 64
    if top > 1 << DRAM_ADDR_BITS:
        raise CompileError(f"kernel '{k.name}': no addresses are left past the target's address map for the "
                           "chain's intermediates")
    return out


def placed_members(k: Kernel, target: Any) -> tuple[Kernel, ...]:
    """The members at the fused kernel's addresses (its inputs and output are the members'
    external tensors, placed by the memory plan) and the intermediates at virtual addresses."""
    a: ChainAttrs = k.attrs
    offs: dict[str, int] = {}
    for orig, now in zip(externals(a.members, a.intermediates) + (a.members[-1].output,), chain_inputs(k) + (k.output,)):
        offs.setdefault(orig.name, now.addr - orig.addr)
    offs.update(virtual_bases(k, target))
    return tuple(relocate_kernel(m, offs) for m in a.members)


@dataclass(frozen=True)
class ChainPlan:
    """The stripes, the chain's scratchpad layout, the target the members plan on, each stripe's
    band plans (None where a member computes no rows in that stripe), and the tile program every
    step of the chain is recorded in (what is emitted and what the estimate walks)."""

    stripes: tuple[Stripe, ...]
    layout: ChainLayout
    member_target: Any
    bands: tuple[tuple[Plan | None, ...], ...]
    program: TileProgram
    alternate: bool = False  # every other band at the top of the members' part (``chain_program``)

    def text(self, indent: str = "") -> str:
        """The chain's loop nest, as ``--print-after codegen`` prints every tile program."""
        return self.program.text(indent)


def plan_chain(k: Kernel, target: Any) -> Plan:
    a: ChainAttrs = k.attrs
    stripes = stripes_of(a)
    layout = chain_layout(a, target.scratchpad.size_bytes, stripes)
    if layout is None:
        raise CompileError(f"kernel '{k.name}': the chain's buffers at {a.stripe_rows} rows per stripe leave "
                           f"the members less than a quarter of the {target.scratchpad.size_bytes}-byte scratchpad")
    sub = with_scratchpad(target, layout.member_bytes)
    members = placed_members(k, target)
    bands, acc = stripe_bands(members, stripes, sub, k, target)
    cycles, program, alternate = cheapest_placement(
        lambda alternate: chain_program(k, target, stripes, layout, sub, bands, alternate), target,
        constant_inputs(members))
    double = sum(1 for n, _, _ in layout.buffers if n.endswith(SECOND))
    where = (f"in SRAM ({a.sram_bytes:,} B)" if a.sram_bytes
             else f"in scratchpad ({sum(n for _, _, n in layout.buffers):,} B)")
    summary = (f"{len(members)} layers depth-first, {len(stripes)} stripes of {a.stripe_rows} rows, "
               f"{len(a.intermediates)} intermediates {where}, "
               + (f"staged inputs {'double' if double else 'single'}-buffered, " if staged_of(a)
                  else "inputs read where they lie, ")
               + f"constants {'resident' if a.resident_weights else 'reloaded per stripe'}"
               + (", every other band at the top of the members' part" if alternate else ""))
    acc = target.accumulator.size_bytes if alternate else acc  # the top bands end at its top
    return Plan(summary, target.scratchpad.size_bytes, acc, cycles,
                ChainPlan(stripes, layout, sub, bands, program, alternate))


PLACEMENTS = (False, True)  # the members' bands all at the bottom of their part; every other one at the top


def cheapest_placement(program_of, target: Any, constants) -> tuple[int, TileProgram, bool]:
    """(cycles, tile program, alternate) of the placement of the members' bands (``PLACEMENTS``,
    :func:`chain_program`) whose program takes fewest cycles: the same instructions either way,
    so the same energy but for the static energy of those cycles.  Each program is walked with
    its loads of the members' ``constants`` as code generation will lay them out
    (:func:`~npuc.schedule.cascade_cost.constant_loads_streamed`)."""
    best = None
    for alternate in PLACEMENTS:
        program = program_of(alternate)
        cycles = walk_cycles(constant_loads_streamed(program.steps, constants, target), target)
        if best is None or cycles < best[0]:
            best = (cycles, program, alternate)
    return best


def priced_estimate(plan: Plan, constants, target: Any) -> Estimate:
    """The estimate of a chain's plan (cycles, off-chip bytes, energy) from its program, with its
    loads of ``constants`` as code generation will lay them out: what the cascade stage compares
    (at its pricing addresses, every transfer inside the system address map)."""
    steps = constant_loads_streamed(plan.details.program.steps, constants, target)
    return program_estimate(steps, target, plan.est_cycles)


def chain_estimate(k: Kernel, plan: Plan, target: Any) -> Estimate:
    """:func:`priced_estimate` of a ``fused_chain`` kernel's plan."""
    return priced_estimate(plan, constant_inputs(placed_members(k, target)), target)


def at_top(steps: list[Step], member_bytes: int, spad_shift: int, acc_shift: int) -> list[Step]:
    """A member's band moved to the top of the members' part of the scratchpad (every address
    below ``member_bytes`` up by ``spad_shift``) and of the accumulator (every address up by
    ``acc_shift``); the chain's own buffers, above the members' part, stay where they are.
    Which field holds which memory's address is read off the instructions' regions
    (:func:`~npuc.kir.tile_program.address_memories`)."""
    out = []
    for s in steps:
        mems = address_memories(s)
        if not mems:
            out.append(s)
            continue
        fields = []
        for name, v in s.fields:
            m = mems.get(name)
            if m is Mem.acc:
                v += acc_shift
            elif m is Mem.spad and v < member_bytes:
                v += spad_shift
            fields.append((name, v))
        out.append(Step(s.op, tuple(fields), s.tile))
    return out


def sram_bases(k: Kernel, stripes: tuple[Stripe, ...]) -> dict[str, int]:
    """Where each intermediate's part of a chain's SRAM block starts (``ChainAttrs.sram_bytes``;
    empty for a chain whose intermediates stay in the scratchpad): a stripe's rows of it are
    held from there."""
    a: ChainAttrs = k.attrs
    if not a.sram_bytes:
        return {}
    return {name: k.inputs[-1].addr + off for name, off, _ in sram_layout(a.members, a.intermediates, stripes)}


def in_block(band: Kernel, s: Stripe, virtual: dict[str, int], bases: dict[str, int], producers) -> Kernel:
    """A band with its views of the intermediates kept in the SRAM block at the block's addresses
    (as ``LocalEmitter.moves`` re-addresses its transfers), so that its plan prices them at the
    SRAM's bandwidth, not at that of the memory behind the virtual addresses."""
    def moved(t):
        if t is None or t.name not in bases:
            return t
        lo, _ = s.rows_of(t.name)
        start = virtual[t.name] + lo * row_bytes(producers[t.name].output)
        return replace(t, addr=bases[t.name] + t.addr - start)

    return replace(band, inputs=tuple(moved(t) for t in band.inputs), output=moved(band.output),
                   epilogue=tuple(replace(e, operand=moved(e.operand)) if e.operand is not None else e
                                  for e in band.epilogue))


def stripe_bands(members, stripes, sub: Any, k: Kernel | None = None, target: Any = None) -> tuple[tuple[tuple, ...], int]:
    """Every member's band plan in every stripe (None where a stripe gives it no rows) on the
    members' share of the scratchpad ``sub``, and the most accumulator bytes any of them takes.
    Given the chain ``k`` (and its ``target``), a chain that keeps its intermediates in an SRAM
    block plans its bands with them there (:func:`in_block`)."""
    bases = sram_bases(k, stripes) if k is not None else {}
    virtual = virtual_bases(k, target) if bases else {}
    producers = {m.output.name: m for m in members}
    bands = []
    acc = 0
    for s in stripes:
        row = []
        for m, (o0, o1) in zip(members, s.out_rows):
            if o1 <= o0:
                row.append(None)
                continue
            band = band_kernel(m, o0, o1)
            plan = band_plan(in_block(band, s, virtual, bases, producers) if bases else band, sub)
            row.append(plan)
            acc = max(acc, plan.acc_bytes)
        bands.append(tuple(row))
    return tuple(bands), acc


_BAND_PLANS: Memo[tuple, Plan] = Memo(4096, "fused band plans")


def _band_key(band: Kernel, target: Any) -> tuple:
    """What a band's plan depends on: everything of the band but its tensors' addresses (a plan
    is emitted at other addresses as it is for the other stripes of a chain), the memory each of
    them lies in, and the target."""
    tensors = tuple((t.name, t.shape, t.strides, t.dtype, getattr(target.window_at(t.addr), "index", -1))
                    for t in band.tensors())
    epilogue = tuple((e.op, e.scalar, e.operand_first, e.params) for e in band.epilogue)
    return band.kind, band.dtype, band.attrs, band.quant, tensors, epilogue, target


def band_plan(band: Kernel, target: Any) -> Plan:
    """The member implementation's plan of a band on the members' part of the scratchpad,
    planned once for every band of that shape (the cascade stage prices several chains that
    share bands, and code generation plans the chosen one again)."""
    key = _band_key(band, target)
    plan = _BAND_PLANS.get(key)
    return _BAND_PLANS.put(key, get_kernel(band.kind).plan(band, target)) if plan is None else plan


def on_chip_emitter(rec: Any, target: Any, k: Kernel) -> Any:
    """What the chain's steps are recorded through: when the memory plan keeps some of the
    chain's tensors in the scratchpad (addresses at ``RESIDENT_BASE``), a
    :class:`~npuc.codegen.local_memory.LocalEmitter` over them, so that the recorded program (what
    the estimate walks and what is emitted) holds the scratchpad copies the code generator issues
    for them, not DMAs of off-chip memory; else the recorder itself."""
    if not any(is_resident_address(t.addr) for t in k.tensors()):
        return rec
    top = 1 << DRAM_ADDR_BITS
    return LocalEmitter(rec, target, [(RESIDENT_BASE, top, -RESIDENT_BASE, "the on-chip tensors")])


class _Recorder(TileBuilder):
    """A tile builder the members' implementations can emit into as into the emitter."""

    def source(self, label: str):
        return nullcontext()

    def __len__(self) -> int:
        return len(self._steps)


def chain_program(k: Kernel, target: Any, stripes: tuple[Stripe, ...], layout: ChainLayout, sub: Any,
                  bands: tuple[tuple[Plan | None, ...], ...], alternate: bool = False) -> TileProgram:
    """Every step of the chain, in program order, one tile-loop iteration per stripe: the
    resident constants loaded before the loop; per stripe, the staged inputs' rows (into the
    stripe's half of their double buffer) and each member's band, emitted by the member's own
    implementation through :class:`~npuc.codegen.local_memory.LocalEmitter`.

    With ``alternate`` every other band, counted over the whole chain, is moved to the top of the
    members' part of the scratchpad and of the accumulator (:func:`at_top`).  A member's band
    begins by loading into the buffers the band before it used; at the same addresses those loads
    wait until that band has read its last tile, and its first accumulator tile until that band
    has drained its last; where the two bands' footprints do not overlap, the next band's loads and
    first tiles run under the last work of the one before (the tokens order the rest)."""
    a: ChainAttrs = k.attrs
    rec = _Recorder(target, k)
    for name, spad, nbytes in (("members", 0, layout.member_bytes),) + layout.buffers + layout.resident:
        rec._buffers.append(Buffer(name, spad, nbytes))
    members = placed_members(k, target)
    virtual = virtual_bases(k, target)
    on_chip = on_chip_emitter(rec, sub, k)
    local = LocalEmitter(on_chip, sub, strict=(min(virtual.values()), RESIDENT_BASE))
    in_sram = sram_bases(k, stripes)
    if a.resident_weights:
        bases = {t.name: t.addr - o.addr for t, o in zip(constant_inputs(members), constant_inputs(a.members))}
        for name, spad, nbytes in layout.resident:
            dma_nd(on_chip, "DMA_LOAD", bases[name], (nbytes,), (1,), spad, (1,), 1)
            local.windows.append((bases[name], bases[name] + nbytes, spad - bases[name], name))
    fixed = list(local.windows)
    producers = {m.output.name: m for m in a.members}
    staged = staged_of(replace(a, members=members))
    buffers = {name: spad for name, spad, _ in layout.buffers}
    emitted = 0
    for i, (s, plans) in enumerate(zip(stripes, bands)):
        rec.at(i)
        local.windows = list(fixed)
        local.moves = []
        for name in a.intermediates:
            lo, hi = s.rows_of(name)
            rb = row_bytes(producers[name].output)
            v = virtual[name]
            if name in in_sram:  # the stripe's rows at the start of the intermediate's part of the SRAM block
                local.moves.append((v + lo * rb, v + hi * rb, in_sram[name] - (v + lo * rb), name))
            else:
                local.windows.append((v + lo * rb, v + hi * rb, buffers[name] - (v + lo * rb), name))
        for t in staged:  # this stripe's rows of each staged input: one load, read by copies
            lo, hi = s.rows_of(t.name)
            if hi <= lo:
                continue
            rb = row_bytes(t)
            start = t.addr + lo * rb
            buf = buffers.get(t.name + SECOND, buffers[t.name]) if i % 2 else buffers[t.name]
            dma_nd(on_chip, "DMA_LOAD", start, ((hi - lo) * rb,), (1,), buf, (1,), 1)
            local.windows.append((start, start + (hi - lo) * rb, buf - start, t.name))
        for m, (o0, o1), bp in zip(members, s.out_rows, plans):
            if bp is not None:
                first = len(rec._steps)
                get_kernel(m.kind).emit(band_kernel(m, o0, o1), bp, local)
                if alternate and emitted % 2:
                    rec._steps[first:] = at_top(rec._steps[first:], layout.member_bytes,
                                                layout.member_bytes - bp.spad_bytes,
                                                target.accumulator.size_bytes - bp.acc_bytes)
                emitted += 1
    rec._steps = list(elide_copies(tuple(rec._steps), layout.member_bytes))
    return rec.finish(f"stripes of {a.stripe_rows} rows of '{k.output.name}'", a)


def unsupported_member(a: ChainAttrs, target: Any) -> str | None:
    """Why the first of a chain's members its own kernel does not support cannot run; None when
    every member can."""
    for m in a.members:
        why = get_kernel(m.kind).supports(m, target)
        if why:
            return f"member {m.name}: {why}"
    return None


class FusedChain:
    """The ``fused_chain`` kernel (docs/kernels.md, "Fused chains")."""

    kind = "fused_chain"

    def supports(self, k: Kernel, target: Any) -> str | None:
        if not isinstance(k.attrs, ChainAttrs) or not k.attrs.members:
            return "a fused chain takes ChainAttrs with its member kernels"
        return unsupported_member(k.attrs, target)

    def plan(self, k: Kernel, target: Any) -> Plan:
        return plan_chain(k, target)

    def emit(self, k: Kernel, plan: Plan, em: Any) -> None:
        p: ChainPlan = plan.details
        prog = p.program
        if not (prog.built_for is k or prog.built_for == k):
            prog = chain_program(k, em.target, p.stripes, p.layout, p.member_target, p.bands, p.alternate)
        emit_program(prog, em)


register_kernel(FusedChain())


def kernel_steps(k: Kernel, target: Any, plan: Plan | None = None, through_on_chip: bool = False) -> tuple:
    """The steps one kernel emits on its own (planned on ``target`` unless ``plan`` is given),
    recorded rather than emitted: what the cascade stage prices a member run unfused by; with
    ``through_on_chip`` through the emitter that turns the DMAs of tensors kept on chip (at
    ``RESIDENT_BASE``) into scratchpad copies, as the code generator does.  Its loads of its own
    constants read them as code generation will lay them out
    (:func:`~npuc.schedule.cascade_cost.constant_loads_streamed`): these steps are for pricing."""
    impl = get_kernel(k.kind)
    rec = _Recorder(target, k)
    em = on_chip_emitter(rec, target, k) if through_on_chip else rec
    impl.emit(k, plan or impl.plan(k, target), em)
    return constant_loads_streamed(rec._steps, constant_inputs((k,)), target)
