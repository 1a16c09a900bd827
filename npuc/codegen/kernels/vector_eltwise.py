"""``eltwise``: out = epilogue(x), any chain of elementwise steps, on the vector unit.

Every tensor (x, the epilogue operands, the output) has the output's logical shape, with zero
strides where it broadcasts.  They are seen together in the output's physical order with
dimensions merged where all allow it (:func:`canonical`), so a dense tensor is one long row and a
channels-last tensor with a per-channel bias is ``[pixels, channels]``.  The iteration space is
cut into ``rows x cols`` tiles that rotate through three buffer sets (software-pipelined: the
loads of the next tiles and the store of the previous one overlap the vector work on this one).  x is loaded straight
into the tile (or, when it broadcasts, once and expanded by a vector copy with zero strides);
each operand is loaded with the fewest bytes (see :mod:`npuc.codegen.epilogue`).

Numerics (fp16): each step is computed in fp32 by the vector unit and rounded to fp16, like a
chain of PyTorch fp16 ops.
"""

from __future__ import annotations

from dataclasses import replace

from npuc.codegen.epilogue import (
    Tile,
    alloc_epilogue,
    apply_epilogue,
    epilogue_blocks,
    epilogue_spad_bytes,
    epilogue_supports,
    load_epilogue_operands,
    load_operand,
    load_pieces,
    rows_block,
    store_pieces,
    broadcast_kind,
    emit_vun,
    ALIGN,
    MAX_COUNT,
)
from npuc.codegen.kernel import register_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan
from npuc.codegen.kernels.vector_common import EltwiseTiling, canonical, dtype_problem, largest_fitting, overlap_cap, pipeline, tile_grid
from npuc.errors import CompileError

NSETS = 3  # buffer sets: load i+1, compute i and store i-1 each have their own


def _canonical_kernel(k: Kernel) -> Kernel:
    """The kernel with every tensor in canonical form (the output's physical order, merged)."""
    ops = [e.operand for e in k.epilogue if e.operand is not None]
    c = canonical([k.inputs[0], *ops, k.output], k.output)
    x, rest, out = c[0], c[1:-1], c[-1]
    it = iter(rest)
    epi = tuple(replace(e, operand=next(it)) if e.operand is not None else e for e in k.epilogue)
    return replace(k, inputs=(x,), output=out, epilogue=epi)


def _x_bytes(k: Kernel, rows: int, cols: int) -> int:
    """Scratchpad bytes of x's own buffer (only when x broadcasts; else it lands in the tile)."""
    x = k.inputs[0]
    if all(s != 0 or n == 1 for n, s in zip(x.shape, x.strides)):
        return 0
    return -(-(rows * cols * k.dtype.size) // ALIGN) * ALIGN


def _set_bytes(k: Kernel, rows: int, cols: int) -> int:
    tile = -(-(rows * cols * k.dtype.size) // ALIGN) * ALIGN
    return tile + _x_bytes(k, rows, cols) + epilogue_spad_bytes(k.epilogue, rows, cols, k.dtype, col_dim=k.output.rank - 1)


class EltwiseKernel:
    """The ``eltwise`` kind (docs/kernels.md)."""

    kind = "eltwise"

    def supports(self, kernel: Kernel, target) -> str | None:
        if len(kernel.inputs) != 1:
            return f"eltwise takes one input, got {len(kernel.inputs)}"
        for t in kernel.tensors():
            if t.shape != kernel.output.shape:
                return f"tensor {t.name} has shape {list(t.shape)}, not the output's {list(kernel.output.shape)}"
        return (dtype_problem(kernel.dtype, target, int8=True, int32=True)
                or epilogue_supports(kernel.epilogue, kernel.dtype, target))

    def plan(self, kernel: Kernel, target) -> Plan:
        k = _canonical_kernel(kernel)
        cols = k.output.shape[-1]
        rows = k.output.numel // cols
        budget = target.scratchpad.size_bytes // NSETS
        tc = largest_fitting(lambda c: _set_bytes(k, 1, c), budget, min(cols, MAX_COUNT))
        if tc == 0:
            raise CompileError(f"kernel '{kernel.name}': no eltwise tile fits {budget} bytes of scratchpad")
        tr = 1 if tc < cols else largest_fitting(lambda r: _set_bytes(k, r, cols), budget, min(rows, MAX_COUNT))
        if tc == cols:
            tr = overlap_cap(rows, tr, max(1, 4096 // (cols * k.dtype.size)))
        elif rows == 1:
            tc = overlap_cap(cols, tc, 2048)
        choice = EltwiseTiling(rows, cols, tr, tc)
        summary = f"eltwise {rows}x{cols} in {tr}x{tc} tiles, {NSETS} buffer sets, {len(k.epilogue)} steps"
        return tile_plan(summary, self.program(kernel, choice, target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, p: EltwiseTiling, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``p``, as data."""
        k = _canonical_kernel(kernel)
        b = TileBuilder(target, kernel)
        sets = []
        for i in range(NSETS):
            tile = b.alloc(p.tile_rows * p.tile_cols * k.dtype.size, f"tile {i}")
            xb = _x_bytes(k, p.tile_rows, p.tile_cols)
            xbuf = (b.alloc(xb, f"x {i}"), xb) if xb else None
            bufs = alloc_epilogue(b, k.epilogue, p.tile_rows, p.tile_cols, k.dtype, col_dim=k.output.rank - 1)
            sets.append((tile, xbuf, bufs))
        row_dims = tuple(range(k.output.rank - 1))
        col = k.output.rank - 1
        x = k.inputs[0]
        grid = list(tile_grid(p.rows, p.cols, p.tile_rows, p.tile_cols))
        pending: dict[int, tuple] = {}

        def block(t, i):
            r0, nr, c0, nc = grid[i]
            return rows_block(t, row_dims, col, r0, nr, c0, nc)

        def fetch(i: int) -> None:
            _, nr, _, nc = grid[i]
            taddr, xbuf, bufs = sets[i % NSETS]
            tile = Tile(taddr, nr, nc, k.dtype)
            xp = block(x, i)
            src = None
            if xbuf is None or broadcast_kind(xp) == "full":
                load_pieces(b, xp, tile)
            else:
                src = load_operand(b, xp, nr, nc, k.dtype, xbuf[0], xbuf[1])
            blocks = epilogue_blocks(k.epilogue, lambda t: block(t, i))
            pending[i] = (tile, src, load_epilogue_operands(b, k.epilogue, bufs, blocks, nr, nc))

        def compute(i: int) -> None:
            tile, src, loaded = pending.pop(i)
            if src is not None:
                emit_vun(b, tile, "copy", src=src)
            apply_epilogue(b, k.epilogue, tile, loaded)
            store_pieces(b, tile, block(k.output, i))

        pipeline(len(grid), fetch, compute, NSETS, b)
        return b.finish(f"{p.tile_rows}x{p.tile_cols} tiles of {p.rows}x{p.cols}", p)


register_kernel(EltwiseKernel())
