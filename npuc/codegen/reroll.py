"""Rerolling: runs of instructions that repeat with constant field strides become LOOPs.

Kernels emit their instructions one tile at a time, and the emitter derives the dependency
tokens of that unrolled stream.  In steady state a kernel's tiles differ only by addresses that
advance by a constant stride, with the same tokens: such a run is exactly a ``LOOP`` (see
:mod:`npuc.isa.loops`), and this pass writes it as one.  A run qualifies when every
repetition of the body has the same mnemonics, dependency flags and labels (a loop never spans
two layers), differs from the one before only in integer fields, by the same amounts each time,
in fields that fit the LOOP's :data:`~npuc.isa.loops.SLOTS` stride slots; a field that
comes back to its first value after P repetitions (a buffer of a double-buffered pair) takes a
slot with period P.  Passes repeat on their own output, so loops
nest (rows inside channel blocks inside a layer).

The result expands to the very instruction stream the emitter produced (tested, and checked
on every program by :func:`check_expansion`), so
correctness, timing and the race detector's view are unchanged: only the encoded program
shrinks.
"""

from __future__ import annotations

import bisect
from itertools import compress
from operator import attrgetter, itemgetter, ne
from typing import Sequence

import numpy as np

from npuc.errors import CompileError
from npuc.isa.instr import Deps, FieldError, Instr, get_def
from npuc.isa.loops import (MAX_BODY, MAX_PERIOD, Slot, dynamic_count, exceptions, expand, group, loop_instr,
                             loop_problem, slot_offset, slots, strides)

PASSES = 3
CANDIDATES = 4  # periods tried at each position (the next occurrences of the same unit)
WINDOW = 96  # units ahead in which a period's start may recur
MAX_MOVES = 48  # differing fields between two repetitions worth grouping into slots
LOOKAHEAD = 2  # later starts compared with a run's (peeling a first repetition)
PREFER = 1000  # a longer period replaces a shorter one only when it saves this many times more (innermost first)
MAX_ITERATIONS = get_def("LOOP").field("n").max_value
_ARGS = attrgetter("args")


def reroll(instrs: Sequence[Instr], labels: Sequence[str], check: bool = True) -> tuple[list[Instr], list[str]]:
    """The program with every worthwhile periodic run written as a LOOP, and its labels.

    ``instrs`` ends with END (which is never part of a loop); ``labels`` has one label per
    instruction (the debug map).  ``check=False`` leaves out :func:`check_expansion`, for a
    caller that checks the whole program it builds from the result (:func:`roll`)."""
    out, labs = list(instrs), list(labels)
    for _ in range(PASSES):
        new, new_labs = _pass(out, labs)
        if len(new) == len(out):
            break
        out, labs = new, new_labs
    if check:
        check_expansion(out, instrs, labs)
    return out, labs


def check_expansion(rolled: Sequence[Instr], instrs: Sequence[Instr], labels: Sequence[str]) -> None:
    """Raise CompileError unless ``rolled`` expands to ``instrs`` exactly: the simulator, the
    race detector and the profile see only the expansion, so a LOOP that strays from the stream
    the emitter wrote would otherwise be a silent wrong answer (linear in the program's size)."""
    dyn, origin = expand(rolled)
    if dyn == list(instrs):
        return
    i = next((k for k, (a, b) in enumerate(zip(dyn, instrs)) if a != b), min(len(dyn), len(instrs)))
    where = f" in layer {labels[origin[i]]}" if i < len(origin) else ""
    raise CompileError(
        f"internal error: the LOOPs written for the program{where} do not expand to the emitted "
        f"instructions (dynamic instruction {i} differs); please report it with the model and target"
    )


