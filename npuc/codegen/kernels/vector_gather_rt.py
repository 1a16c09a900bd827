"""``gather``: rows of a table picked by indices computed at run time, on the vector unit (VGATHER).

Inputs: the table ``[T, B]`` (T rows of B elements, the kernel's dtype, any strides), the indices
as int32 words ``[*S, W]`` (W = 1: int32 indices; W = 2: int64 indices, the low word first, as
they are stored little-endian in DRAM), optionally an int32 constant ``base [R]`` of row offsets;
output ``[R, B]`` with R = prod(S).  Attrs: :class:`~npuc.kir.kernel.GatherRowsAttrs` (``size``
of the indexed dim, ``scale``, ``wrap``).  ``embedding`` and ``index_select`` gather rows
(``scale`` 1, ``base`` the offset of the outer block), ``gather`` single elements (B = 1,
``scale`` the indexed dim's stride, ``base`` the offsets of the other coordinates).

Two schedules, the cheaper by the cost walk (a table too large for the scratchpad, or with more
rows than a count field holds, has only the second): the whole table loaded into the scratchpad
once and VGATHER of its rows, or the table left in DRAM and DMA_GATHER of just the rows the
indices name.  Index rows go in tiles of P; per tile, in int32 on the vector unit:

1. the index words are loaded; ``i`` is the low word (with ``wrap``: plus ``size`` where it is
   negative, VCMP lt then VUN muls and VBIN add);
2. ``valid = (0 <= i) * (i < size)``, and for int64 indices also ``high == -(low < 0)`` (the
   high word is the sign extension of the low one: the value fits int32);
3. the table row ``r = base + scale * i``; where not valid, ``r = T`` (VSEL), a row the table
   does not have, so VGATHER stops the NPU with an error naming the index instead of reading
   another row: PyTorch raises on such an index, the NPU never answers wrongly;
4. VGATHER (or DMA_GATHER) copies the B elements of every row (bit for bit: fp16 or int8, whose
   rows keep the table's quantization), and the tile is stored.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from npuc.codegen.epilogue import ALIGN, MAX_COUNT, Tile, dma_nd, load_pieces, rows_block, store_pieces
from npuc.codegen.kernel import register_kernel
from npuc.codegen.kernels.vector_common import dtype_problem, largest_fitting
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.errors import CompileError
from npuc.isa.enums import DType
from npuc.isa.instr import field_max
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan
from npuc.kir.tile_program import TileProgram

I32 = DType.int32
NSETS = 3  # buffer sets: the index loads of tile i+1, the gather of tile i and the store of tile i-1 overlap
_SCALARS = 3  # int32 0, size and T (the row every invalid index is sent to)


MAX_DRAM_ROWS = (1 << 24) - 1  # DMA_GATHER's table_rows field (and exact as an fp32 immediate)
MAX_DRAM_S0, MAX_DRAM_S1 = field_max("DMA_GATHER", "dram_s0"), field_max("DMA_GATHER", "dram_s1")


@dataclass(frozen=True)
class GatherPlan:
    """Tiles of ``tile`` index rows; the table in the scratchpad (VGATHER) or left in DRAM (DMA_GATHER)."""

    tile: int
    dram_table: bool = False


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _words(k: Kernel) -> int:
    return k.inputs[1].shape[-1]


def _set_bytes(k: Kernel, p: int) -> int:
    """Scratchpad bytes of one buffer set for ``p`` index rows."""
    b = k.inputs[0].shape[1]
    base = _aligned(4 * p) if len(k.inputs) == 3 else 0
    return _aligned(4 * p * _words(k)) + base + 3 * _aligned(4 * p) + _aligned(p * b * k.dtype.size)


def _table_bytes(k: Kernel, dram_table: bool = False) -> int:
    t, b = k.inputs[0].shape
    return (0 if dram_table else _aligned(t * b * k.dtype.size)) + _aligned(4 * _SCALARS)


def _spad_table_problem(k: Kernel, target) -> str | None:
    """Why the table cannot sit in the scratchpad (VGATHER), or None."""
    t, b = k.inputs[0].shape
    if t >= MAX_COUNT:
        return f"more than {MAX_COUNT - 1} rows"
    need = _table_bytes(k) + NSETS * _set_bytes(k, 1)
    if need > target.scratchpad.size_bytes:
        return f"{need} bytes with a one-row tile, more than the {target.scratchpad.size_bytes}-byte scratchpad"
    return None


def _dram_table_problem(k: Kernel, target) -> str | None:
    """Why DMA_GATHER cannot read the rows from the table in DRAM, or None."""
    table = k.inputs[0]
    t = table.shape[0]
    if t > MAX_DRAM_ROWS:
        return f"more than {MAX_DRAM_ROWS} rows"
    if table.strides[1] > MAX_DRAM_S0 or table.strides[0] > MAX_DRAM_S1:
        return f"strides {list(table.strides)} wider than DMA_GATHER's"
    need = _table_bytes(k, True) + NSETS * _set_bytes(k, 1)
    if need > target.scratchpad.size_bytes:
        return f"a one-row tile of {need} bytes, more than the {target.scratchpad.size_bytes}-byte scratchpad"
    return None


class GatherKernel:
    """The ``gather`` kind (docs/kernels.md)."""

    kind = "gather"

    def supports(self, kernel: Kernel, target) -> str | None:
        a = kernel.attrs
        if len(kernel.inputs) not in (2, 3) or kernel.epilogue:
            return "gather takes a table, the indices and optional row offsets, and no epilogue"
        table, idx = kernel.inputs[:2]
        if table.rank != 2 or kernel.output.rank != 2 or idx.rank < 1 or idx.shape[-1] not in (1, 2):
            return f"gather shapes: table {list(table.shape)}, index words {list(idx.shape)}, output {list(kernel.output.shape)}"
        t, b = table.shape
        rows = math.prod(idx.shape[:-1])
        if kernel.output.shape != (rows, b):
            return f"gather output {list(kernel.output.shape)} is not {rows} rows of {b}"
        if len(kernel.inputs) == 3 and kernel.inputs[2].shape != (rows,):
            return f"gather row offsets {list(kernel.inputs[2].shape)} are not one per output row ({rows})"
        if b > MAX_COUNT:
            return f"gather from a table of {t} rows of {b}: more than {MAX_COUNT} elements a row"
        if a.size < 1 or a.scale < 1 or a.scale * (a.size - 1) >= t:
            return f"gather of a dim of {a.size} with a stride of {a.scale} rows leaves the table of {t} rows"
        problem = dtype_problem(kernel.dtype, target, int8=True, int32=True)  # rows copied bit for bit
        if problem:
            return problem
        in_spad, in_dram = _spad_table_problem(kernel, target), _dram_table_problem(kernel, target)
        if in_spad and in_dram:
            return (f"gather from a table of {t} rows of {b}: not in the scratchpad ({in_spad}), "
                    f"nor from DRAM ({in_dram})")
        return None

    def plan(self, kernel: Kernel, target) -> Plan:
        """The cheaper of the two schedules by the cost walk (the scratchpad table on a tie)."""
        return min(self.alternatives(kernel, target), key=lambda p: p.est_cycles)

    def alternatives(self, kernel: Kernel, target) -> list[Plan]:
        """The scratchpad-table plan and the DRAM-table plan, each where it is possible."""
        out = [] if _spad_table_problem(kernel, target) else [self._plan(kernel, target, False)]
        return out + ([] if _dram_table_problem(kernel, target) else [self._plan(kernel, target, True)])

    def _plan(self, kernel: Kernel, target, dram_table: bool) -> Plan:
        rows = kernel.output.shape[0]
        budget = (target.scratchpad.size_bytes - _table_bytes(kernel, dram_table)) // NSETS
        p = largest_fitting(lambda n: _set_bytes(kernel, n), budget, min(rows, MAX_COUNT))
        if p == 0:
            raise CompileError(f"kernel '{kernel.name}': no gather tile fits beside the table")
        p = min(p, max(1, -(-rows // 4)), 1024) if rows > 64 else p  # several tiles, so they overlap
        t, b = kernel.inputs[0].shape
        where = "DMA_GATHER from DRAM" if dram_table else "VGATHER from the scratchpad"
        summary = f"gather of {rows} rows of {b} from a table of {t} rows ({where}), tiles of {p} rows"
        return tile_plan(summary, self.program(kernel, GatherPlan(p, dram_table), target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, gp: GatherPlan, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``gp``, as data: the table and the scalars in the
        prologue, then one iteration per tile of index rows."""
        table_t, idx = kernel.inputs[:2]
        base = kernel.inputs[2] if len(kernel.inputs) == 3 else None
        t, b = table_t.shape
        es = kernel.dtype.size
        w = idx.shape[-1]
        em = TileBuilder(target, kernel)
        table = None if gp.dram_table else em.alloc(t * b * es, "table")
        scal = em.alloc(4 * _SCALARS, "int32 scalars")
        p = gp.tile
        sets = [_Buffers(em, kernel, p, i) for i in range(NSETS)]
        em.at(-1)
        if table is not None:
            dma_nd(em, "DMA_LOAD", table_t.addr, (t, b), table_t.strides, table, (b * es, es), es)
        for i, value in enumerate((0, kernel.attrs.size, t)):
            em.emit("VFILL", dtype="int32", n0=1, dst=scal + 4 * i, value=float(value))
        rows = kernel.output.shape[0]
        lead = tuple(range(idx.rank - 1))
        starts = list(range(0, rows, p))

        def load(it: int) -> None:  # the index words (and row offsets) of tile ``it``
            r0, buf = starts[it], sets[it % NSETS]
            n = min(p, rows - r0)
            load_pieces(em, rows_block(idx, lead, idx.rank - 1, r0, n, 0, w), Tile(buf.words, n, w, I32))
            if base is not None:
                load_pieces(em, rows_block(base.reshape((rows, 1)), (0,), 1, r0, n, 0, 1), Tile(buf.base, n, 1, I32))

        load(0)
        pending = None
        for it, r0 in enumerate(starts):
            em.at(it)
            if it + 1 < len(starts):
                load(it + 1)  # ahead, into the other set: it overlaps this tile's work
            n = min(p, rows - r0)
            buf = sets[it % NSETS]
            _row_indices(em, kernel, buf, n, w, scal)
            if table is None:
                em.emit("DMA_GATHER", esize=es, dram_addr=table_t.addr, local_addr=buf.rows, n0=b, n1=n, idx=buf.r,
                        table_rows=t, dram_s0=table_t.strides[1], dram_s1=table_t.strides[0], local_s1=b * es)
            else:
                em.emit("VGATHER", dtype=kernel.dtype.name, n0=b, n1=n, dst=buf.rows, idx=buf.r, table=table,
                        table_rows=t, table_s1=b * es)
            if pending is not None:
                pending()  # the previous tile's store, after this tile's gather: the transfers queue in that order
            pending = functools.partial(store_pieces, em, Tile(buf.rows, n, b, kernel.dtype),
                                        rows_block(kernel.output, (0,), 1, r0, n, 0, b))
        pending()
        return em.finish(f"tiles of {p} of {rows} index rows", gp)


