"""Array instructions: stationary weights, weight-stationary, depthwise and output-stationary matmuls."""

from __future__ import annotations

import numpy as np

from npuc.errors import SimulationError
from npuc.isa.actions import memory_actions
from npuc.isa.enums import Dataflow, DType, Mem, Queue, Unit
from npuc.isa.fields import Derived, addr, choice, count, flag, uint
from npuc.isa.instr import InstrDef, register
from npuc.isa.region import Region
from npuc.isa.widths import LOCAL_ADDR_BITS

_ARRAY_DTYPES = (DType.int8, DType.fp16)


def _dtype_field():
    return choice("dtype", 3, DType, "operand type: int8 (int32 accumulators) or fp16 (fp32 accumulators)", default=DType.int8)


def _validate_dtype(a) -> str | None:
    if a.dtype not in _ARRAY_DTYPES:
        return f"the array multiplies int8 or fp16, not {a.dtype.name}"
    return None


def _acc_dtype(dt: DType) -> np.dtype:
    return np.dtype("<i4") if dt is DType.int8 else np.dtype("<f4")


def _dtype_problem(a, target) -> str | None:
    if a.dtype.name not in target.array.dtypes:
        return f"target '{target.name}' has no {a.dtype.name} MACs (array.dtypes = {list(target.array.dtypes)})"
    return None


def _fits(what: str, value: int, limit: int, dim: str, target) -> str | None:
    if value > limit:
        return f"{what} = {value} exceeds the {limit} {dim} of target '{target.name}''s array"
    return None


def _dataflow_problem(dataflow: Dataflow, target) -> str | None:
    if not target.supports_dataflow(dataflow):
        flows = [str(d) for d in target.array.dataflows]
        return f"target '{target.name}' has no {dataflow} dataflow (array.dataflows = {flows})"
    return None


def _product(x: np.ndarray, w: np.ndarray, dt: DType) -> np.ndarray:
    """x (M x K) @ w (K x N), exactly: int32 for int8, fp32 for fp16.

    int8 products are below 2^14 in magnitude, so sums of up to 1024 of them are exact in fp32
    (24-bit significand) and longer ones in fp64; the result is converted to int32 exactly.
    """
    if dt is DType.int8:
        ft = np.float32 if x.shape[1] <= 1024 else np.float64
        return (x.astype(ft) @ w.astype(ft)).astype(np.int32)
    return x.astype(np.float32) @ w.astype(np.float32)


def _accumulate(st, out: Region, prod: np.ndarray, dt: DType, accumulate: bool) -> None:
    """Write (or add) a product into ACC: int32 adds wrap (two's complement), fp32 adds round."""
    if accumulate:
        prod = st.view(out) + prod  # int32 + int32 wraps in numpy, fp32 + fp32 rounds
    st.write(out, prod)


def _matmul_actions(macs: int, dt: DType, target, regions):
    key = "macs_int8" if dt is DType.int8 else "macs_fp16"
    return memory_actions(regions, target.dma.burst_bytes, **{key: macs})


# ------------------------------------------------------------------------ LOAD_WEIGHTS
def _lw_region(a) -> tuple[Region, ...]:
    return (Region(Mem.spad, a.addr, (a.k, a.n), (a.s_k, a.s_n), a.dtype.np, "r", "weights"),)


def _lw_execute(st, a, regions) -> None:
    st.weights = st.read(regions[0])
    st.weights_dtype = a.dtype


def _lw_check(a, target) -> str | None:
    return (
        _dataflow_problem(Dataflow.weight_stationary, target)
        or _dtype_problem(a, target)
        or _fits("k", a.k, target.array.rows, "rows", target)
        or _fits("n", a.n, target.array.cols, "columns", target)
    )