def check_loops(rolled: Sequence[Instr], instrs: Sequence[Instr], labels: Sequence[str]) -> None:
    """Raise CompileError unless ``rolled`` stands for ``instrs``, checked in time linear in the
    encoded program plus a comparison of flags per dynamic instruction, not by expanding it.

    Every instruction outside a LOOP must be the one it stands for; every top-level LOOP must
    run as many instructions as it replaces, every iteration with the mnemonics and dependency
    flags of the instructions it stands for (so the tokens, which the race detector and the
    simulator see per dynamic instruction, are the emitter's), and the iterations where its
    strided fields are extreme or rotate -- the first, the first period of every rotating slot,
    the last -- must be exactly the instructions they stand for, fields and all (so the slots,
    their offsets, periods and phases are the ones the runs were found with, and every strided
    field stays in range): the first expanded, the others compared as its fields moved by the
    slots (:func:`_fields_differ`).  :func:`reroll` and :func:`roll` compare every other
    iteration field by field, or know its fields from the emitter's moves, when they find a run;
    :func:`check_expansion` is the full comparison."""
    problem = loop_problem(list(rolled) + ([] if rolled and rolled[-1].op == "END" else [Instr.make("END")]))
    if problem:
        _mismatch(labels, 0, f"the LOOPs written are malformed ({problem})")
    pos, i = 0, 0
    while i < len(rolled):
        ins = rolled[i]
        if ins.op != "LOOP":
            if pos >= len(instrs) or (ins is not instrs[pos] and ins != instrs[pos]):
                _mismatch(labels, i, f"instruction {i} differs from emitted instruction {pos}")
            pos, i = pos + 1, i + 1
            continue
        body = list(rolled[i + 1:i + 1 + ins.args.body])
        n, per = ins.args.n, dynamic_count(body)
        if pos + n * per > len(instrs):
            _mismatch(labels, i, f"the LOOP at instruction {i} runs past the emitted instructions")
        try:
            first, origin = expand(body)
            flags = [(x.op, x.deps) for x in first]
            excepted = {k for k, _, _ in exceptions(ins)}  # iterations whose flags a flag exception changes
            for k in range(1, n):
                lo = pos + k * per
                want = flags if k not in excepted else [(x.op, x.deps) for x in expand(_iteration(ins, body, k))[0]]
                if [(x.op, x.deps) for x in instrs[lo:lo + per]] != want:
                    _mismatch(labels, i, f"iteration {k} of the LOOP at instruction {i} has other flags")
            period = max((sl[5] for sl in slots(ins)), default=0)
            if (first if 0 not in excepted else expand(_iteration(ins, body, 0))[0]) != list(instrs[pos:pos + per]):
                _mismatch(labels, i, f"iteration 0 of the LOOP at instruction {i} differs")
            for k in sorted({*range(1, min(n, max(period, 1) + 1)), n - 1} - {0}):
                if _fields_differ(ins, first, origin, k, instrs[pos + k * per:pos + (k + 1) * per]):
                    _mismatch(labels, i, f"iteration {k} of the LOOP at instruction {i} differs")
        except FieldError as e:
            _mismatch(labels, i, str(e))
        pos, i = pos + n * per, i + 1 + ins.args.body
    if pos != len(instrs):
        _mismatch(labels, len(rolled) - 1, f"the program runs {pos} instructions, {len(instrs)} were emitted")


def _fields_differ(loop: Instr, first: list[Instr], origin: list[int], k: int, emitted: Sequence[Instr]) -> bool:
    """Whether iteration ``k`` of ``loop`` has other fields than the ``emitted`` instructions,
    given its iteration 0 expanded (``first``, and the body instruction each comes from: its
    ``origin``): iteration ``k`` is iteration 0 with every strided field of a body instruction
    moved by its slot's offset in each instruction it stands for (inner strides add to outer
    ones), so it is compared without being built.  Its mnemonics and flags are compared apart;
    a field found equal to the emitted one is in range, as the emitted instruction is."""
    adds: dict[int, dict[int, int]] = {}
    for j, f, stride, period, phase in strides(loop):
        d = adds.setdefault(j, {})
        d[f] = d.get(f, 0) + slot_offset(k, stride, period, phase)
    for x, j, y in zip(first, origin, emitted):
        add = adds.get(j)
        if add is None:
            if x.args != y.args:
                return True
            continue
        vals = list(x.args)
        for f, a in add.items():
            vals[f] += a
        if y.args != tuple(vals):
            return True
    return False


def _iteration(loop: Instr, body: list[Instr], k: int) -> list[Instr]:
    """Iteration ``k`` of ``loop``'s ``body``: every strided field moved by its slot's offset,
    and the flags of its flag exceptions for iteration ``k`` in place."""
    adds: dict[int, dict[int, int]] = {}
    for j, f, stride, period, phase in strides(loop):
        d = adds.setdefault(j, {})
        d[f] = d.get(f, 0) + slot_offset(k, stride, period, phase)
    out = list(body)
    for x, j, bits in exceptions(loop):
        if x == k:
            out[j] = Instr(body[j].op, body[j].args, Deps.from_bits(bits, body[j].defn.queue))
    for j, d in adds.items():
        ins = body[j]
        vals = list(ins.args)
        for f, add in d.items():
            vals[f] += add
            reason = ins.defn.fields[f].problem(vals[f])
            if reason:
                raise FieldError(f"iteration {k}: field '{ins.defn.fields[f].name}' of `{ins}` {reason}")
        args = type(ins.args)._make(vals)
        reason = ins.defn.validate(args)
        if reason:
            raise FieldError(f"iteration {k}: `{ins}`: {reason}")
        out[j] = Instr(ins.op, args, out[j].deps)
    return out


def _mismatch(labels: Sequence[str], i: int, what: str) -> None:
    where = f" in layer {labels[i]}" if 0 <= i < len(labels) and labels[i] else ""
    raise CompileError(f"internal error: the LOOPs written for the program{where} do not stand for the "
                       f"emitted instructions: {what}; please report it with the model and target")


# ------------------------------------------------------------------------------ one pass


class _Units:
    """The top-level units of a stream: plain instructions, and LOOPs with their whole body."""

    def __init__(self, instrs: list[Instr], labels: list[str]) -> None:
        self.instrs, self.labels = instrs, labels
        self.args = list(map(_ARGS, instrs))
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

    def values(self) -> "_FlatValues | None":
        """The integer fields of every instruction as one array (built on first use), or None
        when a value does not fit 64 bits."""
        if not hasattr(self, "_values"):
            self._values = _FlatValues.of(self.instrs)
        return self._values

    def span(self, u: int, n: int) -> tuple[int, int]:
        return self.starts[u], self.starts[u + n]

    def _key(self, u: int) -> tuple:
        """What two repetitions must share: mnemonics, flags, every non-integer field (and a
        LOOP's every field), the label."""
        lo, hi = self.starts[u], self.starts[u + 1]
        first = self.instrs[lo]
        if hi == lo + 1:  # most units: one plain instruction
            shape = ((first.op, first.deps, first.args if first.op == "LOOP" else _fixed(first)),)
        else:
            shape = tuple((i.op, i.deps, i.args if i.op == "LOOP" else _fixed(i)) for i in self.instrs[lo:hi])
        return shape, self.labels[lo], first.op == "END"


