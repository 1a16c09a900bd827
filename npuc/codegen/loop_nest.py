"""Loop nests: a kernel's repeated tiles handed to the emitter as one body, a trip count and strides.

A kernel's schedule is a list of steps in program order, each tagged with the tile-loop
iteration it belongs to (:class:`~npuc.kir.tile_program.Step`: the vector and move kernels'
tile programs, and the array engine's steps recorded by :class:`StepRecorder`).  In steady
state the iterations issue the same instructions at addresses that advance by a constant
stride, or that come back to where they started after a few iterations (the buffers of a
double-buffered pair).  :func:`loop_pieces` cuts the steps into *chunks* -- a chunk starts
at the first step of each new iteration, so the loads that software pipelining hoists into
the iteration before travel with it -- and writes each run of chunks that repeat that way as a
:class:`LoopNest`: the first chunk's steps (the body), the number of repetitions, and the
field moves (:class:`Move`: body step, field, stride, period, phase).  Whatever does not repeat (the
prologue, the first and last iterations of a pipeline, a last tile of another size) stays a
list of plain steps.

The emitter (:meth:`npuc.codegen.emitter.Emitter.emit_loop`) takes a nest as it is: it builds
and checks the body's instructions once and derives every iteration's instruction by adding
the strides, and the code generation writes the nest as a ``LOOP`` directly
(:func:`npuc.codegen.reroll.roll`), so no search for repeated bodies runs over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from types import NoneType
from typing import Any, Sequence

import numpy as np

from npuc.codegen.reroll import _rotation as rotation  # one rule for buffer rotations, found alike in both
from npuc.isa.instr import get_def
from npuc.isa.loops import MAX_BODY, group, slot_offset
from npuc.kir.tile_program import Step

MAX_ITERATIONS = get_def("LOOP").field("n").max_value


@dataclass(frozen=True, slots=True)
class Move:
    """Field ``field`` of body step ``step`` advances by ``stride`` each iteration, or by
    ``((k + phase) mod period - phase) * stride`` in iteration ``k`` when ``period`` is not 0
    (a buffer of a rotation of ``period`` places that the nest enters at place ``phase``:
    :func:`npuc.isa.loops.slot_offset`)."""

    step: int
    field: str
    stride: int
    period: int = 0
    phase: int = 0

    def offset(self, k: int) -> int:
        return slot_offset(k, self.stride, self.period, self.phase)


@dataclass(frozen=True)
class LoopNest:
    """``n`` iterations of ``body`` (the steps of iteration 0, in program order) whose fields
    move as ``moves`` say."""

    body: tuple[Step, ...]
    n: int
    moves: tuple[Move, ...]

    @property
    def period(self) -> int:
        """The least common period of the moves (1 without periodic moves)."""
        from math import lcm

        return lcm(1, *(m.period for m in self.moves if m.period))

    def iteration(self, k: int) -> list[tuple[str, dict[str, Any]]]:
        """The (op, fields) of every step of iteration ``k``."""
        out = [(s.op, s.kwargs()) for s in self.body]
        for m in self.moves:
            f = out[m.step][1]
            f[m.field] = f[m.field] + m.offset(k)
        return out


@dataclass(frozen=True)
class StepRecorder:
    """An emitter stand-in that records ``emit`` calls as steps of the current iteration
    (``at``), for kernels that write their schedule through an emitter (the array engine)."""

    target: Any
    steps: list[Step]
    inner_tiles: list[int]  # the inner iteration of each step (``at``'s second argument)
    tile: list[int]

    @staticmethod
    def new(target: Any) -> "StepRecorder":
        return StepRecorder(target, [], [], [-1, -1])

    def at(self, tile: int, inner: int = -1) -> None:
        self.tile[:] = [tile, inner]

    def emit(self, op: str, /, **fields: Any) -> int:
        self.steps.append(Step(op, tuple(fields.items()), self.tile[0]))
        self.inner_tiles.append(self.tile[1])
        return len(self.steps) - 1

    @property
    def inner(self) -> "Retagged":
        """The same steps tagged with the inner iteration."""
        return Retagged(self.steps, self.inner_tiles)


@dataclass(frozen=True)
class Retagged:
    """``steps`` tagged with other iterations (``tiles``), built only for the slices asked for."""

    steps: Sequence[Step]
    tiles: Sequence[int]

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, i: slice) -> list[Step]:
        return [Step(s.op, s.fields, t) for s, t in zip(self.steps[i], self.tiles[i])]


def emit_steps(steps: Sequence[Step], em: Any, finer: "Sequence[Step] | Retagged | None" = None,
               phases: bool = False) -> None:
    """Issue ``steps`` through the emitter ``em``: plain steps one by one, runs of repeating
    iterations as loop nests (:meth:`Emitter.emit_loop`) when the emitter takes them
    (``finer``: see :func:`refined`; ``phases``: see :func:`loop_pieces`); an emitter made
    with ``nests=False`` gets every step one by one (the same program, unrolled: what the
    tests compare with)."""
    loops = getattr(em, "emit_loop", None) if getattr(em, "nests", False) else None
    pieces: list = [tuple(steps)]
    if loops is not None:
        pieces = loop_pieces(steps, phases)
        if finer is not None:
            pieces = refined(pieces, finer, phases)
    for piece in pieces:
        if isinstance(piece, LoopNest):
            loops(piece)
        else:
            for s in piece:
                em.emit(s.op, **s.kwargs())


# ------------------------------------------------------------------------------ finding the runs


def chunks(steps: Sequence[Step]) -> list[tuple[Step, ...]]:
    """The steps cut before the first step of every iteration not seen before (the prologue,
    iteration -1 and whatever precedes iteration 0, is the first chunk)."""
    out: list[tuple[Step, ...]] = []
    seen: set[int] = set()
    start = 0
    for i, s in enumerate(steps):
        if s.tile >= 0 and s.tile not in seen:
            seen.add(s.tile)
            if i > start:
                out.append(tuple(steps[start:i]))
            start = i
    if start < len(steps):
        out.append(tuple(steps[start:]))
    return out


def _getter(positions: tuple[int, ...]):
    """A function giving the tuple of a sequence's items at ``positions``."""
    if len(positions) > 1:
        return itemgetter(*positions)
    if positions:
        i = positions[0]
        return lambda vs: (vs[i],)
    return lambda vs: ()


