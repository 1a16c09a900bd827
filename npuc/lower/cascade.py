"""Fusion across layers: which chains of kernels run depth-first as one ``fused_chain`` kernel.

After partition and epilogue fusion, an NPU segment is a sequence of kernels that each read and
write DRAM.  A run of consecutive row-mapped kernels (``conv2d``, ``depthwise_conv2d``,
``pool2d``, ``eltwise``, ``qbinary``, ``lut``: a convolution chain, an inverted residual block with its residual add,
a basic block) whose intermediate tensors are read only inside the run can instead run in
stripes of output rows with the intermediates in scratchpad (``npuc.codegen.kernels.fused_chain``).

The choice is the cost model's (``npuc.schedule.cascade_cost``): for every candidate run, every
stripe height and both ways of holding the constants (resident for the whole chain, or reloaded
per stripe) it estimates cycles, DRAM bytes and energy; a dynamic program over the segment picks
the cut points that minimise the estimated energy of the segment (static energy makes cycles
count too), a run fused only where it beats its kernels run one by one.  Each chosen chain is
planned once here (its members on the scratchpad left to them), so a chain that cannot be
planned falls back to its next-best stripe height, and then to no fusion.
"""

from __future__ import annotations

from dataclasses import replace

from npuc.errors import CompileError
from npuc.isa.enums import DType
from npuc.kir.kernel import ChainAttrs, Kernel
from npuc.kir.program import ACTIVATION, LKernel, LoweredModel, NpuSegment
from npuc.schedule.cascade_cost import (
    ROW_KINDS,
    Estimate,
    chain_layout,
    chain_stripes,
    estimate,
    externals,
    program_estimate,
    spatial_inputs,
    unfused_estimate,
)

MAX_MEMBERS = 8  # longest chain considered (the buffers of longer ones rarely fit)
HEIGHTS = 2  # stripe heights priced per way of holding the constants: the tallest that fit
_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224)


def cascade(m: LoweredModel, cycles_not_worse: bool = False) -> LoweredModel:
    """``m`` with the chains the cost model chooses fused into ``fused_chain`` kernels; with
    ``cycles_not_worse`` only chains whose estimate is not slower than their members'."""
    readers = _readers(m)
    protected = {h.buffer for h in m.homes}
    sizes = {b.name: b for b in m.buffers}
    segments = tuple(
        replace(s, kernels=_fuse_segment(s.kernels, m.target, readers, protected, sizes, cycles_not_worse))
        if isinstance(s, NpuSegment) else s
        for s in m.segments
    )
    return replace(m, segments=segments)


def _readers(m: LoweredModel) -> dict[str, list[tuple[int, Kernel]]]:
    """For every buffer, the kernels that read it (global step index, kernel)."""
    out: dict[str, list[tuple[int, Kernel]]] = {}
    step = 0
    for s in m.segments:
        if isinstance(s, NpuSegment):
            for lk in s.kernels:
                k = lk.kernel
                for t in k.inputs + tuple(e.operand for e in k.epilogue if e.operand is not None):
                    out.setdefault(t.name, []).append((step, k))
                step += 1
    return out


def fusable(k: Kernel) -> bool:
    """A kernel a chain may hold: row-mapped, one image, channels-last 4-D tensors of its type."""
    if k.kind not in ROW_KINDS or k.dtype not in (DType.fp16, DType.int8):
        return False
    spatial = [k.inputs[j] for j in spatial_inputs(k) if j < len(k.inputs)]
    if len(spatial) != len(spatial_inputs(k)):
        return False
    for t in spatial + [k.output] + [e.operand for e in k.epilogue if e.operand is not None]:
        if t.rank != 4 or t.shape[0] != 1 or t.dtype != k.dtype:
            return False
    es = k.dtype.size
    if k.output.strides[1] != es or any(t.strides[1] != es for t in spatial):
        return False
    if k.kind in ("eltwise", "qbinary", "lut") and any(t.shape != k.output.shape for t in spatial):
        return False
    if k.kind == "pool2d" and not _banded_pool(k):
        return False
    return all(e.operand.shape[2] in (1, k.output.shape[2]) for e in k.epilogue if e.operand is not None)


