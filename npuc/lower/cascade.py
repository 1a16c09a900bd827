"""Fusion across layers: which chains of kernels run depth-first as one ``fused_chain`` kernel.

After partition and epilogue fusion, an NPU segment is a sequence of kernels that each read and
write DRAM.  A run of consecutive row-mapped kernels (``conv2d``, ``depthwise_conv2d``,
``pool2d``, ``eltwise``, ``qbinary``, ``lut``: a convolution chain, an inverted residual block with its residual add,
a basic block) whose intermediate tensors are read only inside the run can instead run in
stripes of output rows with the intermediates in scratchpad, or, on a target with an on-chip SRAM
for activations, in a block of that SRAM (``ChainAttrs.sram_bytes``;
``npuc.codegen.kernels.fused_chain``).

The choice is the cost model's, in two steps.  A roofline screen (``npuc.schedule.cascade_cost``,
:func:`~npuc.schedule.cascade_cost.estimate`: MACs at peak, bytes at the DRAM port, vector
lane-ops) prices every candidate run at every stripe height and both ways of holding the
constants (resident for the whole chain, or reloaded per stripe), and a dynamic program over the
segment picks the cut points of least screened energy.  Each chain it picks is then priced in
full: a few configurations (:func:`shortlist`) are planned and their tile programs (every step
the chain would issue) walked for cycles and summed for energy
(:func:`~npuc.schedule.cascade_cost.program_estimate`, checked against the simulator by
tests/schedule/test_chain_cost.py), and the members run one by one are priced the same way from
their own recorded steps.  The objective is energy: a chain is kept in its configuration of
least energy that spends less energy than its members, and with ``cycles_not_worse`` only one
that takes no more cycles than them as well; a chain that does not win is taken out of the
dynamic program, which runs again (so its shorter sub-chains get their chance), until every
chain it picks wins.  With ``cycles_not_worse`` (``fuse_layers="not-slower"``) most long chains lose,
and pricing every shorter one in turn would make the compile many times slower, so only the
chains of the first ``ROUNDS_NOT_WORSE`` rounds of the dynamic program are priced; it then runs
once more over the chains already proven to win.
"""

from __future__ import annotations

from dataclasses import replace

from npuc.errors import CompileError
from npuc.isa.enums import DType
from npuc.kir.kernel import ChainAttrs, Kernel
from npuc.codegen.memory_plan import relocate_kernel
from npuc.kir.program import ACTIVATION, CONSTANT, Buffer, LKernel, LoweredModel, NpuSegment
from npuc.schedule.cascade_cost import (
    ROW_KINDS,
    STRIPES,
    Estimate,
    chain_layout,
    chain_stripes,
    estimate,
    externals,
    program_estimate,
    spatial_inputs,
    sram_block_bytes,
    staged_inputs,
    stripes_memory,
    stripes_tensor,
    unfused_estimate,
)

MAX_MEMBERS = 8  # longest chain considered (the buffers of longer ones rarely fit)
SRAM_SHARE = 2  # a chain's SRAM block takes at most 1/SRAM_SHARE of the SRAM (the rest for its inputs and output)
ROUNDS_NOT_WORSE = 2  # with cycles_not_worse: rounds of the dynamic program whose new chains are priced
HEIGHTS = 1  # stripe heights priced in full per way of holding the constants
TRIES = 3  # configurations tried per way of holding the constants before giving it up
_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224)