class _Values:
    """Every chunk's shape as a small integer, and its integer field values as one array.

    A chunk's shape is what two repetitions must share: the ops, the field names and every value
    that is neither a plain integer (integers may move) nor None (equal shapes, equal numbers), so
    that runs of chunks compare as lists of integers.  The values make two repetitions compare in
    one vector subtraction rather than field by field.  A step's form (its op, field names and
    value types) is analysed once per loop_pieces call: a step then costs a few C-level calls,
    not a Python loop over its fields."""

    def __init__(self, cs: list[tuple[Step, ...]]) -> None:
        self.cs = cs
        self.shapes: list[int] = []
        self._lists: list[list[int]] = []
        self._names: list[list[list[str]]] = []  # per chunk, per step: the fields of its integers
        self._keys: dict[int, tuple[list[int], list[str]]] = {}
        self._vals: dict[int, np.ndarray] = {}
        self._forms: dict[tuple, tuple] = {}
        self._ids: dict[tuple, int] = {}  # form id of each (op, field names, kept positions)
        ids: dict[tuple, int] = {}
        for chunk in cs:
            shape, vals, names = self._scan(chunk)
            self.shapes.append(ids.setdefault(shape, len(ids)))
            self._lists.append(vals)
            self._names.append(names)

    def _form(self, op: str, names: tuple[str, ...], types: tuple[type, ...]) -> tuple:
        """(form id, getter of the kept values, getter of the integers, their field names) of
        the steps of op ``op`` whose fields have these names and value types."""
        kept = tuple(i for i, t in enumerate(types) if t is not int and t is not NoneType)
        ints = tuple(i for i, t in enumerate(types) if t is int)
        form = self._ids.setdefault((op, names, kept), len(self._ids))
        got = self._forms[(op, names, types)] = (form, _getter(kept), _getter(ints), [names[i] for i in ints])
        return got

    def _scan(self, chunk: tuple[Step, ...]) -> tuple[tuple, list[int], list[list[str]]]:
        """(shape, integer values, per step the fields of its integers) of a chunk."""
        forms = self._forms
        shape: list[tuple] = []
        vals: list[int] = []
        names: list[list[str]] = []
        for st in chunk:
            fields, values = zip(*st.fields) if st.fields else ((), ())
            types = tuple(map(type, values))
            got = forms.get((st.op, fields, types)) or self._form(st.op, fields, types)
            shape.append((got[0], got[1](values)))
            vals.extend(got[2](values))
            names.append(got[3])
        return tuple(shape), vals, names

    def chunk(self, c: int) -> np.ndarray:
        got = self._vals.get(c)
        if got is None:
            got = self._vals[c] = np.array(self._lists[c], np.int64)
        return got

    def keys(self, c: int) -> tuple[list[int], list[str]]:
        """(step, field) of every value of chunk ``c``, as two lists."""
        got = self._keys.get(c)
        if got is None:
            steps: list[int] = []
            fields: list[str] = []
            for j, names in enumerate(self._names[c]):
                steps.extend([j] * len(names))
                fields.extend(names)
            got = self._keys[c] = (steps, fields)
        return got