def _banded_pool(k: Kernel) -> bool:
    """A pool whose bands compute what the whole does: a max pool (padding is -inf wherever it
    is), or an average without padding or ceil_mode (every divisor the window size); not a
    global pool (its one output row reads every input row)."""
    a = k.attrs
    if tuple(a.kernel) == tuple(k.inputs[0].shape[2:]):
        return False
    return a.kind == "max" or (tuple(a.padding) == (0, 0) and not a.ceil_mode)


def _intermediate(k: Kernel, later: tuple[Kernel, ...], readers, protected, sizes) -> bool:
    """Whether ``k``'s output can live only in scratchpad when ``later`` follow it in a chain:
    a whole dense activation buffer, read only by ``later``, each reading all of it."""
    out = k.output
    b = sizes.get(out.name)
    if b is None or b.kind != ACTIVATION or out.name in protected or out.addr != 0 or not out.is_dense():
        return False
    if b.nbytes != out.nbytes:
        return False
    ids = {id(x) for x in later}
    rs = readers.get(out.name, [])
    if not rs or any(id(r) not in ids for _, r in rs):
        return False
    for _, r in rs:
        for t in r.tensors()[:-1]:
            if t.name == out.name and (t.shape, t.strides, t.addr) != (out.shape, out.strides, out.addr):
                return False
        if any(j not in spatial_inputs(r) for j, t in enumerate(r.inputs) if t.name == out.name):
            return False
    return True


def _chain(ks: tuple[Kernel, ...], readers, protected, sizes) -> tuple[str, ...] | None:
    """The intermediates of ``ks`` run as one chain, or None when they cannot be."""
    if len(ks) < 2 or not all(fusable(k) for k in ks) or len({k.dtype for k in ks}) != 1:
        return None
    inter = []
    for i, k in enumerate(ks[:-1]):
        if not _intermediate(k, ks[i + 1:], readers, protected, sizes):
            return None
        inter.append(k.output.name)
    names = set(inter)
    for k in ks[1:]:
        if not any(t.name in names for t in k.tensors()[:-1]):
            return None  # every member after the first reads the chain
    return tuple(inter)


def row_choices(rows: int) -> tuple[int, ...]:
    return tuple(sorted({r for r in _ROWS if r < rows} | {rows}))


def roofline_configurations(target, ks: tuple[Kernel, ...], inter: tuple[str, ...]) -> list[tuple[Estimate, ChainAttrs]]:
    """Every feasible (stripe rows, constants resident or not) of a chain with its roofline
    estimate, least energy first: the screen the dynamic program runs on."""
    out = []
    for rows in row_choices(ks[-1].output.shape[2]):
        stripes = chain_stripes(ks, inter, rows)
        for resident in (True, False):
            attrs = ChainAttrs(rows, resident, inter, ks)
            if chain_layout(attrs, target.scratchpad.size_bytes, stripes) is None:
                continue
            out.append((estimate(target, attrs, stripes), attrs))
    out.sort(key=lambda ea: (ea[0].energy_pj, ea[0].cycles, -ea[1].stripe_rows, not ea[1].resident_weights))
    return out


def shortlist(roofline: list[tuple[Estimate, ChainAttrs]]) -> list[ChainAttrs]:
    """The configurations priced in full: the roofline's best, and for each way of holding the
    constants the tallest stripes that fit and the next shorter ones (taller stripes recompute
    fewer halo rows and reload weights less often, shorter ones leave the members more
    scratchpad)."""
    out = [roofline[0][1]] if roofline else []
    for resident in (True, False):
        fits = sorted((a for _, a in roofline if a.resident_weights == resident), key=lambda a: -a.stripe_rows)
        out += [a for a in fits[:HEIGHTS] if a not in out]
    return out