def _lw_timing(a, target, regions) -> tuple[int, int]:
    return max(a.k, -(-regions[0].nbytes // target.spad_bytes_per_cycle)), 0


register(
    InstrDef(
        name="LOAD_WEIGHTS",
        opcode=0x20,
        queue=Queue.compute,
        unit=Unit.wload,
        summary="Load a K x N weight tile from the scratchpad into the array (weight-stationary).",
        fields=(
            _dtype_field(),
            addr("addr", LOCAL_ADDR_BITS, "scratchpad byte address of weight (0, 0)"),
            count("k", "rows of the tile (reduction dimension), at most array.rows"),
            count("n", "columns of the tile (output channels), at most array.cols"),
            uint("s_n", 16, "byte stride between weights (k, n) and (k, n+1)", default=Derived("dtype.size")),
            uint("s_k", 24, "byte stride between weights (k, n) and (k+1, n)", default=Derived("n * s_n")),
        ),
        regions=_lw_region,
        execute=_lw_execute,
        timing=_lw_timing,
        actions=lambda a, t, r: memory_actions(r, t.dma.burst_bytes),
        check=_lw_check,
        validate=_validate_dtype,
        may_follow=("MATMUL", "MATMUL_DW"),
        semantics_doc="The array's stationary weights become W[k][n] = SPAD[addr + k*s_k + n*s_n] "
        "(K x N of `dtype`). Swapping the strides (s_k = element size, s_n = row bytes) loads a "
        "tile stored transposed (N x K). The array holds two weight buffers: the load fills the "
        "idle one, and later MATMULs use it.",
        timing_doc="busy = max(k, ceil(k x n x element size / scratchpad bytes per cycle)) cycles "
        "on the weight loader (one tile row shifted in per cycle). It may start as soon as the "
        "MATMUL before it on the compute queue has started (double-buffered weights), so weight "
        "loading overlaps the previous tile's compute.",
        energy_doc="Scratchpad bytes read: k x n x element size.",
    )
)


# ------------------------------------------------------------------------ MATMUL (weight-stationary)
def _row_stream(row: str) -> tuple:
    """The fields after ``in_addr`` of an input-row stream into the accumulator, shared by
    MATMUL and MATMUL_DW: an input row is field ``row`` elements long."""
    return (
        count("m0", "input rows in the inner row loop"),
        count("m1", "repetitions of the inner row loop (M = m0 x m1)", default=1),
        uint("in_s0", 24, "byte stride between input rows of the inner loop", default=Derived(f"{row} * dtype.size")),
        uint("in_s1", 24, "byte stride between inner loops of input rows", default=Derived("m0 * in_s0")),
        addr("out_addr", LOCAL_ADDR_BITS, "accumulator byte address of output row (0, 0)"),
        uint("out_s0", 24, "byte stride between output rows of the inner loop", default=Derived("n * 4")),
        uint("out_s1", 24, "byte stride between inner loops of output rows", default=Derived("m0 * out_s0")),
    )


def _mm_regions(a) -> tuple[Region, ...]:
    es = a.dtype.size
    inp = Region(Mem.spad, a.in_addr, (a.m1, a.m0, a.k), (a.in_s1, a.in_s0, es), a.dtype.np, "r", "in")
    out = Region(Mem.acc, a.out_addr, (a.m1, a.m0, a.n), (a.out_s1, a.out_s0, 4), _acc_dtype(a.dtype), "rw" if a.acc else "w", "out")
    return inp, out


def _mm_execute(st, a, regions) -> None:
    inp, out = regions
    if st.weights is None:
        raise SimulationError("MATMUL with no stationary weights loaded (use LOAD_WEIGHTS first)")
    if st.weights_dtype is not a.dtype or st.weights.shape != (a.k, a.n):
        raise SimulationError(
            f"MATMUL expects {a.k} x {a.n} {a.dtype.name} weights, but the array holds "
            f"{st.weights.shape[0]} x {st.weights.shape[1]} {st.weights_dtype.name} weights"
        )
    x = st.read(inp).reshape(-1, a.k)
    prod = _product(x, st.weights, a.dtype).reshape(a.m1, a.m0, a.n)
    _accumulate(st, out, prod, a.dtype, bool(a.acc))


def _mm_check(a, target) -> str | None:
    return (
        _dataflow_problem(Dataflow.weight_stationary, target)
        or _dtype_problem(a, target)
        or _fits("k", a.k, target.array.rows, "rows", target)
        or _fits("n", a.n, target.array.cols, "columns", target)
    )


def _mm_timing(a, target, regions) -> tuple[int, int]:
    m = a.m0 * a.m1
    stream = max(m, -(-regions[0].nbytes // target.spad_bytes_per_cycle))
    return stream, target.array.rows + a.n - 2


register(
    InstrDef(
        name="MATMUL",
        opcode=0x21,
        queue=Queue.compute,
        unit=Unit.array,
        summary="Stream M input rows through the stationary weights: M x K times K x N into ACC.",
        fields=(
            _dtype_field(),
            flag("acc", "1: add to the accumulators, 0: overwrite them"),
            count("k", "reduction length; must equal the loaded tile's k"),
            count("n", "output columns; must equal the loaded tile's n"),
            addr("in_addr", LOCAL_ADDR_BITS, "scratchpad byte address of input row (0, 0)"),
            *_row_stream("k"),
        ),
        regions=_mm_regions,
        execute=_mm_execute,
        timing=_mm_timing,
        actions=lambda a, t, r: _matmul_actions(a.m0 * a.m1 * a.k * a.n, a.dtype, t, r),
        pipelines_after=("LOAD_WEIGHTS", "MATMUL"),
        check=_mm_check,
        validate=_validate_dtype,
        semantics_doc="For i1 < m1, i0 < m0, n < N: with X[i1][i0][k] = SPAD[in_addr + i1*in_s1 + "
        "i0*in_s0 + k*esize], P = sum over k of X[i1][i0][k] * W[k][n] (W: the stationary weights, "
        "which must be k x n of `dtype`); ACC[out_addr + i1*out_s1 + i0*out_s0 + 4n] = P, or += P "
        "when `acc` = 1. int8: products and sums exact, the accumulator add wraps in int32. fp16: "
        "products exact in fp32, sums in fp32. The two-level row loop lets one MATMUL walk a "
        "convolution window over a 2-D output (in_s0 = horizontal step, in_s1 = row step).",
        timing_doc="busy = max(M, ceil(M x k x esize / scratchpad bytes per cycle)) cycles on the "
        "array, M = m0 x m1 (one input row enters per cycle), then array.rows + n - 2 cycles of "
        "latency: inputs enter skewed, partial sums run down all array.rows rows to the "
        "accumulators, the last column is reached after n - 1 cycles. MATMULs pipeline: right "
        "after a LOAD_WEIGHTS or a MATMUL, a MATMUL starts as soon as that one's own work is done "
        "and the array takes inputs again, while the previous MATMUL still drains (the "
        "accumulators add rows in order, so a MATMUL accumulating into the same tile is not a race).",
        energy_doc="MACs: M x k x n (int8 or fp16). Scratchpad bytes read: M x k x esize. "
        "Accumulator bytes written: M x n x 4 (also read when `acc` = 1).",
    )
)


# ------------------------------------------------------------------------ MATMUL_DW (depthwise mode)
def _dw_regions(a) -> tuple[Region, ...]:
    es = a.dtype.size
    inp = Region(Mem.spad, a.in_addr, (a.m1, a.m0, a.n), (a.in_s1, a.in_s0, es), a.dtype.np, "r", "in")
    w = Region(Mem.spad, a.w_addr, (a.n,), (a.w_s,), a.dtype.np, "r", "w")
    out = Region(Mem.acc, a.out_addr, (a.m1, a.m0, a.n), (a.out_s1, a.out_s0, 4), _acc_dtype(a.dtype), "rw" if a.acc else "w", "out")
    return inp, w, out


def _dw_product(x: np.ndarray, w: np.ndarray, dt: DType) -> np.ndarray:
    """x[..., c] * w[c], exactly: int32 for int8, fp32 for fp16 (an fp16 x fp16 product has at
    most 22 significant bits, so it is exact in fp32)."""
    if dt is DType.int8:
        return x.astype(np.int32) * w.astype(np.int32)
    return x.astype(np.float32) * w.astype(np.float32)


def _dw_execute(st, a, regions) -> None:
    inp, w, out = regions
    _accumulate(st, out, _dw_product(st.read(inp), st.read(w), a.dtype), a.dtype, bool(a.acc))
    st.weights, st.weights_dtype = None, None  # the diagonal replaced the stationary weights


def _dw_check(a, target) -> str | None:
    side = min(target.array.rows, target.array.cols)
    return (
        _dataflow_problem(Dataflow.weight_stationary, target)
        or _dtype_problem(a, target)
        or _fits("n", a.n, side, "diagonal (the smaller of its rows and columns)", target)
    )


def _dw_timing(a, target, regions) -> tuple[int, int]:
    bpc = target.spad_bytes_per_cycle
    m = a.m0 * a.m1
    latch = -(-regions[1].nbytes // bpc)
    return max(m, -(-regions[0].nbytes // bpc)), target.array.rows + a.n - 2 + latch


def _dw_actions(a, target, regions):
    return _matmul_actions(a.m0 * a.m1 * a.n, a.dtype, target, regions)


register(
    InstrDef(
        name="MATMUL_DW",
        opcode=0x23,
        queue=Queue.compute,
        unit=Unit.array,
        summary="Depthwise mode: M input rows of N channels times N per-channel weights on the array's diagonal, into ACC.",
        fields=(
            _dtype_field(),
            flag("acc", "1: add to the accumulators, 0: overwrite them"),
            count("n", "channels (the active diagonal), at most the smaller array side"),
            addr("w_addr", LOCAL_ADDR_BITS, "scratchpad byte address of the weight of channel 0"),
            uint("w_s", 16, "byte stride between the weights of channels c and c+1", default=Derived("dtype.size")),
            addr("in_addr", LOCAL_ADDR_BITS, "scratchpad byte address of input row (0, 0)"),
            *_row_stream("n"),
        ),
        regions=_dw_regions,
        execute=_dw_execute,
        timing=_dw_timing,
        actions=_dw_actions,
        pipelines_after=("MATMUL_DW",),
        check=_dw_check,
        validate=_validate_dtype,
        semantics_doc="For i1 < m1, i0 < m0, c < N: with X[i1][i0][c] = SPAD[in_addr + i1*in_s1 + "
        "i0*in_s0 + c*esize] and W[c] = SPAD[w_addr + c*w_s], P = X[i1][i0][c] * W[c]; "
        "ACC[out_addr + i1*out_s1 + i0*out_s0 + 4c] = P, or += P when `acc` = 1. It is MATMUL "
        "with the stationary weights diag(W) (the same products and sums, the same bits), run in "
        "the array's depthwise mode: only the N diagonal processing elements multiply, the others "
        "are clock-gated and pass partial sums through, and only the N diagonal weights are read. "
        "Channel c's products enter row c and reach accumulator column c. The diagonal takes the "
        "place of the stationary weights: a later MATMUL needs a new LOAD_WEIGHTS. One "
        "MATMUL_DW per kernel tap computes a depthwise convolution's tap over a 2-D output "
        "(in_s0 = horizontal step, in_s1 = row step), the accumulators adding the taps up.",
        timing_doc="busy = max(M, ceil(M x N x esize / scratchpad bytes per cycle)) cycles on the "
        "array, M = m0 x m1, as MATMUL, then array.rows + N - 2 + ceil(N x esize / scratchpad "
        "bytes per cycle) cycles of latency: MATMUL's drain, and the diagonal weights latched "
        "into the idle weight buffer before the first input row. A MATMUL_DW right after a "
        "MATMUL_DW starts as soon as that one's own work is done (the accumulators add rows in "
        "order, as for MATMUL; its weights were latched while that one streamed, as LOAD_WEIGHTS "
        "fills the idle buffer beside a MATMUL), so a run of them pays the latch once.",
        energy_doc="MACs: M x N (int8 or fp16): the diagonal only, the gated processing elements "
        "spend none. Scratchpad bytes read: (M + 1) x N x esize. Accumulator bytes written: "
        "M x N x 4 (also read when `acc` = 1).",
    )
)


# ------------------------------------------------------------------------ MATMUL_OS (output-stationary)
def _os_regions(a) -> tuple[Region, ...]:
    es = a.dtype.size
    inp = Region(Mem.spad, a.in_addr, (a.m, a.k), (a.in_s, es), a.dtype.np, "r", "in")
    w = Region(Mem.spad, a.w_addr, (a.k, a.n), (a.w_s, es), a.dtype.np, "r", "w")
    out = Region(Mem.acc, a.out_addr, (a.m, a.n), (a.out_s, 4), _acc_dtype(a.dtype), "rw" if a.acc else "w", "out")
    return inp, w, out


def _os_execute(st, a, regions) -> None:
    inp, w, out = regions
    prod = _product(st.read(inp), st.read(w), a.dtype)
    _accumulate(st, out, prod, a.dtype, bool(a.acc))
    st.weights, st.weights_dtype = None, None  # the PEs' registers held outputs


def _os_check(a, target) -> str | None:
    return (
        _dataflow_problem(Dataflow.output_stationary, target)
        or _dtype_problem(a, target)
        or _fits("m", a.m, target.array.rows, "rows", target)
        or _fits("n", a.n, target.array.cols, "columns", target)
    )


def _os_timing(a, target, regions) -> tuple[int, int]:
    streamed = regions[0].nbytes + regions[1].nbytes
    stream = max(a.k, -(-streamed // target.spad_bytes_per_cycle))
    return stream + a.m + a.n - 2, target.array.rows


register(
    InstrDef(
        name="MATMUL_OS",
        opcode=0x22,
        queue=Queue.compute,
        unit=Unit.array,
        summary="Output-stationary M x K times K x N (M <= rows, N <= cols, any K) into ACC.",
        fields=(
            _dtype_field(),
            flag("acc", "1: add to the accumulators, 0: overwrite them"),
            count("m", "output rows, at most array.rows"),
            count("k", "reduction length (streamed, any length)"),
            count("n", "output columns, at most array.cols"),
            addr("in_addr", LOCAL_ADDR_BITS, "scratchpad byte address of input (0, 0)"),
            uint("in_s", 24, "byte stride between input rows", default=Derived("k * dtype.size")),
            addr("w_addr", LOCAL_ADDR_BITS, "scratchpad byte address of weight (0, 0)"),
            uint("w_s", 24, "byte stride between weight rows (k)", default=Derived("n * dtype.size")),
            addr("out_addr", LOCAL_ADDR_BITS, "accumulator byte address of output (0, 0)"),
            uint("out_s", 24, "byte stride between output rows", default=Derived("n * 4")),
        ),
        regions=_os_regions,
        execute=_os_execute,
        timing=_os_timing,
        actions=lambda a, t, r: _matmul_actions(a.m * a.k * a.n, a.dtype, t, r),
        check=_os_check,
        validate=_validate_dtype,
        may_follow=("MATMUL_OS",),
        semantics_doc="ACC[out_addr + i*out_s + 4n] (=, or += when `acc` = 1) sum over k of "
        "SPAD[in_addr + i*in_s + k*esize] * SPAD[w_addr + k*w_s + n*esize], with the same "
        "arithmetic as MATMUL. The processing elements hold the outputs, so the array's "
        "stationary weights are lost: a later MATMUL needs a new LOAD_WEIGHTS.",
        timing_doc="busy = max(k, ceil((m + n) x k x esize / scratchpad bytes per cycle)) + m + n "
        "- 2 cycles on the array (both operands stream in skewed for k steps), then array.rows "
        "cycles of latency while the outputs drain through the rows to the accumulators. The PEs "
        "keep a second set of output registers, so a MATMUL_OS right after another may start as "
        "soon as the array is free, its compute overlapping the previous drain (it must not "
        "accumulate into outputs still draining).",
        energy_doc="MACs: m x k x n. Scratchpad bytes read: (m + n) x k x esize. Accumulator "
        "bytes written: m x n x 4 (also read when `acc` = 1).",
    )
)
