"""``pooled_chain``: a chain of row-mapped kernels whose last output is only pooled, never stored.

The first pass of a squeeze-and-excitation block computed again instead of stored
(``npuc.lower.cascade_se``): the row members (an expansion convolution, a depthwise convolution,
their activations) run depth-first in stripes exactly as a ``fused_chain``
(``npuc.codegen.kernels.fused_chain``: the same stripes, layout, band plans and tile program),
with their last output -- the tensor the squeeze-and-excitation pools -- held a stripe at a time
in a scratchpad buffer like every other intermediate.  After each stripe's members, a
``VREDUCE`` per block of channels adds the stripe's pixels of that buffer into an fp32 (int8:
int32) sum kept in the scratchpad for the whole kernel (``acc``: the first stripe starts it);
after the last stripe the sums become the pool's output as a global pool's do
(:func:`npuc.codegen.kernels.vector_pool.finish_global`: the divisor, the conversion, int8's
REQUANT).  The pooled tensor never reaches DRAM; the second pass (an ordinary ``fused_chain``
that starts with the same members) computes it again to scale and project it.

int8 sums are exact, so the pooled value is the global pool's bit for bit; fp16 sums add the
same fp32 values in another order (the stripes' pixels), within the fp16 tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from npuc.codegen.kernel import register_kernel
from npuc.codegen.kernels.fused_chain import (
    chain_program,
    cheapest_placement,
    placed_members,
    priced_estimate,
    stripe_bands,
    unsupported_member,
    with_scratchpad,
)
from npuc.codegen.kernels.vector_pool import finish_global, is_global_pool, load_records, records_bytes
from npuc.codegen.epilogue import MAX_COUNT
from npuc.codegen.tile_builder import TileBuilder, emit_program
from npuc.errors import CompileError
from npuc.kir.kernel import ChainAttrs, Kernel
from npuc.kir.plan import Plan
from npuc.kir.tile_program import Buffer, TileProgram
from npuc.schedule.cascade_cost import (
    ALIGN,
    ChainLayout,
    Stripe,
    chain_layout,
    stripes_of,
    constant_inputs,
    externals,
)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def row_attrs(a: ChainAttrs) -> ChainAttrs:
    """The row members of a pooled chain as a chain of their own (the pool left out)."""
    return replace(a, members=a.members[:-1])


def pooled_stripes(a: ChainAttrs) -> tuple[Stripe, ...]:
    """The stripes of the row members, with the pooled tensor's buffer holding the rows its
    producer (the last row member) computes in each stripe."""
    rows = row_attrs(a)
    last = rows.members[-1].output.name
    out = []
    for s in stripes_of(rows):
        o0, o1 = s.out_rows[-1]
        out.append(replace(s, held=tuple((n, o0, o1) if n == last else (n, lo, hi) for n, lo, hi in s.held)))
    return tuple(out)


def pool_bytes(pool: Kernel) -> int:
    """The scratchpad the pool keeps for the whole kernel: its sums and its REQUANT records."""
    return _align(pool.output.shape[1] * 4) + _align(records_bytes(pool))


def pooled_layout(a: ChainAttrs, spad_bytes: int, stripes: tuple[Stripe, ...]) -> ChainLayout | None:
    """The row chain's layout below the pool's own bytes at the top of the scratchpad (None
    when the buffers leave the members less than a quarter of it)."""
    return chain_layout(row_attrs(a), spad_bytes - pool_bytes(a.members[-1]), stripes)


def pooled_problem(a: ChainAttrs) -> str | None:
    """Why ``a`` is not a pooled chain, or None."""
    if len(a.members) < 2:
        return "a pooled chain takes row members and a global pool"
    pool, last = a.members[-1], a.members[-2]
    if pool.kind != "pool2d" or not is_global_pool(pool):
        return f"the last member of a pooled chain must be a global pool, not {pool.kind}"
    if pool.inputs[0].name != last.output.name or last.output.name not in a.intermediates:
        return "a pooled chain's pool must read its last row member's output, held as an intermediate"
    if pool.inputs[0].shape != last.output.shape or not last.output.is_dense():
        return "a pooled chain's pool must read the whole of its last row member's output"
    return None


@dataclass(frozen=True)
class PooledPlan:
    """The row chain's stripes, layout, member target and band plans (as a fused chain's), where
    the pool's sums and records sit, and the tile program of every step."""

    stripes: tuple[Stripe, ...]
    layout: ChainLayout
    member_target: Any
    bands: tuple[tuple[Plan | None, ...], ...]
    sums_addr: int
    program: TileProgram
    alternate: bool = False  # every other band at the top of the members' part (``chain_program``)

    def text(self, indent: str = "") -> str:
        return self.program.text(indent)


def _row_kernel(k: Kernel) -> Kernel:
    """The fused-chain kernel of the row members at ``k``'s addresses."""
    a: ChainAttrs = k.attrs
    rows = row_attrs(a)
    n = len(externals(rows.members, rows.intermediates))
    return Kernel(k.name, "fused_chain", k.inputs[:n], rows.members[-1].output, rows, (), k.dtype, k.sources)


def _placed_pool(k: Kernel) -> Kernel:
    """The pool member reading nothing from DRAM but its records (where ``k`` has them) and
    writing ``k``'s output."""
    a: ChainAttrs = k.attrs
    pool = a.members[-1]
    rows = row_attrs(a)
    extra = k.inputs[len(externals(rows.members, rows.intermediates)):]
    return replace(pool, inputs=(pool.inputs[0],) + tuple(extra), output=k.output)