class _FlatValues:
    """Every integer field of a stream, in program order, as one int64 array: the repetitions of
    a run (same signatures, so the same fields) are equal-length, evenly spaced slices of it, and
    many of them are compared with the model of the run in one array operation (:func:`_matching`)."""

    def __init__(self, flat: np.ndarray, offsets: list[int], ordinals: dict[str, dict[int, int]],
                 instr_of: np.ndarray, field_of: np.ndarray) -> None:
        self.flat, self.offsets, self.ordinals = flat, offsets, ordinals
        self.instr_of, self.field_of = instr_of, field_of  # per value: its instruction and field index

    def delta(self, lo: int, b: int, body: int) -> dict[tuple[int, int], int] | None:
        """:func:`_args_delta` of the ``body`` instructions at ``lo`` and those at ``b`` (of the
        same signatures): {(offset, field): difference}, None beyond :data:`MAX_MOVES` fields."""
        offsets = self.offsets
        a, width = offsets[lo], offsets[lo + body] - offsets[lo]
        c = offsets[b]
        d = self.flat[c:c + width] - self.flat[a:a + width]
        nz = np.flatnonzero(d)
        if len(nz) > MAX_MOVES:
            return None
        return dict(zip(zip((self.instr_of[a + nz] - lo).tolist(), self.field_of[a + nz].tolist()), d[nz].tolist()))

    @staticmethod
    def of(instrs: Sequence[Instr]) -> "_FlatValues | None":
        ordinals: dict[str, dict[int, int]] = {}
        offsets = [0]
        vals: list[int] = []
        fields: list[int] = []
        readers: dict[str, tuple] = {}  # per mnemonic: its integer fields' getter and indices
        for ins in instrs:
            reader = readers.get(ins.op)
            if reader is None:
                ints = sorted(_integer_fields(ins))
                ordinals[ins.op] = {f: k for k, f in enumerate(ints)}
                reader = readers[ins.op] = (_tuple_getter(ints), ints)
            vals.extend(reader[0](ins.args))
            fields.extend(reader[1])
            offsets.append(len(vals))
        try:
            flat = np.array(vals, dtype=np.int64)
        except OverflowError:
            return None
        counts = np.diff(np.array(offsets, dtype=np.int64))
        instr_of = np.repeat(np.arange(len(instrs), dtype=np.int64), counts)
        return _FlatValues(flat, offsets, ordinals, instr_of, np.array(fields, dtype=np.int64))


def _integer_fields(ins: Instr, _cache: dict = {}) -> frozenset[int]:
    hit = _cache.get(ins.op)
    if hit is None:
        hit = _cache[ins.op] = frozenset(k for k, f in enumerate(ins.defn.fields) if f.kind in ("uint", "sint"))
    return hit


def _fixed(ins: Instr, _getters: dict = {}) -> tuple:
    """The values of the fields a stride cannot move (read by one getter per mnemonic: rerolling
    asks it of most instructions several times)."""
    get = _getters.get(ins.op)
    if get is None:
        ints = _integer_fields(ins)
        get = _getters[ins.op] = _tuple_getter([k for k in range(len(ins.defn.fields)) if k not in ints])
    return get(ins.args)


def _tuple_getter(indices: list[int]):
    """A function of a tuple returning the tuple of its items at ``indices``."""
    if not indices:
        return lambda args: ()
    if len(indices) == 1:
        k = indices[0]
        return lambda args: (args[k],)
    return itemgetter(*indices)


def _delta(a: Sequence[Instr], b: Sequence[Instr], most: int = MAX_MOVES) -> dict[tuple[int, int], int] | None:
    """{(offset, field): b - a} for every field where body ``b`` differs from body ``a``; None
    when they differ otherwise (a LOOP) or in more than ``most`` fields."""
    return _args_delta(a, list(map(_ARGS, a)), list(map(_ARGS, b)), most)


def _args_delta(a: Sequence[Instr], aa: list, bb: list, most: int) -> dict[tuple[int, int], int] | None:
    """:func:`_delta` of body ``a`` (whose args are ``aa``) and the body whose args are ``bb``."""
    differ = list(compress(range(len(aa)), map(ne, aa, bb)))
    if len(differ) > most:  # every differing instruction differs in a field at least
        return None
    out: dict[tuple[int, int], int] = {}
    for j in differ:
        if a[j].op == "LOOP":
            return None
        x, y = aa[j], bb[j]
        for f in compress(range(len(x)), map(ne, x, y)):  # integer fields: the signatures hold the others equal
            out[(j, f)] = y[f] - x[f]
        if len(out) > most:
            return None
    return out


