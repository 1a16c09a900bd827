"""Choosing a tiling for an array problem: a few hundred candidates at most, costed by the model.

Candidates come from a heuristic seed (the largest output tile the accumulator holds, every
reduction channel at once, every weight block resident when the scratchpad allows) widened by a
sweep over output-channel widths, tile shapes, reduction blocks, the unfolded-row layout and the
loop order, and input bands of several row tiles; when none of those fits, the same sweep with
reduction blocks shorter than a burst and narrower tiles, and last single rows and narrow
blocks.  Of the candidates that fit the scratchpad and
the accumulator, the fastest by the walk-free estimate and the leanest in DRAM traffic among the
nearly fastest are costed by the full model; among those within ``CYCLE_SLACK`` of the fastest,
the fewest DRAM bytes win (when they save at least ``LEAN_GAIN`` of the fastest one's bytes,
else the fastest does), then the fewer cycles, the smaller footprint and the candidate's text,
so the choice is deterministic.  int8 tilings within ``CYCLE_SLACK`` of the fastest are costed
again with their bias and REQUANT records loaded once for the kernel (``quant_once``), where
the larger buffer fits.  Last, of the costed tilings within ``CODE_SLACK`` of that one's
cycles and moving no more DRAM bytes, the one of fewest instructions wins: more, shorter steps
for a fraction of a per cent of cycles cost code a device stores for that layer.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from npuc.errors import CompileError
from npuc.isa.enums import Dataflow
from npuc.memo import Memo
from npuc.schedule.cost import Estimate, estimate, quick_estimate
from npuc.schedule.problem import ArrayProblem, ArrayTiling, Footprint, blocks, can_os, can_unfold, footprint
from npuc.targets import Target

MAX_CANDIDATES = 600
WALKED = 6
# Among tilings within this fraction of the fastest, the one that moves the fewest DRAM bytes
# wins (off-chip traffic is most of an edge NPU's energy).
CYCLE_SLACK = 0.01
# ... provided it saves at least this fraction of the fastest one's bytes (a smaller saving is
# not worth the model's error on the cycles).
LEAN_GAIN = 0.05
# Of the tilings within this fraction of the chosen one's cycles (and no more DRAM bytes), the one
# of fewest instructions: MobileNetV2 int8's code 74,347 -> 71,368 B (2.02% -> 1.94% of its
# constants) for 0.17% of ResNet-50's cycles.
CODE_SLACK = 0.005


@dataclass(frozen=True)
class Choice:
    """The chosen tiling, its estimate, and how many candidates were costed."""

    tiling: ArrayTiling
    estimate: Estimate
    candidates: int


def _multiples(unit: int, total: int) -> list[int]:
    """unit, 2 unit, 4 unit, ... below total, and total itself."""
    out = {total}
    v = unit
    while v < total:
        out.add(v)
        v *= 2
    return sorted(out)


def _halvings(total: int, limit: int) -> list[int]:
    """Tile lengths up to ``limit``: the largest, the balanced one, and halves."""
    top = min(total, limit)
    if top < 1:
        return []
    balanced = math.ceil(total / math.ceil(total / top))
    out = {top, balanced}
    for d in (2, 4):
        v = top // d
        if v >= 1:
            out.add(math.ceil(total / math.ceil(total / v)))
    return sorted(out, reverse=True)


def _shapes(target: Target, p: ArrayProblem, tn: int, acc_slots: int = 1, narrow: bool = False) -> list[tuple[int, int]]:
    """(th, tw) output tiles of which ``acc_slots`` accumulator tiles fit for ``tn`` channels;
    ``narrow``: also tiles narrower than the accumulator allows (their input takes less of the
    scratchpad)."""
    m_cap = (target.accumulator.size_bytes - 64 * (acc_slots - 1)) // (acc_slots * tn * 4)  # slots 64-byte aligned
    if m_cap < 1:
        return []
    tws = [p.x.out] if p.x.out <= m_cap and not narrow else _halvings(p.x.out, m_cap)[:2]
    out = []
    for tw in tws:
        for th in _halvings(p.y.out, m_cap // tw)[:3]:
            out.append((th, tw))
    return out


def _widths(target: Target, p: ArrayProblem) -> list[int]:
    """Output-channel widths worth trying: multiples of the array's columns whose accumulator
    tile still holds a useful number of rows (the narrowest is always kept), and every channel
    while the tile holds the array's rows: a pixel's channels are then one run in memory, where
    narrower tiles store (and their consumers load) runs shorter than a burst."""
    cols = target.array.cols
    acc_words = target.accumulator.size_bytes // 4
    want = min(p.y.out * p.x.out, 4 * target.array.rows)
    out = [tn for tn in _multiples(cols, p.n) if acc_words // tn >= want]
    if p.n not in out and acc_words // p.n >= min(p.y.out * p.x.out, target.array.rows):
        out.append(p.n)
    return out or [min(cols, p.n)]


def _reduction_blocks(target: Target, p: ArrayProblem, whole_bursts: bool = True) -> list[int]:
    """Input channels per reduction block: all of them, and up to four smaller blocks, multiples
    of the array's rows and (``whole_bursts``) of a DRAM burst's elements (a pixel's channels of
    a block are one run: shorter than a burst, the rest of the burst is moved for nothing)."""
    unit = target.array.rows
    if whole_bursts:
        unit = math.lcm(unit, max(1, target.dma.burst_bytes // p.es))
    return [p.c] + [c for c in reversed(_multiples(unit, p.c)) if c < p.c][:4]


def _bands(p: ArrayProblem, th: int, tc: int, unfold: bool) -> list[tuple[int, int]]:
    """(band, input buffers) options for row tiles of ``th``: one tile per band (double
    buffered), and when there are several row tiles, the whole height or half of it as one
    band, with two buffers or one for each reduction block (a band loads its rows as its tiles
    need them, so one buffer does not stall the array: the next band's first rows go where the
    last band's first tiles read; fewer buffers than reduction blocks would reload every band
    for every block)."""
    out = [(0, 2)]
    if unfold or p.y.out <= th:
        return out
    cb = len(blocks(p.c, tc))
    for band in sorted({p.y.out, math.ceil(p.y.out / 2)}, reverse=True):
        if band > th:
            out += [(band, 2 * cb), (band, cb)]
    return out


def candidates(target: Target, p: ArrayProblem, whole_bursts: bool = True) -> list[ArrayTiling]:
    """Candidate tilings, before the fit check (deterministic order).  Past ``MAX_CANDIDATES``
    the sweep is cut evenly across reduction blocks, output-channel widths and accumulator
    slot counts (the list of each is interleaved), so that none of them is dropped whole.
    ``whole_bursts``: reduction blocks of whole DRAM bursts only (see ``_reduction_blocks``)."""
    unfolds = [False, True] if can_unfold(p) else [False]
    flows = [f for f in Dataflow if target.supports_dataflow(f) and (f is Dataflow.weight_stationary or can_os(p))]
    per_block: list[list[ArrayTiling]] = []
    for tc in _reduction_blocks(target, p, whole_bursts):
        for tn in reversed(_widths(target, p)):
            for acc_slots in (2, 1):
                out: list[ArrayTiling] = []
                per_block.append(out)
                for th, tw in _shapes(target, p, tn, acc_slots, narrow=not whole_bursts):
                    for unfold in unfolds:
                        # one channel block or one pixel tile: both orders are the same nest
                        single = th >= p.y.out and tw >= p.x.out
                        orders = ["m_outer"] if tn >= p.n or single else ["m_outer", "n_outer"]
                        for band, x_slots in _bands(p, th, tc, unfold):
                            for order in orders:
                                for flow in flows:
                                    out.append(ArrayTiling(th, tw, tn, tc, order, unfold, x_slots=x_slots, dataflow=flow,
                                                           acc_slots=acc_slots, band=band))
    mixed = [t for group in itertools.zip_longest(*per_block) for t in group if t is not None]
    return mixed[:MAX_CANDIDATES]


def part_burst_candidates(target: Target, p: ArrayProblem) -> list[ArrayTiling]:
    """The main sweep with reduction blocks of any multiple of the array's rows, for layers
    where no block of whole bursts fits: a block's runs then move part of each burst for
    nothing (the cost model prices whole bursts), which still costs far less than the single
    rows and narrow blocks of ``small_candidates``."""
    return candidates(target, p, whole_bursts=False)


def small_candidates(target: Target, p: ArrayProblem) -> list[ArrayTiling]:
    """Shrinking tilings for layers the main sweep cannot fit: narrow column tiles, single
    output rows, one array-width of output channels, reduction blocks down to one channel."""
    tn = min(target.array.cols, p.n)
    m_cap = target.accumulator.size_bytes // (tn * 4)
    tcs = sorted({min(p.c, max(1, target.array.rows >> i)) for i in range(8)}, reverse=True)
    out: list[ArrayTiling] = []
    tw = max(1, min(p.x.out, m_cap))  # the last is the smallest tiling: the error reports it
    while tw >= 1 and len(out) < MAX_CANDIDATES:
        for tc in tcs:
            out.append(ArrayTiling(1, tw, tn, tc))
        tw = tw // 2 if tw > 1 else 0
    return out


MAX_TILE = 0xFFFF  # a tile's extents are DMA and MATMUL counts: 16-bit fields of the ISA


def _expressible(t: ArrayTiling) -> bool:
    """Every extent of the tile fits the instruction fields that move and compute it."""
    return max(t.th, t.tw, t.tn, t.tc) <= MAX_TILE


def _with_buffers(target: Target, p: ArrayProblem, t: ArrayTiling, fp: Footprint | None = None) -> ArrayTiling:
    """Make weight blocks, then input tiles, resident when the scratchpad holds them all;
    resident weights are held in blocks of every output channel.  ``fp``: ``footprint(p, t)``
    when the caller has it (the slot counts do not change a slot's bytes)."""
    size = target.scratchpad.size_bytes
    fp = footprint(p, t) if fp is None else fp
    n_w = _count(p.n, t.tn) * _count(p.c, t.tc)
    n_x = _count(p.y.out, t.band_rows) * _count(p.x.out, t.tw) * _count(p.c, t.tc)
    rest = fp.spad(t) - t.x_slots * fp.x_slot - t.w_slots * fp.w_slot  # what the slot counts do not change
    x_slots, w_slots, wide = t.x_slots, t.w_slots, t.wide_weights
    if n_w > 2 and rest + x_slots * fp.x_slot + n_w * fp.w_slot <= size:
        w_slots = n_w
    if n_x > 2 and rest + n_x * fp.x_slot + w_slots * fp.w_slot <= size:
        x_slots = n_x
    if (x_slots, w_slots) != (t.x_slots, t.w_slots):
        t = replace(t, x_slots=x_slots, w_slots=w_slots)
    t = _per_block_buffers(p, t, size, fp, n_w, n_x)
    x_slots, w_slots = t.x_slots, t.w_slots
    if n_w == 1:
        w_slots = 1
    n_c = _count(p.c, t.tc)
    if w_slots >= n_w > n_c and not p.weights_n_major:
        # resident weights, several channel blocks: one block per reduction block holding
        # every channel is the same bytes of scratchpad in whole DRAM rows
        wide, w_slots = True, n_c
    if n_x == 1:
        x_slots = 1
    if (x_slots, w_slots, wide) == (t.x_slots, t.w_slots, t.wide_weights):
        return t
    return replace(t, x_slots=x_slots, w_slots=w_slots, wide_weights=wide)


def _count(total: int, size: int) -> int:
    """``len(blocks(total, size))``."""
    return max(0, -(-total // size))


def _per_block_buffers(p: ArrayProblem, t: ArrayTiling, size: int, fp, n_w: int, n_x: int) -> ArrayTiling:
    """When the operand the loop order reuses is not resident whole, hold one reuse's worth of
    it: every reduction block of one output-channel block's weights (``n_outer``: the weights
    are then read once, the input once per channel block) or of one input tile (``m_outer``:
    the input is read once), plus one buffer so that the next block loads beside the compute."""
    n_c = len(blocks(p.c, t.tc))
    if n_c < 2:
        return t
    if t.order == "n_outer" and t.w_slots < n_w:
        field = "w_slots"
    elif t.order == "m_outer" and t.x_slots < n_x and t.band_rows == t.th:
        field = "x_slots"
    else:
        return t
    for slots in (n_c + 1, n_c):
        if slots > getattr(t, field) and fp.spad(replace(t, **{field: slots})) <= size:
            return replace(t, **{field: slots})
    return t


def shorter_variant(target: Target, p: ArrayProblem, t: ArrayTiling) -> ArrayTiling | None:
    """An ``n_outer`` tiling whose weight blocks of every reduction block do not fit beside its
    input tiles, with shorter row tiles until they do (halving ``th`` at most three times): the
    weights are then read once instead of once per output tile.  None when nothing changes."""
    n_c = len(blocks(p.c, t.tc))
    if t.order != "n_outer" or n_c < 2 or t.w_slots >= n_c or t.unfold:
        return None
    th = t.th
    for _ in range(3):
        th = max(1, th // 2)
        v = _with_buffers(target, p, replace(t, th=th, band=0, x_slots=2, w_slots=2))
        if v.w_slots >= n_c:
            return v
        if th == 1:
            break
    return None


def tail_variants(target: Target, p: ArrayProblem, t: ArrayTiling) -> list[ArrayTiling]:
    """``t`` with its last output tile cut into narrower channel tiles (``tail_cols``: one or
    two units of the array's columns and a DRAM burst's elements, so that the tail's stores
    still move whole bursts), when those tiles share the weight block (every channel of a
    reduction block in one block, k-major): the full model weighs the shorter drain against
    the extra steps."""
    unit = math.lcm(target.array.cols, max(1, target.dma.burst_bytes // p.es))
    if t.order != "m_outer" or p.weights_n_major or min(t.tn, p.n) <= unit:
        return []
    if not (t.wide_weights or t.tn >= p.n):
        return []
    return [replace(t, tail_cols=c, wide_weights=True) for c in (unit, 2 * unit) if c < min(t.tn, p.n)]


def head_variants(target: Target, p: ArrayProblem, t: ArrayTiling) -> list[ArrayTiling]:
    """``t`` with a short first row tile (``head_rows``: the fewest rows whose pixels still fill
    the array's rows, so its weight loads stay hidden): the array starts once those rows' input
    is in, not a whole tile's."""
    rows = -(-target.array.rows // t.tw)
    if t.unfold or rows >= min(t.th, p.y.out):
        return []
    return [replace(t, head_rows=rows)]


def _relative(addrs: tuple[int, ...]) -> tuple[int, ...]:
    base = min(addrs, default=0)
    return tuple(a - base for a in addrs)


def _normalized(p: ArrayProblem) -> ArrayProblem:
    """``p`` with its addresses relative to each tensor's first batch: equal layers at other
    addresses (repeated blocks of a network) share one choice."""
    ops = tuple(None if o is None else replace(o, addrs=_relative(o.addrs)) for o in p.operands)
    epilogue = tuple(replace(e, operand=None, scalar=e.scalar if e.operand is None else 0.0) for e in p.epilogue)
    quant = p.quant
    if quant is not None:
        quant = replace(quant, bias_addrs=_relative(quant.bias_addrs), records_addrs=_relative(quant.records_addrs))
    return replace(p, name="", x_addrs=_relative(p.x_addrs), w_addrs=_relative(p.w_addrs),
                   out_addrs=_relative(p.out_addrs), operands=ops, epilogue=epilogue, quant=quant)


_MEMO: Memo[tuple, "Choice"] = Memo(4096, "tiling choices")


def choose(target: Target, p: ArrayProblem, walk: int = WALKED) -> Choice:
    """The cheapest tiling of ``p`` that fits ``target``; CompileError when none does.

    Every fitting candidate is ranked by the walk-free estimate; the ``walk`` best are costed
    by the full model and the cheapest of those wins.  Choices are memoised per target,
    (address-normalised) problem and the memories its tensors lie in; the prices behind them per problem and target at any
    scratchpad size (:class:`Prices`), so that the same layer planned in less of the
    scratchpad (the network-level memory plan tries several splits) costs only what is new."""
    key = (target, _normalized(p), _windows(target, p), walk)  # the memories the tensors lie in price their transfers
    hit = _MEMO.get(key)
    return _MEMO.put(key, _choose(target, p, walk)) if hit is None else hit


def single_buffer_variants(target: Target, p: ArrayProblem, t: ArrayTiling, fp: Footprint) -> list[ArrayTiling]:
    """``t`` with one input buffer, one weight buffer, or both, when it does not fit the
    scratchpad double buffered: a tile too large to double buffer still reads every operand
    once, where the smaller tiles that fit re-read the weights for every output tile (on a
    target whose weights stream from a slow memory, that is most of the layer's time).  A
    single buffer makes its loads wait for the compute that last read it; the full model
    weighs that against the smaller tiles' traffic."""
    size = target.scratchpad.size_bytes
    if fp.spad(t) <= size:
        return []
    out = []
    for x_slots, w_slots in ((1, t.w_slots), (t.x_slots, 1), (1, 1)):
        x_slots, w_slots = min(x_slots, t.x_slots), min(w_slots, t.w_slots)
        if (x_slots, w_slots) == (t.x_slots, t.w_slots) or t.x_slots > 2 or t.w_slots > 2:
            continue
        v = replace(t, x_slots=x_slots, w_slots=w_slots)
        if fp.spad(v) <= size and v not in out:
            out.append(v)
    return out


def _with_shorter(target: Target, p: ArrayProblem, sweep: list[ArrayTiling], known: "Prices"):
    """The sweep's tilings with their buffers (``_with_buffers``), each followed by its
    ``shorter_variant`` and its ``streamed_variant`` when it has them."""
    for t in sweep:
        fp = known.footprint(p, t)[0]
        resident = _with_buffers(target, p, t, fp)
        yield resident
        v = shorter_variant(target, p, resident)
        if v is not None:
            yield v
        v = streamed_variant(target, p, t, resident, fp)
        if v is not None:
            yield v


def streamed_variant(target: Target, p: ArrayProblem, t: ArrayTiling, resident: ArrayTiling,
                     fp: Footprint) -> ArrayTiling | None:
    """An int8 ``n_outer`` tiling ``t`` whose weights :func:`_with_buffers` made resident
    (``resident``: small int8 blocks fit whole), with its weights streamed instead: one
    output-channel block's reduction blocks at a time, in as many buffers.  Streaming may keep
    the array busier than the resident layout (ResNet-50's stage-3 1x1 expansions); one buffer
    per reduction block makes the buffers' rotation repeat with every channel block, so the
    loop nests roll it (a spare buffer gains no cycles there and breaks that period).  fp16
    keeps its candidates.  None when there is no such variant or it does not fit."""
    if p.dtype.is_float or t.order != "n_outer" or resident.w_slots <= t.w_slots:
        return None
    n_c = _count(p.c, t.tc)
    v = replace(t, w_slots=n_c)
    if n_c < 2 or v.w_slots <= t.w_slots or v == resident or fp.spad(v) > target.scratchpad.size_bytes:
        return None
    return v


def sweep_streamed(target: Target, p: ArrayProblem, t: ArrayTiling, fp: Footprint) -> ArrayTiling | None:
    """The sweep's int8 ``n_outer`` tiling ``t`` itself when it already holds one weight buffer
    per reduction block (two blocks, two buffers): ``t`` is then the streamed layout of
    :func:`streamed_variant`, which the main sweep offers only in the form :func:`_with_buffers`
    gives it (small int8 weights made resident, in blocks of every output channel).  ResNet-50's
    stage-2 expansions (128 -> 512 at 28x28 in 64-channel blocks) streamed take 2,500 cycles
    less in the network, in no more bytes.  None for any other tiling, when ``_with_buffers``
    leaves ``t`` unchanged (the main sweep has it) or when ``t`` does not fit."""
    if p.dtype.is_float or t.order != "n_outer" or t.wide_weights or _count(p.c, t.tc) != t.w_slots:
        return None
    if _with_buffers(target, p, t, fp) == t or fp.spad(t) > target.scratchpad.size_bytes:
        return None
    return t


def _extra(target: Target, p: ArrayProblem, main: list[ArrayTiling], known: "Prices"):
    """The second pool of candidates: the sweep with reduction blocks of part bursts
    (``part_burst_candidates``), the main sweep's tilings that fit only single buffered
    (``single_buffer_variants``), and its int8 tilings of two reduction blocks with their
    weights streamed (``sweep_streamed``: in the second pool, so that they do not displace the
    main sweep's walked candidates)."""
    yield from _with_shorter(target, p, known.sweep(part_burst_candidates, target, p), known)
    for t in main:
        yield from single_buffer_variants(target, p, t, known.footprint(p, t)[0])
    for t in known.sweep(candidates, target, p):
        v = sweep_streamed(target, p, t, known.footprint(p, t)[0])
        if v is not None:
            yield v


def clear_memo() -> None:
    """Forget every memoised choice and price, and the instruction times behind them (the
    search's part of :func:`npuc.memo.forget_all`)."""
    from npuc.schedule import cost

    _MEMO.clear()
    _PRICES.clear()
    cost.clear_memo()


class Prices:
    """What the search has computed of one problem on one target, whatever the scratchpad's
    size: the candidate sweeps, each tiling's footprint, text, walk-free and full estimates, and
    the cost model's memo of tile classes shared by all tilings (``npuc.schedule.cost._Costs``).
    None of these reads the scratchpad's size (only the fit check and the buffer counts of
    ``_with_buffers`` do), so a choice made with them is the one made without."""

    def __init__(self) -> None:
        self.sweeps: dict = {}
        self.footprints: dict[ArrayTiling, tuple[Footprint, int]] = {}
        self.texts: dict[ArrayTiling, str] = {}
        self.quick: dict[ArrayTiling, tuple[int, int]] = {}
        self.full: dict[ArrayTiling, Estimate] = {}
        self.shared: dict[tuple, object] = {}

    def sweep(self, fn, target: Target, p: ArrayProblem) -> list[ArrayTiling]:
        hit = self.sweeps.get(fn)
        if hit is None:
            hit = self.sweeps[fn] = [t for t in fn(target, p) if _expressible(t)]
        return hit

    def footprint(self, p: ArrayProblem, t: ArrayTiling) -> tuple[Footprint, int]:
        """(footprint, scratchpad bytes) of ``t``."""
        hit = self.footprints.get(t)
        if hit is None:
            fp = footprint(p, t)
            hit = self.footprints[t] = (fp, fp.spad(t))
        return hit

    def text(self, t: ArrayTiling) -> str:
        hit = self.texts.get(t)
        if hit is None:
            hit = self.texts[t] = str(t)
        return hit

    def quick_estimate(self, target: Target, p: ArrayProblem, t: ArrayTiling) -> tuple[int, int]:
        hit = self.quick.get(t)
        if hit is None:
            hit = self.quick[t] = quick_estimate(target, p, t, self.shared)
        return hit

    def estimate(self, target: Target, p: ArrayProblem, t: ArrayTiling) -> Estimate:
        hit = self.full.get(t)
        if hit is None:
            hit = self.full[t] = estimate(target, p, t, self.shared)
        return hit


# problems (a network has a few dozen distinct ones); forgotten when full
_PRICES: Memo[tuple, Prices] = Memo(128, "tiling prices")


def _windows(target: Target, p: ArrayProblem) -> tuple[int, ...]:
    """The memory each of the problem's tensors lies in (a transfer's time depends on it)."""
    addrs = [*p.x_addrs, *p.w_addrs, *p.out_addrs]
    for o in p.operands:
        if o is not None:
            addrs += o.addrs
    if p.quant is not None:
        addrs += [*p.quant.bias_addrs, *p.quant.records_addrs, *(a for a in p.quant.add_records if a is not None)]
    out = []
    for a in addrs:
        w = target.window_at(a)
        out.append(-1 if w is None else w.index)
    return tuple(out)


def prices(target: Target, p: ArrayProblem) -> Prices:
    """The :class:`Prices` of ``p`` on ``target`` (the same for every scratchpad size and for
    every layer equal to ``p`` but for where its tensors lie in their memories)."""
    timing = replace(target, scratchpad=replace(target.scratchpad, size_bytes=0))
    key = (timing, _normalized(p), _windows(target, p))
    hit = _PRICES.get(key)
    return _PRICES.put(key, Prices()) if hit is None else hit


def _choose(target: Target, p: ArrayProblem, walk: int) -> Choice:
    """Rank each pool of candidates (the main sweep; part bursts and single buffers; last the
    shrinking sweep, when neither fits) by the walk-free estimate, walk the best of each pool
    with the full model, and take the best walked (see the module docstring)."""
    known = prices(target, p)
    main = list(_with_shorter(target, p, known.sweep(candidates, target, p), known))
    seen: set[ArrayTiling] = set()
    smallest: list = [None]
    pools = [_ranked(target, p, main, known, seen, smallest), _ranked(target, p, _extra(target, p, main, known), known,
                                                                       seen, smallest)]
    if not any(pools):
        pools = [_ranked(target, p, _with_shorter(target, p, known.sweep(small_candidates, target, p), known), known,
                         seen, smallest)]
    if not any(pools):
        need = (f"{smallest[0][0]} bytes of scratchpad and {smallest[0][1]} bytes of accumulator"
                if smallest[0] else "an output tile")
        raise CompileError(
            f"kernel '{p.name}' does not fit target '{target.name}' at any tiling: the smallest "
            f"needs {need}, the target has {target.scratchpad.size_bytes} and "
            f"{target.accumulator.size_bytes}"
        )
    walked: dict[str, ArrayTiling] = {}
    for ranked in pools:
        walked.update(_to_walk(ranked, walk))
    tilings = list(walked.values())
    tilings += [v for t in tilings for v in tail_variants(target, p, t)]
    tilings += [v for t in tilings for v in head_variants(target, p, t)]
    full = [(known.estimate(target, p, t), known.footprint(p, t)[1], known.text(t), t) for t in tilings]
    full += _quant_once(target, p, full, known)
    fastest_e = min(full, key=lambda f: (f[0].cycles, f[1], f[2]))
    lean = min((f for f in full if f[0].cycles <= fastest_e[0].cycles * (1 + CYCLE_SLACK)),
               key=lambda f: (f[0].dram_bytes, f[0].cycles, f[1], f[2]))
    pick = lean if lean[0].dram_bytes <= (1 - LEAN_GAIN) * fastest_e[0].dram_bytes else fastest_e
    e, _, _, t = min((f for f in full if f[0].cycles <= pick[0].cycles * (1 + CODE_SLACK)
                      and f[0].dram_bytes <= pick[0].dram_bytes),
                     key=lambda f: (f[0].instructions, f[0].cycles, f[1], f[2]))
    return Choice(t, e, sum(len(r) for r in pools))


def _quant_once(target: Target, p: ArrayProblem, full: list[tuple], known: "Prices") -> list[tuple]:
    """int8: the costed tilings within ``CYCLE_SLACK`` of the fastest (those the choice can
    take) again with every channel's bias and records loaded once (``quant_once``), where that
    still fits: offered beside them, after the search, so that the larger buffer never displaces
    a tiling that needs the room."""
    if p.quant is None or not full:
        return []
    fastest = min(f[0].cycles for f in full)
    out = []
    for e, _, _, t in full:
        v = replace(t, quant_once=True)
        if t.quant_once or e.cycles > fastest * (1 + CYCLE_SLACK):
            continue
        fp, spad = known.footprint(p, v)
        if spad <= target.scratchpad.size_bytes and fp.acc <= target.accumulator.size_bytes:
            out.append((known.estimate(target, p, v), spad, known.text(v), v))
    return out


def _ranked(target: Target, p: ArrayProblem, tilings, known: "Prices", seen: set, smallest: list) -> list[tuple]:
    """(quick cycles, quick DRAM cycles, scratchpad bytes, text, tiling) of each new tiling that
    fits; ``smallest`` keeps the least (scratchpad, accumulator) bytes seen, for the error."""
    spad_size, acc_size = target.scratchpad.size_bytes, target.accumulator.size_bytes
    ranked: list[tuple] = []
    for t in tilings:
        if not _expressible(t) or t in seen:
            continue
        seen.add(t)
        fp, spad = known.footprint(p, t)
        if smallest[0] is None or (spad, fp.acc) < smallest[0]:
            smallest[0] = (spad, fp.acc)
        if spad > spad_size or fp.acc > acc_size:
            continue
        ranked.append((*known.quick_estimate(target, p, t), spad, known.text(t), t))
    return ranked


def _to_walk(ranked: list[tuple], walk: int) -> dict[str, ArrayTiling]:
    """The ``walk`` fastest by the walk-free estimate and the ``walk`` leanest among the nearly
    fastest, by text."""
    if not ranked:
        return {}
    fastest = min(r[0] for r in ranked)
    by_cycles = sorted(ranked, key=lambda r: (r[0], r[1], r[2], r[3]))[:walk]
    lean = sorted((r for r in ranked if r[0] <= fastest * (1 + CYCLE_SLACK)), key=lambda r: (r[1], r[0], r[2], r[3]))[:walk]
    return {r[3]: r[4] for r in by_cycles + lean}
