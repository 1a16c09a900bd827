"""Dependency tokens of a loop nest derived once per body, not once per iteration.

:meth:`npuc.codegen.emitter.Emitter.emit_loop` hands a loop nest here.  The first iterations are
issued exactly as :meth:`~npuc.codegen.emitter.Emitter.emit` would issue them (the conflict scans,
the vector clocks).  After each one the emitter's state is written *relative to the iteration*
(:func:`_state`): the vector clocks, each queue's last instruction and pending waits, and the
accesses a body queue may still have to order itself after, as program indices counted from the
next iteration's start (indices before the loop stay absolute).  When that relative state equals
the one ``T`` iterations earlier (``T`` a multiple of the nest's period), every later iteration
makes the decisions iteration ``k - T`` made, shifted by ``T`` bodies: the emitter's choices
depend on nothing else, provided

* every pair of body accesses that may ever conflict (same memory, one of them a write, address
  hulls over the whole loop that meet) moves by the same amount every ``T`` iterations, so their
  overlap depends only on the iteration distance (:func:`_invariant`); and
* no access before the loop that a body queue does not yet know to be complete meets the hull of
  that queue's accesses in the remaining iterations (:func:`_clear_before`).

The remaining iterations are then appended without scanning (:func:`_replicate`): each
instruction takes its template's wait flags, its template's links (signal flags on the shifted
producers), its template's clock shifted, and its regions' access entries computed from the
affine model of the body's regions (:class:`_Regions`).  The emitter's state after the loop is the
template's shifted, so what follows the loop is ordered exactly as before.  The program is the one
the iterations emitted one by one give, token for token (tests/codegen/test_loop_emission.py);
a nest whose state never settles within :data:`TRIES` iterations, or whose regions do not follow
the model, is issued exactly to its end.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import numpy as np

from npuc.isa.enums import Mem, Queue
from npuc.isa.instr import Instr
from npuc.isa.loops import slot_offset

if TYPE_CHECKING:
    from npuc.codegen.emitter import Emitter

TRIES = 24  # exact iterations after which a nest that has not settled is issued exactly to its end
SHORT = 10  # nests of fewer iterations are issued exactly (their state rarely settles before the end)
MULTIPLES = 4  # state periods tried: 1..MULTIPLES times the nest's period
MAX_LIVE = 4096  # live accesses beyond which the relative state is not worth comparing
_BIG = 1 << 62
_QUEUES = tuple(Queue)


def shifted(ins: Instr, moves: list[tuple[int, int, int, int]], k: int) -> Instr:
    """``ins`` in iteration ``k`` of its loop: each (field index, stride, period, phase) moved."""
    return Instr(ins.op, _moved_args(ins.args, moves, k))


def _moved_args(args: Any, moves: list[tuple[int, int, int, int]], k: int) -> Any:
    """The fields ``args`` in iteration ``k`` (``moves`` as for :func:`shifted`)."""
    vals = list(args)
    for f, stride, period, phase in moves:
        vals[f] += slot_offset(k, stride, period, phase)
    return args._make(vals)


class _Regions:
    """The body's memory accesses as affine functions of the iteration.

    Region ``r`` of body step ``b`` spans ``[lo, hi)`` with ``lo(k) = lo[k mod P] + (k div P) * dlo``
    (``hi`` alike): fields that move by a stride or come back after a period give exactly that
    when an access's bounds are affine in its fields, which :meth:`fit` checks on the first two
    periods and the last iteration."""

    def __init__(self, body: list[Instr], moves: list, n: int, period: int) -> None:
        self.n, self.period = n, period
        self.ok = n > 2 * period
        if not self.ok:
            return
        iters = {k: [d.regions(i.args) for d, i in ((s.defn, s) for s in (shifted(ins, mv, k) if mv else ins
                                                                         for ins, mv in zip(body, moves)))]
                 for k in (*range(2 * period), n - 1)}
        first = iters[0]
        # (step, mem, writes) per region, in the emitter's order
        self.kind = [(b, r.mem, r.writes) for b, regs in enumerate(first) for r in regs]
        bounds = {k: [(r.addr, r.end) for regs in iters[k] for r in regs] for k in iters}
        if any([(b, r.mem, r.writes) for b, regs in enumerate(iters[k]) for r in regs] != self.kind for k in iters):
            self.ok = False
            return
        P = period
        self.lo = [[bounds[ph][r][0] for r in range(len(self.kind))] for ph in range(P)]
        self.hi = [[bounds[ph][r][1] for r in range(len(self.kind))] for ph in range(P)]
        self.dlo = [bounds[P][r][0] - bounds[0][r][0] for r in range(len(self.kind))]
        self.dhi = [bounds[P][r][1] - bounds[0][r][1] for r in range(len(self.kind))]
        for r in range(len(self.kind)):
            for ph in range(P):
                if (bounds[P + ph][r][0] - bounds[ph][r][0] != self.dlo[r]
                        or bounds[P + ph][r][1] - bounds[ph][r][1] != self.dhi[r]):
                    self.ok = False
                    return
            if bounds[n - 1][r] != self.at(r, n - 1):
                self.ok = False
                return
        self.by_step: list[list[int]] = [[] for _ in body]
        for r, (b, _, _) in enumerate(self.kind):
            self.by_step[b].append(r)

    def at(self, r: int, k: int) -> tuple[int, int]:
        ph, q = k % self.period, k // self.period
        return self.lo[ph][r] + q * self.dlo[r], self.hi[ph][r] + q * self.dhi[r]

    def hulls(self, first: int, last: int) -> tuple[list[int], list[int]]:
        """The smallest interval holding each region in iterations ``first..last``, as (lows,
        highs): its bounds in the first and the last period of them (an affine function of the
        iteration per phase is extreme at its first or its last)."""
        if not hasattr(self, "_arrays"):
            self._arrays = tuple(np.array(x, np.int64) for x in (self.lo, self.hi, self.dlo, self.dhi))
        lo, hi, dlo, dhi = self._arrays
        P = self.period
        ks = sorted({*range(first, min(last, first + P - 1) + 1), *range(max(first, last - P + 1), last + 1)})
        ph = np.array([k % P for k in ks])
        q = np.array([k // P for k in ks], np.int64)[:, None]
        return (lo[ph] + q * dlo).min(0).tolist(), (hi[ph] + q * dhi).max(0).tolist()


def _meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


class _Pairs:
    """Which body accesses may conflict, and whether their overlaps repeat with the iteration.

    ``against[(q, p, mem, writes)]`` lists, for each region ``rb`` of a queue-``p`` step kept in
    that access table (``writes``: the table of writes), the regions of queue ``q`` that may meet
    it (address hulls over the whole loop that meet, one of the two a write)."""

    def __init__(self, regs: _Regions, queues: list[int]) -> None:
        n = regs.n
        self.against: dict[tuple[int, int, Mem, bool], dict[int, list[int]]] = {}
        self.invariant = all(regs.dlo[r] == regs.dhi[r] for r in range(len(regs.kind)))
        by_mem: dict[Mem, list[tuple[int, int, int]]] = {}
        lows, highs = regs.hulls(0, n - 1)
        for r, (_, mem, _) in enumerate(regs.kind):
            by_mem.setdefault(mem, []).append((lows[r], highs[r], r))
        queue = [queues[b] for b, _, _ in regs.kind]
        written = [w for _, _, w in regs.kind]
        dlo, against = regs.dlo, self.against
        for mem, spans in by_mem.items():  # a sweep over each memory's hulls, in address order
            spans.sort()
            active: list[tuple[int, int]] = []  # (hull end, region)
            for lo, hi, r in spans:
                active = [(e, x) for e, x in active if e > lo]
                q, w = queue[r], written[r]
                for _, x in active:
                    # regions of two queues, one of them written, may meet: each noted in the
                    # other's table (r against x's, then x against r's)
                    if queue[x] == q or not (w or written[x]):
                        continue
                    if dlo[r] != dlo[x]:
                        self.invariant = False
                    against.setdefault((q, queue[x], mem, written[x]), {}).setdefault(x, []).append(r)
                    against.setdefault((queue[x], q, mem, w), {}).setdefault(r, []).append(x)
                active.append((hi, r))


def _iterations(regs: _Regions, r: int, first: int, last: int, h: tuple[int, int]) -> list[int]:
    """The iterations in ``first..last`` whose region ``r`` meets ``h``."""
    P, d = regs.period, regs.dlo[r]
    if first > last:
        return []
    out = []
    for ph in range(P):
        lo, hi = regs.lo[ph][r], regs.hi[ph][r]
        q0 = max(0, -((ph - first) // P))  # the first q with ph + q*P >= first
        q1 = (last - ph) // P
        if d == 0:
            if lo < h[1] and h[0] < hi:
                # the newest entry of a phase shadows the older ones (the same bytes, a later index)
                out.append(ph + q1 * P) if q1 >= q0 else None
            continue
        if d > 0:
            qa, qb = (h[0] - hi) // d + 1, (h[1] - lo - 1) // d
        else:
            qa, qb = (lo - h[1]) // -d + 1, (hi - h[0] - 1) // -d
        out.extend(ph + q * P for q in range(max(q0, qa), min(q1, qb) + 1))
    return sorted(out)


def _state(em: "Emitter", start: int, k: int, regs: _Regions, pairs: _Pairs, nsteps: int):
    """The emitter's state after iteration ``k``, relative to the next iteration's start, or
    None when too many accesses are live to compare: the vector clocks, last instructions and
    pending waits, and per access table the body accesses a later iteration may still conflict
    with (not known complete, not shadowed by a newer access to the same bytes, meeting the hull
    of the remaining iterations' accesses), with their clocks."""
    base = start + (k + 1) * nsteps
    n = regs.n

    def norm(v: int) -> int:
        return v - base if v >= start else v - _BIG

    known = tuple(norm(v) for row in em._known for v in row)
    last = tuple(norm(v) for v in em._last)
    pending = tuple(em._pending)
    live: list[Any] = []
    total = 0
    lows, highs = regs.hulls(k + 1, n - 1)  # every region's over the remaining iterations
    for (q, p, mem, writes), against in pairs.against.items():
        floor = em._known[q][p]
        for rb, ras in against.items():
            b = regs.kind[rb][0]
            h = (min(lows[ra] for ra in ras), max(highs[ra] for ra in ras))
            first = max(0, (floor - start - b) // nsteps + 1)
            its = _iterations(regs, rb, first, k, h)
            total += len(its)
            if total > MAX_LIVE:
                return None
            live.append((rb, tuple(i - k - 1 for i in its),
                         tuple(tuple(norm(v) for v in em._clock_at[start + i * nsteps + b]) for i in its)))
    return known, last, pending, tuple(live)


def _clear_before(em: "Emitter", start: int, regs: _Regions, queues: list[int], first: int) -> bool:
    """Whether no access before the loop that a body queue does not know complete meets that
    queue's accesses in iterations ``first..n-1``."""
    lows, highs = regs.hulls(first, regs.n - 1)
    for r, (b, mem, writes) in enumerate(regs.kind):
        q = queues[b]
        h = lows[r], highs[r]
        for p in range(len(_QUEUES)):
            if p == q:
                continue
            floor = em._known[q][p]
            if floor >= start - 1:
                continue
            for table in ((em._writes, em._reads) if writes else (em._writes,)):
                lst = table[mem][p]
                hi = bisect.bisect_left(lst, (start, -_BIG, -_BIG))
                for k in range(hi - 1, -1, -1):
                    j, lo_, hi_ = lst[k]
                    if j <= floor:
                        break
                    if lo_ < h[1] and h[0] < hi_:
                        return False
    return True


def issue_loop(em: "Emitter", body: list[Instr], moves: list, n: int, period: int) -> None:
    """Append ``n`` iterations of ``body`` (fields moved by ``moves``) to ``em`` with the tokens
    :meth:`Emitter.emit` would give them, scanning only until the emitter's state repeats."""
    start = len(em._ops)
    nsteps = len(body)
    queues = [int(i.defn.queue) for i in body]
    regs = _Regions(body, moves, n, period) if n >= SHORT else None
    pairs = _Pairs(regs, queues) if regs is not None and regs.ok else None
    trying = pairs is not None and pairs.invariant
    snaps: list[Any] = []  # per exact iteration: (relative state, known, last, pending)
    links: list[list[int]] = []  # per exact instruction: the producers it was linked after
    modelled = regs is not None and regs.ok
    kinds = [[regs.kind[r][1:] for r in regs.by_step[b]] for b in range(nsteps)] if modelled else []
    for k in range(n):
        if modelled:  # the accesses from the region model, which holds in every iteration
            for b, (ins, mv) in enumerate(zip(body, moves)):
                accesses = [(mem, writes, *regs.at(r, k)) for r, (mem, writes) in zip(regs.by_step[b], kinds[b])]
                em._place(ins.op, _moved_args(ins.args, mv, k) if mv else ins.args, queues[b], accesses)
                links.append(em._made)
        else:
            for ins, mv in zip(body, moves):
                em._issue(shifted(ins, mv, k) if mv else ins)
                links.append(em._made)
        if not trying:
            continue
        if k >= TRIES or k == n - 1:
            trying = False
            continue
        st = _state(em, start, k, regs, pairs, nsteps)
        if st is None:
            trying = False
            continue
        snaps.append((st, [list(r) for r in em._known], list(em._last), list(em._pending)))
        for m in range(1, MULTIPLES + 1):
            t = m * period
            if k - t < 0 or snaps[k - t][0] != st:
                continue
            template = links[(k + 1 - t) * nsteps:]
            if any(j < start for ls in template for j in ls) or not _clear_before(em, start, regs, queues, k + 1):
                break
            _replicate(em, body, moves, n, k, t, start, regs, queues, links, snaps)
            return


def _replicate(em: "Emitter", body, moves, n: int, k: int, t: int, start: int, regs: _Regions,
               queues: list[int], links: list[list[int]], snaps: list) -> None:
    """Append iterations ``k+1..n-1`` as copies of iterations ``k+1-t..k`` shifted (see the module
    docstring) and leave the emitter in the state the last of them gives.

    The copies' queues and wait flags repeat the template's; their clocks are left to
    :meth:`Emitter._clock_of` (derived from the template's when an instruction asks for one);
    their signal flags are set on the shifted producers of the template's links, and their
    accesses are appended to each access table from the region model."""
    nsteps = len(body)
    first = start + (k + 1) * nsteps  # the first copied instruction
    template = first - t * nsteps
    block = t * nsteps
    count = (n - 1 - k) * nsteps
    whole, part = divmod(count, block)
    for lst in (em._queues, em._waits):
        tpl = lst[template:first]
        lst.extend(tpl * whole + tpl[:part])
    em._signals.extend([0] * count)
    em._sources.extend([em._label] * count)
    em._clock_at.extend([None] * count)
    em._copies.append((first, template, block, start))
    # the producers of each template instruction, relative to the template's start
    signals = em._signals
    produced = [(c - template, [j - template for j in links[c - start]], 1 << queues[(c - start) % nsteps])
                for c in range(template, first) if links[c - start]]
    for base in range(first, first + count, block):
        for c, js, bit in produced:
            if c + base >= first + count:
                break
            for j in js:
                signals[base + j] |= bit
    # the instructions themselves: a step that does not move keeps its template's fields
    steps = [(ins.op, ins.args, mv) for ins, mv in zip(body, moves)]
    em._ops.extend((op, _moved_args(args, mv, i)) if mv else (op, args)
                   for i in range(k + 1, n) for op, args, mv in steps)
    # the accesses, table by table (each table's entries in program order)
    by_table: dict[int, tuple[list, list[tuple[int, int]]]] = {}
    for r, (b, mem, writes) in enumerate(regs.kind):
        lst = (em._writes if writes else em._reads)[mem][queues[b]]
        by_table.setdefault(id(lst), (lst, []))[1].append((r, b))
    P = regs.period
    for lst, rs in by_table.values():
        lst.extend((start + i * nsteps + b,
                    regs.lo[i % P][r] + i // P * regs.dlo[r], regs.hi[i % P][r] + i // P * regs.dhi[r])
                   for i in range(k + 1, n) for r, b in rs)
    j = n - 1 - t * ((n - 1 - k - 1) // t + 1) if n - 1 > k else k
    _, known, last, pending = snaps[j]
    shift = (n - 1 - j) * nsteps
    for q, row in enumerate(known):
        em._known[q][:] = [v + shift if v >= start else v for v in row]
    em._last[:] = [v + shift if v >= start else v for v in last]
    em._pending[:] = pending
    em.replicated += count
    em._prune()


__all__ = ["issue_loop", "shifted"]