def _advance(model: dict[tuple[int, int], list[int]], moved: dict[tuple[int, int], int], k: int) -> dict | None:
    """The stride model after repetition ``k`` moved its fields by ``moved`` from repetition 0,
    or None when it does not fit.  ``model[(offset, field)] = [stride, period, phase]``: each
    field moves by k x stride, or, once it is seen to rotate, by
    ``slot_offset(k, stride, period, phase)`` (:func:`npuc.isa.loops.slot_offset`)."""
    # A field that moves for the first time ends the run, however many fields came back to
    # their first value in this repetition (counting keys would let one hide the other).
    if not moved.keys() <= model.keys():
        return None
    new = None
    get = moved.get
    for key, (stride, period, phase) in model.items():
        got = get(key, 0)
        if got == slot_offset(k, stride, period, phase):
            continue
        rotation = None if period else _rotation(stride, got, k)
        if rotation is not None:
            if new is None:
                new = dict(model)
            new[key] = list(rotation)
            continue
        return None
    return model if new is None else new


def _rotation(first: int, got: int, k: int) -> tuple[int, int, int] | None:
    """(stride, period, phase) of a field that moved by ``first`` in repetition 1 and by ``m *
    first`` up to repetition ``k - 1``, and by ``got`` in repetition ``k``, when that is a buffer
    rotation of at most MAX_PERIOD places: it came back ``phase`` places short of its start
    (``got = -phase * first``: period ``k + phase``), or it started in the rotation's last place
    and came back to its first (repetition 1 jumped back ``period - 1`` places)."""
    if not first:
        return None
    if -got % first == 0:
        phase = -got // first
        if phase >= 0 and k + phase <= MAX_PERIOD:
            return first, k + phase, phase
    if k == 2:  # 0, -(P-1) x s, -(P-2) x s, ...: the start is the last place of P
        stride = got - first
        if stride and first % stride == 0 and 3 <= 1 - first // stride <= MAX_PERIOD:
            period = 1 - first // stride
            return stride, period, period - 1
    return None


def _run(units: _Units, u: int, period: int) -> tuple[int, dict[tuple[int, int], list[int]]] | None:
    """(repetitions, stride model: see :func:`_advance`) of the run of ``period`` units starting
    at unit ``u`` (:func:`_slots` gives its LOOP's slots)."""
    sig = units.sig
    n = len(units)
    if u + 2 * period > n or sig[u:u + period] != sig[u + period:u + 2 * period]:
        return None
    lo, mid = units.span(u, period)
    body = mid - lo
    if body > MAX_BODY:
        return None
    instrs, args = units.instrs, units.args
    first, first_args = instrs[lo:mid], args[lo:mid]
    fv = units.values() if body >= ARRAY_FROM else None
    moved = fv.delta(lo, mid, body) if fv is not None else _args_delta(first, first_args, args[mid:mid + body], MAX_MOVES)
    if moved is None:
        return None
    model = {key: [s, 0, 0] for key, s in moved.items()}
    count = 2
    pattern = sig[u:u + period]
    while u + (count + 1) * period <= n and count < MAX_ITERATIONS:
        if count >= FAST_FROM:  # the repetitions that fit the model, compared at once
            count = _matching(units, u, period, lo, body, model, count)
            if not (u + (count + 1) * period <= n and count < MAX_ITERATIONS):
                break
        if sig[u + count * period:u + (count + 1) * period] != pattern:
            break
        b = units.starts[u + count * period]
        moved = fv.delta(lo, b, body) if fv is not None else _args_delta(first, first_args, args[b:b + body], MAX_MOVES)
        nxt = None if moved is None else _advance(model, moved, count)
        if nxt is None:
            break
        model = nxt
        count += 1
    return count, model


FAST_FROM = 8  # repetitions of a run from which the next ones are compared in blocks (_matching)
BLOCK = 64  # repetitions compared in one array operation
ARRAY_FROM = 8  # body instructions from which two repetitions are compared as arrays (_FlatValues.delta)


