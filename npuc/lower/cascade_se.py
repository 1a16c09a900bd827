"""Squeeze-and-excitation blocks computed twice instead of stored (DeFiNES-style recompute).

A squeeze-and-excitation (SE) block scales a tensor D by a vector pooled over all of D::

    X -> R (expand conv, depthwise, activations) -> D -> global pool -> MLP -> s
    D * s -> projection (+ residual) -> Y

Fused chains run in stripes of rows, and no stripe of ``D * s`` can start before the whole of D
has been pooled, so the cascade stage's chains stop at D: D (the largest tensor of the block, the
expanded one) is written to DRAM once and read back twice, by the pool and by the scaling.

The alternative priced here: the chain R runs twice from X (much smaller than D).  The first pass
(a ``pooled_chain`` kernel, ``npuc.codegen.kernels.pooled_chain``) computes D stripe by stripe
only to pool it, storing nothing but the pooled vector; the MLP runs as before; the second pass is
an ordinary ``fused_chain`` R -> scale -> projection that computes D again and scales it as its
projection's input in scratchpad, so D never reaches DRAM.  The price is R's MACs and X's reads a
second time.

The cost model chooses per block, never a fixed rule: the two passes are priced in full (their
tile programs walked and their energy actions summed, as the cascade stage prices every chain:
``npuc.lower.cascade.best_chain``), against what the block costs with D stored -- the chain R, the
pool and the chain scale -> projection, each at its best configuration or its members one by one,
whichever costs less.  The objective is the cascade stage's: energy, and with ``cycles_not_worse``
no more cycles either.  A block that recomputes leaves the dynamic program of the cascade stage
two fused kernels it does not touch; the other blocks go to it as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from npuc.codegen.kernels.pooled_chain import pooled_layout, pooled_stripes, row_attrs
from npuc.codegen.kernels.vector_pool import is_global_pool
from npuc.codegen.memory_plan import relocate_kernel
from npuc.isa.enums import DType
from npuc.kir.kernel import ChainAttrs, Kernel
from npuc.kir.program import ACTIVATION, LKernel, LoweredModel, NpuSegment
from npuc.lower.cascade import (
    TRIES,
    _chain,
    _intermediate,
    _readers,
    _sum,
    best_chain,
    fusable,
    pricing_offsets,
    roofline_configurations,
    row_choices,
    shortlist,
    unfused_cost,
)
from npuc.schedule.cascade_cost import Estimate, estimate, externals

MAX_ROW_MEMBERS = 4  # members of R (the chain recomputed): expand conv, its activation, depthwise, its activation
_NONE = Estimate(0, 0, 0, 0, float("inf"))


@dataclass(frozen=True)
class SeBlock:
    """Positions in a segment: the chain R producing the pooled tensor D, the global pool of D,
    the kernel that scales D by the pooled vector's excitation, and the one kernel after it that
    reads the scaled tensor (the projection)."""

    rows: tuple[int, ...]
    pool: int
    scale: int
    tail: int

    def positions(self) -> tuple[int, ...]:
        return self.rows + (self.pool, self.scale, self.tail)


@dataclass(frozen=True)
class Choice:
    """A block's two passes and what they and the stored alternative are priced at."""

    block: SeBlock
    first: Kernel  # pooled_chain: R, then the pool
    second: Kernel  # fused_chain: R, the scaling, the projection
    recompute: Estimate
    stored: Estimate

    def wins(self, cycles_not_worse: bool) -> bool:
        return self.recompute.energy_pj < self.stored.energy_pj and (
            not cycles_not_worse or self.recompute.cycles <= self.stored.cycles)


def recompute_squeeze_excitation(m: LoweredModel, cycles_not_worse: bool = False) -> LoweredModel:
    """``m`` with every SE block for which the cost model prefers it run as two passes (module
    docstring); the rest as it was."""
    readers = _readers(m)
    protected = {h.buffer for h in m.homes}
    sizes = {b.name: b for b in m.buffers}
    segments = []
    for s in m.segments:
        if isinstance(s, NpuSegment):
            choices = [c for c in (price_block(s.kernels, b, m.target, readers, protected, sizes)
                                   for b in se_blocks(s.kernels, readers, protected, sizes)) if c is not None]
            s = replace(s, kernels=rewrite(s.kernels, [c for c in choices if c.wins(cycles_not_worse)]))
        segments.append(s)
    return replace(m, segments=tuple(segments))


