"""Code generation for the systolic array: one engine for convolutions and matrix products.

The engine emits an :class:`~npuc.schedule.problem.ArrayProblem` under a chosen
:class:`~npuc.schedule.problem.ArrayTiling` by walking the same loop nest as the cost model
(:func:`npuc.schedule.problem.steps`).  Per step:

1. the input band's rows that the tile needs and its buffer does not hold yet (a band spans one
   or several row tiles, so the rows neighbouring tiles share are loaded once): the DMA of the
   valid part, then, for a band new to its buffer, VFILL of the zero border (only when the
   buffer's last band had a different border);
2. the weight blocks the plan loads at this step (``weight_plan``: its own, unless a buffer
   already holds it, after the input loads; pieces of later steps' blocks into buffers nothing
   reads before them, before the input loads);
3. per output-column subtile (<= array.cols) and reduction chunk (<= array.rows): LOAD_WEIGHTS
   and one MATMUL whose two-level row loop walks the whole th x tw output tile over the input
   tile (m0 = tw pixels at the horizontal step, m1 = th rows at the row step), accumulating in
   ACC over chunks and reduction blocks;
4. after the last reduction block: the epilogue operands (kept while they do not change, so a
   bias is loaded once per channel block), ACC -> scratchpad conversion, the fused epilogue
   (``npuc.codegen.epilogue``), one DMA_STORE of the tile.  int8 (``ArrayProblem.quant``): the
   int32 accumulators get the folded bias added in place (VBIN add in ACC) and REQUANT writes
   the int8 tile per channel with the output zero point and clamp; the bias and the REQUANT
   records of a channel block are loaded once while the block does not change; padding cells
   hold the input zero point.  A fused residual qadd (``npuc.schedule.int8_epilogue``) then
   adds the operand tile to the int8 tile in place with QADD, the qadd's zero points, factors
   and record (loaded once).

Input buffers alternate (LRU over a pool) and weight buffers follow the weight plan, so with
the emitter's automatic tokens the load of the next tile overlaps the compute of this one and
the store of this tile overlaps the next compute.  With two accumulator tiles
(``ArrayTiling.acc_slots``) the epilogue of one output tile, on the vector queue, overlaps the
matrix products of the next.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from npuc.codegen.emitter import Emitter
from npuc.codegen.epilogue import Tile, apply_epilogue, emit_acc_to_tile, emit_bias_requant, load_step_operand, Piece
from npuc.codegen.kernel import SramArena
from npuc.codegen.loop_nest import StepRecorder, emit_steps
from npuc.kir.kernel import qadd_step
from npuc.kir.tensor import DramTensor
from npuc.isa.enums import Dataflow, DType
from npuc.schedule.int8_epilogue import Block, qadd_instrs
from npuc.schedule.problem import (
    QADD_RECORD_BYTES,
    ArrayProblem,
    ArrayTiling,
    InputGeometry,
    Step,
    chunks,
    footprint,
    input_geometry,
    steps,
    weight_rows,
)
from npuc.schedule.transfers import BandState, band_loads, output_store, quant_loads, weight_plan


class _Buffers:
    """A pool of equal scratchpad buffers reused least-recently-used first."""

    def __init__(self, arena: SramArena, slots: int, nbytes: int, what: str) -> None:
        self.addrs = [arena.alloc(nbytes, f"{what} {i}") for i in range(slots)]
        self.keys: OrderedDict[Any, int] = OrderedDict()
        self.data: dict[int, Any] = {}

    def get(self, key: Any) -> tuple[int, bool]:
        """(buffer index, whether it already holds ``key``)."""
        if key in self.keys:
            self.keys.move_to_end(key)
            return self.keys[key], True
        if len(self.keys) < len(self.addrs):
            slot = len(self.keys)
        else:
            _, slot = self.keys.popitem(last=False)
        self.keys[key] = slot
        return slot, False


def _shifted(fields: dict[str, Any], base: int, keys: tuple[str, ...]) -> dict[str, Any]:
    out = dict(fields)
    for k in keys:
        if k in out:
            out[k] = out[k] + base
    return out


class ArrayEngine:
    """Emits one array problem with one tiling (see the module docstring)."""

    def __init__(self, p: ArrayProblem, t: ArrayTiling, em: Emitter, operand_names: tuple[str, ...] = ()) -> None:
        self.p, self.t, self.em = p, t, em
        # an emitter that only counts data movement (the network-level memory plan's) gets the
        # loads and stores alone: no LOAD_WEIGHTS or MATMUL is built for it
        self.moves_only = bool(getattr(em, "moves_only", False))
        target = em.target
        self.rows, self.cols = target.array.rows, target.array.cols
        fp = footprint(p, t)
        spad = SramArena("scratchpad", target.scratchpad.size_bytes, owner=p.name)
        acc = SramArena("accumulator", target.accumulator.size_bytes, owner=p.name)
        self.x = _Buffers(spad, t.x_slots, fp.x_slot, "input tile")
        self.w_addrs = [spad.alloc(fp.w_slot, f"weight block {i}") for i in range(t.w_slots)]
        self.seq = list(steps(p, t))
        self.w_plan = weight_plan(p, t, self.seq)
        self.out = [spad.alloc(fp.out_slot, f"output tile {i}") for i in range(2)]
        self.ops = [
            (i, o, _Buffers(spad, 2, nbytes, f"epilogue operand {i}"), nbytes)
            for (i, o), nbytes in zip(
                [(i, o) for i, o in enumerate(p.operands) if o is not None], fp.operand_slots
            )
        ]
        self.operand_names = operand_names
        self.q = _Buffers(spad, fp.quant_slots, fp.quant_slot, "bias and requant records") if p.quant is not None else None
        self.accs = [acc.alloc(fp.acc_slot, f"accumulator tile {i}") for i in range(t.acc_slots)]
        adds = p.quant.adds if p.quant is not None else 0
        self.add_slots = [spad.alloc(QADD_RECORD_BYTES, f"qadd record {i}") for i in range(adds)]
        self.add_records: dict[int, int] = {}  # epilogue step -> scratchpad address of its loaded record
        self.acc_slot = 0
        self.x_state: dict[int, BandState] = {}  # what each input buffer holds
        self.w_loaded = False
        self.by_planes = False  # this step's weight block arrives plane by plane
        self.out_slot = 0
        self.reductions: dict[int, tuple[InputGeometry, int, list]] = {}

    def run(self) -> None:
        """Emit the problem: the loop nest's steps recorded, one iteration per output tile (its
        reduction blocks, then its epilogue and store) and an inner one per reduction block, then
        handed to the emitter as loop nests (:func:`npuc.codegen.loop_nest.emit_steps`)."""
        em = self.em
        rec = self.em = StepRecorder.new(em.target)
        tile = -1
        try:
            for i, s in enumerate(self.seq):
                tile += s.first
                rec.at(tile, i)
                self._step(i, s)
        finally:
            self.em = em
        emit_steps(rec.steps, em, rec.inner, phases=True)  # weight pools rotate over channel blocks

    # ------------------------------------------------------------------ one step

    @property
    def acc(self) -> int:
        return self.accs[self.acc_slot]

    def _step(self, i: int, s: Step) -> None:
        self._weights(i, early=True)
        xb = self._input(s)
        wb = self._weights(i, early=False)
        if self.moves_only:
            self.by_planes = False
        else:
            self._compute(s, xb, wb)
        if s.last:
            self._finish(s)

    def _input(self, s: Step) -> int:
        slot, hit = self.x.get(s.x_key(self.p))
        base = self.x.addrs[slot]
        fills, loads, _, self.x_state[slot] = band_loads(self.p, self.t, s, self.x_state.get(slot), hit)
        for op, f in loads:
            self.em.emit(op, **_shifted(f, base, ("local_addr",)))
        # The border is zeroed after the load is issued: the two write disjoint elements, and a
        # VFILL first would hold the load behind the compute queue (no prefetch).
        for op, f in fills:
            self.em.emit(op, **_shifted(f, base, ("dst",)))
        return base

    def _weights(self, i: int, early: bool) -> int:
        """Issue the weight loads the plan puts at step ``i`` (its own block's, or later
        steps' into buffers no step before those reads again: ``weight_plan``), the ``early``
        ones (before the step's input loads) or the rest; the address of step ``i``'s block."""
        plan = self.w_plan
        for load in plan.loads[i]:
            if load.early != early:
                continue
            # the kernel's first block by planes: the array starts on the first chunk
            first, self.w_loaded = not self.w_loaded, True
            self.by_planes |= first and load.step == i
            base = self.w_addrs[plan.slot[load.step]]
            for op, f in plan.instrs(self.p, self.t, self.seq, load, first):
                self.em.emit(op, **_shifted(f, base, ("local_addr",)))
        return self.w_addrs[plan.slot[i]]

    def _reduction(self, tc: int) -> tuple[InputGeometry, int, list]:
        """(input geometry, weight rows, reduction chunks) of a reduction block of ``tc`` channels
        (the same for every step of the block's size: computed once)."""
        got = self.reductions.get(tc)
        if got is None:
            p, t = self.p, self.t
            got = self.reductions[tc] = (input_geometry(p, t, tc), weight_rows(p, tc), chunks(p, t, tc, self.rows))
        return got

    def _compute(self, s: Step, xb: int, wb: int) -> None:
        p, t, es = self.p, self.t, self.p.es
        g, krows, cks = self._reduction(s.tc)
        dt = p.dtype.name
        in_s0 = p.x.out_step * g.slot * es
        in_s1 = (g.row_elems if t.unfold else p.y.out_step * g.row_elems) * es
        xb += s.x_rows(p)[0] * g.row_elems * es  # the tile's first row in its band
        if t.dataflow is Dataflow.output_stationary:
            self._compute_os(s, xb, wb, g.slot * es)
            return
        wcols, wcol = (p.n, s.n0) if t.wide_weights else (s.tn, 0)  # the block's columns, the step's first
        cols = range(0, s.tn, self.cols)
        # reduction chunks outside while the weight block arrives plane by plane (each chunk's
        # products start as soon as its plane is in), column subtiles outside otherwise
        order = ([(j, i) for i in range(len(cks)) for j in cols] if self.by_planes
                 else [(j, i) for j in cols for i in range(len(cks))])
        self.by_planes = False
        for j, i in order:
            n, ch = min(self.cols, s.tn - j), cks[i]
            if p.weights_n_major:
                lw = dict(addr=wb + (j * krows + ch.w_row) * es, s_k=es, s_n=krows * es)
            else:
                lw = dict(addr=wb + (ch.w_row * wcols + wcol + j) * es, s_n=es, s_k=wcols * es)
            self.em.emit("LOAD_WEIGHTS", dtype=dt, k=ch.k, n=n, **lw)
            self.em.emit(
                "MATMUL", dtype=dt, acc=not (s.first and i == 0), k=ch.k, n=n,
                in_addr=xb + ch.in_off * es, m0=s.tw, m1=s.th, in_s0=in_s0, in_s1=in_s1,
                out_addr=self.acc + j * 4, out_s0=s.tn * 4, out_s1=s.tw * s.tn * 4,
            )

    def _compute_os(self, s: Step, xb: int, wb: int, pixel_bytes: int) -> None:
        """Output-stationary: one MATMUL_OS per rows x cols block of the output tile, over the
        whole reduction block (1x1 windows: the tile's pixels are evenly strided)."""
        es, dt = self.p.es, self.p.dtype.name
        for i in range(0, s.m, self.rows):
            m = min(self.rows, s.m - i)
            for j in range(0, s.tn, self.cols):
                self.em.emit(
                    "MATMUL_OS", dtype=dt, acc=not s.first, m=m, k=s.tc, n=min(self.cols, s.tn - j),
                    in_addr=xb + i * pixel_bytes, in_s=pixel_bytes, w_addr=wb + (s.w_col(self.t) + j) * es,
                    w_s=(self.p.n if self.t.wide_weights else s.tn) * es,
                    out_addr=self.acc + (i * s.tn + j) * 4, out_s=s.tn * 4,
                )

    def _finish(self, s: Step) -> None:
        p = self.p
        loaded = []
        for (i, o, pool, nbytes), name in zip(self.ops, self.operand_names):
            soy, sox, sn = o.strides
            addr = o.addrs[s.b] + s.oy0 * soy + s.ox0 * sox + s.n0 * sn
            view = DramTensor(name, (s.th, s.tw, s.tn), p.dtype, addr, (soy, sox, sn))
            key = (addr, s.th, s.tw, s.tn)
            slot, hit = pool.get(key)
            if not hit:
                pool.data[slot] = load_step_operand(self.em, p.epilogue[i], (Piece(0, view),), s.m, s.tn,
                                                    pool.addrs[slot], nbytes)
            loaded.append((i, pool.data[slot]))
        operands: list[Tile | None] = [None] * len(p.epilogue)
        for i, tile in loaded:
            operands[i] = tile
        out = Tile(self.out[self.out_slot], s.m, s.tn, p.dtype)
        acc = Tile(self.acc, s.m, s.tn, DType.fp32 if p.dtype.is_float else DType.int32, space="acc")
        if p.quant is not None:
            self._requantize(s, acc, out)
            self._int8_epilogue(s, out, operands)
        else:
            emit_acc_to_tile(self.em, acc, out)
            apply_epilogue(self.em, p.epilogue, out, operands)
        op, f = output_store(p, s)
        self.em.emit(op, **_shifted(f, out.addr, ("local_addr",)))
        self.out_slot ^= 1
        self.acc_slot = (self.acc_slot + 1) % len(self.accs)

    def _int8_epilogue(self, s: Step, out: Tile, operands: list[Tile | None]) -> None:
        """The steps after REQUANT on the int8 tile: clamps, and fused qadds."""
        for i, (e, opnd) in enumerate(zip(self.p.epilogue, operands)):
            q = qadd_step(e)
            if q is None:
                apply_epilogue(self.em, (e,), out, (opnd,))
                continue
            y = Block(out.space, out.addr, out.s0, out.s1)
            r = Block(opnd.space, opnd.addr, opnd.s0, opnd.s1)
            for op, f in qadd_instrs(q, s.m, s.tn, y, r, self._add_record(i)):
                self.em.emit(op, **f)

    def _add_record(self, i: int) -> int:
        """The scratchpad address of epilogue step ``i``'s qadd record, loaded on first use."""
        if i not in self.add_records:
            addr = self.add_slots[len(self.add_records)]
            self.em.emit("DMA_LOAD", esize=4, dram_addr=self.p.quant.add_records[i], local_addr=addr, n0=2)
            self.add_records[i] = addr
        return self.add_records[i]

    def _requantize(self, s: Step, acc: Tile, out: Tile) -> None:
        """int8: add the folded bias to the int32 accumulators, then REQUANT per channel."""
        q = self.p.quant
        ql = quant_loads(self.p, self.t, s)
        slot, hit = self.q.get(ql.key)
        base = self.q.addrs[slot]
        if not hit:
            for op, f in ql.instrs:
                self.em.emit(op, **_shifted(f, base, ("local_addr", "src", "dst")))
        bias = Tile(base + ql.first * 4, acc.rows, acc.cols, DType.int32, s1=0)
        records = base + ql.records + ql.first * 8
        emit_bias_requant(self.em, acc, out, bias, records, q.zero_point, q.qmin, q.qmax)