def cascade(m: LoweredModel, cycles_not_worse: bool = False) -> LoweredModel:
    """``m`` with the chains the cost model chooses fused into ``fused_chain`` kernels; with
    ``cycles_not_worse`` only chains whose estimate is not slower than their members'.
    Squeeze-and-excitation blocks are first given their chance to run as two passes that compute
    the pooled tensor twice instead of storing it (``npuc.lower.cascade_se``)."""
    from npuc.lower.cascade_se import recompute_squeeze_excitation

    m = recompute_squeeze_excitation(m, cycles_not_worse)
    readers = _readers(m)
    protected = {h.buffer for h in m.homes}
    sizes = {b.name: b for b in m.buffers}
    segments = tuple(
        replace(s, kernels=_fuse_segment(s.kernels, m.target, readers, protected, sizes, cycles_not_worse))
        if isinstance(s, NpuSegment) else s
        for s in m.segments
    )
    blocks = tuple(Buffer(t.name, t.nbytes, ACTIVATION) for s in segments if isinstance(s, NpuSegment)
                   for lk in s.kernels if lk.kernel.kind == "fused_chain" and lk.kernel.attrs.sram_bytes
                   for t in lk.kernel.inputs[-1:])
    return replace(m, segments=segments, buffers=m.buffers + blocks)


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
    """Every feasible (stripe rows, constants resident or not, intermediates in scratchpad or in
    the on-chip SRAM, inputs staged or read where they lie) of a chain with its roofline
    estimate, least energy first: the screen the dynamic program runs on.  Inputs read where
    they lie are screened only on a target with an on-chip SRAM for activations
    (:func:`read_in_place`).  The intermediates go to the SRAM only on a target whose fastest
    memory for activations is one (``stripes_memory``), in a block of at most
    1/``SRAM_SHARE`` of it."""
    out = []
    sram = stripes_memory(target)
    on_chip = any(m.kind == "sram" for m in target.memories_holding("activations"))
    stagings = (True, False) if on_chip and staged_inputs(ks, inter) else (True,)  # see read_in_place
    for rows in row_choices(ks[-1].output.shape[2]):
        for staged in stagings:
            stripes = chain_stripes(ks, inter, rows, staged)
            block = sram_block_bytes(ks, inter, stripes) if sram is not None else 0
            places = (0, block) if 0 < block <= sram.size_bytes // SRAM_SHARE else (0,)
            for resident in (True, False):
                for sram_bytes in places:
                    attrs = ChainAttrs(rows, resident, inter, ks, sram_bytes, staged)
                    if chain_layout(attrs, target.scratchpad.size_bytes, stripes) is None:
                        continue
                    out.append((estimate(target, attrs, stripes), attrs))
    out.sort(key=lambda ea: (ea[0].energy_pj, ea[0].cycles, -ea[1].stripe_rows, not ea[1].resident_weights,
                             not ea[1].staged))
    return out


def shortlist(roofline: list[tuple[Estimate, ChainAttrs]], resident: bool, staged: bool = True) -> list[ChainAttrs]:
    """The configurations holding the constants as ``resident`` says and staging their inputs as
    ``staged`` says, tallest stripes first (taller stripes recompute fewer halo rows and reload
    weights less often; shorter ones leave the members more scratchpad), the roofline's best of
    them first of all."""
    mine = [a for _, a in roofline if a.resident_weights == resident and a.staged == staged]
    fits = sorted(mine, key=lambda a: -a.stripe_rows)
    return mine[:1] + [a for a in fits if a not in mine[:1]]


def read_in_place(target, ks: tuple[Kernel, ...], inter: tuple[str, ...], offs: dict[str, int]) -> bool:
    """Whether the chain ``ks`` is also priced reading its stageable inputs where they lie
    (``ChainAttrs.staged`` False): when each of them lies, at the pricing addresses ``offs``, in an
    on-chip SRAM, whose bandwidth a member's re-reads can afford and whose bytes are not off-chip
    bytes.  Off chip, every re-read would be an off-chip transfer the staged copy saves."""
    ts = staged_inputs(ks, inter)
    return bool(ts) and all(target.window_at(offs[t.name] + t.addr).memory.kind == "sram" for t in ts)