def fused_kernel(attrs: ChainAttrs) -> Kernel:
    """The ``fused_chain`` kernel of a chain: its inputs the members' external tensors."""
    ms = attrs.members
    sources = tuple(s for k in ms for s in k.sources)
    return Kernel(f"{ms[0].name}..{ms[-1].name}", "fused_chain", externals(ms, attrs.intermediates), ms[-1].output,
                  attrs, (), ms[0].dtype, sources)


def fused_estimate(k: Kernel, target) -> Estimate | None:
    """The estimate of a fused chain read off its tile program (None when it cannot be planned)."""
    from npuc.codegen.kernels.fused_chain import plan_chain

    try:
        plan = plan_chain(k, target)
    except CompileError:
        return None
    return program_estimate(plan.details.program.steps, target)


def unfused_cost(k: Kernel, target) -> Estimate:
    """A kernel run on its own: its recorded emission priced the same way."""
    from npuc.codegen.kernels.fused_chain import kernel_steps

    return program_estimate(kernel_steps(k, target), target)


def best_chain(target, configs: list[ChainAttrs], alone: Estimate, cycles_not_worse: bool) -> tuple[Estimate, Kernel] | None:
    """The configuration of least estimated energy among ``configs`` that beats ``alone`` (the
    members one by one) in energy, and when ``cycles_not_worse`` without costing more cycles;
    None when none does."""
    best = None
    for attrs in configs:
        k = fused_kernel(attrs)
        est = fused_estimate(k, target)
        if est is None or est.energy_pj >= alone.energy_pj or (cycles_not_worse and est.cycles > alone.cycles):
            continue
        if best is None or (est.energy_pj, est.cycles) < (best[0].energy_pj, best[0].cycles):
            best = (est, k)
    return best


def _sum(es) -> Estimate:
    es = list(es)
    return Estimate(sum(e.cycles for e in es), sum(e.dram_bytes for e in es), sum(e.copy_bytes for e in es),
                    sum(e.macs for e in es), sum(e.energy_pj for e in es))


def _fuse_segment(lks: tuple[LKernel, ...], target, readers, protected, sizes, cycles_not_worse: bool) -> tuple[LKernel, ...]:
    """The dynamic program over the segment on the roofline screen, then each chosen chain priced
    in full (module docstring)."""
    n = len(lks)
    single = [unfused_estimate(target, (lk.kernel,)).energy_pj if fusable(lk.kernel) else 0.0 for lk in lks]
    best: list[tuple[float, list]] = [(0.0, [])] + [(float("inf"), [])] * n
    for j in range(1, n + 1):
        e, plan = best[j - 1]
        best[j] = (e + single[j - 1], plan + [(j - 1, j, None)])
        for i in range(max(0, j - MAX_MEMBERS), j - 1):
            ks = tuple(lk.kernel for lk in lks[i:j])
            inter = _chain(ks, readers, protected, sizes)
            if inter is None:
                continue
            confs = roofline_configurations(target, ks, inter)
            if not confs or confs[0][0].energy_pj >= sum(single[i:j]):
                continue
            cost = best[i][0] + confs[0][0].energy_pj
            if cost < best[j][0]:
                best[j] = (cost, best[i][1] + [(i, j, confs)])
    out: list[LKernel] = []
    for i, j, confs in best[n][1]:
        chosen = None
        if confs is not None:
            alone = _sum(unfused_cost(lk.kernel, target) for lk in lks[i:j])
            chosen = best_chain(target, shortlist(confs), alone, cycles_not_worse)
        if chosen is None:
            out.extend(lks[i:j])
            continue
        group = lks[i:j]
        out.append(LKernel(chosen[1], tuple(o for lk in group for o in lk.ops), group[0].loc, sum(lk.macs for lk in group)))
    return tuple(out)
