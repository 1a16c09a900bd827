"""``layernorm`` over the last ``normalized_rank`` dimensions, on the vector unit.

The tensor is a :class:`RowSpace` (the normalized dimensions reduced).  The weight and bias are
loaded once and converted to fp32.  Per tile of whole rows (three buffer sets, pipelined):

1. VREDUCE sum (fp16 -> fp32), VUN x 1/L: the row means;
2. VCVT the tile to fp32, VBIN subtract the mean (broadcast along the row);
3. VBIN square into a second fp32 scratch, VREDUCE sum, x 1/L, + eps, rsqrt: 1/std per row;
4. VBIN multiply by 1/std, by the weight, add the bias (fp32), VCVT back to fp16; store.

Numerics: the statistics and the normalisation are fp32 (squares of fp16 activations can
overflow fp16, and E[x^2] - E[x]^2 would cancel), so only the input and the final result are
rounded to fp16.  The fp32 scratch tiles are shared by the buffer sets (they live only during a
tile's compute).  A whole row must fit the scratchpad.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.codegen.epilogue import ALIGN, f32
from npuc.codegen.kernel import register_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel, LayerNormAttrs
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
class LayerNormPlan:
    """``rows`` normalized rows per tile."""

    rows: int


def _r(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _over_x(k: Kernel, t) -> tuple[int, ...]:
    """Strides of a normalized-shape tensor (weight, bias) over x's logical dimensions."""
    r = k.inputs[0].rank
    nr = k.attrs.normalized_rank
    return (0,) * (r - nr) + tuple(t.strides)


def _space(k: Kernel):
    x = k.inputs[0]
    nr = k.attrs.normalized_rank
    others = [k.output.strides] + [_over_x(k, t) for t in k.inputs[1:]]
    return row_space(x, list(range(x.rank - nr, x.rank)), others)


def _bytes(rows: int, L: int, es: int) -> int:
    return NSETS * _r(rows * L * es) + 2 * _r(rows * L * 4) + 4 * _r(rows * 4) + 3 * _r(L * 4)


