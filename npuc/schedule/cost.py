"""The analytical cost model of the array kernels.

Instruction times come from the instruction set's own definitions (``InstrDef.timing`` of
``npuc/isa/defs``: the formulas of docs/isa.md), never from a copy of them.  A tiling is costed
by walking its loop nest (:func:`npuc.schedule.problem.steps`) the way the code generator emits
it: which input tiles and weight blocks miss their buffers and are loaded (burst-rounded DMA
cycles), which compute-queue instructions run (weight loads hidden behind the previous MATMUL,
vector work with its latency, zero borders), and when each output tile is stored.  A small
four-timeline model (load queue, compute queue for the array, vector queue for zero borders and
epilogues, store queue, with buffer reuse as the only synchronisation) gives the overlap that
double buffering buys; the DRAM port is shared by loads and stores and goes, as the simulator
gives it (``npuc.runtime.sim.engine``), to the transfer that asks first, a load before a store
on a tie: a store waits, pending, until the walk meets a load that asks after it (or its output
buffer is needed again), so that loads of later steps that ask earlier take the port before it.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from npuc.isa.enums import Dataflow, UnOp
from npuc.isa.instr import build_args, get_def
from npuc.kir import records
from npuc.kir.kernel import COMMUTATIVE_EPILOGUE_OPS, UNARY_EPILOGUE_OPS, qadd_step
from npuc.memo import on_forget
from npuc.schedule.int8_epilogue import Block, qadd_instrs, requant_instrs
from npuc.schedule.problem import (
    ArrayProblem, ArrayTiling, Step, blocks, chunks, footprint, quant_slots, row_tiles, steps,
)
from npuc.schedule.transfers import BandState, Rows, as_streams, band_loads, by_planes, operand_load, output_store, plane_range, quant_key, quant_loads, weight_loads, weight_plan, WeightLoad
from npuc.targets import Target

_ADDRESS_FIELDS = frozenset({"dram_addr", "local_addr", "addr", "in_addr", "out_addr", "w_addr", "dst", "src", "a", "b", "value",
                             "qparams", "table"})


def _built(op: str, fields: dict[str, Any]):
    """(definition, args) of an instruction given without the addresses it does not need."""
    d = get_def(op)
    full = dict(fields)
    for f in d.fields:
        if f.name in _ADDRESS_FIELDS and f.name not in full and f.default is None:
            full[f.name] = 0
    return d, build_args(d, full)


class _Table:
    """Instruction times for one target, memoised by the fields that matter (not addresses)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.cache: dict[tuple, tuple[int, int]] = {}

    def time(self, op: str, fields: dict[str, Any]) -> tuple[int, int]:
        # A DMA's time depends on the memory its DRAM-side address falls in (not the address).
        w = self.target.window_at(fields["dram_addr"]) if "dram_addr" in fields else None
        key = (op, w.index if w is not None else -1) + tuple(
            sorted((k, v) for k, v in fields.items() if k not in _ADDRESS_FIELDS))
        hit = self.cache.get(key)
        if hit is None:
            d, args = _built(op, fields)
            hit = self.cache[key] = d.timing(args, self.target, d.regions(args))
        return hit

    def streamed(self, op: str, fields: dict[str, Any]) -> tuple[int, int]:
        """(busy, latency) of a load of a constant on a target with stream buffers
        (npuc.codegen.constant_streams): a contiguous load then shares the bursts at its seams
        with the pieces before and after it, so it moves its bytes on average, not its whole
        bursts; a strided load is timed as it is."""
        w = self.target.window_at(fields["dram_addr"])
        key = ("stream", op, w.index if w is not None else -1) + tuple(
            sorted((k, v) for k, v in fields.items() if k not in _ADDRESS_FIELDS))
        hit = self.cache.get(key)
        if hit is None:
            d, args = _built(op, fields)
            side = d.regions(args)[0]
            if side.dram_runs()[0] != 1:
                hit = self.time(op, fields)
            else:
                m = w.memory if w is not None else self.target.activation_memory
                hit = (-int(-side.nbytes // m.bytes_per_cycle), m.latency_cycles)
            self.cache[key] = hit
        return hit


@lru_cache(maxsize=16)
def _table(target: Target) -> _Table:
    return _Table(target)


@on_forget
def clear_memo() -> None:
    """Forget the instruction times worked out per target."""
    _table.cache_clear()


def instr_time(target: Target, op: str, fields: dict[str, Any]) -> tuple[int, int]:
    """(busy, latency) cycles of one instruction, from its definition (addresses do not matter)."""
    return _table(target).time(op, fields)


def instr_cycles(target: Target, op: str, fields: dict[str, Any]) -> int:
    busy, lat = instr_time(target, op, fields)
    return busy + lat


# ----------------------------------------------------------------------------- compute pieces


def matmul_time(target: Target, p: ArrayProblem, k: int, n: int, m0: int, m1: int) -> int:
    return instr_time(target, "MATMUL", dict(dtype=p.dtype.name, k=k, n=n, m0=m0, m1=m1))[0]


def weight_load_time(target: Target, p: ArrayProblem, k: int, n: int) -> int:
    return instr_time(target, "LOAD_WEIGHTS", dict(dtype=p.dtype.name, k=k, n=n))[0]


def vector_time(target: Target, instr: str, /, **fields: Any) -> int:
    """Busy plus latency: the in-order compute queue waits for a vector result."""
    return instr_cycles(target, instr, fields)


def epilogue_time(target: Target, p: ArrayProblem, m: int, tn: int) -> int:
    """Compute-queue cycles of turning an m x tn accumulator tile into the stored result:
    the conversion out of the accumulator and the fused epilogue ops on the tile."""
    dt = p.dtype.name
    if p.quant is not None:  # int8: REQUANT with the folded bias on its pre-adder
        total = sum(instr_cycles(target, op, f) for op, f in requant_instrs(
            m, tn, Block("acc", 0, 4, tn * 4), Block("spad", 0, 1, tn), Block("spad", 0, 4, 0), 0, 0))
    else:
        total = vector_time(target, "VCVT", src_dtype="fp32", dst_dtype=dt, n0=tn, n1=m, src_space="acc")
    for e in p.epilogue:
        q = qadd_step(e)
        if q is not None:  # a fused residual qadd: its instructions, timed one by one
            total += sum(instr_cycles(target, op, f) for op, f in qadd_instrs(
                q, m, tn, Block("spad", 0, 1, tn), Block("spad", 0, 1, tn), 0))
        elif e.op in UNARY_EPILOGUE_OPS:
            name = "gelu_tanh" if e.op == "gelu" and e.param("approximate", "none") == "tanh" else e.op
            name = name if name in UnOp.__members__ else "copy"
            total += vector_time(target, "VUN", op=name, dtype=dt, n0=tn, n1=m)
        elif e.operand is not None:
            total += vector_time(target, "VBIN", op="add", dtype=dt, n0=tn, n1=m)
            if e.op == "div":
                total += vector_time(target, "VUN", op="reciprocal", dtype=dt, n0=tn, n1=m)
        else:
            steps_needed = 2 if (e.operand_first and e.op not in COMMUTATIVE_EPILOGUE_OPS) else 1
            total += steps_needed * vector_time(target, "VUN", op="adds", dtype=dt, n0=tn, n1=m)
    return total


def step_compute(target: Target, p: ArrayProblem, t: ArrayTiling, s: Step) -> tuple[int, int, int]:
    """(array cycles, MATMUL count, the first LOAD_WEIGHTS's cycles) of one step: every
    reduction chunk times every column subtile, each MATMUL pipelined behind the one before it
    (paced by the array or by the weight loader filling the next tile beside it).  The step's
    first LOAD_WEIGHTS is not in the array cycles: it is hidden behind the previous step's last
    MATMUL when the array goes straight on (a LOAD_WEIGHTS starts as soon as the MATMUL before it
    has started), and exposed when the step waits for its operands (the walk adds it then)."""
    table = _table(target)
    cols = target.array.cols
    dt = p.dtype.name
    if t.dataflow is Dataflow.output_stationary:
        rows = target.array.rows
        ms = Counter(min(rows, s.m - i) for i in range(0, s.m, rows))
        ns = Counter(min(cols, s.tn - j) for j in range(0, s.tn, cols))
        total = count = 0
        for m, nm in sorted(ms.items()):
            for n, nn in sorted(ns.items()):
                total += nm * nn * table.time("MATMUL_OS", dict(dtype=dt, m=m, k=s.tc, n=n))[0]
                count += nm * nn
        return total, count, 0
    ks = Counter(ch.k for ch in chunks(p, t, s.tc, target.array.rows))
    ns = Counter(min(cols, s.tn - j) for j in range(0, s.tn, cols))
    total = count = 0
    for k, nk in sorted(ks.items()):
        for n, nn in sorted(ns.items()):
            # pipelined: each MATMUL takes the array while the next weight tile loads beside it
            mm = table.time("MATMUL", dict(dtype=dt, k=k, n=n, m0=s.tw, m1=s.th))[0]
            lw = table.time("LOAD_WEIGHTS", dict(dtype=dt, k=k, n=n))[0]
            total += nk * nn * max(mm, lw)
            count += nk * nn
    return total, count, table.time("LOAD_WEIGHTS", dict(dtype=dt, k=max(ks), n=min(cols, s.tn)))[0]


# ----------------------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class Estimate:
    """What the model expects of a tiling: total cycles and where they go."""

    cycles: int
    compute: int  # execute-queue cycles (array + vector + weight loads not hidden)
    array: int  # cycles inside MATMULs
    dma: int  # DRAM-port cycles, loads and stores
    dram_bytes: int  # DRAM bytes the port moves (whole bursts)
    instructions: int
    spad_bytes: int
    acc_bytes: int


class _Pool:
    """LRU buffers, as the code generator allocates them: a key already present is not reloaded."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.keys: OrderedDict[Any, int] = OrderedDict()
        self.free_at = [0] * slots

    def get(self, key: Any) -> tuple[int, bool]:
        if key in self.keys:
            self.keys.move_to_end(key)
            return self.keys[key], True
        if len(self.keys) < self.slots:
            slot = len(self.keys)
        else:
            _, slot = self.keys.popitem(last=False)
        self.keys[key] = slot
        return slot, False


class _Port:
    """The DRAM port, shared by the load and store queues: each transfer takes it for its busy
    cycles at the first free stretch from when its queue asks (the simulator serves requests in
    the order they are made)."""

    def __init__(self) -> None:
        self.busy: list[list[int]] = []  # disjoint [start, end) stretches, in order
        self.floor = 0  # no queue asks before this any more

    def take(self, at: int, cycles: int) -> int:
        """When a transfer asked for at ``at`` starts."""
        b = self.busy
        i = len(b)
        while i > 0 and b[i - 1][1] > at:  # back to the last stretch that ends by ``at``
            i -= 1
        start = at
        while i < len(b) and b[i][0] < start + cycles:
            start = max(start, b[i][1])
            i += 1
        b.insert(i, [start, start + cycles])
        self._merge(i)
        return start

    def _merge(self, i: int) -> None:
        b = self.busy
        if i + 1 < len(b) and b[i][1] == b[i + 1][0]:
            b[i][1] = b.pop(i + 1)[1]
        if i > 0 and b[i - 1][1] == b[i][0]:
            b[i - 1][1] = b.pop(i)[1]

    def forget_before(self, t: int) -> None:
        """Drop the stretches that end before ``t`` (no transfer asks earlier)."""
        b = self.busy
        k = 0
        while k < len(b) - 1 and b[k][1] <= t:
            k += 1
        if k:
            del b[:k]


class _Costs:
    """Per-estimate memo of what a step's transfers and compute cost, keyed by tile class.

    ``shared`` (optional) is a memo for one problem across tilings (the search prices hundreds
    of tilings of one problem): keyed by everything the cost reads of the step and the tiling
    (addresses aside: an instruction's time depends on the memory an address falls in, which
    the search keeps in its key), so that a tiling priced with it gets exactly what it would
    get alone.  The per-estimate memo stays in front of it with its own keys."""

    def __init__(self, target: Target, p: ArrayProblem, t: ArrayTiling, shared: dict | None = None) -> None:
        self.target, self.p, self.t = target, p, t
        self.table = _table(target)
        self.memo: dict[tuple, Any] = {}
        self.shared: dict[tuple, Any] = {} if shared is None else shared
        self.streams = target.stream_buffers > 0

    def _pure(self, key: tuple, fn) -> Any:
        hit = self.shared.get(key)
        if hit is None:
            hit = self.shared[key] = fn()
        return hit

    def dmas(self, instrs: list[tuple[str, dict]], constant: bool = False) -> tuple[tuple[int, int], ...]:
        """(busy, latency) of each DMA (``constant``: loads of a constant, which stream buffers
        read piece after piece: :meth:`_Table.streamed`)."""
        if constant and self.streams:
            return tuple(self.table.streamed(op, f) for op, f in instrs)
        return tuple(self.table.time(op, f) for op, f in instrs)

    def input(self, s: Step, state: BandState | None, same: bool) -> tuple[int, int, tuple[tuple[int, int], ...], Rows, BandState]:
        """(zero-fill cycles, fill count, DMA times, local rows written, the buffer's state
        afterwards) of the step's input band (see ``band_loads``)."""
        unfold = self.t.unfold
        where = (unfold, s.oy0, s.th, s.y0, s.bh, s.ox0, s.tw)
        band = self.shared.get(where)
        if band is None:  # the band's rows and the tile's valid columns
            p = self.p
            band = self.shared[where] = (s.oy0 if unfold else (p.y.valid(s.y0, s.bh), s.bh, s.x_rows(p)),
                                         p.x.valid(s.ox0, s.tw))
        key = ("x", s.th, s.tw, s.tc, band[0], band[1], state, same)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._pure(key + (self.t.unfold, self.t.tw), lambda: self._input(s, state, same))
        return hit

    def _input(self, s: Step, state: BandState | None, same: bool) -> tuple:
        fills, loads, rows, after = band_loads(self.p, self.t, s, state, same)
        fill = sum(sum(self.table.time(op, f)) for op, f in fills)
        return (fill, len(fills), self.dmas(loads), rows, after)

    def weights(self, s: Step, planes: bool | tuple[int, int] = False) -> tuple[tuple[int, int], ...]:
        key = ("w", self.t.weight_cols(self.p), s.tc, planes)
        hit = self.memo.get(key)
        if hit is None:
            t = self.t
            pure = ("w", t.unfold, t.wide_weights, self.p.n if t.wide_weights else s.tn, s.tc, planes)
            hit = self.memo[key] = self._pure(pure, lambda: self._weights(s, planes))
        return hit

    def _weights(self, s: Step, planes: bool | tuple[int, int]) -> tuple[tuple[int, int], ...]:
        loads = weight_loads(self.p, self.t, s)
        if planes is True:
            loads = by_planes(loads)
        elif planes:
            loads = plane_range(loads, *planes)
        if self.target.weight_decoder is not None:
            loads = as_streams(loads)
        return self.dmas(loads, constant=True)

    def operand(self, i: int, o: Any, s: Step) -> tuple[int, int]:
        key = ("o", i, s.th, s.tw, s.tn)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._pure(key, lambda: self.table.time(*operand_load(self.p, o, s)[1]))
        return hit

    def store(self, s: Step) -> tuple[int, int]:
        key = ("s", s.th, s.tw, s.tn)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._pure(key, lambda: self.table.time(*output_store(self.p, s)))
        return hit

    def compute(self, s: Step) -> tuple[int, int, int]:
        key = ("c", s.th, s.tw, s.tn, s.tc)
        hit = self.memo.get(key)
        if hit is None:
            pure = key + (self.t.dataflow, self.t.unfold)
            hit = self.memo[key] = self._pure(pure, lambda: step_compute(self.target, self.p, self.t, s))
        return hit

    def quant(self, s: Step) -> tuple[tuple[tuple[int, int], ...], int, int]:
        """A load of the bias and records: (busy, latency) of each DMA, then the vector cycles and
        the instructions that widen their shifts (npuc.kir.records)."""
        key = ("q", quant_key(self.p, self.t, s)[1])
        hit = self.memo.get(key)
        if hit is None:
            def price():
                instrs = quant_loads(self.p, self.t, s).instrs
                vector = [(op, f) for op, f in instrs if op != "DMA_LOAD"]
                return (self.dmas([i for i in instrs if i[0] == "DMA_LOAD"], constant=True),
                        sum(instr_cycles(self.target, op, f) for op, f in vector), len(vector))
            hit = self.memo[key] = self._pure(key, price)
        return hit

    def drain(self, s: Step) -> int:
        """Latency of the tile's last array instruction: its partial sums leaving the array."""
        key = ("d", s.m, s.tn, s.tc)
        hit = self.memo.get(key)
        if hit is None:
            cols = self.target.array.cols
            n = min(cols, s.tn - (s.tn - 1) // cols * cols)
            dt = self.p.dtype.name
            if self.t.dataflow is Dataflow.output_stationary:
                m = min(self.target.array.rows, s.m - (s.m - 1) // self.target.array.rows * self.target.array.rows)
                hit = self.table.time("MATMUL_OS", dict(dtype=dt, m=m, k=s.tc, n=n))[1]
            else:
                hit = self.table.time("MATMUL", dict(dtype=dt, k=1, n=n, m0=1, m1=1))[1]
            self.memo[key] = hit
        return hit

    def epilogue(self, s: Step) -> int:
        key = ("e", s.m, s.tn)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._pure(key, lambda: epilogue_time(self.target, self.p, s.m, s.tn))
        return hit


class _Walk:
    """The three-timeline walk of one tiling's loop nest (see the module docstring)."""

    def __init__(self, target: Target, p: ArrayProblem, t: ArrayTiling, seq: list[Step],
                 shared: dict | None = None) -> None:
        self.p, self.t, self.seq = p, t, seq
        self.costs = _Costs(target, p, t, shared)
        self.xp = _Pool(t.x_slots)
        self.plan = weight_plan(p, t, seq)  # the weight buffers and loads, as the code generator's
        self.w_free = [0] * t.w_slots  # when the compute last reading each weight buffer ends
        self.w_ready = [0] * t.w_slots  # when each weight buffer's block has arrived
        self.ops = [(i, o, _Pool(2)) for i, o in enumerate(p.operands) if o is not None]
        self.qp = _Pool(quant_slots(p, t) if p.quant is not None else 2)
        self.x_state: dict[int, BandState] = {}
        self.w_loaded = False
        self.x_reads: dict[int, dict[int, int]] = {}  # per input buffer: local row -> last reader's end
        self.out_free = [0, 0]
        self.out_slot = 0
        self.acc_free = [0] * t.acc_slots  # when the epilogue last reading each accumulator tile ends
        self.acc_slot = 0
        self.t_load = self.t_comp = self.t_vec = self.t_store = 0  # when each queue is next free
        self.dram = _Port()
        # the stores not yet given the port: (ready, busy, latency, output slot)
        self.pending: deque[tuple[int, int, int, int]] = deque()
        self.port = self.array = self.compute = self.instrs = 0

    def _dma(self, loads: tuple[tuple[int, int], ...], slot_free: int) -> int:
        """Issue loads on the load queue once their buffer is free; when the last completes."""
        ready = 0
        for busy, lat in loads:
            at = max(self.t_load, slot_free)
            while self.pending and max(self.t_store, self.pending[0][0]) < at:
                self._commit_store()  # asked for the port before this load (on a tie the load goes first)
            self.t_load = self.dram.take(at, busy) + busy
            ready = max(ready, self.t_load + lat)
            self.port += busy
        self.instrs += len(loads)
        return ready

    def _weights(self, i: int, early: bool) -> tuple[int, int] | None:
        """Issue the weight loads the plan puts at step ``i``, the ``early`` ones (before its
        input loads) or the rest; (first plane's arrival, last's) when step ``i``'s own block is
        the kernel's first, loaded by planes."""
        own = None
        for load in self.plan.loads[i]:
            if load.early != early:
                continue
            b = self.plan.slot[load.step]
            if not self.w_loaded:
                pieces = self.costs.weights(self.seq[load.step], planes=True)
                first = self._dma(pieces[:1], self.w_free[b])
                self.w_ready[b] = max(first, self._dma(pieces[1:], self.w_free[b]))
                self.w_loaded = True
                if load.step == i:
                    own = (first, self.w_ready[b])
            else:
                self.w_ready[b] = max(self.w_ready[b] if load.planes and load.planes[0] else 0,
                                      self._dma(self._pieces(load), self.w_free[b]))
        return own

    def _pieces(self, load: WeightLoad) -> tuple[tuple[int, int], ...]:
        """The (busy, latency) of each transfer of ``load`` (its share of the block's planes)."""
        return self.costs.weights(self.seq[load.step], planes=load.planes or False)

    def _input(self, s: Step) -> tuple[int, int, int]:
        """The input loads and border fill of step ``s``: (its buffer, when they are done, the
        fill's vector cycles)."""
        ready = 0
        x_slot, hit = self.xp.get(s.x_key(self.p))
        fill, nfill, loads, (lo, hi), self.x_state[x_slot] = self.costs.input(s, self.x_state.get(x_slot), hit)
        reads = self.x_reads.setdefault(x_slot, {})
        free = max((reads.get(r, 0) for r in range(lo, hi)), default=0)  # the rows' last readers
        if loads:
            ready = self._dma(loads, free)
        if nfill:  # the border of the rows added, on the vector queue
            self.instrs += nfill
            self.t_vec = max(self.t_vec, free) + fill
            ready = max(ready, self.t_vec)
        return x_slot, ready, fill

    def step(self, i: int, s: Step) -> None:
        p, costs = self.p, self.costs
        self._weights(i, early=True)
        x_slot, ready, fill = self._input(s)
        reads = self.x_reads[x_slot]
        w_slot, w_last, tail = self.plan.slot[i], 0, 0
        own = self._weights(i, early=False)
        if own is not None:  # the first block, by planes: the array starts on the first
            ready, w_last = max(ready, own[0]), own[1]
        else:
            ready = max(ready, self.w_ready[w_slot])
        mm, count, lw = costs.compute(s)
        if w_last:  # the chunks of the last plane run after it arrives
            tail = w_last + lw + mm // max(1, len(costs.weights(s, planes=True)))
        self.instrs += count if self.t.dataflow is Dataflow.output_stationary else 2 * count
        self.array += mm
        if s.first:  # a new output tile: its accumulator tile must be free of the last epilogue
            ready = max(ready, self.acc_free[self.acc_slot])
        # the first LOAD_WEIGHTS runs beside the previous MATMUL unless the step waits
        self.compute += fill + mm + max(0, min(lw, ready + lw - self.t_comp))
        self.t_comp = max(self.t_comp + mm, ready + lw + mm, tail)
        self.xp.free_at[x_slot] = self.w_free[w_slot] = self.t_comp
        r0, r1 = s.x_rows(p)
        for r in range(r0, r1):
            reads[r] = self.t_comp
        if s.last:
            self._finish(s)

    def _finish(self, s: Step) -> None:
        """Epilogue operands, conversion and epilogue on the compute queue, the store."""
        costs = self.costs
        op_ready = 0
        used = []
        for i, o, pool in self.ops:
            soy, sox, sn = o.strides
            slot, hit = pool.get((o.addrs[s.b] + s.oy0 * soy + s.ox0 * sox + s.n0 * sn, s.th, s.tw, s.tn))
            used.append((pool, slot))
            if not hit:
                op_ready = max(op_ready, self._dma((costs.operand(i, o, s),), pool.free_at[slot]))
        epi = costs.epilogue(s)
        if self.p.quant is not None:
            slot, hit = self.qp.get(quant_key(self.p, self.t, s))
            used.append((self.qp, slot))
            if not hit:
                loads, widen, count = costs.quant(s)
                op_ready = max(op_ready, self._dma(loads, self.qp.free_at[slot]))
                epi += widen
                self.instrs += count
        self.instrs += 1 + len(self.p.epilogue)
        # the epilogue reads the accumulators once the last product has drained out of the array
        done = self.t_comp + self.costs.drain(s)
        while any(slot == self.out_slot for *_, slot in self.pending):  # the output buffer's last store
            self._commit_store()
        self.t_vec = max(self.t_vec, done, self.out_free[self.out_slot], op_ready) + epi
        self.compute += epi
        for pool, slot in used:
            pool.free_at[slot] = self.t_vec
        self.acc_free[self.acc_slot] = self.t_vec
        self.acc_slot = (self.acc_slot + 1) % len(self.acc_free)
        busy, lat = costs.store(s)
        # the store gets the port after the loads the walk meets later but that ask before it
        self.pending.append((self.t_vec, busy, lat, self.out_slot))
        self.out_slot ^= 1
        self.port += busy
        self.instrs += 1

    def _commit_store(self) -> None:
        """The oldest pending store takes the port, from when its epilogue is done and the store
        before it has left the port."""
        ready, busy, lat, slot = self.pending.popleft()
        at = max(self.t_store, ready)
        self.t_store = self.dram.take(at, busy) + busy
        self.dram.forget_before(min(self.t_load, self.t_store))
        self.out_free[slot] = self.t_store + lat


def estimate(target: Target, p: ArrayProblem, t: ArrayTiling, shared: dict | None = None) -> Estimate:
    """Walk the loop nest of ``t`` and estimate its cycles on ``target``: the last of the
    compute queue, the store queue, and the DRAM port's total busy time (plus latencies).
    ``shared``: the problem's memo across tilings (see ``_Costs``)."""
    seq = list(steps(p, t))
    w = _Walk(target, p, t, seq, shared)
    for i, s in enumerate(seq):
        w.step(i, s)
    while w.pending:
        w._commit_store()
    lat = target.dma.latency_cycles
    total = max(w.t_comp, w.t_vec, w.t_store + lat, w.port + 2 * lat)
    fp = footprint(p, t)
    return Estimate(total, w.compute, w.array, w.port, w.port * target.dma.bytes_per_cycle, w.instrs + 1,
                    fp.spad(t), fp.acc)


def quick_estimate(target: Target, p: ArrayProblem, t: ArrayTiling, shared: dict | None = None) -> tuple[int, int]:
    """A walk-free estimate for ranking candidates, (cycles, DRAM port cycles): loads counted per
    input band and weight block from the loop order and buffer counts, compute summed per tile
    class (each step's first LOAD_WEIGHTS included: without the walk it is not known which
    steps wait for their operands), total = the larger of compute and DMA plus the first tile's
    load.  ``shared``: the problem's memo across tilings (see ``_Costs``)."""
    costs = _Costs(target, p, t, shared)
    rts, xs, ns, cs = row_tiles(p, t), blocks(p.x.out, t.tw), blocks(p.n, t.tn), blocks(p.c, t.tc)
    bands = blocks(p.y.out, t.band_rows)
    S, NB, CB = len(bands) * len(xs), len(ns), len(cs)
    WB = 1 if t.wide_weights else NB  # weight blocks per reduction block
    T = len(rts) * len(xs)  # output tiles per channel block
    xb = len(set(p.x_addrs)) if t.x_slots >= S * CB else p.batches
    wb = len(set(p.w_addrs)) if t.w_slots >= WB * CB else p.batches
    if t.order == "m_outer":
        x_loads = S * CB if (CB == 1 or t.x_slots >= CB) else S * NB * CB
        w_loads = WB * CB if t.w_slots >= WB * CB else T * NB * CB
    else:
        x_loads = S * CB if t.x_slots >= S * CB else S * NB * CB
        # one channel block's weight blocks of every reduction block held: each loaded once
        w_loads = WB * CB if (CB == 1 or t.w_slots >= CB) else T * NB * CB
    comp = epi = store = 0
    ox0 = xs[len(xs) // 2][0]
    ths = Counter(r.th for r in rts)
    tws, tns, tcs = (sorted(Counter(b[1] for b in bs).items()) for bs in (xs, ns, cs))
    for th, ny in sorted(ths.items()):
        r = next(r for r in rts if r.th == th)
        for tw, nx in tws:
            for tn, nn in tns:
                for tc, nc in tcs:
                    s = Step(0, r.oy0, th, ox0, tw, 0, tn, 0, tc, True, True, r.y0, r.bh)
                    mm, _, lw = costs.compute(s)
                    comp += ny * nx * nn * nc * (mm + lw)
                s = Step(0, r.oy0, th, ox0, tw, 0, tn, 0, cs[0][1], True, True, r.y0, r.bh)
                epi += ny * nx * nn * costs.epilogue(s)
                store += ny * nx * nn * (costs.store(s)[0] + sum(costs.operand(i, o, s)[0] for i, o in enumerate(p.operands) if o is not None and not o.spatial_broadcast))
    mid = bands[len(bands) // 2]
    whole = Step(0, mid[0], mid[1], ox0, xs[0][1], 0, ns[0][1], 0, cs[0][1], True, True, mid[0], mid[1])
    x_one = sum(b for b, _ in costs.input(whole, None, False)[2])  # one whole band
    first = Step(0, 0, rts[0].th, 0, xs[0][1], 0, ns[0][1], 0, cs[0][1], True, True, 0, rts[0].bh)
    x_first = sum(b for b, _ in costs.input(first, None, False)[2])  # the first tile's rows
    w_one = sum(b for b, _ in costs.weights(first))
    x_dma, w_dma = xb * x_loads * x_one, wb * w_loads * w_one
    dma = p.batches * store + x_dma + w_dma
    # one accumulator tile: the array waits for every epilogue; two: the two queues overlap
    work = comp + epi if t.acc_slots == 1 else max(comp, epi)
    # an operand reloaded into a single buffer: its loads wait for the compute, and it for them
    serial = (x_dma if t.x_slots == 1 and x_loads > 1 else 0) + (w_dma if t.w_slots == 1 and w_loads > 1 else 0)
    return max(p.batches * work + serial, dma) + x_first + w_one + 2 * target.dma.latency_cycles, dma


def compulsory_bytes(p: ArrayProblem) -> int:
    """DRAM bytes no schedule avoids: every distinct input, weight, epilogue operand and (int8)
    bias and REQUANT record block read once, the output written once."""
    es = p.es
    total = (
        len(set(p.x_addrs)) * p.y.size * p.x.size * p.c
        + len(set(p.w_addrs)) * p.y.kernel * p.x.kernel * p.c * p.n
        + p.batches * p.y.out * p.x.out * p.n
    ) * es
    for o in p.operands:
        if o is not None:
            rows = 1 if o.spatial_broadcast else p.y.out * p.x.out
            cols = 1 if o.channel_broadcast else p.n
            total += len(set(o.addrs)) * rows * cols * es
    if p.quant is not None:  # int32 bias [n] and stored records (npuc.kir.records)
        total += len(set(p.quant.bias_addrs)) * p.n * 4 + len(set(p.quant.records_addrs)) * p.n * records.BYTES_PER_CHANNEL
    return total


def lower_bound(target: Target, p: ArrayProblem) -> int:
    """max(MACs / processing elements, compulsory DRAM bytes / bandwidth): what no schedule beats."""
    return max(-(-p.macs // target.peak_macs_per_cycle), -(-compulsory_bytes(p) // target.dma.bytes_per_cycle))