def _matching(units: _Units, u: int, period: int, lo: int, body: int, model: dict, count: int) -> int:
    """The first repetition from ``count`` on of the run at unit ``u`` (its first repetition's
    instructions at ``lo``, ``body`` of them) that does not repeat the first one's signatures
    with every field where ``model`` puts it (see :func:`_advance`), or the last one the run
    may reach: what :func:`_run`'s loop finds repetition by repetition, where :func:`_advance`
    keeps the model, found in array operations."""
    fv = units.values()
    if fv is None:
        return count
    sig, n = units.sig, len(units)
    last = min((n - u) // period, MAX_ITERATIONS)  # repetitions the run may have
    pattern = sig[u:u + period]
    offsets, ordinals, instrs = fv.offsets, fv.ordinals, units.instrs
    a = offsets[lo]
    width = offsets[lo + body] - a
    first = fv.flat[a:a + width]
    cols = np.array([offsets[lo + j] - a + ordinals[instrs[lo + j].op][f] for j, f in model], dtype=np.int64)
    params = np.array(list(model.values()), dtype=np.int64).reshape(-1, 3)
    stride, per, phase = params[:, 0], params[:, 1], params[:, 2]
    rotating = per != 0
    safe = np.where(rotating, per, 1)
    moving = np.zeros(width, dtype=bool)
    moving[cols] = True
    while count < last:
        stop = min(last, count + BLOCK)
        # the repetitions whose signatures repeat the pattern (then their instructions lie evenly spaced)
        same = count
        while same < stop and sig[u + same * period:u + (same + 1) * period] == pattern:
            same += 1
        if same == count:
            return count
        ks = np.arange(count, same, dtype=np.int64)
        block = fv.flat[a + count * width:a + same * width].reshape(-1, width) - first
        want = np.where(rotating, ((ks[:, None] + phase) % safe - phase), ks[:, None]) * stride
        bad = (block[:, cols] != want).any(axis=1) | (block[:, ~moving] != 0).any(axis=1)
        hit = np.flatnonzero(bad)
        if len(hit):
            return count + int(hit[0])
        count = same
        if same < stop:
            return count
    return count


def _slots(model: dict[tuple[int, int], list[int]]) -> tuple[Slot, ...] | None:
    """The stride slots of a run's model (:func:`_run`), or None when they do not fit a LOOP."""
    return group([(j, f, *m) for (j, f), m in model.items()])


def _may_save(units: _Units, u: int, period: int, need: int) -> bool:
    """Whether a run of ``period`` units at ``u`` could save more than ``need`` instructions:
    its signatures alone repeat often enough (a bound on what :func:`_run` may find, so a
    candidate that fails it is left out without changing the result)."""
    lo, hi = units.span(u, period)
    body = hi - lo
    if body > MAX_BODY:
        return False
    sig = units.sig
    pattern = sig[u:u + period]
    last = min((len(units) - u) // period, MAX_ITERATIONS)
    count = 1
    while count < last and sig[u + count * period:u + (count + 1) * period] == pattern:
        count += 1
        if (count - 1) * body - 1 > need:
            return True
    return False


def _best_run(units: _Units, nxt: list[int], u: int) -> tuple[int, int, int, tuple[Slot, ...]] | None:
    """(saving, period, repetitions, slots) of the best run starting at unit ``u``, or None."""
    n = len(units)
    best = None
    v, tried = nxt[u], 0
    while v < n and v - u <= WINDOW and tried < CANDIDATES:
        tried += 1
        if best is not None and not _may_save(units, u, v - u, PREFER * best[0]):
            v = nxt[v]  # it cannot replace the run found: not worth comparing its fields
            continue
        found = _run(units, u, v - u)
        if found is not None:
            count, model = found
            lo, hi = units.span(u, v - u)
            saving = (count - 1) * (hi - lo) - 1
            # the innermost period first: outer passes nest it into the larger ones
            if saving > 0 and (best is None or saving > PREFER * best[0]):
                used = _slots(model)
                if used is not None:
                    best = (saving, v - u, count, used)
        v = nxt[v]
    return best


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
    cache: dict[int, tuple | None] = {}

    def best_at(u: int):
        if u not in cache:
            cache[u] = _best_run(units, nxt, u) if u < n else None
        return cache[u]

    u = 0
    while u < n:
        best = best_at(u)
        # a run that starts a little later may save more (the first repetition of a loop often
        # differs in its tokens: peel it, rather than roll a run out of phase)
        if best is not None and any((b := best_at(u + k)) is not None and b[0] > best[0] for k in range(1, LOOKAHEAD + 1)):
            best = None
        if best is None:
            lo, hi = units.span(u, 1)
            out += instrs[lo:hi]
            out_labels += labels[lo:hi]
            u += 1
            continue
        _, period, count, slots = best
        lo, hi = units.span(u, period)
        body, body_labels = instrs[lo:hi], labels[lo:hi]
        nested = _nested_run(body, body_labels, count, slots)
        if nested is not None:
            body, body_labels, slots = nested
        out.append(loop_instr(count, len(body), slots))
        out_labels.append(labels[lo])
        out += body
        out_labels += body_labels
        u += period * count
    return out, out_labels


# A nest whose body rerolls (to ``r`` instructions) only in a way the outer slots cannot carry is
# written with a flat body when its ``n`` iterations would take more than this many times the body
# rerolled as plain instructions (``n * r``): measured on the zoo on npu-mid, a flat body saves code
# from a ratio of about 5 (MobileNetV2 fp16's 14x14 convs, 7 of 84 rerolled to 69: 7.8 KB; the
# 56x56x64 3x3 conv, 52 of 294 to 60: 3,432 instructions rolled to 581) and costs code up to 2.3
# (ResNet-50 int8's layer4.0.downsample, 28 of 522 to 43: 1.9 KB), where runs span the iterations.
# 2, not 3: with the tile programs' nests (rotations entered part way) MobileNetV2 int8's depthwise
# tiles reach ratios of 2 to 3 whose flat bodies save 1.5 KB in all (74,593 -> 73,141 B of code on
# npu-mid: under 2% of its constants), for ResNet-50 int8's 1.9 KB at 0.8% of its constants.
FLAT_BODY_GAIN = 2
NEST_FROM = 4  # body instructions from which a found run's body is rerolled on its own


def _nested_run(body: list[Instr], labels: list[str], count: int, slots: tuple[Slot, ...]):
    """(body, labels, slots) of a run with its flat body's own repetitions rerolled inside it
    (the tiles of a layer repeat at two levels: reduction blocks inside output tiles), or None
    when the body has none, or has LOOPs already (an outer pass nests those)."""
    if len(body) < NEST_FROM or any(i.op == "LOOP" for i in body):
        return None
    nested = _nested_body(body, labels, [(j + m * d, f, s, p, h) for j, d, r, f, s, p, h in slots if s for m in range(r)])
    return nested if isinstance(nested, tuple) else None


# ------------------------------------------------------------------------------ known loops


def roll(instrs: Sequence[Instr], labels: Sequence[str], loops: Sequence[tuple[int, int, int]],
         moves: Sequence[tuple[tuple[int, int, int, int, int], ...]] | None = None,
         rewritten: Sequence[int] = ()) -> tuple[list[Instr], list[str]]:
    """The program with its emitted loop nests written as LOOPs and the rest rerolled.

    ``loops`` are the nests the emitter was given, as (first index, body length, iterations)
    (:attr:`npuc.codegen.emitter.Emitter.loops`).  The iterations of a nest are rolled where
    they repeat with the same dependency flags (the first and last ones of a pipeline may not:
    they stay plain and are rerolled with their neighbours), so nothing is searched for over a
    nest; the body itself is rerolled (a short search) to nest the repetitions inside one
    iteration.  Everything outside the nests goes through :func:`reroll`.

    ``moves`` (:attr:`npuc.codegen.emitter.Emitter.loop_moves`, one per nest: (body step, field
    index, stride, period, phase)) say how the emitter moved each nest's fields, so an iteration is
    compared with the first by its dependency flags alone and its field changes are the moves'
    (:func:`_nest_run`); ``rewritten``: the instructions replaced since emission (weight
    compression), whose iterations are compared field by field.  Without ``moves`` every
    iteration is compared field by field.  The result expands to ``instrs`` exactly (checked:
    :func:`check_loops`)."""
    out: list[Instr] = []
    labs: list[str] = []
    plain: list[Instr] = []
    plain_labs: list[str] = []

    def flush() -> None:
        if plain:
            r, rl = reroll(plain, plain_labs, check=False)  # the whole program is checked below
            out.extend(r)
            labs.extend(rl)
            plain.clear()
            plain_labs.clear()

    pos = 0
    nest_moves = list(moves) if moves is not None else [None] * len(loops)
    from npuc.codegen.loop_edges import regrouped  # nests whose flags repeat every few iterations

    loops, nest_moves = regrouped(instrs, loops, nest_moves)
    touched = sorted(rewritten)
    for (start, body, n), mv in sorted(zip(loops, nest_moves), key=lambda x: x[0]):
        plain.extend(instrs[pos:start])
        plain_labs.extend(labels[pos:start])
        runs: dict[int, tuple | None] = {}

        def run_at(v: int, start: int = start, body: int = body, n: int = n, mv=mv):
            if v not in runs:
                lo = start + v * body
                if v >= n:
                    runs[v] = None
                elif mv is None or _touches(touched, lo, lo + body):
                    runs[v] = _known_run(instrs, labels, lo, body, n - v)
                else:
                    runs[v] = _nest_run(instrs, lo, body, n - v, mv, v, touched)
            return runs[v]

        u = 0
        hopeless = False
        while u < n:
            lo = start + u * body
            got = run_at(u)
            edge = None if hopeless or (got is not None and got[0] >= n - u) else edge_run(
                instrs, labels, lo, body, n - u, mv, u, touched, run_at)
            if edge is not None:
                count, encoded, encoded_labs, slots, flag_exceptions = edge
                flush()
                out.append(loop_instr(count, len(encoded), slots, flag_exceptions))
                labs.append(labels[lo])
                out.extend(encoded)
                labs.extend(encoded_labs)
                u += count
                continue
            # peel an iteration that spoils a longer run (the first of a pipeline, out of phase);
            # a run from u + k covers at most the n - u - k iterations left, so only where those
            # are more than got's + k is it looked for
            if got is not None and any(n - u - k > got[0] + k and (r := run_at(u + k)) is not None
                                       and r[0] > got[0] + k for k in range(1, LOOKAHEAD + 2)):
                got = None
            if got is not None and not hopeless:
                got = _encoded_run(instrs, labels, lo, body, *got)
                hopeless = got is None  # the other iterations' bodies fare no better: plain
            else:
                got = None
            if got is None:
                plain.extend(instrs[lo:lo + body])
                plain_labs.extend(labels[lo:lo + body])
                u += 1
                continue
            count, encoded, encoded_labs, slots = got
            flush()
            out.append(loop_instr(count, len(encoded), slots))
            labs.append(labels[lo])
            out.extend(encoded)
            labs.extend(encoded_labs)
            u += count
        pos = start + body * n
    plain.extend(instrs[pos:])
    plain_labs.extend(labels[pos:])
    flush()
    check_loops(out, instrs, labs)
    return out, labs


def edge_run(instrs, labels, lo, body, left, mv, v, touched, run_at):
    """A nest's run whose first iterations, last iteration or a few others differ in their flags
    (the pipeline's fill and drain), written with flag exceptions (:func:`npuc.codegen.loop_edges.edge_run`)."""
    from npuc.codegen.loop_edges import edge_run as find

    return find(instrs, labels, lo, body, left, mv, v, touched, run_at)


def _touches(touched: Sequence[int], lo: int, hi: int) -> bool:
    """Whether a rewritten instruction (``touched``, sorted) lies in ``[lo, hi)``."""
    k = bisect.bisect_left(touched, lo)
    return k < len(touched) and touched[k] < hi


def _nest_run(instrs: Sequence[Instr], lo: int, body: int, left: int,
              moves: Sequence[tuple[int, int, int, int, int]], v: int, touched: Sequence[int]):
    """:func:`_known_run` for the iterations of an emitted nest from its iteration ``v`` (at
    ``lo``) on, with the emitter's ``moves``: iteration ``v + c`` is the body with the moves
    applied (the emitter built it so), so only its dependency flags are compared with the first
    one's, and the fields it changes are the moves' offsets from iteration ``v`` -- what
    :func:`_delta` finds comparing the instructions, without comparing them.  An iteration with
    a rewritten instruction (``touched``) is compared field by field.

    The moves' offsets of a block of iterations are one array (:class:`_MoveTable`), and the
    iterations that keep the model (:func:`_advance` would return it unchanged) are found in
    array operations; :func:`_advance` sees the others, one at a time."""
    if left < 2 or body > MAX_BODY:
        return None
    first = instrs[lo:lo + body]
    if any(i.op in ("LOOP", "END") for i in first):
        return None
    flags = [i.deps for i in first]
    key = [(i.op, i.deps, _fixed(i)) for i in first]
    most = len(first) * 8
    last = min(left, MAX_ITERATIONS)
    table = _MoveTable(moves, v)

    def plain(c: int) -> bool:
        """Whether iteration ``v + c`` has no rewritten instruction and the first one's flags."""
        b = lo + c * body
        return not _touches(touched, b, b + body) and [i.deps for i in instrs[b:b + body]] == flags

    def moved_at(c: int):
        """The fields iteration ``v + c`` changes from iteration ``v``, or None when it does not
        repeat the first one's flags and fixed fields."""
        b = lo + c * body
        if _touches(touched, b, b + body):
            if not all((i.op, i.deps) == k[:2] and _fixed(i) == k[2] for i, k in zip(instrs[b:b + body], key)):
                return None
            return _delta(first, instrs[b:b + body], most)
        if [i.deps for i in instrs[b:b + body]] != flags:
            return None
        row = table.offsets(c, c + 1)[0]
        nz = np.flatnonzero(row)
        if len(nz) > most:
            return None
        return {table.keys[k]: int(row[k]) for k in nz.tolist()}

    moved = moved_at(1)
    if moved is None:
        return None
    model = {k: [s, 0, 0] for k, s in moved.items()}
    count = 2
    while count < last:
        count = _kept(table, model, plain, count, last)
        if count >= last:
            break
        moved = moved_at(count)
        nxt = None if moved is None else _advance(model, moved, count)
        if nxt is None:
            break
        model, count = nxt, count + 1
    return count, [(j, f, *m) for (j, f), m in model.items()]


class _MoveTable:
    """The emitter's moves of a nest as arrays: :meth:`offsets` gives, per iteration ``v + c``
    and per moved (body offset, field), what the moves add to the field from iteration ``v``
    (the sum of their :func:`~npuc.isa.loops.slot_offset` differences)."""

    def __init__(self, moves: Sequence[tuple[int, int, int, int, int]], v: int) -> None:
        self.v = v
        self.keys = sorted({(j, f) for j, f, *_ in moves})
        column = {k: c for c, k in enumerate(self.keys)}
        order = sorted(range(len(moves)), key=lambda m: column[moves[m][:2]])
        cols = np.array([column[moves[m][:2]] for m in order], dtype=np.int64)
        params = np.array([moves[m][2:] for m in order], dtype=np.int64).reshape(-1, 3)
        self.stride, self.period, self.phase = params[:, 0], params[:, 1], params[:, 2]
        self.rotating = self.period != 0
        self.safe = np.where(self.rotating, self.period, 1)
        # the moves of one column are adjacent: reduceat sums them from each column's first
        self.starts = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]]) if len(cols) else cols
        self.base = self._slot_offsets(np.array([v], dtype=np.int64))[0]

    def _slot_offsets(self, ks: np.ndarray) -> np.ndarray:
        """slot_offset(k, stride, period, phase) of every move (columns) in iterations ``ks`` (rows)."""
        k = ks[:, None]
        return np.where(self.rotating, (k + self.phase) % self.safe - self.phase, k) * self.stride

    def offsets(self, c0: int, c1: int) -> np.ndarray:
        """Rows ``c0`` to ``c1 - 1``: what the moves add per key in iterations ``v + c``, from ``v``."""
        if not len(self.keys):
            return np.zeros((c1 - c0, 0), dtype=np.int64)
        moved = self._slot_offsets(np.arange(self.v + c0, self.v + c1, dtype=np.int64)) - self.base
        return np.add.reduceat(moved, self.starts, axis=1)


