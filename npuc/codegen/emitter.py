"""Instruction emission with automatic dependency tokens.

Kernels write instructions in *program order*, as if the machine ran them one after the other:
load a tile, multiply it, store the result.  The :class:`Emitter` then makes the queues of
the decoupled machine respect that order exactly where it matters, and nowhere else: for every
instruction it finds the earlier instructions of *other* queues whose memory regions conflict with
its own (read after write, write after read, write after write; scratchpad, accumulator and DRAM
alike) and are not already ordered before it, and adds the tokens that order them.

Ordering facts are tracked with a vector clock per queue: ``known[q][p]`` is the highest program
index of a queue-``p`` instruction known to have completed before queue ``q``'s next instruction
starts.  In-order queues make that a prefix: the completion of instruction ``j`` implies that every
earlier instruction of its queue has completed (the execute queues, compute and vector, complete
in order; DMA transfers of one queue complete in order because they all pay the same latency
after their turn on the DRAM port).

Token rules (see docs/isa.md): every pair of queues has a token channel each way.  A dependency
of queue ``q`` on instruction ``j`` of queue ``p`` sets ``j``'s signal flag towards ``q`` and the
new instruction's wait flag from ``p``; every token is consumed by the instruction that asked for
it, so the k-th wait on a channel always matches the k-th signal.  Dependencies only point
backwards in program order, so the result cannot deadlock.

Double buffering falls out: a kernel that alternates two scratchpad buffers gets tokens only
between a buffer's consumer and the next load into that same buffer, so the load of tile i+1
overlaps the compute of tile i.
"""

from __future__ import annotations

import bisect
from contextlib import contextmanager
from typing import Any, Iterator

from npuc.errors import CompileError
from npuc.isa.enums import Mem, Queue
from npuc.codegen.loop_nest import LoopNest
from npuc.codegen.loop_tokens import issue_loop, shifted
from npuc.isa.instr import Deps, FieldError, Instr, Program, build_args, get_def, program_problem
from npuc.targets import Target

_COMPUTE = int(Queue.compute)
_NQ = len(Queue)
_EXECUTES = tuple(q.executes for q in Queue)
_PRUNE_EVERY = 512
_COPY = int(Queue.copy)
# the queues that may touch each memory, but the copy queue: it may lag far behind, so the
# accesses forgotten without it are remembered as a horizon it orders after (Emitter._prune)
_REACHED_BY = {m: tuple(int(q) for q in Queue if m in q.reaches and q is not Queue.copy) for m in Mem}
_BIG = 1 << 62


def _queues(bits: int) -> frozenset[Queue]:
    """The queues whose bits are set in ``bits``."""
    return frozenset(q for q in Queue if bits >> q & 1)


# one Deps per combination of flags: waits in the low bits, signals above them
_DEPS = tuple(Deps(_queues(key), _queues(key >> _NQ)) for key in range(1 << 2 * _NQ))