def spilled(target, ks: tuple[Kernel, ...], inter: tuple[str, ...], offs: dict[str, int]) -> dict[str, int]:
    """The pricing addresses ``offs`` with the chain's stageable inputs moved to the slowest
    memory that holds activations (from the middle of its window, where no priced tensor lies):
    where the memory plan puts an input that does not fit on chip beside the tensors live with it
    across the whole network, which pricing a run alone cannot see."""
    w = target.window_of(target.memories_holding("activations")[-1].name)
    top = w.base + (w.end - w.base) // 2 // 64 * 64
    out = dict(offs)
    for t in staged_inputs(ks, inter):
        out[t.name] = top
        top += -(-max(t.addr + t.span, 1) // 64) * 64
    return out


def chain_name(ks: tuple[Kernel, ...]) -> str:
    """The name of the fused kernel of the run ``ks``."""
    return f"{ks[0].name}..{ks[-1].name}"


def fused_kernel(attrs: ChainAttrs) -> Kernel:
    """The ``fused_chain`` kernel of a chain: its inputs the members' external tensors."""
    ms = attrs.members
    sources = tuple(s for k in ms for s in k.sources)
    name = chain_name(ms)
    block = (stripes_tensor(name, attrs.sram_bytes, ms[0].dtype),) if attrs.sram_bytes else ()
    return Kernel(name, "fused_chain", externals(ms, attrs.intermediates) + block, ms[-1].output,
                  attrs, (), ms[0].dtype, sources)


def fused_estimate(k: Kernel, target) -> Estimate | None:
    """The estimate of a fused chain read off its tile program (None when it cannot be planned)."""
    from npuc.codegen.kernels.fused_chain import chain_estimate, plan_chain

    try:
        plan = plan_chain(k, target)
    except CompileError:
        return None
    return chain_estimate(k, plan, target)


def unfused_cost(k: Kernel, target) -> Estimate:
    """A kernel run on its own: its recorded emission priced the same way."""
    from npuc.codegen.kernels.fused_chain import kernel_steps

    return program_estimate(kernel_steps(k, target), target)


def members_together(ks: tuple[Kernel, ...], target, offs: dict[str, int]) -> int:
    """Cycles of a run's kernels one after the other as the machine runs them: their recorded
    emissions, at the run's pricing addresses, walked as one stream, so that each kernel's first
    loads overlap the one before's last work as the tokens allow (the sum of the kernels priced
    alone leaves that overlap out, and a chain that only matches that sum can be slower)."""
    from npuc.codegen.kernels.fused_chain import kernel_steps
    from npuc.schedule.vector_cost import walk_cycles

    steps = [s for k in ks for s in kernel_steps(relocate_kernel(k, offs), target)]
    return walk_cycles(steps, target)


def pricing_offsets(ks: tuple[Kernel, ...], target, sizes) -> dict[str, int]:
    """Where a run's tensors sit while it is priced: each buffer at its own address (before the
    memory plan every buffer's views start at 0), so that the priced transfers reach the memories
    the plan will likely put them in and no two tensors share an address.  Constants go in the
    memory that holds weights; an activation in the fastest memory that holds activations and
    still has room for it beside the run's tensors already there (the last, off-chip, always has:
    on u65-like-256 a tensor that fits its 384 KiB SRAM is priced there, a larger one in DRAM; the
    members run one by one are priced at their best, which a chain must beat).  On a target with
    an on-chip SRAM for activations, ``offs[STRIPES]`` is where the block of the run fused with
    its intermediates there (``ChainAttrs.sram_bytes``) is priced: past the tensors in that SRAM
    when half of it is left, else at its start."""
    acts = target.memories_holding("activations")
    top = {m.name: target.window_of(m.name).base for m in acts}
    const = target.window_of(target.weight_memory.name).base
    if target.weight_memory.name == target.activation_memory.name:
        const += 1 << 24  # one memory holds both: constants above the activations' first 16 MiB
    offs: dict[str, int] = {}
    for k in ks:
        for t in k.tensors():
            if t.name in offs:
                continue
            b = sizes.get(t.name)
            n = -(-max(b.nbytes if b is not None else 0, t.addr + t.span, 1) // 64) * 64
            if b is not None and b.kind == CONSTANT:
                offs[t.name] = const
                const += n
                continue
            m = next(m for m in acts if m is acts[-1] or top[m.name] + n <= target.window_of(m.name).end)
            offs[t.name] = top[m.name]
            top[m.name] += n
    sram = stripes_memory(target)
    if sram is not None:
        w = target.window_of(sram.name)
        offs[STRIPES] = top[sram.name] if top[sram.name] + sram.size_bytes // SRAM_SHARE <= w.end else w.base
    return offs


def priced_at(k: Kernel, offs: dict[str, int]) -> Kernel:
    """The fused kernel ``k`` at the pricing addresses ``offs`` (:func:`pricing_offsets`), its
    SRAM block, if it has one, where those put a block."""
    if k.attrs.sram_bytes:
        offs = {**offs, k.inputs[-1].name: offs[STRIPES]}
    return relocate_kernel(k, offs)


def best_chain(target, roofline: list[tuple[Estimate, ChainAttrs]], alone: Estimate,
               cycles_not_worse: bool, offs: dict[str, int]) -> tuple[Estimate, Kernel] | None:
    """The configuration of least estimated energy that beats ``alone`` (the members one by one)
    in energy, and when ``cycles_not_worse`` without costing more cycles; None when none does.
    Per way of holding the constants, and of reading the inputs where :func:`read_in_place`
    says so, configurations are priced in :func:`shortlist` order until ``HEIGHTS`` of them could
    be planned (or ``TRIES`` were tried).  Each is priced with its tensors at ``offs``
    (:func:`pricing_offsets`); one that reads its inputs in place must also win with them off
    chip (:func:`spilled`), since the memory plan may not keep them in the SRAM."""
    best = None
    ks, inter = roofline[0][1].members, roofline[0][1].intermediates
    stagings = (True, False) if read_in_place(target, ks, inter, offs) else (True,)
    off_chip = spilled(target, ks, inter, offs) if len(stagings) > 1 else offs
    for resident, staged in ((r, s) for r in (True, False) for s in stagings):
        planned = 0
        for attrs in shortlist(roofline, resident, staged)[:TRIES]:
            est = fused_estimate(priced_at(fused_kernel(attrs), offs), target)
            if est is None:
                continue
            planned += 1
            ok = est.energy_pj < alone.energy_pj and (not cycles_not_worse or est.cycles <= alone.cycles)
            if ok and not staged:  # it must still win with its inputs where they may be placed after all
                worst = fused_estimate(priced_at(fused_kernel(attrs), off_chip), target)
                ok = worst is not None and worst.energy_pj < alone.energy_pj and (
                    not cycles_not_worse or worst.cycles <= alone.cycles)
            if ok and (best is None or (est.energy_pj, est.cycles) < (best[0].energy_pj, best[0].cycles)):
                best = (est, fused_kernel(attrs))
            if planned == HEIGHTS:
                break
    return best


def _sum(es) -> Estimate:
    es = list(es)
    return Estimate(sum(e.cycles for e in es), sum(e.dram_bytes for e in es), sum(e.copy_bytes for e in es),
                    sum(e.macs for e in es), sum(e.energy_pj for e in es))


def _fuse_segment(lks: tuple[LKernel, ...], target, readers, protected, sizes, cycles_not_worse: bool) -> tuple[LKernel, ...]:
    """The dynamic program over the segment on the roofline screen; each chain it chooses is then
    priced in full (:func:`best_chain`), and one that does not win is taken out and the program
    run again, until every chain chosen wins (module docstring)."""
    n = len(lks)
    single = [unfused_estimate(target, (lk.kernel,)).energy_pj if fusable(lk.kernel) else 0.0 for lk in lks]
    runs: dict[tuple[int, int], list] = {}
    for j in range(2, n + 1):
        for i in range(max(0, j - MAX_MEMBERS), j - 1):
            ks = tuple(lk.kernel for lk in lks[i:j])
            inter = _chain(ks, readers, protected, sizes)
            if inter is None:
                continue
            confs = roofline_configurations(target, ks, inter)
            if confs and confs[0][0].energy_pj < sum(single[i:j]):
                runs[(i, j)] = confs
    priced: dict[tuple[int, int], tuple[Estimate, Kernel] | None] = {}
    costs: dict[int, Estimate] = {}

    def alone(x: int) -> Estimate:
        """Kernel ``x`` run on its own, priced once for every run that holds it: at the addresses
        :func:`pricing_offsets` gives it alone (each buffer 64-byte aligned in the memory the plan
        will put it in, as in any run, so its bursts and memories are the same)."""
        if x not in costs:
            k = lks[x].kernel
            costs[x] = unfused_cost(relocate_kernel(k, pricing_offsets((k,), target, sizes)), target)
        return costs[x]

    rounds = 0
    while True:
        plan = _cheapest(n, single, runs)
        missing = [r for r in plan if r not in priced]
        if not missing:
            break
        if cycles_not_worse and rounds == ROUNDS_NOT_WORSE:
            runs = {r: c for r, c in runs.items() if priced.get(r) is not None}  # the chains proven not slower
            continue
        rounds += 1
        for i, j in missing:
            offs = pricing_offsets(tuple(lk.kernel for lk in lks[i:j]), target, sizes)
            members = _sum(alone(x) for x in range(i, j))
            if cycles_not_worse:
                members = replace(members, cycles=members_together(tuple(lk.kernel for lk in lks[i:j]), target, offs))
            priced[(i, j)] = best_chain(target, runs[(i, j)], members, cycles_not_worse, offs)
            if priced[(i, j)] is None:
                del runs[(i, j)]
    out: list[LKernel] = []
    chosen = {i: (j, priced[(i, j)][1]) for i, j in plan}
    x = 0
    while x < n:
        if x not in chosen:
            out.append(lks[x])
            x += 1
            continue
        j, k = chosen[x]
        group = lks[x:j]
        out.append(LKernel(k, tuple(o for lk in group for o in lk.ops), group[0].loc, sum(lk.macs for lk in group)))
        x = j
    return tuple(out)


def _cheapest(n: int, single: list[float], runs: dict[tuple[int, int], list]) -> list[tuple[int, int]]:
    """The runs of least total roofline energy that cover the segment (the rest one by one)."""
    best: list[tuple[float, list]] = [(0.0, [])] + [(float("inf"), [])] * n
    for j in range(1, n + 1):
        best[j] = (best[j - 1][0] + single[j - 1], best[j - 1][1])
        for i in range(max(0, j - MAX_MEMBERS), j - 1):
            confs = runs.get((i, j))
            if confs and best[i][0] + confs[0][0].energy_pj < best[j][0]:
                best[j] = (best[i][0] + confs[0][0].energy_pj, best[i][1] + [(i, j)])
    return best[n][1]