def _kept(table: _MoveTable, model: dict, plain, count: int, last: int) -> int:
    """The first iteration from ``count`` on (before ``last``) that :func:`_nest_run` must pass
    to :func:`_advance`: one that is not ``plain`` (a rewritten instruction, other flags), or
    whose offsets are not where ``model`` puts them -- ``last`` when there is none."""
    column = {k: c for c, k in enumerate(table.keys)}
    if not model.keys() <= column.keys():
        return count  # a field no move changes (only a rewritten iteration can have moved it)
    cols = np.array([column[k] for k in model], dtype=np.int64)
    params = np.array(list(model.values()), dtype=np.int64).reshape(-1, 3)
    stride, per, phase = params[:, 0], params[:, 1], params[:, 2]
    rotating = per != 0
    safe = np.where(rotating, per, 1)
    still = np.ones(len(table.keys), dtype=bool)
    still[cols] = False
    while count < last:
        limit = min(last, count + BLOCK)
        stop = count
        while stop < limit and plain(stop):
            stop += 1
        if stop == count:
            return count
        block = table.offsets(count, stop)
        ks = np.arange(count, stop, dtype=np.int64)[:, None]
        want = np.where(rotating, (ks + phase) % safe - phase, ks) * stride
        bad = (block[:, cols] != want).any(axis=1) | (block[:, still] != 0).any(axis=1)
        hit = np.flatnonzero(bad)
        if len(hit):
            return count + int(hit[0])
        if stop < limit:
            return stop
        count = stop
    return count


