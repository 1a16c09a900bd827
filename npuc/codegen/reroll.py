"""Rerolling: runs of instructions that repeat with constant field strides become LOOPs.

Kernels emit their instructions one tile at a time, and the emitter derives the dependency
tokens of that unrolled stream.  In steady state a kernel's tiles differ only by addresses that
advance by a constant stride, with the same tokens: such a run is exactly a ``LOOP`` (see
:mod:`npuc.isa.loops`), and this pass writes it as one.  A run qualifies when every
repetition of the body has the same mnemonics, dependency flags and labels (a loop never spans
two layers), differs from the one before only in integer fields, by the same amounts each time,
in fields that fit the LOOP's :data:`~npuc.isa.loops.SLOTS` stride slots.  Passes repeat on their own output, so loops
nest (rows inside channel blocks inside a layer).

The result expands to the very instruction stream the emitter produced (tested), so
correctness, timing and the race detector's view are unchanged: only the encoded program
shrinks.
"""

from __future__ import annotations

from typing import Sequence

from npuc.isa.instr import Instr
from npuc.isa.loops import MAX_BODY, Slot, group, loop_instr

PASSES = 3
CANDIDATES = 2  # periods tried at each position (the next occurrences of the same unit)
WINDOW = 96  # units ahead in which a period's start may recur
MAX_MOVES = 12  # differing fields between two repetitions worth grouping into slots


def reroll(instrs: Sequence[Instr], labels: Sequence[str]) -> tuple[list[Instr], list[str]]:
    """The program with every worthwhile periodic run written as a LOOP, and its labels.

    ``instrs`` ends with END (which is never part of a loop); ``labels`` has one label per
    instruction (the debug map)."""
    out, labs = list(instrs), list(labels)
    for _ in range(PASSES):
        new, new_labs = _pass(out, labs)
        if len(new) == len(out):
            break
        out, labs = new, new_labs
    return out, labs


# ------------------------------------------------------------------------------ one pass


class _Units:
    """The top-level units of a stream: plain instructions, and LOOPs with their whole body."""

    def __init__(self, instrs: list[Instr], labels: list[str]) -> None:
        self.instrs, self.labels = instrs, labels
        self.starts: list[int] = []
        i = 0
        while i < len(instrs):
            self.starts.append(i)
            i += 1 + (instrs[i].args.body if instrs[i].op == "LOOP" else 0)
        self.starts.append(len(instrs))
        keys: dict[tuple, int] = {}
        self.sig = [keys.setdefault(self._key(u), len(keys)) for u in range(len(self))]

    def __len__(self) -> int:
        return len(self.starts) - 1

    def span(self, u: int, n: int) -> tuple[int, int]:
        return self.starts[u], self.starts[u + n]

    def _key(self, u: int) -> tuple:
        """What two repetitions must share: mnemonics, flags, every non-integer field (and a
        LOOP's every field), the label."""
        lo, hi = self.starts[u], self.starts[u + 1]
        first = self.instrs[lo]
        shape = tuple((i.op, i.deps, i.args if i.op == "LOOP" else _fixed(i)) for i in self.instrs[lo:hi])
        return shape, self.labels[lo], first.op == "END"


def _integer_fields(ins: Instr, _cache: dict = {}) -> frozenset[int]:
    hit = _cache.get(ins.op)
    if hit is None:
        hit = _cache[ins.op] = frozenset(k for k, f in enumerate(ins.defn.fields) if f.kind in ("uint", "sint"))
    return hit


def _fixed(ins: Instr) -> tuple:
    """The values of the fields a stride cannot move."""
    ints = _integer_fields(ins)
    return tuple(v for k, v in enumerate(ins.args) if k not in ints)


def _delta(a: Sequence[Instr], b: Sequence[Instr]) -> tuple[tuple[int, int, int], ...] | None:
    """The (offset, field, b - a) of every field where body ``b`` differs from body ``a``; None
    when they differ otherwise (a LOOP, a non-integer field) or in too many fields."""
    out = []
    for j, (x, y) in enumerate(zip(a, b)):
        if x.args == y.args:
            continue
        if x.op == "LOOP":
            return None
        for f, (u, v) in enumerate(zip(x.args, y.args)):
            if u != v:  # an integer field: the signatures hold the others equal
                out.append((j, f, v - u))
                if len(out) > MAX_MOVES:
                    return None
    return tuple(out)


def _run(units: _Units, u: int, period: int) -> tuple[int, tuple[Slot, ...]] | None:
    """(repetitions, stride slots) of the run of ``period`` units starting at unit ``u``."""
    sig = units.sig
    n = len(units)
    if u + 2 * period > n or sig[u:u + period] != sig[u + period:u + 2 * period]:
        return None
    lo, mid = units.span(u, period)
    body = mid - lo
    if body > MAX_BODY:
        return None
    instrs = units.instrs
    strides = _delta(instrs[lo:mid], instrs[mid:mid + body])
    if strides is None:
        return None
    used = group(strides)
    if used is None:
        return None
    count = 2
    while u + (count + 1) * period <= n:
        a = units.starts[u + (count - 1) * period]
        b = units.starts[u + count * period]
        if sig[u + count * period:u + (count + 1) * period] != sig[u:u + period]:
            break
        if _delta(instrs[a:b], instrs[b:b + body]) != strides:
            break
        count += 1
    return count, used


def _pass(instrs: list[Instr], labels: list[str]) -> tuple[list[Instr], list[str]]:
    units = _Units(instrs, labels)
    sig = units.sig
    n = len(units)
    # the next unit with the same signature, for candidate periods
    nxt = [n] * n
    last: dict[int, int] = {}
    for u in range(n - 1, -1, -1):
        nxt[u] = last.get(sig[u], n)
        last[sig[u]] = u
    out: list[Instr] = []
    out_labels: list[str] = []
    u = 0
    while u < n:
        best = None
        v, tried = nxt[u], 0
        while v < n and v - u <= WINDOW and tried < CANDIDATES:
            tried += 1
            found = _run(units, u, v - u)
            if found is not None:
                count, strides = found
                lo, hi = units.span(u, v - u)
                saving = (count - 1) * (hi - lo) - 1
                # the innermost period first: outer passes nest it into the larger ones
                if saving > 0 and (best is None or saving > 2 * best[0]):
                    best = (saving, v - u, count, strides)
            v = nxt[v]
        if best is None:
            lo, hi = units.span(u, 1)
            out += instrs[lo:hi]
            out_labels += labels[lo:hi]
            u += 1
            continue
        _, period, count, strides = best
        lo, hi = units.span(u, period)
        out.append(loop_instr(count, hi - lo, strides))
        out_labels.append(labels[lo])
        out += instrs[lo:hi]
        out_labels += labels[lo:hi]
        u += period * count
    return out, out_labels