def se_blocks(lks: tuple[LKernel, ...], readers, protected, sizes) -> list[SeBlock]:
    """The SE blocks of a segment that two passes could run (the shape in the module docstring:
    D read by its global pool and by the scaling only, the scaled tensor by the projection only,
    R a run of row-mapped kernels right before the pool whose outputs only R and the scaling read)."""
    out = []
    claimed: set[int] = set()
    where = {id(lk.kernel): i for i, lk in enumerate(lks)}
    for p, lk in enumerate(lks):
        pool = lk.kernel
        if pool.kind != "pool2d" or not is_global_pool(pool) or pool.dtype not in (DType.fp16, DType.int8) or p == 0:
            continue
        d = pool.inputs[0]
        producer = lks[p - 1].kernel
        b = sizes.get(d.name)
        if (producer.output.name != d.name or producer.output != d or b is None or b.kind != ACTIVATION
                or d.name in protected or not d.is_dense() or b.nbytes != d.nbytes):
            continue
        others = list({id(r): r for _, r in readers.get(d.name, []) if r is not pool}.values())
        if len(others) != 1 or id(others[0]) not in where:
            continue
        scale = others[0]
        s = where[id(scale)]
        if s <= p or s + 1 >= len(lks):
            continue
        tail = lks[s + 1].kernel
        if not _scales(scale, d) or not fusable(tail) or not _intermediate(scale, (tail,), readers, protected, sizes):
            continue
        rows = _rows_before(lks, p - 1, readers, protected, sizes)
        if rows is None or len({lks[i].kernel.dtype for i in rows} | {scale.dtype, tail.dtype}) != 1:
            continue
        block = SeBlock(rows, p, s, s + 1)
        if claimed & set(block.positions()):
            continue
        claimed |= set(block.positions())
        out.append(block)
    return out


def _scales(k: Kernel, d) -> bool:
    """Whether ``k`` is a row-mapped kernel reading all of ``d`` as a spatial input."""
    if not fusable(k):
        return False
    spatial = [k.inputs[0]] + ([k.inputs[1]] if k.kind == "qbinary" else [])
    return any(t == d for t in spatial)


def _rows_before(lks, last: int, readers, protected, sizes) -> tuple[int, ...] | None:
    """The run R ending at ``last``: it and, going back, each kernel whose output only the later
    members of R read (at most MAX_ROW_MEMBERS), every one of them row-mapped, up to and
    including the first full convolution (the block's expansion, or the stem before a block
    that has none): R never reaches into the block before."""
    if not fusable(lks[last].kernel):
        return None
    rows = [last]
    while len(rows) < MAX_ROW_MEMBERS and rows[0] > 0 and lks[rows[0]].kernel.kind != "conv2d":
        cand = lks[rows[0] - 1].kernel
        later = tuple(lks[i].kernel for i in rows)
        if not fusable(cand) or not _intermediate(cand, later, readers, protected, sizes):
            break
        if not any(t.name == cand.output.name for t in later[0].tensors()[:-1]):
            break
        rows.insert(0, rows[0] - 1)
    return tuple(rows)


def pooled_configurations(target, members: tuple[Kernel, ...]) -> list[tuple[Estimate, ChainAttrs]]:
    """Every feasible (stripe rows, constants resident or not) of the first pass, with the
    roofline screen of its row chain, least energy first (the screen orders; the program prices)."""
    inter = tuple(k.output.name for k in members[:-1])
    out = []
    for rows in row_choices(members[-2].output.shape[2]):
        for resident in (True, False):
            a = ChainAttrs(rows, resident, inter, members)
            stripes = pooled_stripes(a)
            if pooled_layout(a, target.scratchpad.size_bytes, stripes) is None:
                continue
            out.append((estimate(target, row_attrs(a), stripes), a))
    out.sort(key=lambda ea: (ea[0].energy_pj, ea[0].cycles, -ea[1].stripe_rows, not ea[1].resident_weights))
    return out