def _known_run(instrs: Sequence[Instr], labels: Sequence[str], lo: int, body: int, left: int):
    """(repetitions, moves) of the run of ``body``-instruction iterations starting at ``lo`` (at
    most ``left`` of them), or None when fewer than two repeat with constant strides and the
    same flags."""
    if left < 2 or body > MAX_BODY:
        return None
    first = instrs[lo:lo + body]
    key = [(i.op, i.deps, _fixed(i)) for i in first]

    def same(b: int) -> bool:
        return all((i.op, i.deps) == k[:2] and (i.op == "LOOP" or _fixed(i) == k[2])
                   for i, k in zip(instrs[b:b + body], key))

    if any(i.op in ("LOOP", "END") for i in first) or not same(lo + body):
        return None
    most = len(first) * 8  # the slots decide what fits (below), not the count of moves
    moved = _delta(first, instrs[lo + body:lo + 2 * body], most)
    if moved is None:
        return None
    model = {k: [s, 0, 0] for k, s in moved.items()}
    count = 2
    while count < left and count < MAX_ITERATIONS:
        b = lo + count * body
        if not same(b):
            break
        moved = _delta(first, instrs[b:b + body], most)
        nxt = None if moved is None else _advance(model, moved, count)
        if nxt is None:
            break
        model, count = nxt, count + 1
    return count, [(j, f, *m) for (j, f), m in model.items()]