def plan_pooled(k: Kernel, target: Any) -> Plan:
    a: ChainAttrs = k.attrs
    why = pooled_problem(a)
    if why:
        raise CompileError(f"kernel '{k.name}': {why}")
    stripes = pooled_stripes(a)
    spad = target.scratchpad.size_bytes
    layout = pooled_layout(a, spad, stripes)
    if layout is None:
        raise CompileError(f"kernel '{k.name}': the chain's buffers at {a.stripe_rows} rows per stripe leave "
                           f"the members less than a quarter of the {spad}-byte scratchpad")
    sub = with_scratchpad(target, layout.member_bytes)
    row_k = _row_kernel(k)
    members = placed_members(row_k, target)
    bands, acc = stripe_bands(members, stripes, sub)
    sums = spad - pool_bytes(a.members[-1])
    cycles, program, alternate = cheapest_placement(
        lambda alternate: pooled_program(k, target, stripes, layout, sub, bands, sums, alternate), target,
        constant_inputs(members))
    pool = a.members[-1]
    summary = (f"{len(members)} layers depth-first, {len(stripes)} stripes of {a.stripe_rows} rows, "
               f"{pool.output.shape[1]} channels {pool.attrs.kind}-pooled per stripe, "
               f"'{pool.inputs[0].name}' never stored; constants "
               f"{'resident' if a.resident_weights else 'reloaded per stripe'}"
               + (", every other band at the top of the members' part" if alternate else ""))
    acc = target.accumulator.size_bytes if alternate else acc  # the top bands end at its top
    return Plan(summary, spad, acc, cycles, PooledPlan(stripes, layout, sub, bands, sums, program, alternate))


def pooled_estimate(k: Kernel, plan: Plan, target: Any):
    """What the cascade stage compares of a pooled chain's plan
    (:func:`~npuc.codegen.kernels.fused_chain.priced_estimate`)."""
    return priced_estimate(plan, constant_inputs(placed_members(_row_kernel(k), target)), target)


def pooled_program(k: Kernel, target: Any, stripes: tuple[Stripe, ...], layout: ChainLayout, sub: Any,
                   bands: tuple[tuple[Plan | None, ...], ...], sums: int, alternate: bool = False) -> TileProgram:
    """The row chain's tile program with the pool's steps added: its records loaded before the
    loop, each stripe's pixels reduced into the sums after that stripe's members, the sums
    finished and stored after the last stripe."""
    a: ChainAttrs = k.attrs
    chain = chain_program(_row_kernel(k), target, stripes, layout, sub, bands, alternate)
    pool = _placed_pool(k)
    x = pool.inputs[0]
    c, w = x.shape[1], x.shape[3]
    es = k.dtype.size
    buf = next(addr for name, addr, _ in layout.buffers if name == x.name)
    rec = TileBuilder(target, k)
    records = load_records(rec, pool, sums + _align(c * 4)) if records_bytes(pool) else None
    prologue = list(rec._steps)
    op = "max" if pool.attrs.kind == "max" else "sum"
    acc_dt = "fp32" if k.dtype.is_float else "int32"
    chans = min(c, MAX_COUNT)
    per_stripe: list[list] = []
    for i, s in enumerate(stripes):
        rec._steps = []
        rec.at(i)
        o0, o1 = s.out_rows[-1]
        npx = (o1 - o0) * w
        for p0 in range(0, npx, MAX_COUNT):
            n = min(MAX_COUNT, npx - p0)
            for c0 in range(0, c, chans):
                nc = min(chans, c - c0)
                rec.emit("VREDUCE", op=op, dtype=k.dtype.name, out_dtype=acc_dt, acc=i > 0 or p0 > 0, n0=n, n1=nc,
                         dst=sums + c0 * 4, dst_s=4, src=buf + p0 * c * es + c0 * es,
                         src_s0=c * es if n > 1 else 0, src_s1=es if nc > 1 else 0)
        if i == len(stripes) - 1:
            for c0 in range(0, c, chans):
                finish_global(rec, pool, sums + c0 * 4, 0, c0, min(chans, c - c0), x.shape[2] * w, records)
        per_stripe.append(list(rec._steps))
    steps = prologue + [st for st in chain.steps if st.tile < 0]
    for i, extra in enumerate(per_stripe):
        steps += [st for st in chain.steps if st.tile == i] + extra
    buffers = chain.buffers + (Buffer("pool sums", sums, c * 4),)
    if records is not None:
        buffers += (Buffer("pool records", records, records_bytes(pool)),)
    tensors = chain.tensors + tuple(t for t in rec.finish("").tensors if t.name not in {d.name for d in chain.tensors})
    return TileProgram(k.name, k.kind, chain.loop + f", {pool.attrs.kind}-pooled", buffers, tuple(steps), tensors,
                       a, k)


class PooledChain:
    """The ``pooled_chain`` kernel (docs/kernels.md, "Fused chains")."""

    kind = "pooled_chain"

    def supports(self, k: Kernel, target: Any) -> str | None:
        if not isinstance(k.attrs, ChainAttrs):
            return "a pooled chain takes ChainAttrs with its member kernels"
        return pooled_problem(k.attrs) or unsupported_member(k.attrs, target)

    def plan(self, k: Kernel, target: Any) -> Plan:
        return plan_pooled(k, target)

    def emit(self, k: Kernel, plan: Plan, em: Any) -> None:
        p: PooledPlan = plan.details
        prog = p.program
        if not (prog.built_for is k or prog.built_for == k):
            prog = pooled_program(k, em.target, p.stripes, p.layout, p.member_target, p.bands, p.sums_addr, p.alternate)
        emit_program(prog, em)


register_kernel(PooledChain())
