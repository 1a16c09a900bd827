"""Loop nests whose first and last iterations differ in their dependency flags, as one LOOP.

A software-pipelined nest issues the same instructions every iteration, but the first iteration
waits for nothing the loop itself produced and the last signals no successor: their flags
differ from the middle iterations' in a few instructions.  Without help such a nest is written
as a LOOP over the middle iterations with the first and the last beside it in full (each
rerolled on its own), which is most of the code of a nest of two to six iterations.  A LOOP's
*flag exceptions* (:mod:`npuc.isa.loops`: body instruction ``j`` has other flags in iteration
``k``) say the same in a few bytes: :func:`edge_run` finds such a run among a nest's iterations
and writes its body with the middle iterations' flags and the edges' flags as exceptions.

The run is found exactly as :func:`npuc.codegen.reroll.roll` finds a nest's runs
(:func:`~npuc.codegen.reroll._nest_run`, :func:`~npuc.codegen.reroll._known_run`), on a view of
the instructions whose edge iterations carry the middle flags, so every field still follows the
same strides; :func:`npuc.codegen.reroll.check_loops` then checks every iteration's flags, the
exceptions' included, against the emitted instructions.  Besides the edges, a few later
iterations may take exceptions too (a token every so often) while the LOOP's twelve last.

A nest whose flags repeat only every two to four iterations (:func:`regrouped`) is cut into the
stretch that repeats, a nest of bodies of that many iterations, and what precedes and follows.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from npuc.isa.instr import Instr
from npuc.isa.loops import EXCEPTIONS, MAX_BODY, expand

CUT = "\x00"  # joins a label and the flags an instruction takes at the edges, while its body is rerolled
# What exceptions cost and save, in bytes, to decide whether they pay: a LOOP with exceptions writes
# its mask up to them (past every slot and phase field), and each exception a field of its own; an
# iteration left beside the loop costs about this much per encoded instruction (rerolled on its own)
MASK_BYTES = 15
EXCEPTION_BYTES = 4
PEELED_BYTES = 5
FILL = 8  # first iterations that may differ from the steady state (a pipeline filling its buffer sets)
FLAT_FROM = 2  # a body rerolled to less than 1/FLAT_FROM of its instructions is not written flat for its exceptions


class _Patched:
    """A read-only view of a sequence with some items replaced (``patch``: {index: item})."""

    def __init__(self, base: Sequence[Any], patch: dict[int, Any]) -> None:
        self.base, self.patch = base, patch

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self.base))
            got = list(self.base[i])
            if self.patch:
                for k in range(lo, hi, step):
                    p = self.patch.get(k)
                    if p is not None:
                        got[(k - lo) // step] = p
            return got
        p = self.patch.get(i)
        return self.base[i] if p is None else p


def edge_run(instrs: Sequence[Instr], labels: Sequence[str], lo: int, body: int, left: int, moves, v: int,
             touched: Sequence[int], run_at: Callable[[int], Any]):
    """(repetitions, encoded body, its labels, slots, flag exceptions) of the run of a nest's
    iterations from its iteration ``v`` (at ``lo``, ``left`` of them) whose first iterations (up
    to :data:`FILL`: a pipeline fills one buffer set after the other), its last iteration, or
    both differ from the middle ones in their flags only, when it covers more iterations than
    the runs :func:`npuc.codegen.reroll.roll` finds without exceptions (``run_at``) and saves
    bytes, or None."""
    from npuc.codegen.reroll import LOOKAHEAD

    if left < 2 or body > MAX_BODY:
        return None
    found = None
    for fill in range(1, min(FILL, left - 1) + 1):  # iterations before the steady one (the pipeline's depth)
        got = _with_edges(instrs, labels, lo, body, left, moves, v, touched, fill)
        if got is not None and (found is None or got[0] > found[0]):
            found = got
            if found[0] == left:
                break  # covers every iteration left: a deeper fill cannot cover more
    if found is None:
        return None
    count, model, edges, patch = found
    # the most of these iterations one LOOP without exceptions covers (from here, or a little later)
    plain = run_at(v)
    best = max([plain[0] if plain is not None else 1] +
               [min(r[0], count - k) for k in range(1, LOOKAHEAD + 2) if (r := run_at(v + k)) is not None])
    if not edges or count <= best:
        return None
    got = _encoded(_Patched(instrs, patch), labels, lo, body, count, model, edges)
    if got is None:
        return None
    saved = (count - best) * len(got[1]) * PEELED_BYTES - MASK_BYTES - EXCEPTION_BYTES * len(got[4])
    return got if saved > 0 else None


def _with_edges(instrs, labels, lo, body, left, moves, v, touched, fill: int):
    """(repetitions, moves, {iteration: {body offset: flags}}, patch) of the run from ``lo`` whose
    first ``fill`` iterations, and any later ones while :data:`~npuc.isa.loops.EXCEPTIONS` last
    (the last iteration, a token every so often), may differ in their flags from iteration
    ``fill`` (the steady state), or None."""
    from npuc.codegen.reroll import _fixed

    ref = instrs[lo + fill * body:lo + (fill + 1) * body]
    if any(i.op in ("LOOP", "END") for i in ref):
        return None
    edges: dict[int, dict[int, Any]] = {}
    patch: dict[int, Instr] = {}
    for k in range(fill):
        it = instrs[lo + k * body:lo + (k + 1) * body]
        if any(a.op != b.op or _fixed(a) != _fixed(b) for a, b in zip(it, ref)):
            return None
        diff = {j: it[j].deps for j in range(body) if it[j].deps != ref[j].deps}
        if diff:
            edges[k] = diff
            patch.update({lo + k * body + j: Instr(it[j].op, it[j].args, ref[j].deps) for j in diff})
    if sum(map(len, edges.values())) > EXCEPTIONS:
        return None
    # later iterations whose flags differ (the last one's, a token every so often), while exceptions are left
    used = sum(map(len, edges.values()))
    for k in range(fill + 1, left):
        it = instrs[lo + k * body:lo + (k + 1) * body]
        diff = {j: it[j].deps for j in range(body) if it[j].deps != ref[j].deps}
        if not diff:
            continue
        if used + len(diff) > EXCEPTIONS or any(a.op != b.op for a, b in zip(it, ref)):
            break
        edges[k] = diff
        used += len(diff)
        patch.update({lo + k * body + j: Instr(it[j].op, it[j].args, ref[j].deps) for j in diff})
    got = _run(instrs, labels, lo, body, left, moves, v, touched, patch)
    if got is None or got[0] <= fill:
        return None
    count, model = got
    edges = {k: e for k, e in edges.items() if k < count}
    return count, model, edges, patch


def _run(instrs, labels, lo, body, left, moves, v, touched, patch):
    """The run :func:`npuc.codegen.reroll.roll` would find at ``lo`` with ``patch`` in place
    (``_nest_run`` with the emitter's moves, ``_known_run`` comparing fields otherwise)."""
    from npuc.codegen.reroll import _known_run, _nest_run, _touches

    view = _Patched(instrs, patch)
    if moves is None or _touches(touched, lo, lo + body):
        return _known_run(view, labels, lo, body, left)
    return _nest_run(view, lo, body, left, moves, v, touched)


def _encoded(view, labels, lo: int, body: int, count: int, model: list, edges: dict[int, dict[int, Any]]):
    """The run's body rerolled (:func:`npuc.codegen.reroll._encoded_run`), its instructions with
    other flags at the edges kept apart (their labels carry those flags while it is rerolled),
    and its exceptions on the encoded body; None when they do not fit."""
    from npuc.codegen.reroll import _encoded_run
    from npuc.isa.loops import group

    def key(j: int) -> str:
        return CUT.join(f"{k}:{edges[k][j].to_bits(view[lo + j].defn.queue)}" for k in sorted(edges) if j in edges[k])

    keyed = {lo + j: labels[lo + j] + CUT + key(j) for j in {j for e in edges.values() for j in e}}
    got = _encoded_run(view, _Patched(labels, keyed), lo, body, count, model)
    if got is None:
        return None  # its body repeats within itself in a way the slots do not carry: better rerolled plain
    count, encoded, encoded_labs, slots = got
    encoded_labs = [lab.split(CUT, 1)[0] for lab in encoded_labs]
    flag_exceptions = _on_encoded(encoded, edges, body)
    if flag_exceptions is not None:
        return count, encoded, encoded_labs, slots, flag_exceptions
    if len(encoded) * FLAT_FROM < body:
        return None  # the body as it is would be many times its rerolled form
    slots = group(model)  # the body as it is: one encoded instruction per emitted one
    if slots is None:
        return None
    flat = list(view[lo:lo + body])
    flag_exceptions = _on_encoded(flat, edges, body)
    if flag_exceptions is None:
        return None
    return count, flat, list(labels[lo:lo + body]), slots, flag_exceptions


def _on_encoded(encoded: list[Instr], edges: dict[int, dict[int, Any]], body: int):
    """The flag exceptions (iteration, encoded body offset, flag bits) of ``edges`` ({iteration:
    {emitted body offset: flags}}) on an encoded body that expands to ``body`` instructions,
    or None when an encoded instruction stands for emitted ones that the edges treat apart, or
    there are more than :data:`~npuc.isa.loops.EXCEPTIONS`."""
    flat, origin = expand(encoded)
    if len(flat) != body:
        return None
    out = []
    for k in sorted(edges):
        want: dict[int, set] = {}
        for p, e in enumerate(origin):
            want.setdefault(e, set()).add(edges[k].get(p, flat[p].deps))
        for e in sorted(want):
            ws = want[e]
            if len(ws) > 1:
                return None
            w = next(iter(ws))
            if w != encoded[e].deps:
                out.append((k, e, w.to_bits(encoded[e].defn.queue)))
    return out if len(out) <= EXCEPTIONS else None


LONGER = 2  # how many times the longest run of equal flags a stretch of repeating flags must cover
MAX_FLAG_PERIOD = 4  # iterations over which a nest's flags may repeat (a store waited for every few tiles)


def regrouped(instrs: Sequence[Instr], loops: Sequence[tuple[int, int, int]], moves: Sequence[Any]):
    """The nests ``loops`` (with their emitter's ``moves``), each whose dependency flags repeat
    only every ``T`` iterations (2 <= T <= :data:`MAX_FLAG_PERIOD`: tokens that one buffer's
    reuse asks for every few tiles) cut into the iterations before that stretch (a nest with the
    same moves), the stretch as a nest of ``T``-iteration bodies and what follows (both compared
    field by field: no moves), so each becomes one LOOP; the others as they are."""
    out_loops, out_moves = [], []
    for (start, body, n), mv in zip(loops, moves):
        cut = _flag_period(instrs, start, body, n)
        if cut is None:
            out_loops.append((start, body, n))
            out_moves.append(mv)
            continue
        first, period, reps = cut
        pieces = [((start, body, first), mv),
                  ((start + first * body, period * body, reps), None),
                  ((start + (first + period * reps) * body, body, n - first - period * reps), None)]
        for (s, b, k), m in pieces:
            if k > 0:
                out_loops.append((s, b, k))
                out_moves.append(m)
    return out_loops, out_moves


def _flag_period(instrs: Sequence[Instr], start: int, body: int, n: int) -> tuple[int, int, int] | None:
    """(first iteration, period T, repetitions) of the longest stretch of a nest whose iterations'
    flags repeat every T iterations but not every one, when it covers more than twice the
    iterations of the nest's longest run of equal flags and at least three periods; or None."""
    if n < 6:
        return None
    flags = [[i.deps for i in instrs[start + v * body:start + (v + 1) * body]] for v in range(n)]
    if all(f == flags[0] for f in flags):  # most nests (compared as lists: shared flags compare by identity)
        return None
    keys: dict[tuple, int] = {}
    sig = [keys.setdefault(tuple(f), len(keys)) for f in flags]
    longest = run = 1
    for a, b in zip(sig, sig[1:]):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    best = None
    for period in range(2, MAX_FLAG_PERIOD + 1):
        if period * body > MAX_BODY:
            break
        for first in range(period):
            reps = 1
            k = first
            while k + 2 * period <= n and sig[k:k + period] == sig[k + period:k + 2 * period]:
                reps, k = reps + 1, k + period
            # the stretch may start later: slide to where it is longest
            if reps >= 3 and reps * period > LONGER * longest and (best is None or reps * period > best[1] * best[2]):
                best = (first, period, reps)
    return best
