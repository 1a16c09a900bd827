"""int8 elementwise kernels on the vector unit: ``qbinary`` (qadd, qmul) and ``lut`` (qlut).

Both see their tensors like ``eltwise`` does: every tensor has the output's logical shape (zero
strides where an operand broadcasts), taken together in the output's physical order with
dimensions merged where all allow it (:func:`canonical`), and cut into ``rows x cols`` tiles
that rotate through three buffer sets (software-pipelined: loads of the next tiles and the store
of the previous one overlap the vector work on this one).

``qbinary`` (inputs a, b and the int32 REQUANT record ``[1, 2]``; ``QuantAttrs.in_zero_points``
= (za, zb), ``factors`` = (fa, fb) for an add) runs ``npuc.quant.arith.run_qadd`` /
``run_qmul`` exactly: one QADD / QMUL per tile, the zero points, factors, the record, the output
zero point and the clamp in its fields (a broadcast operand is loaded once per tile row or column
and read with zero strides); int8 in, int8 out, no int32 buffer.

``lut`` (inputs x and the 256-byte int8 table) is one LUT instruction per tile, in place; the
table is loaded once.
"""

from __future__ import annotations


from npuc.codegen.epilogue import (
    ALIGN,
    MAX_COUNT,
    Tile,
    broadcast_kind,
    load_operand,
    load_pieces,
    rows_block,
    store_pieces,
)
from npuc.codegen.kernel import register_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel, QBinaryAttrs
from npuc.kir.plan import Plan
from npuc.codegen.kernels.vector_common import (
    EltwiseTiling,
    canonical,
    largest_fitting,
    overlap_cap,
    pipeline,
    tile_grid,
    zero_point_problem,
)
from npuc.kir.tensor import DramTensor
from npuc.errors import CompileError
from npuc.isa.enums import DType

NSETS = 3


