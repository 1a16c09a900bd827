"""``softmax`` along any dimension, numerically safe, on the vector unit.

The tensor is seen as a :class:`RowSpace` (the softmax dimension reduced, the others kept): rows
along a scratchpad row when the softmax dimension is innermost in DRAM, down the columns when it
is not (softmax over the channels of a channels-last tensor, over a middle dimension of a
row-major one).  Per tile of whole rows: VREDUCE max, VBIN subtract the row max (broadcast by a
zero stride), VUN exp, VREDUCE sum, VUN reciprocal of the row sums, VBIN multiply.  Tiles
rotate through three buffer sets so loads and stores overlap the vector work.

Numerics (fp16): the max and the exponentials are fp16 (exp computed in fp32, rounded); the row
sum is accumulated in fp32 (VREDUCE fp16 -> fp32) and its reciprocal computed in fp32 before
being rounded to fp16 for the final multiply.  A whole row must fit in a third of the
scratchpad (``plan`` says so otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.codegen.epilogue import ALIGN
from npuc.codegen.kernel import register_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel, SoftmaxAttrs
from npuc.kir.plan import Plan
from npuc.codegen.kernels.vector_common import dtype_problem, largest_fitting, overlap_cap, pipeline
from npuc.codegen.kernels.vector_rows import (
    MAX_N,
    Operand,
    binary_rows,
    move_tile,
    reduce_rows,
    row_space,
    tile_strides,
    unary_rows,
    vector_of,
)
from npuc.errors import CompileError

NSETS = 3


@dataclass(frozen=True)
class SoftmaxPlan:
    """``rows`` softmax rows per tile."""

    rows: int


def _space(k: Kernel):
    return row_space(k.inputs[0], [k.attrs.dim], [k.output.strides])


def _r(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class SoftmaxKernel:
    """The ``softmax`` kind (docs/kernels.md)."""

    kind = "softmax"

    def supports(self, kernel: Kernel, target) -> str | None:
        if len(kernel.inputs) != 1 or not isinstance(kernel.attrs, SoftmaxAttrs):
            return "softmax takes one input and SoftmaxAttrs"
        x = kernel.inputs[0]
        if x.shape != kernel.output.shape or not 0 <= kernel.attrs.dim < max(x.rank, 1):
            return f"softmax over dim {kernel.attrs.dim} of {list(x.shape)} -> {list(kernel.output.shape)} is malformed"
        if kernel.epilogue:
            return "softmax takes no epilogue"
        return dtype_problem(kernel.dtype, target)

    def plan(self, kernel: Kernel, target) -> Plan:
        sp = _space(kernel)
        es = kernel.dtype.size
        L = sp.length
        budget = target.scratchpad.size_bytes
        limit = min(sp.rows, MAX_N, 32767 if sp.column_mode else MAX_N)
        rows = largest_fitting(lambda r: NSETS * _r(r * L * es) + 3 * _r(4 * r), budget, limit)
        if rows == 0:
            raise CompileError(
                f"kernel '{kernel.name}': a softmax row of {L} elements needs {NSETS * L * es} bytes of "
                f"scratchpad (three buffers), the target has {target.scratchpad.size_bytes}"
            )
        rows = overlap_cap(sp.rows, rows, max(1, 4096 // (L * es)))
        mode = "down columns" if sp.column_mode else "along rows"
        summary = f"softmax of {sp.rows} rows x {L}, {rows} rows per tile, {mode}"
        return tile_plan(summary, self.program(kernel, SoftmaxPlan(rows), target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, choice, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``choice``, as data."""
        sp = _space(kernel)
        es = kernel.dtype.size
        dt = kernel.dtype.name
        L = sp.length
        R = choice.rows
        tb = TileBuilder(target, kernel)
        tiles = [tb.alloc(R * L * es, f"tile {i}") for i in range(NSETS)]
        mx = tb.alloc(R * es, "row max")
        s32 = tb.alloc(R * 4, "row sums")
        rcp = tb.alloc(R * es, "reciprocal sums")
        x, out = kernel.inputs[0], kernel.output
        starts = list(range(0, sp.rows, R))

        def view(i: int):
            k0 = starts[i]
            nk = min(R, sp.rows - k0)
            ks, ls = tile_strides(sp, nk, L, es)
            return k0, nk, tiles[i % NSETS], ks, ls

        def fetch(i: int) -> None:
            k0, nk, buf, ks, ls = view(i)
            move_tile(tb, "DMA_LOAD", sp, 0, x.addr, k0, nk, 0, L, buf, ks, ls, es)

        def compute(i: int) -> None:
            k0, nk, buf, ks, ls = view(i)
            t = Operand(buf, ks, ls)
            reduce_rows(tb, "max", dt, dt, t, nk, L, mx, es)
            binary_rows(tb, "sub", dt, t, t, vector_of(mx, es), nk, L)
            unary_rows(tb, "VUN", t, t, nk, L, op="exp", dtype=dt)
            reduce_rows(tb, "sum", dt, "fp32", t, nk, L, s32, 4)
            tb.emit("VUN", op="reciprocal", dtype="fp32", n0=nk, dst=s32, src=s32)
            tb.emit("VCVT", src_dtype="fp32", dst_dtype=dt, n0=nk, dst=rcp, src=s32)
            binary_rows(tb, "mul", dt, t, t, vector_of(rcp, es), nk, L)
            move_tile(tb, "DMA_STORE", sp, 1, out.addr, k0, nk, 0, L, buf, ks, ls, es)

        pipeline(len(starts), fetch, compute, NSETS, tb)
        return tb.finish(f"{R} rows x {L}", choice)


register_kernel(SoftmaxKernel())
