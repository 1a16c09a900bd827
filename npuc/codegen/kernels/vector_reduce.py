"""``reduce``: sum, mean, max or min over any dimensions (keepdim or not), on the vector unit.

The input is a :class:`RowSpace` (the reduced dimensions against the kept ones).  A tile is
``nk`` output rows x ``nl`` reduced elements; when a whole reduced row fits, one VREDUCE per
tile does it, otherwise the row is cut into chunks that VREDUCE accumulates (``acc``) into the
row results, so a reduction of any size runs (a sum over a whole tensor is one row).  Sums over
H and W of a channels-last tensor run down the columns (channels contiguous).  The results are
scaled by 1/count for a mean, converted to fp16 and stored.  Input tiles rotate through three
buffer sets, pipelined.

int8 (``qmean``: inputs x and the int32 REQUANT record ``[1, 2]``): sums accumulate in int32,
then a VUN subtracts count x zx and REQUANT writes int8 (``npuc.quant.arith.run_average``).

Numerics: every reduction accumulates in fp32 (VREDUCE fp16 -> fp32), the mean's scaling is
fp32, and only the final result is rounded to fp16; max and min are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.codegen.epilogue import ALIGN, Tile, emit_bias_requant, emit_vun, f32
from npuc.codegen.kernel import register_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel, ReduceAttrs
from npuc.kir.plan import Plan
from npuc.codegen.kernels.vector_common import zero_point_problem, dtype_problem, largest_fitting, overlap_cap, pipeline, PIPELINE_TILES
from npuc.codegen.kernels.vector_rows import MAX_N, Operand, move_tile, reduce_rows, row_space, tile_strides, unary_rows
from npuc.errors import CompileError
from npuc.isa.enums import DType

NSETS = 3


@dataclass(frozen=True)
class ReducePlan:
    """``rows`` output rows x ``chunk`` reduced elements per tile."""

    rows: int
    chunk: int


def _out_over_x(k: Kernel) -> tuple[int, ...]:
    """The output's strides over the input's logical dimensions (0 on reduced ones)."""
    x, out = k.inputs[0], k.output
    dims = set(k.attrs.dims)
    if k.attrs.keepdim:
        return tuple(0 if d in dims else out.strides[d] for d in range(x.rank))
    it = iter(out.strides)
    return tuple(0 if d in dims else next(it) for d in range(x.rank))


def _space(k: Kernel):
    return row_space(k.inputs[0], list(k.attrs.dims), [_out_over_x(k)])


def _r(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class ReduceKernel:
    """The ``reduce`` kind (docs/kernels.md)."""

    kind = "reduce"

    def supports(self, kernel: Kernel, target) -> str | None:
        a = kernel.attrs
        if not isinstance(a, ReduceAttrs) or len(kernel.inputs) != (1 if kernel.dtype.is_float else 2):
            return "reduce takes one input (int8: and the REQUANT record) and ReduceAttrs"
        if not kernel.dtype.is_float:
            problem = _int8_problem(kernel)
            if problem:
                return problem
        if a.op not in ("sum", "mean", "max", "min"):
            return f"reduction '{a.op}' is not sum, mean, max or min"
        x = kernel.inputs[0]
        if any(not 0 <= d < x.rank for d in a.dims) or len(set(a.dims)) != len(a.dims):
            return f"reduce dims {list(a.dims)} do not fit a {x.rank}-D input"
        dims = set(a.dims) if a.dims else set(range(x.rank))
        want = tuple(1 if d in dims else n for d, n in enumerate(x.shape)) if a.keepdim else tuple(
            n for d, n in enumerate(x.shape) if d not in dims)
        if kernel.output.shape != want:
            return f"reduce output shape {list(kernel.output.shape)} should be {list(want)}"
        if kernel.epilogue:
            return "reduce takes no epilogue"
        return dtype_problem(kernel.dtype, target, int8=True)

    def plan(self, kernel: Kernel, target) -> Plan:
        sp = _space(kernel)
        es = kernel.dtype.size
        L, K = sp.length, sp.rows
        budget = target.scratchpad.size_bytes // NSETS - 2 * _r(min(K, MAX_N) * 4)
        limit = min(K, MAX_N, 32767 if sp.column_mode else MAX_N)
        inner = sp.kept_shape[-1]
        if sp.column_mode:
            # rows: whole contiguous runs of the innermost kept dimension (up to 256 of them: long
            # DRAM runs), then as many reduced elements as fit
            rows = min(limit, inner * max(1, 256 // inner) if inner <= 256 else 256)
            chunk = min(L, MAX_N, max(1, budget // (rows * es)))
        else:
            chunk = min(L, MAX_N, max(1, budget // es))
            rows = largest_fitting(lambda r: _r(r * chunk * es), budget, limit)
            if rows and chunk == L:
                rows = overlap_cap(K, rows, max(1, 4096 // (L * es)))
        if rows == 0:
            raise CompileError(f"kernel '{kernel.name}': no reduce tile fits {budget} bytes of scratchpad")
        kt = -(-K // rows)
        if kt < PIPELINE_TILES:  # few row blocks: cut the rows so loads overlap the reductions
            chunk = min(chunk, max(256, -(-L // -(-PIPELINE_TILES // kt))))
        mode = "down columns" if sp.column_mode else "along rows"
        summary = f"{kernel.attrs.op} of {K} rows x {L}, tiles {rows} x {chunk}, {mode}, fp32 accumulation"
        return tile_plan(summary, self.program(kernel, ReducePlan(rows, chunk), target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, choice, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``choice``, as data."""
        sp = _space(kernel)
        es = kernel.dtype.size
        dt = kernel.dtype.name
        L, K = sp.length, sp.rows
        p: ReducePlan = choice
        tb = TileBuilder(target, kernel)
        bufs = [tb.alloc(p.rows * p.chunk * es, f"tile {i}") for i in range(NSETS)]
        accs = [tb.alloc(p.rows * 4, f"results {i}") for i in range(2)]
        op = {"sum": "sum", "mean": "sum", "max": "max", "min": "min"}[kernel.attrs.op]
        x, out = kernel.inputs[0], kernel.output
        int8 = not kernel.dtype.is_float
        acc_dt = "int32" if int8 else "fp32"
        records = None
        if int8:
            rec = kernel.inputs[1]
            records = tb.alloc(8, "requant record")
            tb.emit("DMA_LOAD", esize=4, dram_addr=rec.addr, local_addr=records, n0=2)
        steps = [(kb, k0, l0) for kb, k0 in enumerate(range(0, K, p.rows)) for l0 in range(0, L, p.chunk)]

        def view(i: int):
            kb, k0, l0 = steps[i]
            nk, nl = min(p.rows, K - k0), min(p.chunk, L - l0)
            ks, ls = tile_strides(sp, nk, nl, es)
            return kb, k0, l0, nk, nl, bufs[i % NSETS], ks, ls

        def fetch(i: int) -> None:
            _, k0, l0, nk, nl, buf, ks, ls = view(i)
            move_tile(tb, "DMA_LOAD", sp, 0, x.addr, k0, nk, l0, nl, buf, ks, ls, es)

        def compute(i: int) -> None:
            kb, k0, l0, nk, nl, buf, ks, ls = view(i)
            acc = accs[kb % 2]
            reduce_rows(tb, op, dt, acc_dt, Operand(buf, ks, ls), nk, nl, acc, 4, acc=l0 > 0)
            if l0 + nl < L:
                return
            if int8:
                _finish_int8(tb, kernel, acc, nk, L, records)
            elif kernel.attrs.op == "mean":
                unary_rows(tb, "VUN", Operand(acc, 4, 0), Operand(acc, 4, 0), nk, 1, op="muls", dtype="fp32",
                           imm0=f32(1.0 / L))
            if not int8:
                unary_rows(tb, "VCVT", Operand(acc, es, 0), Operand(acc, 4, 0), nk, 1, src_dtype="fp32", dst_dtype=dt)
            move_tile(tb, "DMA_STORE", sp, 1, out.addr, k0, nk, 0, 1, acc, es, es, es)

        pipeline(len(steps), fetch, compute, NSETS, tb)
        return tb.finish(f"{p.rows} x {p.chunk} tiles", choice)


def _int8_problem(k: Kernel) -> str | None:
    """An int8 reduce is a mean (``qmean``): x, the int32 REQUANT record ``[1, 2]``, QuantAttrs."""
    if k.attrs.op != "mean":
        return f"int8 reductions are means (qmean), not '{k.attrs.op}'"
    rec = k.inputs[1]
    if k.quant is None or rec.dtype is not DType.int32 or rec.shape != (1, 2):
        return f"an int8 mean takes the int32 REQUANT record [1, 2] and QuantAttrs, got {rec}"
    return zero_point_problem(k)


def _finish_int8(em, k: Kernel, acc: int, nk: int, count: int, records: int) -> None:
    """int8 mean: the int32 sums minus count x zx, REQUANT (``npuc.quant.arith.run_average``)
    into int8 in place."""
    q = k.quant
    sums = Tile(acc, 1, nk, DType.int32)
    emit_vun(em, sums, "adds", float(-count * q.in_zero_point))
    emit_bias_requant(em, sums, Tile(acc, 1, nk, DType.int8), None, records, q.out_zero_point, q.qmin, q.qmax,
                      per_channel=False)


register_kernel(ReduceKernel())
