"""Copy elision in a fused chain's steps: members read and write the chain's buffers in place.

Inside a fused chain (``npuc.codegen.kernels.fused_chain``) a member's transfers from or to an
intermediate, a staged input or a resident constant become scratchpad-to-scratchpad ``VUN copy``
steps.  Where such a copy moves one contiguous block to another (the same bytes, translated), it
need not run at all:

* **a load** (chain buffer -> the member's own buffer): the steps after it that read the block
  read the chain buffer instead, up to the point where the member's buffer has been overwritten
  (or the program ends), provided the chain buffer is not written meanwhile;
* **a store** (the member's tile -> chain buffer): the steps before it that produce the tile,
  back to the one that writes all of it, write the chain buffer instead, provided nothing else
  touches the chain buffer meanwhile and nothing reads the tile afterwards.

Every rewrite moves only the address fields that point into the block, by the same offset; a step
that reaches partly outside the block, or one whose fields cannot be told apart, stops the
elision of that copy, which then stays.  The data every step reads is the same as before, so the
chain's results are unchanged (int8 bit for bit); the emitter orders the new accesses by their
regions as for any step.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.isa.enums import Mem
from npuc.isa.instr import build_args, get_def
from npuc.kir.tile_program import LOCAL_ADDRESS_FIELDS, Step
from npuc.memo import Memo

SCAN = 4000  # steps looked at past (or before) a copy before giving its elision up


RUNS = 512  # a strided write is tracked byte-exactly when it is at most this many contiguous runs


@dataclass(frozen=True)
class _Access:
    lo: int
    hi: int
    reads: bool
    writes: bool
    dense: bool
    runs: tuple[tuple[int, int], ...] | None  # the contiguous byte runs written (None: too many)


def _runs(r) -> tuple[tuple[int, int], ...] | None:
    """The contiguous byte runs a region covers, or None when there are more than ``RUNS``."""
    dims = [(n, s) for n, s in zip(r.shape, r.strides) if n > 1]
    run = r.itemsize
    while dims and dims[-1][1] == run:
        run *= dims.pop()[0]
    count = 1
    for n, _ in dims:
        count *= n
    if count > RUNS:
        return None
    starts = [r.addr]
    for n, st in dims:
        starts = [a + i * st for a in starts for i in range(n)]
    return tuple(sorted((a, a + run) for a in starts))


def _dense(r) -> bool:
    size = r.itemsize
    for n, s in reversed(tuple(zip(r.shape, r.strides))):
        if n == 1:
            continue
        if s != size:
            return False
        size *= n
    return True


_SEEN: Memo[Step, tuple[_Access, ...]] = Memo(1 << 16, "chain-copy accesses")


def _spad_accesses(s: Step) -> tuple[_Access, ...]:
    if s is _NOTHING:
        return ()
    out = _SEEN.get(s)
    if out is None:
        d = get_def(s.op)
        out = _SEEN.put(s, tuple(_Access(r.addr, r.end, r.reads, r.writes, _dense(r),
                                         _runs(r) if r.writes and not _dense(r) else None)
                                 for r in d.regions(build_args(d, s.kwargs())) if r.mem is Mem.spad))
    return out


def _block_copy(s: Step) -> tuple[int, int, int] | None:
    """(source, destination, bytes) of a VUN copy of one contiguous block, else None."""
    if s.op != "VUN" or s.kwargs().get("op") != "copy":
        return None
    f = s.kwargs()
    if any(getattr(f.get(k), "name", f.get(k)) == "acc" for k in ("dst_space", "src_space")):
        return None
    d = get_def(s.op)
    regions = d.regions(build_args(d, f))
    src = next(r for r in regions if r.reads)
    dst = next(r for r in regions if r.writes)
    if not (_dense(src) and _dense(dst)) or src.end - src.addr != dst.end - dst.addr:
        return None
    return src.addr, dst.addr, dst.end - dst.addr


def _regions(op: str, fields: dict):
    d = get_def(op)
    return d.regions(build_args(d, fields))


def _moved(s: Step, lo: int, hi: int, delta: int) -> Step | None:
    """``s`` with the address fields that place its scratchpad regions in [lo, hi) moved by
    ``delta``; None when a region of it reaches partly outside [lo, hi), or a field that would
    move also places a region elsewhere (another memory, or outside the block)."""
    f = s.kwargs()
    before = _regions(s.op, f)
    inside = [r for r in before if r.mem is Mem.spad and r.addr < hi and lo < r.end]
    if any(r.addr < lo or r.end > hi for r in inside):
        return None
    keys = []
    for k, v in s.fields:
        if k not in LOCAL_ADDRESS_FIELDS or not isinstance(v, int) or not lo <= v < hi:
            continue
        trial = _regions(s.op, {**f, k: v + delta})
        changed = [r for r, t in zip(before, trial) if (r.mem, r.addr) != (t.mem, t.addr)]
        if not changed:
            continue
        if any(r.mem is not Mem.spad or r.addr < lo or r.end > hi for r in changed):
            return None  # the field also places something that must stay (e.g. an accumulator tile)
        keys.append(k)
    out = {**f, **{k: f[k] + delta for k in keys}}
    after = _regions(s.op, out)
    for r, t in zip(before, after):
        want = r.addr + delta if r in inside else r.addr
        if (t.mem, t.addr, t.end - t.addr) != (r.mem, want, r.end - r.addr):
            return None
    return Step(s.op, tuple((k, out[k]) for k, _ in s.fields), s.tile)


def _minus(spans: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [p for x0, x1 in spans for p in ((x0, min(x1, lo)), (max(x0, hi), x1)) if p[0] < p[1]]


def _readers_until_dead(steps: "_Compact", start: int, lo: int, hi: int, keep: tuple[int, int] | None) -> list[int] | None:
    """The steps after ``start`` that read bytes of [lo, hi) still holding what ``start`` left
    there, up to where every byte has been overwritten (or the program ends).  None when that
    cannot be told (a read partly of such bytes, a read of bytes a strided write may or may not
    have hit, no end within ``SCAN`` steps), or when a step writes ``keep`` (the source a load's
    readers are moved to) before then."""
    live = [(lo, hi)]  # bytes still holding the copied data
    unsure: list[tuple[int, int]] = []  # bytes a strided write may have hit
    out = []
    for i in range(start + 1, min(len(steps), start + SCAN)):
        acc = steps.accesses(i)
        if keep and any(a.writes and a.lo < keep[1] and keep[0] < a.hi for a in acc):
            return None
        reads = [a for a in acc if a.reads and a.lo < hi and lo < a.hi]
        if reads:
            if any(a.lo < u1 and u0 < a.hi for a in reads for u0, u1 in unsure):
                return None
            hits = [a for a in reads if any(a.lo < x1 and x0 < a.hi for x0, x1 in live)]
            if any(not any(x0 <= a.lo and a.hi <= x1 for x0, x1 in live) for a in hits):
                return None
            if hits and any(a.writes and a.lo < hi and lo < a.hi for a in acc):
                return None  # it reads the copied bytes and writes the block: its fields cannot be told apart
            if hits:
                out.append(i)
        for a in acc:
            if a.writes and a.lo < hi and lo < a.hi:
                if a.dense:
                    unsure = _minus(unsure, a.lo, a.hi)
                    live = _minus(live, a.lo, a.hi)
                elif a.runs is not None:
                    for r0, r1 in a.runs:
                        unsure = _minus(unsure, r0, r1)
                        live = _minus(live, r0, r1)
                elif any(a.lo < x1 and x0 < a.hi for x0, x1 in live):
                    unsure.append((max(lo, a.lo), min(hi, a.hi)))
                    live = _minus(live, a.lo, a.hi)
        if not live and not unsure:
            return out
    return out if start + SCAN >= len(steps) else None


def _elide_load(steps: "_Compact", c: int, src: int, dst: int, n: int) -> bool:
    readers = _readers_until_dead(steps, c, dst, dst + n, (src, src + n))
    if readers is None:
        return False
    return _move_and_drop(steps, c, readers, dst, dst + n, src - dst)


def _elide_store(steps: "_Compact", c: int, src: int, dst: int, n: int) -> bool:
    if _readers_until_dead(steps, c, src, src + n, None) != []:
        return False  # the tile is read again: it must stay where it is
    producers = []
    for i in range(c - 1, max(-1, c - SCAN), -1):
        acc = steps.accesses(i)
        if any(a.lo < dst + n and dst < a.hi for a in acc):
            return False
        touching = [a for a in acc if a.lo < src + n and src < a.hi]
        if not touching:
            continue
        producers.append(i)
        if any(a.writes and a.dense and a.lo <= src and src + n <= a.hi for a in touching) and not any(a.reads for a in touching):
            break
    else:
        return False
    return _move_and_drop(steps, c, producers, src, src + n, dst - src)


def _move_and_drop(steps: "_Compact", c: int, moving: list[int], lo: int, hi: int, delta: int) -> bool:
    """Move the accesses of steps ``moving`` within [lo, hi) by ``delta`` and drop the copy at
    ``c``; nothing changes (False) when any of those steps cannot be moved."""
    moved = [_moved(steps[i], lo, hi, delta) for i in moving]
    if any(m is None for m in moved):
        return False
    for i, m in zip(moving, moved):
        steps[i] = m
    steps[c] = None
    return True


def elide_copies(steps: tuple[Step, ...], chain_lo: int) -> tuple[Step, ...]:
    """``steps`` with the block copies between the chain's buffers (at and above scratchpad
    address ``chain_lo``) and the members' buffers (below it) elided where the module docstring
    allows: stores first (a member writes the chain buffer), then loads (a member reads it)."""
    work: list[Step | None] = list(steps)
    compact = _Compact(work)
    for store in (True, False):
        for c in range(len(work)):
            bc = compact.block_copy(c)
            if bc is None:
                continue
            src, dst, n = bc
            if store and src < chain_lo <= dst:
                _elide_store(compact, c, src, dst, n)
            elif not store and dst < chain_lo <= src:
                _elide_load(compact, c, src, dst, n)
    return tuple(s for s in work if s is not None)


class _Compact(list):
    """The working list, elided steps (None) read as steps that touch nothing.

    It also holds what :func:`_spad_accesses` and :func:`_block_copy` say of each step, worked
    out on first use and forgotten when the step is rewritten: the scans past (and before) every
    copy read the same steps many times over, each time hashing the step to look it up in the
    process-wide memo, and both passes over the copies decoded every step again; that was a
    good part of the elision's time.  Both are functions of the step alone, so the elision is
    the same."""

    def __init__(self, work: list) -> None:
        self.work = work
        self._accesses: list[tuple[_Access, ...] | None] = [None] * len(work)
        self._copies: list[tuple[tuple[int, int, int] | None] | None] = [None] * len(work)

    def __len__(self) -> int:
        return len(self.work)

    def __getitem__(self, i):
        s = self.work[i]
        return _NOTHING if s is None else s

    def __setitem__(self, i, v) -> None:
        self.work[i] = v
        self._accesses[i] = None
        self._copies[i] = None

    def accesses(self, i: int) -> tuple[_Access, ...]:
        """:func:`_spad_accesses` of step ``i`` (none for an elided step)."""
        got = self._accesses[i]
        if got is None:
            got = self._accesses[i] = _spad_accesses(self[i])
        return got

    def block_copy(self, i: int) -> tuple[int, int, int] | None:
        """:func:`_block_copy` of step ``i`` (None for an elided step)."""
        got = self._copies[i]
        if got is None:
            s = self.work[i]
            got = self._copies[i] = (_block_copy(s) if s is not None else None,)
        return got[0]


_NOTHING = Step("NOP", (), -1)