class Emitter:
    """Collects a program in program order and inserts the dependency tokens it needs.

    ``emit("DMA_LOAD", dram_addr=..., ...)`` builds and checks one instruction (fields as in
    docs/isa.md) and returns its program index.  ``with em.source("layer1.0.conv1"):`` labels the
    instructions emitted inside (the debug map).  ``emit_loop(nest)`` appends the iterations of
    a loop nest (:mod:`npuc.codegen.loop_nest`) from its body, built once; the nests emitted are
    listed in :attr:`loops` (``nests=False``: kernels emit every step one by one instead).
    ``finish()`` appends ``END`` and returns the program and the label of every instruction.
    """

    def __init__(self, target: Target, nests: bool = True) -> None:
        self.target = target
        self.nests = nests  # whether kernels hand their repeating tiles over as loop nests (emit_loop)
        self._ops: list[tuple[str, Any]] = []
        self._queues: list[int] = []
        # dependency flags per instruction, one bit per queue (bit q: the queue q)
        self._waits: list[int] = []
        self._signals: list[int] = []
        self._sources: list[str] = []
        # knowledge when each instruction starts; None for an instruction a loop nest copied from
        # a template without a scan: its clock is the template's shifted (:meth:`_clock_of`)
        self._clock_at: list[tuple[int, ...] | None] = []
        # the copied runs of instructions, by first index: (first, template start, template
        # length, loop start); instruction c of a run copies template start + (c - first) mod length
        self._copies: list[tuple[int, int, int, int]] = []
        self._known = [[-1] * _NQ for _ in range(_NQ)]
        # accesses per memory and queue, in program order: (index, lo, hi)
        self._reads: dict[Mem, list[list[tuple[int, int, int]]]] = {m: [[] for _ in range(_NQ)] for m in Mem}
        self._writes: dict[Mem, list[list[tuple[int, int, int]]]] = {m: [[] for _ in range(_NQ)] for m in Mem}
        self._last = [-1] * _NQ  # last program index per queue
        # per queue, the latest of its system-memory accesses forgotten before the copy queue
        # knew it complete: a copy orders after it (every earlier one of its queue with it)
        self._horizon = [-1] * _NQ
        self._pending = [0] * _NQ  # waits of each queue's next instruction (queue bits)
        self._made: list[int] = []  # the producers the last instruction issued was linked after
        self._label = ""
        self._finished = False
        self.loops: list[tuple[int, int, int]] = []  # loop nests emitted: (first index, body, iterations)
        # per nest of ``loops``, its field moves: (body step, field index, stride, period, phase)
        self.loop_moves: list[tuple[tuple[int, int, int, int, int], ...]] = []
        self.replicated = 0  # instructions of loop nests appended without a conflict scan (loop_tokens)

    # ------------------------------------------------------------------ labels

    @contextmanager
    def source(self, label: str) -> Iterator[None]:
        """Label the instructions emitted inside the block (restored afterwards)."""
        saved = self._label
        self._label = label
        try:
            yield
        finally:
            self._label = saved

    def __len__(self) -> int:
        return len(self._ops)

    # ------------------------------------------------------------------ emission

    def emit(self, op: str, /, **fields: Any) -> int:
        """Append one instruction (and the tokens it needs); return its index."""
        if self._finished:
            raise CompileError("the program is already finished")
        return self._issue(self._build(op, fields))

    def emit_loop(self, nest: LoopNest) -> None:
        """Append ``nest.n`` iterations of a loop nest (:mod:`npuc.codegen.loop_nest`).

        The body's instructions are built and checked once; iteration ``k``'s are the body's
        with ``k`` strides added to the moving fields (their ranges and the target's limits
        checked in the iterations where they are extreme: the first period and the last
        iteration).  Tokens are those :meth:`emit` would give every iteration, derived by
        scanning only until the emitter's state repeats (:mod:`npuc.codegen.loop_tokens`), so
        the program is the one the iterations emitted one by one would give; the nest is
        remembered (:attr:`loops`) so that code generation writes it as a LOOP without
        searching for it.  A nest whose moved fields feed another field's default is emitted
        iteration by iteration."""
        if self._finished:
            raise CompileError("the program is already finished")
        body = [self._build(s.op, s.kwargs()) for s in nest.body]
        moves: list[list[tuple[int, int, int]]] = [[] for _ in body]
        for m in nest.moves:
            fields = body[m.step].defn.fields
            index = next(i for i, f in enumerate(fields) if f.name == m.field)
            moves[m.step].append((index, m.stride, m.period, m.phase))
        extremes = sorted({*range(1, min(nest.period, nest.n - 1) + 1), nest.n - 1} - {0})
        # only the steps that move are built again: the others are the body's, built and checked
        moving = [j for j, mv in enumerate(moves) if mv]
        for k in extremes:
            steps = nest.iteration(k)
            built = [self._build(*steps[j]).args for j in moving]
            if built != [shifted(body[j], moves[j], k).args for j in moving]:
                for j in range(nest.n):
                    for op, f in nest.iteration(j):
                        self._issue(self._build(op, f))
                return
        start = len(self._ops)
        issue_loop(self, body, moves, nest.n, nest.period)
        self.loops.append((start, len(body), nest.n))
        self.loop_moves.append(tuple((j, *move) for j, mv in enumerate(moves) for move in mv))

    def wait_for(self, q: Queue, on: Queue) -> None:
        """Make queue ``q``'s next instruction start only after every instruction of queue ``on``
        emitted so far has completed (a token from the latest of them, unless ``q`` already
        knows it complete)."""
        j = self._last[int(on)]
        if j > self._known[int(q)][int(on)]:
            self._link(int(on), j, int(q))

    def finish(self) -> tuple[Program, tuple[str, ...]]:
        """Append END and return the program with its tokens, and each instruction's label."""
        if not self._finished:
            self._append("END", Instr.make("END").args, _COMPUTE)
            self._finished = True
        deps = _DEPS
        instrs = [Instr(op, args, deps[w | sig << _NQ])
                  for (op, args), w, sig in zip(self._ops, self._waits, self._signals)]
        problem = program_problem(instrs)
        if problem:
            raise CompileError(f"internal error: {problem}")
        return Program(tuple(instrs)), tuple(self._sources)

    # ------------------------------------------------------------------ internals

    def _build(self, op: str, fields: dict[str, Any]) -> Instr:
        """One instruction from its fields, checked against the target (CompileError)."""
        try:
            d = get_def(op)
            if d is None:
                raise FieldError(f"unknown instruction '{op}'")
            ins = Instr(op, build_args(d, fields))
        except FieldError as e:
            raise CompileError(f"cannot emit {op} for '{self._label or 'program'}': {e}") from None
        problem = ins.defn.check(ins.args, self.target)
        if problem:
            raise CompileError(f"cannot emit {op} for '{self._label or 'program'}': {problem}")
        return ins

    def _issue(self, ins: Instr) -> int:
        """Order ``ins`` after the accesses it conflicts with and append it; its index."""
        d = ins.defn
        return self._place(ins.op, ins.args, int(d.queue), [(r.mem, r.writes, r.addr, r.end) for r in d.regions(ins.args)])

    def _place(self, op: str, args: Any, q: int, accesses: list[tuple[Mem, bool, int, int]]) -> int:
        """Append an instruction of queue ``q`` whose memory accesses are ``accesses`` (memory,
        written, first byte, one past the last) after the accesses they conflict with; its index."""
        needs = self._conflicts(q, accesses)
        self._order_after(q, needs)
        index = self._append(op, args, q)
        for mem, writes, lo, hi in accesses:
            (self._writes if writes else self._reads)[mem][q].append((index, lo, hi))
        if index % _PRUNE_EVERY == 0:
            self._prune()
        return index

    def _append(self, op: str, args: Any, q: int) -> int:
        index = len(self._ops)
        self._ops.append((op, args))
        self._queues.append(q)
        self._waits.append(self._pending[q])
        self._pending[q] = 0
        self._signals.append(0)
        self._sources.append(self._label)
        known = self._known[q]
        if _EXECUTES[q]:
            # an execute queue starts an instruction only when every earlier one has completed
            known[q] = max(known[q], self._last[q])
        self._clock_at.append(tuple(known))
        self._last[q] = index
        return index

    def _conflicts(self, q: int, accesses: list[tuple[Mem, bool, int, int]]) -> dict[int, int]:
        """For each other queue, the latest conflicting instruction not yet ordered before us.

        Each queue's accesses are kept in program order, so the scan runs from the newest back
        and stops at the first conflict (the latest) or at the first access already known to
        be complete (every older one is too)."""
        known = self._known[q]
        needs: dict[int, int] = {}
        if q == _COPY:
            for p, h in enumerate(self._horizon):
                if h > known[p]:
                    needs[p] = h
        for mem, writes, lo, hi in accesses:
            tables = (self._writes[mem], self._reads[mem]) if writes else (self._writes[mem],)
            for p in range(_NQ):
                if p == q:
                    continue
                for table in tables:
                    floor = max(known[p], needs.get(p, -1))
                    for index, a_lo, a_hi in reversed(table[p]):
                        if index <= floor:
                            break
                        if a_lo < hi and lo < a_hi:
                            needs[p] = index
                            break
        return needs

    def _order_after(self, q: int, needs: dict[int, int]) -> None:
        """Make queue ``q``'s next instruction start after each ``needs[p]`` has completed
        (the producers linked are left in ``_made``)."""
        self._made = made = []
        for p, j in sorted(needs.items()):
            if j > self._known[q][p]:
                self._link(p, j, q)
                made.append(j)

    def _link(self, p: int, j: int, q: int) -> None:
        """Signal from instruction j (queue p) to the next instruction of queue q."""
        self._signals[j] |= 1 << q
        self._pending[q] |= 1 << p
        known = self._known[q]
        after = self._clock_after(j)
        for r in range(_NQ):
            known[r] = max(known[r], after[r])

    def _clock_after(self, j: int) -> tuple[int, ...]:
        """What is known complete once instruction j has completed."""
        c = list(self._clock_of(j))
        p = self._queues[j]
        c[p] = max(c[p], j)
        return tuple(c)

    def _clock_of(self, j: int) -> tuple[int, ...]:
        """What is known complete when instruction j starts."""
        c = self._clock_at[j]
        if c is not None:
            return c
        first, template, length, start = self._copies[bisect.bisect_right(self._copies, (j, _BIG)) - 1]
        t = template + (j - first) % length
        s = j - t
        return tuple(v + s if v >= start else v for v in self._clock_at[t])

    def _prune(self) -> None:
        """Forget accesses that every other queue that may touch their memory
        (:attr:`Queue.reaches`) already knows to be complete; the copy queue, which may lag
        far behind, is not waited for: it orders after the latest access forgotten before it
        knew it complete (``_horizon``), conservatively."""
        for p in range(_NQ):
            for mem, others in _REACHED_BY.items():
                done = min((self._known[q][p] for q in others if q != p), default=_BIG)
                for table in (self._reads, self._writes):
                    lst = table[mem][p]
                    k = bisect.bisect_right(lst, (done, _BIG, _BIG))
                    if k:
                        if mem in Queue.copy.reaches and lst[k - 1][0] > self._known[_COPY][p]:
                            self._horizon[p] = max(self._horizon[p], lst[k - 1][0])
                        del lst[:k]

