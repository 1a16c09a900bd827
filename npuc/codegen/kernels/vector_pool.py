"""``pool2d``: max and average pooling windows on the vector unit (channels-last tensors).

Windowed pools: a tile is a block of output rows of one image, of output columns and of
channels.  The input rows it needs are loaded into a scratchpad buffer laid out
``[rows][padded width][channels]``;
the padding border (and the cells a ``ceil_mode`` window reaches past it) is filled by VFILL with
-inf (max) or 0 (avg), only where this tile has one; one VPOOL then computes every window of the
tile.  An average multiplies the window sums by the reciprocal of the divisor: the window size,
the count of cells inside the padded input (``count_include_pad``) or the count of real input
cells, or ``divisor_override``.  The divisor of output (oh, ow) is a product of a row count and a
column count that differ only near the borders, so one VUN ``muls`` covers each rectangle of
equal divisors (one for a pool without padding).  Tiles alternate between buffer sets.  When a
row of every channel does not fit the scratchpad, the plan either cuts the channels (each pixel's
run then moves part of a burst for nothing: 16 int8 channels in a 128-byte burst move 8x their
bytes) or keeps them and cuts the columns (the windows' overlap is read twice); the cost model
(:func:`npuc.schedule.vector_cost.program_cycles`, burst-rounded transfers) picks.

Global pools (a window the size of the whole input, no padding) use VREDUCE down the pixel
column of each channel instead (any size; VPOOL windows are at most 15 x 15), accumulating in
fp32 over pixel chunks, then scaling (avg) and converting to fp16.

int8: max pools fill borders with -128 and are exact.  Average pools (inputs x and the int32
REQUANT records of :func:`record_divisors`, ``QuantAttrs``) fill borders with the input zero
point, VPOOL sums every window cell into int32, a VUN subtracts kh x kw x zx (so padding adds
nothing) and one REQUANT per rectangle of equal divisors applies that divisor's record: the
steps of ``npuc.quant.arith.run_average``.  Global pools reduce into int32 and do the same with
one record.

Numerics (fp16): VPOOL sums in fp32 and rounds the window sum to fp16 before the divisor
multiply; global sums stay in fp32 until the final conversion.  Max is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.codegen.epilogue import ALIGN, MAX_COUNT, dma_nd, f32
from npuc.codegen.kernel import register_kernel
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel, PoolAttrs
from npuc.kir.plan import Plan
from npuc.codegen.epilogue import Tile, emit_bias_requant, emit_vun
from npuc.codegen.kernels.vector_common import (
    dtype_problem,
    fetch_padded,
    largest_fitting,
    overlap_cap,
    pipeline,
    zero_point_problem,
)
from npuc.errors import CompileError
from npuc.isa.enums import DType

NSETS = 3
_MAX_WINDOW = 15  # VPOOL kh/kw/sy/sx are 4-bit fields


@dataclass(frozen=True)
class PoolPlan:
    """``global_`` pools reduce ``chunk`` pixels at a time; windowed pools do ``rows`` output
    rows x ``chans`` channels per tile."""

    global_: bool
    rows: int
    chans: int
    chunk: int
    cols: int = 0  # output columns per tile (0: all of them)

    def tile_cols(self, ow: int) -> int:
        return self.cols or ow


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def is_global_pool(k: Kernel) -> bool:
    a: PoolAttrs = k.attrs
    _, _, h, w = k.inputs[0].shape
    _, _, oh, ow = k.output.shape
    return (oh, ow) == (1, 1) and tuple(a.kernel) == (h, w) and tuple(a.padding) == (0, 0)


def _geometry(k: Kernel, rows: int, cols: int = 0) -> tuple[int, int]:
    """(input rows, padded width) of a tile of ``rows`` output rows and ``cols`` output columns
    (0: all)."""
    a: PoolAttrs = k.attrs
    ow = cols or k.output.shape[3]
    return (rows - 1) * a.stride[0] + a.kernel[0], (ow - 1) * a.stride[1] + a.kernel[1]


def _tile_bytes(k: Kernel, rows: int, chans: int, cols: int = 0) -> int:
    es = k.dtype.size
    rin, wp = _geometry(k, rows, cols)
    ow = cols or k.output.shape[3]
    sums = _round(rows * ow * chans * 4) if _int8_avg(k) else 0
    return _round(rin * wp * chans * es) + _round(rows * ow * chans * es) + sums


def _int8_avg(k: Kernel) -> bool:
    return not k.dtype.is_float and k.attrs.kind == "avg"


def record_divisors(attrs: PoolAttrs, in_hw: tuple[int, int], out_hw: tuple[int, int]) -> tuple[int, ...]:
    """int8 average pools: the divisor each row of the REQUANT records input stands for.

    One row when every window has the same divisor (a global pool, ``divisor_override``);
    otherwise row d - 1 for divisor d, d = 1 .. kh x kw.  The lowering fills row i with
    ``npuc.quant.arith.average_multiplier(in_scale, divisors[i], out_scale)``."""
    if attrs.divisor_override is not None:
        return (attrs.divisor_override,)
    if tuple(attrs.kernel) == tuple(in_hw) and tuple(attrs.padding) == (0, 0) and tuple(out_hw) == (1, 1):
        return (in_hw[0] * in_hw[1],)
    return tuple(range(1, attrs.kernel[0] * attrs.kernel[1] + 1))


def _record_row(divisors: tuple[int, ...], d: int) -> int:
    return 0 if len(divisors) == 1 else d - 1


def _int8_problem(k: Kernel) -> str | None:
    """Why an int8 pool2d is malformed, or None: max takes x alone; avg takes x and int32
    REQUANT records ``[len(record_divisors), 2]`` and QuantAttrs."""
    if k.dtype.is_float:
        return None if len(k.inputs) == 1 and k.quant is None else "a float pool2d takes one input"
    if k.attrs.kind == "max":
        return None if len(k.inputs) == 1 else "an int8 max pool takes one input"
    if k.quant is None or len(k.inputs) != 2:
        return "an int8 average pool takes x and the REQUANT records, and QuantAttrs"
    rec = k.inputs[1]
    rows = len(record_divisors(k.attrs, k.inputs[0].shape[2:], k.output.shape[2:]))
    if rec.dtype.name != "int32" or rec.shape != (rows, 2) or not rec.is_dense():
        return f"the int8 average pool records must be dense int32 [{rows}, 2], got {rec}"
    return zero_point_problem(k)


def _counts(n_out: int, stride: int, pad: int, size: int, win: int, include_pad: bool) -> list[int]:
    """Cells of each window along one axis inside the padded input (or the real input)."""
    out = []
    for o in range(n_out):
        start = o * stride - pad
        end = min(start + win, size + pad)
        if not include_pad:
            start, end = max(start, 0), min(end, size)
        out.append(max(end - start, 0))
    return out


def _runs(values: list[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(start, length, value) runs of equal values in ``values[lo:hi]``."""
    runs: list[tuple[int, int, int]] = []
    for i in range(lo, hi):
        if runs and runs[-1][2] == values[i]:
            s, n, v = runs[-1]
            runs[-1] = (s, n + 1, v)
        else:
            runs.append((i, 1, values[i]))
    return runs