def _r(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _canonical(k: Kernel, operands: int) -> tuple[list[DramTensor], DramTensor]:
    """The first ``operands`` inputs and the output in canonical form."""
    c = canonical([*k.inputs[:operands], k.output], k.output)
    return c[:-1], c[-1]


def _shape_problem(k: Kernel, operands: int) -> str | None:
    if k.dtype is not DType.int8:
        return f"{k.kind} is an int8 kernel, not {k.dtype.name}"
    for t in (*k.inputs[:operands], k.output):
        if t.shape != k.output.shape or t.dtype is not DType.int8:
            return f"tensor {t} must be int8 with the output's shape {list(k.output.shape)}"
    if k.epilogue:
        return f"{k.kind} takes no epilogue"
    return None


def _tiling(k: Kernel, target, operands: int, set_bytes) -> EltwiseTiling:
    _, out = _canonical(k, operands)
    cols = out.shape[-1]
    rows = out.numel // cols
    budget = target.scratchpad.size_bytes // NSETS - ALIGN * 8
    tc = largest_fitting(lambda c: set_bytes(1, c), budget, min(cols, MAX_COUNT))
    if tc == 0:
        raise CompileError(f"kernel '{k.name}': no {k.kind} tile fits {budget} bytes of scratchpad")
    tr = 1 if tc < cols else largest_fitting(lambda r: set_bytes(r, cols), budget, min(rows, MAX_COUNT))
    if tc == cols:
        tr = overlap_cap(rows, tr, max(1, 4096 // cols))
    elif rows == 1:
        tc = overlap_cap(cols, tc, 2048)
    return EltwiseTiling(rows, cols, tr, tc)


def _block(t: DramTensor, p: EltwiseTiling, grid, i: int):
    r0, nr, c0, nc = grid[i]
    return rows_block(t, tuple(range(t.rank - 1)), t.rank - 1, r0, nr, c0, nc)


# ============================================================================ qbinary


class QBinaryKernel:
    """The ``qbinary`` kind: qadd and qmul (see the module docstring)."""

    kind = "qbinary"

    def supports(self, k: Kernel, target) -> str | None:
        if not isinstance(k.attrs, QBinaryAttrs) or k.attrs.op not in ("add", "mul"):
            return "qbinary needs QBinaryAttrs with op 'add' or 'mul'"
        if len(k.inputs) != 3 or k.quant is None:
            return "qbinary takes a, b and the int32 REQUANT record [1, 2], and QuantAttrs"
        problem = _shape_problem(k, 2)
        if problem:
            return problem
        rec = k.inputs[2]
        if rec.dtype is not DType.int32 or rec.shape != (1, 2):
            return f"the qbinary record must be int32 [1, 2], got {rec}"
        q = k.quant
        if len(q.in_zero_points) != 2 or len(q.factors) != (2 if k.attrs.op == "add" else 0):
            return f"qbinary {k.attrs.op} needs two input zero points and {'two factors' if k.attrs.op == 'add' else 'no factor'}"
        if any(not 0 < f < (1 << 24) for f in q.factors):
            return f"qadd factors must be positive and below 2^24 (QADD's 24-bit factor fields), got {list(q.factors)}"
        return zero_point_problem(k)

    def plan(self, k: Kernel, target) -> Plan:
        p = _tiling(k, target, 2, lambda r, c: 3 * _r(r * c))  # a, b, out (int8)
        summary = f"q{k.attrs.op} {p.rows}x{p.cols} in {p.tile_rows}x{p.tile_cols} tiles, {_INSTR[k.attrs.op]}"
        return tile_plan(summary, self.program(k, p, target), target)

    def emit(self, k: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(k, plan, em.target, self.program), em)

    def program(self, k: Kernel, p: EltwiseTiling, target) -> TileProgram:
        """The schedule of ``k`` at tiling ``p``, as data."""
        (a, b), out = _canonical(k, 2)
        bld = TileBuilder(target, k)
        record = bld.alloc(8, "requant record")
        rec = k.inputs[2]
        bld.emit("DMA_LOAD", esize=4, dram_addr=rec.addr, local_addr=record, n0=2)
        n = p.tile_rows * p.tile_cols
        sets = [tuple(bld.alloc(n, f"{what} {i}") for what in ("a", "b", "out")) for i in range(NSETS)]
        grid = list(tile_grid(p.rows, p.cols, p.tile_rows, p.tile_cols))
        pending: dict[int, tuple[Tile, Tile]] = {}

        def fetch(i: int) -> None:
            _, nr, _, nc = grid[i]
            abuf, bbuf = sets[i % NSETS][:2]
            pending[i] = (_load(bld, _block(a, p, grid, i), nr, nc, abuf, n),
                          _load(bld, _block(b, p, grid, i), nr, nc, bbuf, n))

        def compute(i: int) -> None:
            _, nr, _, nc = grid[i]
            ta, tb = pending.pop(i)
            o = Tile(sets[i % NSETS][2], nr, nc, DType.int8)
            _qbinary(bld, k, ta, tb, o, record)
            store_pieces(bld, o, _block(out, p, grid, i))

        pipeline(len(grid), fetch, compute, NSETS, bld)
        return bld.finish(f"{p.tile_rows}x{p.tile_cols} tiles of {p.rows}x{p.cols}", p)


_INSTR = {"add": "QADD", "mul": "QMUL"}


def _qbinary(em, k: Kernel, ta: Tile, tb: Tile, o: Tile, record: int) -> None:
    """QADD / QMUL of the int8 tiles ``ta`` and ``tb`` (zero strides broadcast) into ``o``."""
    q = k.quant
    operands = dict(za=q.in_zero_points[0], zb=q.in_zero_points[1])
    if k.attrs.op == "add":
        operands.update(fa=q.factors[0], fb=q.factors[1])
    for r0 in range(0, o.rows, MAX_COUNT):
        n1 = min(MAX_COUNT, o.rows - r0)
        for prefix, t in (("dst", o), ("a", ta), ("b", tb)):
            operands.update({prefix: t.addr + r0 * t.s1, f"{prefix}_s0": t.s0 if o.cols > 1 else 0,
                             f"{prefix}_s1": t.s1 if n1 > 1 else 0})
        em.emit(_INSTR[k.attrs.op], n0=o.cols, n1=n1, **operands, qparams=record, zp=q.out_zero_point,
                qmin=q.qmin, qmax=q.qmax)


def _load(em, pieces, nr: int, nc: int, addr: int, capacity: int) -> Tile:
    """An operand block with the fewest bytes (zero strides where it broadcasts)."""
    if broadcast_kind(pieces) == "full":
        t = Tile(addr, nr, nc, DType.int8)
        load_pieces(em, pieces, t)
        return t
    return load_operand(em, pieces, nr, nc, DType.int8, addr, capacity)


# ============================================================================ lut


class LutKernel:
    """The ``lut`` kind: y = table[x + 128] (qlut), one LUT per tile, in place."""

    kind = "lut"

    def supports(self, k: Kernel, target) -> str | None:
        if len(k.inputs) != 2:
            return "lut takes x and the 256-entry int8 table"
        problem = _shape_problem(k, 1)
        if problem:
            return problem
        table = k.inputs[1]
        if table.dtype is not DType.int8 or table.shape != (256,) or not table.is_dense():
            return f"the lut table must be a dense int8 [256] constant, got {table}"
        return None

    def plan(self, k: Kernel, target) -> Plan:
        p = _tiling(k, target, 1, lambda r, c: _r(r * c))
        summary = f"lut {p.rows}x{p.cols} in {p.tile_rows}x{p.tile_cols} tiles, in place"
        return tile_plan(summary, self.program(k, p, target), target)

    def emit(self, k: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(k, plan, em.target, self.program), em)

    def program(self, k: Kernel, p: EltwiseTiling, target) -> TileProgram:
        """The schedule of ``k`` at tiling ``p``, as data."""
        (x,), out = _canonical(k, 1)
        bld = TileBuilder(target, k)
        table = bld.alloc(256, "table")
        tt = k.inputs[1]
        bld.emit("DMA_LOAD", esize=1, dram_addr=tt.addr, local_addr=table, n0=256)
        bufs = [bld.alloc(p.tile_rows * p.tile_cols, f"tile {i}") for i in range(NSETS)]
        grid = list(tile_grid(p.rows, p.cols, p.tile_rows, p.tile_cols))

        def fetch(i: int) -> None:
            _, nr, _, nc = grid[i]
            load_pieces(bld, _block(x, p, grid, i), Tile(bufs[i % NSETS], nr, nc, DType.int8))

        def compute(i: int) -> None:
            _, nr, _, nc = grid[i]
            t = Tile(bufs[i % NSETS], nr, nc, DType.int8)
            for r0 in range(0, nr, MAX_COUNT):
                n1 = min(MAX_COUNT, nr - r0)
                bld.emit("LUT", n0=nc, n1=n1, dst=t.addr + r0 * t.s1, dst_s1=t.s1 if n1 > 1 else 0,
                        src=t.addr + r0 * t.s1, src_s1=t.s1 if n1 > 1 else 0, table=table)
            store_pieces(bld, t, _block(out, p, grid, i))

        pipeline(len(grid), fetch, compute, NSETS, bld)
        return bld.finish(f"{p.tile_rows}x{p.tile_cols} tiles of {p.rows}x{p.cols}", p)

register_kernel(QBinaryKernel())
register_kernel(LutKernel())