def _diff(values: _Values, c: int, period: int, other: int) -> np.ndarray:
    """The integer values of the unit of ``period`` chunks at ``other`` less those of the one at
    ``c`` (units of the same shape), as one array."""
    parts = [values.chunk(other + i) - values.chunk(c + i) for i in range(period)]
    return parts[0] if period == 1 else np.concatenate(parts)


def _moved(values: _Values, c: int, period: int, d: np.ndarray) -> dict[tuple[int, str], int]:
    """{(step, field): change} for every integer field of the unit of ``period`` chunks at ``c``
    that ``d`` (:func:`_diff`) changes."""
    nz = np.flatnonzero(d)
    if not len(nz):
        return {}
    out: dict[tuple[int, str], int] = {}
    base = at = 0  # the unit's first step and value in chunk c + i
    i, steps, fields, end = -1, (), (), 0
    for n, delta in zip(nz.tolist(), d[nz].tolist()):
        while n >= end:
            if i >= 0:
                base += len(values.cs[c + i])
                at = end
            i += 1
            steps, fields = values.keys(c + i)
            end = at + len(steps)
        out[(base + steps[n - at], fields[n - at])] = delta
    return out


def _as_arrays(model: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The strides, periods and phases of ``model``'s fields, in its order."""
    return tuple(np.array([m[i] for m in model.values()], np.int64) for i in range(3))


def _keeps(d: np.ndarray, moving: np.ndarray, arrays: tuple[np.ndarray, ...], k: int) -> bool:
    """Whether repetition ``k``, ``d`` (:func:`_diff`) from the first, moves as the model of
    ``arrays`` (:func:`_as_arrays`) says: then :func:`_fit` would return the model itself.
    ``moving``: the positions in ``d`` of the model's fields, in its order (those repetition 1
    moved: the model never gains a field)."""
    strides, periods, phases = arrays
    offsets = np.where(periods == 0, k * strides, ((k + phases) % np.maximum(periods, 1) - phases) * strides)
    return np.array_equal(d[moving], offsets) and np.count_nonzero(d) == np.count_nonzero(offsets)


DRAM_FIELDS = frozenset({"dram_addr"})


def _fit(model: dict, moved: dict, k: int, phases: bool = True) -> dict | None:
    """The (stride, period, phase) model extended by repetition ``k``'s moves, or None: a field
    that has moved by ``k`` strides so far and comes back short of (or to) its first value is a
    buffer rotation (as :func:`npuc.codegen.reroll._advance` finds them); ``phases=False``
    takes only rotations that start at their first place."""
    if not moved.keys() <= model.keys():
        return None
    new = None
    for key, (stride, period, phase) in model.items():
        got = moved.get(key, 0)
        if got == slot_offset(k, stride, period, phase):
            continue
        found = None if period else rotation(stride, got, k)
        if found is not None and found[2] and (not phases or key[1] in DRAM_FIELDS):
            found = None  # a DRAM address that comes back part way is a wrap (the next band), not a buffer
        if found is not None:
            if new is None:
                new = dict(model)
            new[key] = found
            continue
        return None
    return model if new is None else new


def _run(cs: list[tuple[Step, ...]], shapes: list[int], c: int, period: int, values: _Values,
         phases: bool = False) -> tuple[int, dict]:
    """(repetitions, moves model) of the run of ``period``-chunk units starting at chunk ``c``."""
    key = shapes[c:c + period]
    if c + 2 * period > len(cs) or shapes[c + period:c + 2 * period] != key:
        return 1, {}
    size = sum(len(x) for x in cs[c:c + period])
    if not size or size > MAX_BODY:
        return 1, {}
    d = _diff(values, c, period, c + period)
    moving = np.flatnonzero(d)
    model = {k: (s, 0, 0) for k, s in _moved(values, c, period, d).items()}
    arrays = _as_arrays(model)
    # a rotation entered part way only for a unit of several forms (the weight blocks of a channel
    # block over a pool of another size): a unit of one form of the array engine rolls chunk by
    # chunk instead; a tile program's chunk holds steps of three tiles (the next fetch, this
    # tile's epilogue, the next products), each in its own place of the rotation (ANY_FORM)
    phases = phases == ANY_FORM or (phases and len(set(key)) > 1)
    count = 2
    while (c + (count + 1) * period <= len(cs) and count < MAX_ITERATIONS
           and shapes[c + count * period:c + (count + 1) * period] == key):
        d = _diff(values, c, period, c + count * period)
        if _keeps(d, moving, arrays, count):
            count += 1
            continue
        nxt = _fit(model, _moved(values, c, period, d), count, phases)
        if nxt is None:
            break
        if nxt is not model:
            arrays = _as_arrays(nxt)
        model, count = nxt, count + 1
    return count, model


ANY_FORM = "any form"  # ``phases``: rotations entered part way for a unit of any form (tile programs)
MAX_UNIT = 6  # chunks a repeating unit may span (iterations of 2 or 3 forms over 2 or 3 buffer sets)


MOVE_COST = 4  # steps a moving field is worth in a run's score
LOOKAHEAD = 3  # later starts compared with a run's: a rotation of buffer sets rolls from its first set


def _slot_count(model: dict) -> int:
    """The stride slots a run's moves take (their count when they do not fit a LOOP's)."""
    used = group([(j, k, *m) for (j, k), m in model.items()])
    return len(model) if used is None else len(used)


def _best(cs: list[tuple[Step, ...]], shapes: list[int], c: int, values: _Values,
          phases: bool = False) -> tuple[int, int, int, dict]:
    """(score, period in chunks, repetitions, moves) of the best run at chunk ``c``: the steps
    it covers less its body, less :data:`MOVE_COST` per stride slot its moves take (a unit
    spanning every buffer rotation moves only its DRAM addresses, and its body's own repetitions
    then nest within the LOOP's stride slots; moves of one field by one stride at evenly spaced
    steps, the taps of a depthwise tile, share a slot: :func:`npuc.isa.loops.group`)."""
    best = (0, 1, 1, {})
    for period in range(1, MAX_UNIT + 1):
        count, model = _run(cs, shapes, c, period, values, phases)
        if count >= 2:
            covered = sum(len(x) for x in cs[c + period:c + count * period])
            if covered - MOVE_COST * bool(model) <= best[0]:
                continue  # it cannot beat the run found, however few slots it takes
            saved = covered - MOVE_COST * _slot_count(model)
            if saved > best[0]:
                best = (saved, period, count, model)
    return best


def loop_pieces(steps: Sequence[Step], phases: bool = False) -> list[tuple[Step, ...] | LoopNest]:
    """The steps as plain runs and loop nests, in program order (see the module docstring);
    ``phases``: a unit of several forms may meet a buffer rotation part way (:class:`Move`'s
    phase), as the array engine's weight pools do."""
    cs = chunks(steps)
    values = _Values(cs)
    shapes = values.shapes
    out: list[tuple[Step, ...] | LoopNest] = []
    flat: list[Step] = []
    found: dict[int, tuple[int, int, int, dict]] = {}

    def best_at(i: int) -> tuple[int, int, int, dict]:
        if i not in found:
            found[i] = _best(cs, shapes, i, values, phases) if i < len(cs) else (0, 1, 1, {})
        return found[i]

    c = 0
    while c < len(cs):
        saved, period, count, model = best_at(c)
        # peel a first chunk that spoils a better run (one in phase with the buffer rotation)
        # (on a tie, the shorter body: its own repetitions nest more readily)
        if count < 2 or any(best_at(c + k)[0] > saved or (best_at(c + k)[0] == saved and best_at(c + k)[1] < period)
                            for k in range(1, LOOKAHEAD + 1)):
            flat.extend(cs[c])
            c += 1
            continue
        if flat:
            out.append(tuple(flat))
            flat = []
        moves = tuple(Move(j, k, s, p, h) for (j, k), (s, p, h) in sorted(model.items()))
        out.append(LoopNest(sum(cs[c:c + period], ()), count, moves))
        c += count * period
    if flat:
        out.append(tuple(flat))
    return out


def refined(pieces: list[tuple[Step, ...] | LoopNest], finer: "Sequence[Step] | Retagged",
            phases: bool = False) -> list[tuple[Step, ...] | LoopNest]:
    """``pieces`` with every plain run cut again by the iterations of ``finer`` (the same steps
    tagged with an inner loop's iterations: the array engine's reduction blocks inside its
    output tiles), so an inner loop rolls where the outer one does not repeat."""
    out: list[tuple[Step, ...] | LoopNest] = []
    pos = 0
    for p in pieces:
        if isinstance(p, LoopNest):
            out.append(p)
            pos += p.n * len(p.body)
            continue
        out.extend(loop_pieces(finer[pos:pos + len(p)], phases) if len(p) > 2 else [p])
        pos += len(p)
    return out


__all__ = ["LoopNest", "Move", "StepRecorder", "chunks", "emit_steps", "loop_pieces", "refined"]
