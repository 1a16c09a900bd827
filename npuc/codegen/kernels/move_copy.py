"""``copy``: any strided view to any strided view of the same logical shape, through the scratchpad.

This is how permutes (NCHW <-> NHWC), non-view reshapes, slices, concat parts, expands and
nearest upsampling run.  The cost of a DMA is its DRAM bursts, so the plan keeps both DRAM sides
in long contiguous runs and does any reordering on chip:

1. Both views are seen in the destination's physical order, size-1 dimensions dropped and
   neighbours merged where both allow it (a dense NCHW -> NHWC copy becomes ``[N, HW, C]``
   against ``[N, C, HW]`` strides; a concat part becomes ``[pixels, channels]``).
2. A tile is a box over these dimensions.  It grows first along the destination's innermost
   dimension and the source's innermost dimension (the smaller first, each kept >= 32 elements so
   both sides move whole bursts), then along the other dimensions from the innermost, up to a
   third of the scratchpad (three buffer sets: load, reorder and store of successive tiles
   overlap).
3. When the tile's dimensions have the same order on both sides and nothing broadcasts, the tile
   is loaded in the destination's layout and stored back (DMAs only).  Otherwise the source's
   distinct elements are loaded in the source's order (a zero-stride dimension once), one
   vector copy per 2-D slice (``vector_nd``: the two largest dimensions per instruction)
   writes the destination's order, broadcasting by zero strides, and the tile is stored.

A copy whose two views are one dense run each (a staged weight tensor, a reshape that needs
no reorder) does not pass through the scratchpad: it is ``DMA_COPY`` instructions on the copy
queue, :data:`COPY_CHUNK` bytes each, memory to memory, beside the load and store queues (where a
side lives in the scratchpad, ``npuc.codegen.local_memory`` makes it a load or a store).  A
staged weight's copy (``npuc.codegen.weight_staging``) is issued last slice first: its reader's
first load, which reads the first bytes, then orders after the whole copy, so weight compression
(``npuc.codegen.weight_compression``) may repack the copied bytes without breaking an order.

No arithmetic: values are copied bit for bit.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from npuc.codegen.epilogue import ALIGN, dma_nd, vector_nd
from npuc.codegen.kernel import register_kernel
from npuc.codegen.weight_staging import copied_constant
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan
from npuc.codegen.kernels.vector_common import canonical, overlap_cap, pipeline
from npuc.kir.tensor import DramTensor
from npuc.errors import CompileError

NSETS = 3
COPY_CHUNK = 1024  # bytes per DMA_COPY: the ports it shares with the kernels' transfers are taken in slices this long
MIN_RUN = 32  # elements kept along each side's innermost dimension (whole 64-byte bursts of fp16)


@dataclass(frozen=True)
class CopyPlan:
    """Tile extents per canonical dimension and whether tiles need an on-chip reorder."""

    shape: tuple[int, ...]
    extents: tuple[int, ...]
    reorder: bool
    direct: bool = False  # memory to memory on the copy queue (one dense run each side)


def _canon(k: Kernel) -> tuple[DramTensor, DramTensor]:
    src, dst = canonical([k.inputs[0], k.output], k.output)
    return src, dst


def _growth_order(src: DramTensor, dst: DramTensor) -> list[int]:
    """Dimensions in the order the tile grows along them."""
    r = dst.rank
    kd = r - 1
    nz = [d for d in range(r) if src.strides[d] != 0]
    ks = min(nz, key=lambda d: (src.strides[d], -d)) if nz else kd
    first = [kd] if ks == kd else sorted((kd, ks), key=lambda d: (src.shape[d], -d))
    return first + [d for d in range(r - 1, -1, -1) if d not in first]


def _extents(src: DramTensor, dst: DramTensor, budget: int) -> tuple[int, ...]:
    order = _growth_order(src, dst)
    ext = [1] * dst.rank
    prod = 1
    for i, d in enumerate(order):
        n = dst.shape[d]
        if i == 0 and len(order) > 1 and order[1] != d and src.strides[order[1]] != 0:
            cap = max(1, budget // min(dst.shape[order[1]], MIN_RUN))
            n = min(n, cap)
        if prod * n <= budget:
            ext[d] = n
            prod *= n
            if n < dst.shape[d]:
                break
        else:
            ext[d] = max(1, budget // prod)
            break
    return tuple(ext)


def _dense(shape: tuple[int, ...], order: list[int], es: int, skip: set[int] = frozenset()) -> tuple[int, ...]:
    """Byte strides of a dense block of ``shape`` laid out in ``order`` (outermost first); the
    dimensions in ``skip`` get stride 0 (not stored)."""
    strides = [0] * len(shape)
    step = es
    for d in reversed(order):
        if d in skip:
            continue
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def _src_order(src: DramTensor) -> list[int]:
    return sorted(range(src.rank), key=lambda d: (-src.strides[d], d))


def _needs_reorder(src: DramTensor, ext: tuple[int, ...]) -> bool:
    live = [d for d in range(src.rank) if ext[d] > 1]
    if any(src.strides[d] == 0 for d in live):
        return True
    so = [d for d in _src_order(src) if d in live]
    return so != live


def _footprint(es: int, ext: tuple[int, ...], src: DramTensor, reorder: bool) -> int:
    n = math.prod(ext) * es
    tile = -(-n // ALIGN) * ALIGN
    if not reorder:
        return tile
    uniq = math.prod(e for d, e in enumerate(ext) if src.strides[d] != 0) * es
    return tile + -(-uniq // ALIGN) * ALIGN


class CopyKernel:
    """The ``copy`` kind (docs/kernels.md)."""

    kind = "copy"

    def supports(self, kernel: Kernel, target) -> str | None:
        if len(kernel.inputs) != 1:
            return f"copy takes one input, got {len(kernel.inputs)}"
        src, out = kernel.inputs[0], kernel.output
        if src.shape != out.shape:
            return f"copy needs equal logical shapes, got {list(src.shape)} and {list(out.shape)}"
        if src.dtype != out.dtype:
            return f"copy does not convert: {src.dtype.name} -> {out.dtype.name}"
        if kernel.epilogue:
            return "copy takes no epilogue (use eltwise)"
        return None

    def plan(self, kernel: Kernel, target) -> Plan:
        src, dst = _canon(kernel)
        es = dst.dtype.size
        if _direct(src, dst):
            n = dst.numel * es
            summary = f"copy {n} bytes memory to memory on the copy queue ({-(-n // COPY_CHUNK)} DMA_COPY)"
            return tile_plan(summary, self.program(kernel, CopyPlan(dst.shape, dst.shape, False, True), target), target)
        per_set = target.scratchpad.size_bytes // NSETS
        budget = overlap_cap(dst.numel, per_set // es, 8192 // es)
        while True:
            ext = _extents(src, dst, budget)
            reorder = _needs_reorder(src, ext)
            if _footprint(es, ext, src, reorder) <= per_set or budget == 1:
                break
            budget //= 2
        if _footprint(es, ext, src, reorder) > per_set:
            raise CompileError(f"kernel '{kernel.name}': no copy tile fits {per_set} bytes of scratchpad")
        tiles = math.prod(-(-n // e) for n, e in zip(dst.shape, ext))
        how = "reordered on chip" if reorder else "DMA only"
        summary = f"copy {list(dst.shape)} in tiles {list(ext)} ({tiles}), {how}, {NSETS} buffer sets"
        return tile_plan(summary, self.program(kernel, CopyPlan(dst.shape, ext, reorder), target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, choice, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``choice``, as data."""
        src, dst = _canon(kernel)
        p: CopyPlan = choice
        es = dst.dtype.size
        tb = TileBuilder(target, kernel)
        if p.direct:
            n = dst.numel * es
            starts = range(0, n, COPY_CHUNK)
            if copied_constant(dst.name) is not None:  # last slice first: its reader's first load waits for the whole copy
                starts = starts[::-1]
            for i, at in enumerate(starts):
                tb.at(i)
                tb.emit("DMA_COPY", src_addr=src.addr + at, dst_addr=dst.addr + at, nbytes=min(COPY_CHUNK, n - at))
            return tb.finish(f"{-(-n // COPY_CHUNK)} runs of {COPY_CHUNK} bytes", choice)
        tile_bytes = math.prod(p.extents) * es
        uniq_bytes = math.prod(e for d, e in enumerate(p.extents) if src.strides[d] != 0) * es
        sets = []
        for i in range(NSETS):
            out_buf = tb.alloc(tile_bytes, f"tile {i}")
            in_buf = tb.alloc(uniq_bytes, f"source tile {i}") if p.reorder else out_buf
            sets.append((in_buf, out_buf))
        starts = [range(0, n, e) for n, e in zip(p.shape, p.extents)]
        dorder = list(range(dst.rank))
        sorder = _src_order(src)
        bcast = {d for d in range(src.rank) if src.strides[d] == 0}
        boxes = list(itertools.product(*starts))

        def geometry(i: int):
            start = boxes[i]
            ext = tuple(min(e, n - s) for s, e, n in zip(start, p.extents, p.shape))
            return start, ext, _dense(ext, dorder, es), p.reorder and _needs_reorder(src, ext)

        def fetch(i: int) -> None:
            start, ext, out_str, reorder = geometry(i)
            in_buf, out_buf = sets[i % NSETS]
            if not reorder:
                dma_nd(tb, "DMA_LOAD", src.offset(start), ext, src.strides, out_buf, out_str, es)
                return
            in_str = _dense(ext, sorder, es, bcast)
            keep = [d for d in range(src.rank) if d not in bcast]
            dma_nd(tb, "DMA_LOAD", src.offset(start), [ext[d] for d in keep], [src.strides[d] for d in keep],
                   in_buf, [in_str[d] for d in keep], es)

        def compute(i: int) -> None:
            start, ext, out_str, reorder = geometry(i)
            in_buf, out_buf = sets[i % NSETS]
            if reorder:
                in_str = _dense(ext, sorder, es, bcast)
                vector_nd(tb, "VUN", ext, {"dst": (out_buf, out_str), "src": (in_buf, in_str)},
                          op="copy", dtype=_raw_dtype(es))
            dma_nd(tb, "DMA_STORE", dst.offset(start), ext, dst.strides, out_buf, out_str, es)

        pipeline(len(boxes), fetch, compute, NSETS, tb)
        return tb.finish(f"tiles {list(p.extents)} of {list(p.shape)}", choice)


def _direct(src: DramTensor, dst: DramTensor) -> bool:
    """Whether the copy is one dense run on each side (memory to memory, no scratchpad)."""
    es = dst.dtype.size
    return src.rank == dst.rank == 1 and src.strides == dst.strides == (es,)


def _raw_dtype(es: int) -> str:
    """An integer vector dtype of the element size: an integer copy moves the bits unchanged
    (whatever the tensor's type) and needs no floating-point support."""
    return {1: "int8", 2: "int16", 4: "int32"}[es]


register_kernel(CopyKernel())