def _row_indices(em, kernel: Kernel, buf: "_Buffers", n: int, w: int, scal: int) -> None:
    """The table row of each of ``n`` indices into ``buf.r`` (int32), T where the index is invalid."""
    a = kernel.attrs
    zero, size, past = scal, scal + 4, scal + 8
    ws = 4 * w  # byte stride between the low words

    def vec(instr: str, **f) -> None:
        em.emit(instr, n0=n, **f)

    lo = dict(a=buf.words, a_s0=ws)
    if a.wrap:
        vec("VCMP", op="lt", dtype="int32", dst=buf.m, **lo, b=zero, b_s0=0)
        vec("VUN", op="muls", dtype="int32", dst=buf.m, src=buf.m, imm0=float(a.size))
        vec("VBIN", op="add", dtype="int32", dst=buf.r, **lo, b=buf.m)
    else:
        vec("VUN", op="copy", dtype="int32", dst=buf.r, src=buf.words, src_s0=ws)
    vec("VCMP", op="ge", dtype="int32", dst=buf.valid, a=buf.r, b=zero, b_s0=0)
    vec("VCMP", op="lt", dtype="int32", dst=buf.m, a=buf.r, b=size, b_s0=0)
    vec("VBIN", op="mul", dtype="int32", dst=buf.valid, a=buf.valid, b=buf.m)
    if w == 2:  # the high word must be the low word's sign: the int64 value fits int32
        vec("VCMP", op="lt", dtype="int32", dst=buf.m, **lo, b=zero, b_s0=0)
        vec("VUN", op="neg", dtype="int32", dst=buf.m, src=buf.m)
        vec("VCMP", op="eq", dtype="int32", dst=buf.m, a=buf.words + 4, a_s0=ws, b=buf.m)
        vec("VBIN", op="mul", dtype="int32", dst=buf.valid, a=buf.valid, b=buf.m)
    if a.scale != 1:
        vec("VUN", op="muls", dtype="int32", dst=buf.r, src=buf.r, imm0=float(a.scale))
    if len(kernel.inputs) == 3:
        vec("VBIN", op="add", dtype="int32", dst=buf.r, a=buf.r, b=buf.base)
    vec("VCMP", op="eq", dtype="int32", dst=buf.m, a=buf.valid, b=zero, b_s0=0)
    vec("VSEL", dtype="int32", dst=buf.r, mask=buf.m, a=past, a_s0=0)


class _Buffers:
    """The scratchpad buffers of one set (see :func:`_set_bytes`)."""

    def __init__(self, arena: TileBuilder, k: Kernel, p: int, i: int) -> None:
        self.words = arena.alloc(4 * p * _words(k), f"index words {i}")
        self.base = arena.alloc(4 * p, f"row offsets {i}") if len(k.inputs) == 3 else None
        self.r = arena.alloc(4 * p, f"table rows {i}")
        self.m = arena.alloc(4 * p, f"mask {i}")
        self.valid = arena.alloc(4 * p, f"valid {i}")
        self.rows = arena.alloc(p * k.inputs[0].shape[1] * k.dtype.size, f"gathered rows {i}")


register_kernel(GatherKernel())