class LayerNormKernel:
    """The ``layernorm`` kind (docs/kernels.md)."""

    kind = "layernorm"

    def supports(self, kernel: Kernel, target) -> str | None:
        a = kernel.attrs
        if not isinstance(a, LayerNormAttrs):
            return "layernorm needs LayerNormAttrs"
        x = kernel.inputs[0]
        if not 1 <= a.normalized_rank <= x.rank:
            return f"normalized_rank {a.normalized_rank} does not fit a {x.rank}-D input"
        if len(kernel.inputs) not in (1, 3):
            return f"layernorm takes x, or x, weight and bias; got {len(kernel.inputs)} inputs"
        norm = x.shape[x.rank - a.normalized_rank:]
        for t in kernel.inputs[1:]:
            if t.shape != norm:
                return f"{t.name} has shape {list(t.shape)}, not the normalized shape {list(norm)}"
        if kernel.output.shape != x.shape:
            return "layernorm output must have the input's shape"
        if kernel.epilogue:
            return "layernorm takes no epilogue"
        return dtype_problem(kernel.dtype, target)

    def plan(self, kernel: Kernel, target) -> Plan:
        sp = _space(kernel)
        es = kernel.dtype.size
        L = sp.length
        limit = min(sp.rows, MAX_N, 32767 if sp.column_mode else MAX_N)
        rows = largest_fitting(lambda r: _bytes(r, L, es), target.scratchpad.size_bytes, limit)
        if rows == 0:
            raise CompileError(
                f"kernel '{kernel.name}': a layernorm row of {L} elements needs {_bytes(1, L, es)} bytes of "
                f"scratchpad, the target has {target.scratchpad.size_bytes}"
            )
        rows = overlap_cap(sp.rows, rows, max(1, 4096 // (L * es)))
        summary = f"layernorm of {sp.rows} rows x {L}, {rows} rows per tile, fp32 statistics"
        return tile_plan(summary, self.program(kernel, LayerNormPlan(rows), target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, choice, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``choice``, as data."""
        sp = _space(kernel)
        es = kernel.dtype.size
        dt = kernel.dtype.name
        L = sp.length
        R = choice.rows
        eps = kernel.attrs.eps
        x, out = kernel.inputs[0], kernel.output
        tb = TileBuilder(target, kernel)
        tiles = [tb.alloc(R * L * es, f"tile {i}") for i in range(NSETS)]
        t32 = tb.alloc(R * L * 4, "centred rows (fp32)")
        sq32 = tb.alloc(R * L * 4, "squares (fp32)")
        mean = tb.alloc(R * 4, "row means")
        rstd = tb.alloc(R * 4, "row 1/std")
        affine = len(kernel.inputs) == 3
        wb = []
        if affine:
            raw = tb.alloc(L * es, "weight/bias (fp16)")
            for j, t in enumerate(kernel.inputs[1:]):
                buf = tb.alloc(L * 4, f"{'weight' if j == 0 else 'bias'} (fp32)")
                move_tile(tb, "DMA_LOAD", sp, 2 + j, t.addr, 0, 1, 0, L, raw, 0, es, es)
                unary_rows(tb, "VCVT", Operand(buf, 0, 4), Operand(raw, 0, es), 1, L, src_dtype=dt, dst_dtype="fp32")
                wb.append(Operand(buf, 0, 4))
        starts = list(range(0, sp.rows, R))
        inv_l = f32(1.0 / L)

        def view(i: int):
            k0 = starts[i]
            nk = min(R, sp.rows - k0)
            ks, ls = tile_strides(sp, nk, L, es)
            ks4, ls4 = tile_strides(sp, nk, L, 4)
            return k0, nk, tiles[i % NSETS], ks, ls, ks4, ls4

        def fetch(i: int) -> None:
            k0, nk, buf, ks, ls, _, _ = view(i)
            move_tile(tb, "DMA_LOAD", sp, 0, x.addr, k0, nk, 0, L, buf, ks, ls, es)

        def compute(i: int) -> None:
            k0, nk, buf, ks, ls, ks4, ls4 = view(i)
            t16 = Operand(buf, ks, ls)
            t = Operand(t32, ks4, ls4)
            sq = Operand(sq32, ks4, ls4)
            reduce_rows(tb, "sum", dt, "fp32", t16, nk, L, mean, 4)
            tb.emit("VUN", op="muls", dtype="fp32", n0=nk, dst=mean, src=mean, imm0=inv_l)
            unary_rows(tb, "VCVT", t, t16, nk, L, src_dtype=dt, dst_dtype="fp32")
            binary_rows(tb, "sub", "fp32", t, t, vector_of(mean, 4), nk, L)
            binary_rows(tb, "mul", "fp32", sq, t, t, nk, L)
            reduce_rows(tb, "sum", "fp32", "fp32", sq, nk, L, rstd, 4)
            tb.emit("VUN", op="muls", dtype="fp32", n0=nk, dst=rstd, src=rstd, imm0=inv_l)
            tb.emit("VUN", op="adds", dtype="fp32", n0=nk, dst=rstd, src=rstd, imm0=f32(eps))
            tb.emit("VUN", op="rsqrt", dtype="fp32", n0=nk, dst=rstd, src=rstd)
            binary_rows(tb, "mul", "fp32", t, t, vector_of(rstd, 4), nk, L)
            if affine:
                w, b = (Operand(o.addr, 0, 4) for o in wb)
                binary_rows(tb, "mul", "fp32", t, t, w, nk, L)
                binary_rows(tb, "add", "fp32", t, t, b, nk, L)
            unary_rows(tb, "VCVT", t16, t, nk, L, src_dtype="fp32", dst_dtype=dt)
            move_tile(tb, "DMA_STORE", sp, 1, out.addr, k0, nk, 0, L, buf, ks, ls, es)

        pipeline(len(starts), fetch, compute, NSETS, tb)
        return tb.finish(f"{R} rows x {L}", choice)


register_kernel(LayerNormKernel())
