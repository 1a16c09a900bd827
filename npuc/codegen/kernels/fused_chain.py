"""``fused_chain``: member kernels run depth-first in stripes, intermediates kept in scratchpad.

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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from npuc.codegen.epilogue import dma_nd
from npuc.codegen.kernel import get_kernel, register_kernel
from npuc.codegen.local_memory import RESIDENT_BASE, LocalEmitter
from npuc.codegen.memory_plan import relocate_kernel
from npuc.errors import CompileError
from npuc.isa.widths import DRAM_ADDR_BITS
from npuc.kir.kernel import ChainAttrs, Kernel
from npuc.kir.plan import Plan
from npuc.schedule.cascade_cost import (
    ChainLayout,
    Stripe,
    band_kernel,
    chain_layout,
    chain_stripes,
    constant_inputs,
    estimate,
    externals,
    row_bytes,
    staged_inputs,
)

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
    for orig, now in zip(externals(a.members, a.intermediates) + (a.members[-1].output,), k.inputs + (k.output,)):
        offs.setdefault(orig.name, now.addr - orig.addr)
    offs.update(virtual_bases(k, target))
    return tuple(relocate_kernel(m, offs) for m in a.members)


@dataclass(frozen=True)
class ChainPlan:
    """The stripes, the chain's scratchpad layout, the target the members plan on, and each
    stripe's band plans (None where a member computes no rows in that stripe)."""

    stripes: tuple[Stripe, ...]
    layout: ChainLayout
    member_target: Any
    bands: tuple[tuple[Plan | None, ...], ...]


def plan_chain(k: Kernel, target: Any) -> Plan:
    a: ChainAttrs = k.attrs
    stripes = chain_stripes(a.members, a.intermediates, a.stripe_rows)
    layout = chain_layout(a, target.scratchpad.size_bytes, stripes)
    if layout is None:
        raise CompileError(f"kernel '{k.name}': the chain's buffers at {a.stripe_rows} rows per stripe leave "
                           f"the members less than a quarter of the {target.scratchpad.size_bytes}-byte scratchpad")
    sub = with_scratchpad(target, layout.member_bytes)
    members = placed_members(k, target)
    cache: dict[tuple, Plan] = {}
    bands = []
    acc = 0
    for s in stripes:
        row = []
        for i, (m, (o0, o1)) in enumerate(zip(members, s.out_rows)):
            if o1 <= o0:
                row.append(None)
                continue
            band = band_kernel(m, o0, o1)
            key = (i, band.inputs[0].shape, band.output.shape, band.attrs)
            if key not in cache:
                cache[key] = get_kernel(m.kind).plan(band, sub)
            row.append(cache[key])
            acc = max(acc, cache[key].acc_bytes)
        bands.append(tuple(row))
    est = estimate(target, a, stripes)
    summary = (f"{len(members)} layers depth-first, {len(stripes)} stripes of {a.stripe_rows} rows, "
               f"{len(a.intermediates)} intermediates in scratchpad ({sum(n for _, _, n in layout.buffers):,} B), "
               f"constants {'resident' if a.resident_weights else 'reloaded per stripe'}")
    return Plan(summary, target.scratchpad.size_bytes, acc, est.cycles, ChainPlan(stripes, layout, sub, tuple(bands)))


class FusedChain:
    """The ``fused_chain`` kernel (docs/kernels.md, "Fused chains")."""

    kind = "fused_chain"

    def supports(self, k: Kernel, target: Any) -> str | None:
        if not isinstance(k.attrs, ChainAttrs) or not k.attrs.members:
            return "a fused chain takes ChainAttrs with its member kernels"
        for m in k.attrs.members:
            why = get_kernel(m.kind).supports(m, target)
            if why:
                return f"member {m.name}: {why}"
        return None

    def plan(self, k: Kernel, target: Any) -> Plan:
        return plan_chain(k, target)

    def emit(self, k: Kernel, plan: Plan, em: Any) -> None:
        p: ChainPlan = plan.details
        a: ChainAttrs = k.attrs
        members = placed_members(k, em.target)
        virtual = virtual_bases(k, em.target)
        local = LocalEmitter(em, p.member_target, strict=(min(virtual.values()), RESIDENT_BASE))
        if a.resident_weights:
            bases = {t.name: t.addr - o.addr for t, o in zip(constant_inputs(members), constant_inputs(a.members))}
            for name, spad, nbytes in p.layout.resident:
                dma_nd(em, "DMA_LOAD", bases[name], (nbytes,), (1,), spad, (1,), 1)
                local.windows.append((bases[name], bases[name] + nbytes, spad - bases[name], name))
        fixed = list(local.windows)
        producers = {m.output.name: m for m in a.members}
        staged = staged_inputs(members, a.intermediates)
        buffers = {name: spad for name, spad, _ in p.layout.buffers}
        for s, plans in zip(p.stripes, p.bands):
            local.windows = list(fixed)
            for name in a.intermediates:
                lo, hi = s.rows_of(name)
                rb = row_bytes(producers[name].output)
                v = virtual[name]
                local.windows.append((v + lo * rb, v + hi * rb, buffers[name] - (v + lo * rb), name))
            for t in staged:  # this stripe's rows of each staged input: one load, read by copies
                lo, hi = s.rows_of(t.name)
                if hi <= lo:
                    continue
                rb = row_bytes(t)
                start = t.addr + lo * rb
                dma_nd(em, "DMA_LOAD", start, ((hi - lo) * rb,), (1,), buffers[t.name], (1,), 1)
                local.windows.append((start, start + (hi - lo) * rb, buffers[t.name] - start, t.name))
            for m, (o0, o1), bp in zip(members, s.out_rows, plans):
                if bp is not None:
                    get_kernel(m.kind).emit(band_kernel(m, o0, o1), bp, local)


register_kernel(FusedChain())