def _encoded_run(instrs: Sequence[Instr], labels: Sequence[str], lo: int, body: int, count: int, moves: list):
    """(repetitions, encoded body, its labels, slots) of a run found by :func:`_known_run`, or
    None when it is better rerolled as plain instructions."""
    first = instrs[lo:lo + body]
    body_labels = list(labels[lo:lo + body])
    nested = _nested_body(first, body_labels, moves)
    if isinstance(nested, tuple):
        return (count,) + nested
    if isinstance(nested, int) and count * nested <= FLAT_BODY_GAIN * len(first):
        # the body repeats within itself, but its rerolled instructions would move in more ways
        # than the outer slots carry: rerolled as plain instructions instead, each iteration takes
        # at most about as many as the body rerolled alone (``nested``; fewer where runs span
        # iterations), so a flat body under one LOOP wins only when the iterations are many
        # (see FLAT_BODY_GAIN)
        return None
    slots = group(moves)
    if slots is None:
        return None
    return count, list(first), body_labels, slots


def _nested_body(first: Sequence[Instr], labels: list[str], moves: list[tuple[int, int, int, int, int]]):
    """(encoded body, labels, slots) with the body's own repetitions rerolled, when the outer
    moves still fit (every instruction an encoded one stands for moves alike); None when the
    body has no repetition of its own; the length of the rerolled body when it has some but the outer
    moves do not fit it."""
    from npuc.isa.loops import expand

    by_flat: dict[int, list] = {}
    for j, *move in moves:
        by_flat.setdefault(j, []).append(tuple(move))
    # the outer moves ride on the labels, so that inner loops only gather instructions that move alike
    keyed = [(label, tuple(sorted(by_flat.get(j, ())))) for j, label in enumerate(labels)]
    inner, inner_keys = reroll(first, keyed, check=False)  # checked against the body below
    if len(inner) >= len(first):
        return None
    inner_labs = [k[0] for k in inner_keys]
    flat, origin = expand(inner)
    if [i.args for i in flat] != [i.args for i in first]:
        return len(inner)
    per: dict[int, set] = {}
    for j, e in enumerate(origin):
        per.setdefault(e, set()).add(tuple(sorted(by_flat.get(j, ()))))
    if any(len(v) > 1 for v in per.values()):
        return len(inner)
    encoded_moves = [(e, *move) for e, v in per.items() for move in next(iter(v))]
    slots = group(encoded_moves)
    if slots is None:
        return len(inner)
    return inner, inner_labs, slots
