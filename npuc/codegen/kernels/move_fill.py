"""``fill``: every element of the output view becomes one constant (padding borders, zeros).

One VFILL writes a scratchpad buffer as large as the output (up to 32 KiB: a larger one would
only delay the first store) once; DMA stores then copy it to each block of the output view, seen in its physical
order with dimensions merged (:func:`canonical`).  The buffer is never rewritten, so the stores
follow each other back to back on the DRAM port.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.codegen.epilogue import MAX_COUNT, Tile, f32, rows_block, store_pieces
from npuc.codegen.kernel import register_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import FillAttrs, Kernel
from npuc.kir.plan import Plan
from npuc.codegen.kernels.vector_common import canonical, largest_fitting, tile_grid
from npuc.errors import CompileError

_BUFFER_BYTES = 32 * 1024


@dataclass(frozen=True)
class FillPlan:
    """Tiles of ``tile_rows x tile_cols`` over the canonical ``rows x cols`` output."""

    rows: int
    cols: int
    tile_rows: int
    tile_cols: int


def _fill_dtype(kernel: Kernel) -> str:
    return kernel.output.dtype.name


class FillKernel:
    """The ``fill`` kind (docs/kernels.md)."""

    kind = "fill"

    def supports(self, kernel: Kernel, target) -> str | None:
        if kernel.inputs:
            return f"fill takes no input, got {len(kernel.inputs)}"
        if not isinstance(kernel.attrs, FillAttrs):
            return "fill needs FillAttrs (the value)"
        if kernel.epilogue:
            return "fill takes no epilogue"
        if kernel.output.dtype.is_float and not target.has_fp16:
            return f"target '{target.name}' has no fp16 vector arithmetic"
        return None

    def plan(self, kernel: Kernel, target) -> Plan:
        (out,) = canonical([kernel.output], kernel.output)
        es = out.dtype.size
        cols = out.shape[-1]
        rows = out.numel // cols
        budget = min(target.scratchpad.size_bytes // 4, _BUFFER_BYTES)
        tc = min(cols, MAX_COUNT, max(1, budget // es))
        tr = 1 if tc < cols else largest_fitting(lambda r: r * cols * es, budget, min(rows, MAX_COUNT))
        if tr == 0:
            raise CompileError(f"kernel '{kernel.name}': no fill tile fits {budget} bytes")
        n = -(-rows // tr) * -(-cols // tc)
        summary = f"fill {rows}x{cols} from one {tr}x{tc} buffer ({n} stores)"
        return tile_plan(summary, self.program(kernel, FillPlan(rows, cols, tr, tc), target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, choice, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``choice``, as data."""
        (out,) = canonical([kernel.output], kernel.output)
        p: FillPlan = choice
        tb = TileBuilder(target, kernel)
        buf = Tile(tb.alloc(p.tile_rows * p.tile_cols * out.dtype.size, "fill buffer"), p.tile_rows, p.tile_cols, out.dtype)
        tb.emit("VFILL", dtype=_fill_dtype(kernel), n0=buf.cols, n1=buf.rows, dst=buf.addr,
                dst_s1=buf.s1 if buf.rows > 1 else 0, value=f32(kernel.attrs.value))
        rows_dims = tuple(range(out.rank - 1))
        for i, (r0, nr, c0, nc) in enumerate(tile_grid(p.rows, p.cols, p.tile_rows, p.tile_cols)):
            tb.at(i)
            store_pieces(tb, buf.block(0, nr, 0, nc), rows_block(out, rows_dims, out.rank - 1, r0, nr, c0, nc))
        return tb.finish(f"{p.tile_rows}x{p.tile_cols} stores of {p.rows}x{p.cols}", choice)


register_kernel(FillKernel())