class PoolKernel:
    """The ``pool2d`` kind (docs/kernels.md)."""

    kind = "pool2d"

    def supports(self, kernel: Kernel, target) -> str | None:
        a = kernel.attrs
        if not isinstance(a, PoolAttrs):
            return "pool2d needs PoolAttrs"
        if a.kind not in ("max", "avg"):
            return f"pool kind '{a.kind}' is not max or avg"
        x, out = kernel.inputs[0], kernel.output
        if x.rank != 4 or out.rank != 4:
            return "pool2d needs 4-D [N, C, H, W] tensors"
        for t in (x, out):
            if t.strides[1] != t.dtype.size:
                return f"pool2d needs channels-last tensors (channel stride = element size); {t.name} has {t.strides[1]}"
        if kernel.epilogue:
            return "pool2d takes no epilogue"
        problem = dtype_problem(kernel.dtype, target, int8=True) or _int8_problem(kernel)
        if problem or is_global_pool(kernel):
            return problem
        if tuple(a.dilation) != (1, 1):
            return f"pool2d with dilation {tuple(a.dilation)} is not supported (VPOOL windows are dense)"
        if max(*a.kernel, *a.stride) > _MAX_WINDOW:
            return f"pool window {tuple(a.kernel)} / stride {tuple(a.stride)} exceeds VPOOL's {_MAX_WINDOW}"
        return None

    def plan(self, kernel: Kernel, target) -> Plan:
        x = kernel.inputs[0]
        n, c, h, w = x.shape
        es = kernel.dtype.size
        budget = target.scratchpad.size_bytes // NSETS
        if is_global_pool(kernel):
            chans = min(c, MAX_COUNT)
            while chans > 1 and _round(chans * es) + 2 * _round(chans * 4) > budget:  # a small scratchpad: fewer channels per step
                chans = -(-chans // 2)
            chunk = largest_fitting(lambda p: _round(p * chans * es), budget - 2 * _round(chans * 4), min(h * w, MAX_COUNT))
            if chunk == 0:
                raise CompileError(f"kernel '{kernel.name}': a global pool chunk does not fit {budget} bytes")
            chunk = overlap_cap(n * h * w * -(-c // chans), chunk, max(1, 4096 // (chans * es)))
            summary = f"global {kernel.attrs.kind} pool by VREDUCE, {chunk} pixels x {chans} channels per step"
            return tile_plan(summary, self.program(kernel, PoolPlan(True, 1, chans, chunk), target), target)
        plans = [(self._window_plan(kernel, target, p), p) for p in _window_tilings(kernel, budget)]
        fastest = min(plan.est_cycles for plan, _ in plans)
        # among the nearly fastest, the one that reads the fewest bytes (the first on a tie)
        burst = _burst_bytes(kernel.inputs[0], target)
        return min((x for x in plans if x[0].est_cycles <= fastest * (1 + CYCLE_SLACK)),
                   key=lambda x: _input_bytes(kernel, x[1], burst))[0]

    def _window_plan(self, kernel: Kernel, target, p: PoolPlan) -> Plan:
        a: PoolAttrs = kernel.attrs
        cols = f" x {p.cols} columns" if p.cols else ""
        summary = (f"{a.kind} pool {a.kernel[0]}x{a.kernel[1]}/{a.stride[0]}x{a.stride[1]}, {p.rows} output rows{cols} x "
                   f"{p.chans} channels per tile")
        return tile_plan(summary, self.program(kernel, p, target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, p: PoolPlan, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``p``, as data."""
        tb = TileBuilder(target, kernel)
        if p.global_:
            _global(kernel, p, tb)
            return tb.finish(f"{p.chunk} pixels x {p.chans} channels", p)
        _windows(kernel, p, tb)
        cols = f" x {p.cols} columns" if p.cols else ""
        return tb.finish(f"{p.rows} output rows{cols} x {p.chans} channels", p)


CYCLE_SLACK = 0.01  # plans this close to the fastest count as fast: the fewest bytes read wins


def _burst_bytes(x, target) -> int:
    w = target.window_at(x.addr)
    return w.memory.burst_bytes if w is not None else target.dma.burst_bytes


def _input_bytes(k: Kernel, p: PoolPlan, burst: int) -> int:
    """Bytes the input loads of windowed plan ``p`` move: each pixel's run of a tile's channels
    in whole bursts (a run may start mid-burst: taken as aligned), rows and columns clipped to
    the image."""
    a: PoolAttrs = k.attrs
    n, c, h, w = k.inputs[0].shape
    oh, ow = k.output.shape[2:]
    qw, es = p.tile_cols(ow), k.dtype.size
    total = 0
    for o0 in range(0, oh, p.rows):
        nr = min(p.rows, oh - o0)
        top = o0 * a.stride[0] - a.padding[0]
        rows = min(top + (nr - 1) * a.stride[0] + a.kernel[0], h) - max(top, 0)
        for q0 in range(0, ow, qw):
            nq = min(qw, ow - q0)
            left = q0 * a.stride[1] - a.padding[1]
            cols = min(left + (nq - 1) * a.stride[1] + a.kernel[1], w) - max(left, 0)
            for c0 in range(0, c, p.chans):
                run = min(p.chans, c - c0) * es
                total += max(rows, 0) * max(cols, 0) * -(-run // burst) * burst
    return n * total


def _window_tilings(k: Kernel, budget: int) -> list[PoolPlan]:
    """The windowed tilings worth costing: every column, with channels halved until a row
    fits; and, when that cuts the channels, every channel in tiles of rows and columns (balanced
    widths) shaped to read the least input per output (the windows' overlap)."""
    n, c = k.inputs[0].shape[:2]
    oh, ow = k.output.shape[2:]
    es = k.dtype.size
    full = min(c, MAX_COUNT)
    chans = full
    while chans > 1 and _tile_bytes(k, 1, chans) > budget:
        chans = -(-chans // 2)
    rows = largest_fitting(lambda r: _tile_bytes(k, r, chans), budget, min(oh, MAX_COUNT))
    if rows == 0:
        raise CompileError(
            f"kernel '{k.name}': one pooled row needs {_tile_bytes(k, 1, 1)} bytes, more than {budget} of scratchpad"
        )
    rows = overlap_cap(n * oh * -(-c // chans), rows, max(1, 2048 // (ow * chans * es)))
    out = [PoolPlan(False, rows, chans, 0)]
    if chans < full:
        best = None
        for parts in range(1, ow + 1):  # column tiles of balanced widths, as few as fit
            cols = -(-ow // parts)
            if parts > 1 and -(-ow // (parts - 1)) == cols:
                continue
            rows = largest_fitting(lambda r: _tile_bytes(k, r, full, cols), budget, min(oh, MAX_COUNT))
            if rows == 0:
                continue
            rin, wp = _geometry(k, rows, cols)
            read = (rin * wp / (rows * cols), parts)  # input read per output pixel: the overlap
            if best is None or read < best[0]:
                best = (read, rows, cols)
            if rows >= min(oh, MAX_COUNT):
                break
        if best is not None:
            _, rows, cols = best
            tiles = -(-ow // cols) * -(-c // full)
            rows = overlap_cap(n * oh * tiles, rows, max(1, 2048 // (cols * full * es)))
            out.append(PoolPlan(False, rows, full, 0, cols if cols < ow else 0))
    return out


def _global(k: Kernel, p: PoolPlan, em) -> None:
    x = k.inputs[0]
    n, c, h, w = x.shape
    es = k.dtype.size
    dt = k.dtype.name
    bufs = [em.alloc(p.chunk * p.chans * es, f"pixels {i}") for i in range(NSETS)]
    accs = [em.alloc(p.chans * 4, f"sums {i}") for i in range(2)]
    records = load_records(em, k)
    acc_dt = "fp32" if k.dtype.is_float else "int32"
    op = "max" if k.attrs.kind == "max" else "sum"
    npx = h * w
    step = 0
    for i, (b, c0) in enumerate((b, c0) for b in range(n) for c0 in range(0, c, p.chans)):
        nc = min(p.chans, c - c0)
        acc = accs[i % 2]
        for j, p0 in enumerate(range(0, npx, p.chunk)):
            npix = min(p.chunk, npx - p0)
            buf = bufs[step % NSETS]
            em.at(step)
            step += 1
            y0, x0 = divmod(p0, w)
            _load_pixels(em, x, b, c0, nc, p0, npix, buf, es)
            em.emit("VREDUCE", op=op, dtype=dt, out_dtype=acc_dt, acc=j > 0, n0=npix, n1=nc, dst=acc, dst_s=4,
                    src=buf, src_s0=nc * es if npix > 1 else 0, src_s1=es if nc > 1 else 0)
        finish_global(em, k, acc, b, c0, nc, npx, records)


def finish_global(em, k: Kernel, acc: int, b: int, c0: int, nc: int, npx: int, records: int | None) -> None:
    """A global pool's last step for image ``b``, channels ``c0 .. c0+nc``: the fp32 (int32) sums
    or maxima of ``npx`` pixels at ``acc`` scaled (avg), converted to the output type in place and
    stored (also the end of a pool accumulated by a chain, ``npuc.codegen.kernels.pooled_chain``)."""
    out = k.output
    es = k.dtype.size
    if not k.dtype.is_float:
        _finish_int8(em, k, acc, nc, npx, records)
    elif k.attrs.kind == "avg":
        div = k.attrs.divisor_override or npx
        em.emit("VUN", op="muls", dtype="fp32", n0=nc, dst=acc, src=acc, imm0=f32(1.0 / div))
    if k.dtype.is_float:
        em.emit("VCVT", src_dtype="fp32", dst_dtype=k.dtype.name, n0=nc, dst=acc, src=acc)
    dma_nd(em, "DMA_STORE", out.offset((b, c0, 0, 0)), (nc,), (out.strides[1],), acc, (es,), es)


def records_bytes(k: Kernel) -> int:
    """Scratchpad bytes of a pool's REQUANT records (0 when it has none: not an int8 average)."""
    return k.inputs[1].nbytes if _int8_avg(k) else 0


def load_records(em, k: Kernel, addr: int | None = None) -> int | None:
    """int8 average pools: the REQUANT records, loaded once (into ``addr``, else a buffer of
    their own); None for other pools."""
    if not _int8_avg(k):
        return None
    rec = k.inputs[1]
    if addr is None:
        addr = em.alloc(rec.nbytes, "requant records")
    dma_nd(em, "DMA_LOAD", rec.addr, rec.shape, rec.strides, addr, (8, 4), 4)
    return addr


def _finish_int8(em, k: Kernel, acc: int, nc: int, npx: int, records: int | None) -> None:
    """int8 global pool results (int32 sums or maxima) -> int8 in place: a max converts
    (exact), an average subtracts npx x zx and REQUANTs (``npuc.quant.arith.run_average``)."""
    if records is None:
        em.emit("VCVT", src_dtype="int32", dst_dtype="int8", n0=nc, dst=acc, src=acc)
        return
    q = k.quant
    sums = Tile(acc, 1, nc, DType.int32)
    emit_vun(em, sums, "adds", float(-npx * q.in_zero_point))
    emit_bias_requant(em, sums, Tile(acc, 1, nc, DType.int8), None, records, q.out_zero_point, q.qmin, q.qmax,
                      per_channel=False)


def _load_pixels(em, x, b: int, c0: int, nc: int, p0: int, npix: int, buf: int, es: int) -> None:
    """Pixels p0 .. p0+npix (row-major over H, W) of image b, channels c0 .. c0+nc, densely."""
    w = x.shape[3]
    row = 0
    p = p0
    while row < npix:
        y, x0 = divmod(p, w)
        if x0 == 0 and npix - row >= w:
            ny = (npix - row) // w
            dma_nd(em, "DMA_LOAD", x.offset((b, c0, y, 0)), (ny, w, nc), (x.strides[2], x.strides[3], x.strides[1]),
                   buf + row * nc * es, (w * nc * es, nc * es, es), es)
            n = ny * w
        else:
            n = min(w - x0, npix - row)
            dma_nd(em, "DMA_LOAD", x.offset((b, c0, y, x0)), (n, nc), (x.strides[3], x.strides[1]),
                   buf + row * nc * es, (nc * es, es), es)
        row += n
        p += n


def _windows(k: Kernel, p: PoolPlan, em) -> None:
    a: PoolAttrs = k.attrs
    x, out = k.inputs[0], k.output
    n, c, h, w = x.shape
    _, _, oh, ow = out.shape
    es = k.dtype.size
    dt = k.dtype.name
    (kh, kw), (sy, sx), (pt, pl) = a.kernel, a.stride, a.padding
    int8_avg = _int8_avg(k)
    fill = float("-inf") if a.kind == "max" else float(k.quant.in_zero_point) if int8_avg else 0.0
    qw = p.tile_cols(ow)
    rin_max, wp_max = _geometry(k, p.rows, qw)
    sets = [(em.alloc(rin_max * wp_max * p.chans * es, f"input {i}"), em.alloc(p.rows * qw * p.chans * es, f"output {i}"),
             em.alloc(p.rows * qw * p.chans * 4, f"int32 sums {i}") if int8_avg else None)
            for i in range(NSETS)]
    records = load_records(em, k)
    divisors = record_divisors(a, (h, w), (oh, ow)) if int8_avg else ()
    include = a.count_include_pad
    hc = _counts(oh, sy, pt, h, kh, include)
    wc = _counts(ow, sx, pl, w, kw, include)
    tiles = [(b, o0, q0, c0) for b in range(n) for o0 in range(0, oh, p.rows) for q0 in range(0, ow, qw)
             for c0 in range(0, c, p.chans)]

    def extent(i: int) -> tuple[int, int, int, int, int, int, int]:
        """Tile i: (image, first output row, rows, first output column, columns, first channel,
        channels)."""
        b, o0, q0, c0 = tiles[i]
        return b, o0, min(p.rows, oh - o0), q0, min(qw, ow - q0), c0, min(p.chans, c - c0)

    def fetch(i: int) -> None:
        """Borders and input rows of tile i: its columns' windows, the padding left of the
        first one (a first column tile) in local columns."""
        b, o0, nr, q0, nq, c0, nc = extent(i)
        left = q0 * sx - pl  # input column of the tile's first window
        fetch_padded(em, x, b, c0, nc, o0 * sy - pt, (nr - 1) * sy + kh, (nq - 1) * sx + kw, max(0, -left),
                     sets[i % NSETS][0], fill, max(0, left))

    def pool(i: int) -> None:
        b, o0, nr, q0, nq, c0, nc = extent(i)
        ibuf, obuf, sums = sets[i % NSETS]
        wp = (nq - 1) * sx + kw
        row_s, px_s = wp * nc * es, nc * es
        if int8_avg:
            em.emit("VPOOL", op="sum", dtype=dt, out_dtype="int32", c=nc, ow=nq, oh=nr, kh=kh, kw=kw, sy=sy, sx=sx,
                    src=ibuf, src_sx=px_s, src_sy=row_s, dst=sums, dst_sx=nc * 4, dst_sy=nq * nc * 4)
            _requant_windows(em, k, sums, obuf, nr, nq, nc, hc[o0:o0 + nr], wc[q0:q0 + nq], records, divisors)
        else:
            em.emit("VPOOL", op="max" if a.kind == "max" else "sum", dtype=dt, out_dtype=dt, c=nc, ow=nq, oh=nr,
                    kh=kh, kw=kw, sy=sy, sx=sx, src=ibuf, src_sx=px_s, src_sy=row_s, dst=obuf, dst_sx=px_s,
                    dst_sy=nq * px_s)
        if a.kind == "avg" and not int8_avg:
            _scale(em, dt, obuf, nr, nq, nc, es, hc[o0:o0 + nr], wc[q0:q0 + nq], a.divisor_override)
        dma_nd(em, "DMA_STORE", out.offset((b, c0, o0, q0)), (nr, nq, nc), (out.strides[2], out.strides[3], out.strides[1]),
               obuf, (nq * px_s, px_s, es), es)

    pipeline(len(tiles), fetch, pool, NSETS, em)


def _requant_windows(em, k: Kernel, sums: int, obuf: int, nr: int, ow: int, nc: int, hc: list[int], wc: list[int],
                     records: int, divisors: tuple[int, ...]) -> None:
    """int8 average: window sums (every cell of every window, padding holding zx) minus
    kh x kw x zx, then one REQUANT per rectangle of equal divisors with that divisor's record."""
    a: PoolAttrs = k.attrs
    q = k.quant
    emit_vun(em, Tile(sums, nr * ow, nc, DType.int32), "adds", float(-a.kernel[0] * a.kernel[1] * q.in_zero_point))
    for r0, rn, hv in _runs(hc, 0, nr):
        for q0, qn, wv in _runs(wc, 0, ow):
            div = a.divisor_override or hv * wv
            step = max(1, MAX_COUNT // nc)  # columns of pixels per REQUANT row (16-bit n0)
            for c0 in range(q0, q0 + qn, step):
                cn = min(step, q0 + qn - c0)
                at = (r0 * ow + c0) * nc
                src = Tile(sums + at * 4, rn, cn * nc, DType.int32, s1=ow * nc * 4)
                dst = Tile(obuf + at, rn, cn * nc, DType.int8, s1=ow * nc)
                emit_bias_requant(em, src, dst, None, records + 8 * _record_row(divisors, div), q.out_zero_point,
                                  q.qmin, q.qmax, per_channel=False)


def _scale(em, dt: str, obuf: int, nr: int, ow: int, nc: int, es: int, hc: list[int], wc: list[int], override) -> None:
    """Multiply window sums by 1 / divisor, one VUN per rectangle of equal divisors."""
    px_s = nc * es
    for r0, rn, hv in _runs(hc, 0, nr):
        for q0, qn, wv in _runs(wc, 0, ow):
            div = override or hv * wv
            em.emit("VUN", op="muls", dtype=dt, n0=qn * nc, n1=rn, dst=obuf + (r0 * ow + q0) * px_s,
                    dst_s1=ow * px_s if rn > 1 else 0, src=obuf + (r0 * ow + q0) * px_s, src_s1=ow * px_s if rn > 1 else 0,
                    imm0=f32(1.0 / div) if div else 0.0)


register_kernel(PoolKernel())
