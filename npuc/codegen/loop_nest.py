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
field moves (:class:`Move`: body step, field, stride, period).  Whatever does not repeat (the
prologue, the first and last iterations of a pipeline, a last tile of another size) stays a
list of plain steps.

The emitter (:meth:`npuc.codegen.emitter.Emitter.emit_loop`) takes a nest as it is: it builds
and checks the body's instructions once and derives every iteration's instruction by adding
the strides, and the code generation writes the nest as a ``LOOP`` directly
(:func:`npuc.codegen.reroll.roll`), so no search for repeated bodies runs over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from npuc.isa.instr import get_def
from npuc.isa.loops import MAX_BODY, MAX_PERIOD
from npuc.kir.tile_program import Step

MAX_ITERATIONS = get_def("LOOP").field("n").max_value


@dataclass(frozen=True, slots=True)
class Move:
    """Field ``field`` of body step ``step`` advances by ``stride`` each iteration, or by
    ``(k mod period) * stride`` in iteration ``k`` when ``period`` is not 0."""

    step: int
    field: str
    stride: int
    period: int = 0

    def offset(self, k: int) -> int:
        return (k % self.period if self.period else k) * self.stride


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
    tile: list[int]

    @staticmethod
    def new(target: Any) -> "StepRecorder":
        return StepRecorder(target, [], [-1])

    def at(self, tile: int) -> None:
        self.tile[0] = tile

    def emit(self, op: str, /, **fields: Any) -> int:
        self.steps.append(Step(op, tuple(fields.items()), self.tile[0]))
        return len(self.steps) - 1


def emit_steps(steps: Sequence[Step], em: Any) -> None:
    """Issue ``steps`` through the emitter ``em``: plain steps one by one, runs of repeating
    iterations as loop nests (:meth:`Emitter.emit_loop`) when the emitter takes them."""
    loops = getattr(em, "emit_loop", None)
    for piece in loop_pieces(steps) if loops is not None else (tuple(steps),):
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


def _shape(chunk: tuple[Step, ...]) -> tuple:
    """What two repetitions must share: the ops, the field names and every value that is not a
    plain integer (integers may move)."""
    return tuple((s.op,) + tuple((k, None if type(v) is int else v) for k, v in s.fields) for s in chunk)


def _moved(a: tuple[Step, ...], b: tuple[Step, ...]) -> dict[tuple[int, str], int]:
    """{(step, field): b - a} for every integer field that differs."""
    out = {}
    for j, (x, y) in enumerate(zip(a, b)):
        if x.fields == y.fields:
            continue
        for (k, u), (_, v) in zip(x.fields, y.fields):
            if u != v:
                out[(j, k)] = v - u
    return out


def _fit(model: dict, moved: dict, k: int) -> dict | None:
    """The (stride, period) model extended by repetition ``k``'s moves, or None (as
    :func:`npuc.codegen.reroll._advance`)."""
    new = None
    for key, (stride, period) in model.items():
        got = moved.get(key, 0)
        if got == (k % period if period else k) * stride:
            continue
        if got == 0 and not period and k <= MAX_PERIOD:
            if new is None:
                new = dict(model)
            new[key] = (stride, k)
            continue
        return None
    if any(key not in model for key in moved):
        return None
    return model if new is None else new


def _run(cs: list[tuple[Step, ...]], shapes: list[tuple], c: int) -> tuple[int, dict]:
    """(repetitions, moves model) of the run of chunks starting at chunk ``c``."""
    first = cs[c]
    if c + 1 >= len(cs) or shapes[c + 1] != shapes[c] or not first or len(first) > MAX_BODY:
        return 1, {}
    model = {key: (s, 0) for key, s in _moved(first, cs[c + 1]).items()}
    count = 2
    while c + count < len(cs) and count < MAX_ITERATIONS and shapes[c + count] == shapes[c]:
        nxt = _fit(model, _moved(first, cs[c + count]), count)
        if nxt is None:
            break
        model, count = nxt, count + 1
    return count, model


def loop_pieces(steps: Sequence[Step]) -> list[tuple[Step, ...] | LoopNest]:
    """The steps as plain runs and loop nests, in program order (see the module docstring)."""
    cs = chunks(steps)
    shapes = [_shape(c) for c in cs]
    out: list[tuple[Step, ...] | LoopNest] = []
    flat: list[Step] = []
    c = 0
    runs: dict[int, tuple[int, dict]] = {}

    def run_at(i: int) -> tuple[int, dict]:
        if i not in runs:
            runs[i] = _run(cs, shapes, i) if i < len(cs) else (0, {})
        return runs[i]

    while c < len(cs):
        count, model = run_at(c)
        if count < 2 or run_at(c + 1)[0] > count:  # peel a first chunk that spoils a longer run
            flat.extend(cs[c])
            c += 1
            continue
        if flat:
            out.append(tuple(flat))
            flat = []
        moves = tuple(Move(j, k, s, p) for (j, k), (s, p) in sorted(model.items()))
        out.append(LoopNest(cs[c], count, moves))
        c += count
    if flat:
        out.append(tuple(flat))
    return out


__all__ = ["LoopNest", "Move", "StepRecorder", "chunks", "emit_steps", "loop_pieces"]
