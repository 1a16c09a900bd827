"""Pieces shared by the vector-unit and data-movement kernels (no kernel of its own).

* :func:`canonical`: several tensors of one logical shape seen in one iteration order (the
  physical order of a reference tensor), with size-1 dimensions dropped and dimensions merged
  where every tensor allows it: a dense NHWC tensor plus a per-channel bias becomes
  ``[N*H*W, C]``; two dense tensors of the same layout become one long row.
* :func:`dtype_problem`: the dtype checks every vector kernel makes.
* :func:`largest_fitting`: the largest count whose footprint fits a budget.
* :func:`tile_grid`: (row, column) blocks of a rows x cols iteration space.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any, Callable, Iterator, Sequence

from npuc.codegen.epilogue import merge_dims
from npuc.kir import records
from npuc.kir.tensor import DramTensor
from npuc.isa.enums import DType



@dataclass(frozen=True)
class EltwiseTiling:
    """Tiles of ``tile_rows x tile_cols`` of an elementwise kernel over the canonical ``rows x cols`` space."""

    rows: int
    cols: int
    tile_rows: int
    tile_cols: int


def canonical(tensors: Sequence[DramTensor], ref: DramTensor) -> list[DramTensor]:
    """``tensors`` (all of ``ref``'s logical shape) permuted to ``ref``'s physical order (largest
    stride first), size-1 dimensions dropped and neighbours merged where all allow it."""
    order = ref.order
    shape = [ref.shape[d] for d in order]
    sh, sts = merge_dims(shape, *[[t.strides[d] for d in order] for t in tensors])
    if not sh:
        sh, sts = (1,), tuple((t.dtype.size,) for t in tensors)
    return [DramTensor(t.name, tuple(sh), t.dtype, t.addr, tuple(s)) for t, s in zip(tensors, sts)]


def dtype_problem(dtype: DType, target: Any, int8: bool = False, int32: bool = False) -> str | None:
    """Why a vector kernel cannot compute in ``dtype`` on ``target``, or None (``int8``, ``int32``:
    the kernel has an int8 / int32 form; the vector unit computes int32 exactly, saturating)."""
    if dtype is DType.fp16:
        if not target.has_fp16:
            return f"target '{target.name}' has no fp16 vector arithmetic"
        return None
    if (dtype is DType.int8 and int8) or (dtype is DType.int32 and int32):
        return None
    return f"this kernel has no {dtype.name} form (fp16{' and int8' if int8 else ''} only)"


def quant_problem(k: Any, channels: int) -> str | None:
    """Why an int8 kernel with a folded bias and per-channel REQUANT records (the last two
    inputs: int32 ``[channels]`` and the stored records, int8 ``[5 channels]``, npuc.kir.records)
    is malformed, or None; fp16 kernels pass."""
    if k.dtype.is_float:
        return "a float kernel takes no quantization parameters" if k.quant is not None else None
    if k.quant is None:
        return "an int8 kernel needs QuantAttrs (zero points, clamp)"
    bias, rec = k.inputs[-2], k.inputs[-1]
    n = records.BYTES_PER_CHANNEL * channels
    if bias.dtype is not DType.int32 or bias.shape != (channels,) or rec.dtype is not DType.int8 or rec.shape != (n,):
        return (f"the int8 bias must be int32 [{channels}] and the records int8 [{n}] (npuc.kir.records), "
                f"got {bias} and {rec}")
    if not rec.is_dense():
        return f"the int8 records must be a dense constant, got {rec}"
    return zero_point_problem(k)


def zero_point_problem(k: Any) -> str | None:
    """Why an int8 kernel's zero points or clamp bounds are not int8 values, or None."""
    q = k.quant
    vals = (q.in_zero_point, q.out_zero_point, q.qmin, q.qmax) + tuple(q.in_zero_points)
    if any(not -128 <= v <= 127 for v in vals) or q.qmin > q.qmax:
        return f"zero points and clamp bounds must be int8 values with qmin <= qmax: {q}"
    return None


def largest_fitting(footprint: Callable[[int], int], budget: int, limit: int) -> int:
    """The largest n in 1..limit with ``footprint(n) <= budget`` (0 when even 1 does not fit);
    ``footprint`` must grow with n."""
    if footprint(1) > budget:
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if footprint(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def tile_grid(rows: int, cols: int, tile_rows: int, tile_cols: int) -> Iterator[tuple[int, int, int, int]]:
    """(r0, nr, c0, nc) blocks covering ``rows x cols``, row blocks outer."""
    for r0 in range(0, rows, tile_rows):
        for c0 in range(0, cols, tile_cols):
            yield r0, min(tile_rows, rows - r0), c0, min(tile_cols, cols - c0)


PIPELINE_TILES = 6  # aim for at least this many tiles so loads, compute and stores overlap


def overlap_cap(n: int, fit: int, min_tile: int) -> int:
    """Units per tile: at most ``fit``, small enough that ``n`` units make about
    :data:`PIPELINE_TILES` tiles (the first load and the last store are not overlapped), but not
    below ``min_tile`` (tiny tiles pay per-instruction costs)."""
    return max(1, min(fit, max(min_tile, -(-n // PIPELINE_TILES))))


def fetch_padded(em: Any, x: DramTensor, b: int, c0: int, nc: int, top: int, rin: int, wp: int, pl: int,
                 buf: int, fill: float, x0: int = 0) -> None:
    """Load input rows ``top .. top+rin`` (may reach outside 0..H) of image ``b``, channels
    ``c0 .. c0+nc``, of a channels-last ``[N, C, H, W]`` tensor into ``buf`` laid out
    ``[rin][wp][nc]`` with input column ``x0`` at column ``pl`` (a tile of columns: ``x0`` its
    first input column, ``pl`` the padding left of it); every cell outside the image (padding,
    and whatever a ceil-mode window reaches) is filled with ``fill`` by VFILL, only where this
    block has such cells.  Input columns past the last window are not loaded."""
    from npuc.codegen.epilogue import dma_nd, f32

    h = x.shape[2]
    w = max(0, min(x.shape[3] - x0, wp - pl))  # columns no window reaches are not loaded
    es = x.dtype.size
    dt = x.dtype.name
    row_s, px_s = wp * nc * es, nc * es
    lo, hi = max(top, 0), min(top + rin, h)
    value = f32(fill)
    if pl > 0:
        em.emit("VFILL", dtype=dt, n0=pl * nc, n1=rin, dst=buf, dst_s1=row_s if rin > 1 else 0, value=value)
    if wp > pl + w:
        em.emit("VFILL", dtype=dt, n0=(wp - pl - w) * nc, n1=rin, dst=buf + (pl + w) * px_s,
                dst_s1=row_s if rin > 1 else 0, value=value)
    for r0, r1 in ((top, lo), (max(hi, top), top + rin)):
        if r1 > r0:
            em.emit("VFILL", dtype=dt, n0=wp * nc, n1=r1 - r0, dst=buf + (r0 - top) * row_s, value=value)
    if hi > lo and w > 0:
        dma_nd(em, "DMA_LOAD", x.offset((b, c0, lo, x0)), (hi - lo, w, nc), (x.strides[2], x.strides[3], x.strides[1]),
               buf + (lo - top) * row_s + pl * px_s, (row_s, px_s, es), es)


def column_tilings(fits: Callable[[int, int], int], budget: int, rows_limit: int, width: int,
                   read: Callable[[int, int], float]) -> list[tuple[int, int]]:
    """(rows, columns) of output tiles cut into balanced column tiles (two or more), for each
    number of column tiles the one with the most rows that ``fits(rows, cols) <= budget``; the
    best by ``read(rows, cols)`` (input read per output pixel: the windows' overlap) first.
    Empty when no tile fits."""
    out: list[tuple[float, int, int, int]] = []
    for parts in range(2, width + 1):
        cols = -(-width // parts)
        if -(-width // (parts - 1)) == cols:
            continue
        rows = largest_fitting(lambda r: fits(r, cols), budget, rows_limit)
        if rows:
            out.append((read(rows, cols), parts, rows, cols))
        if rows >= rows_limit:
            break
    return [(r, c) for _, _, r, c in sorted(out)]


def pipeline(n: int, fetch: Callable[[int], None], compute: Callable[[int], None], sets: int, b: Any = None) -> None:
    """Emit ``n`` tiles that rotate through ``sets`` buffer sets, software-pipelined.

    ``fetch(i)`` emits tile i's loads (and any fills of its input buffer), ``compute(i)`` its
    vector work and stores.  Tile i+sets-1 is fetched right after tile i is computed: its buffer
    set was last read by the store of tile i-1, so the emitter's ordering of that store before
    the new load sits in the compute queue after tile i's work, not in front of it (fetching
    just before each compute would make every load wait for the previous tile's compute).
    ``b`` (a :class:`~npuc.codegen.tile_builder.TileBuilder`) is told which tile each step is of.
    """
    depth = max(1, sets - 1)
    at = b.at if b is not None else (lambda i: None)
    for j in range(min(depth, n)):
        at(j)
        fetch(j)
    for i in range(n):
        at(i)
        compute(i)
        if i + depth < n:
            at(i + depth)
            fetch(i + depth)