def pooled_kernel(a: ChainAttrs) -> Kernel:
    """The ``pooled_chain`` kernel of a first pass: its inputs the members' external tensors, its
    output the pool's."""
    ms = a.members
    return Kernel(f"{ms[0].name}..{ms[-1].name}", "pooled_chain", externals(ms, a.intermediates), ms[-1].output,
                  a, (), ms[0].dtype, tuple(s for k in ms for s in k.sources))


def best_pooled(target, members: tuple[Kernel, ...], offs) -> tuple[Estimate, Kernel] | None:
    """The first pass at its configuration of least energy (priced as :func:`best_chain` prices
    a chain: per way of holding the constants, the screen's best and then the tallest stripes)."""
    from npuc.codegen.kernels.pooled_chain import plan_pooled, pooled_estimate
    from npuc.errors import CompileError

    confs = pooled_configurations(target, members)
    best = None
    for resident in (True, False):
        for a in shortlist(confs, resident)[:TRIES]:
            k = pooled_kernel(a)
            try:
                plan = plan_pooled(relocate_kernel(k, offs), target)
            except CompileError:
                continue
            est = pooled_estimate(relocate_kernel(k, offs), plan, target)
            if best is None or (est.energy_pj, est.cycles) < (best[0].energy_pj, best[0].cycles):
                best = (est, k)
            break
    return best


def _chain_or_members(target, ks: tuple[Kernel, ...], readers, protected, sizes, offs) -> Estimate:
    """What ``ks`` cost when the cascade stage may fuse them: the best chain, else one by one."""
    alone = _sum(unfused_cost(relocate_kernel(k, offs), target) for k in ks)
    inter = _chain(ks, readers, protected, sizes) if len(ks) > 1 else None
    if inter is None:
        return alone
    fused = best_chain(target, roofline_configurations(target, ks, inter), alone, False, offs)
    return fused[0] if fused is not None else alone


def price_block(lks: tuple[LKernel, ...], b: SeBlock, target, readers, protected, sizes) -> Choice | None:
    """Both ways of running block ``b``, priced (None when the two passes cannot be planned)."""
    rows = tuple(lks[i].kernel for i in b.rows)
    pool, scale, tail = lks[b.pool].kernel, lks[b.scale].kernel, lks[b.tail].kernel
    offs = pricing_offsets(rows + (pool, scale, tail), target, sizes)
    first = best_pooled(target, rows + (pool,), offs)
    if first is None:
        return None
    second_members = rows + (scale, tail)
    inter = tuple(k.output.name for k in rows) + (scale.output.name,)
    second = best_chain(target, roofline_configurations(target, second_members, inter), _NONE, False, offs)
    if second is None:
        return None
    stored = _sum([
        _chain_or_members(target, rows, readers, protected, sizes, offs),
        unfused_cost(relocate_kernel(pool, offs), target),
        _chain_or_members(target, (scale, tail), readers, protected, sizes, offs),
    ])
    return Choice(b, first[1], second[1], _sum([first[0], second[0]]), stored)


def rewrite(lks: tuple[LKernel, ...], choices: list[Choice]) -> tuple[LKernel, ...]:
    """The segment with each chosen block's first pass where its pool was and its second pass
    where its scaling was (R and the projection taken from their places)."""
    if not choices:
        return lks
    at: dict[int, LKernel] = {}
    gone: set[int] = set()
    for c in choices:
        b = c.block
        rows = [lks[i] for i in b.rows]
        pool, scale, tail = lks[b.pool], lks[b.scale], lks[b.tail]
        at[b.pool] = _lkernel(c.first, rows + [pool])
        at[b.scale] = _lkernel(c.second, rows + [scale, tail])
        gone |= set(b.rows) | {b.tail}
    return tuple(at.get(i, lk) for i, lk in enumerate(lks) if i not in gone)


def _lkernel(k: Kernel, group: list[LKernel]) -> LKernel:
    return LKernel(k, tuple(o for lk in group for o in lk.ops), group[0].loc, sum(lk.macs for lk in group))
