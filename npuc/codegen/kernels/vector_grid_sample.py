"""``grid_sample``: sampling an image at computed coordinates, on the vector unit (VGATHER).

Inputs: x ``[N, C, H, W]`` (channels-last: each image is a table of H*W rows of C channels) and
the grid ``[N, Ho, Wo, 2]`` of (x, y) coordinates in [-1, 1]; output ``[N, C, Ho, Wo]``.  Attrs:
the graph op's (mode bilinear or nearest, padding zeros or border, align_corners).

Per image, the whole of ``x[n]`` is loaded into the scratchpad as the table.  Output pixels go in
tiles of P; for each tile, all in fp32 on the vector unit:

1. the grid block is loaded and converted to fp32; each coordinate is unnormalized as PyTorch
   does (``((g + 1) / 2) * (size - 1)`` with align_corners, else ``((g + 1) * size - 1) / 2``),
   clamped to ``[0, size - 1]`` for border padding;
2. bilinear: ``floor`` is VCVT to int32 (round half to even), back to fp32, minus 1 where that
   rounded up (VCMP gt); the weights are ``c - floor`` and ``1 - (c - floor)``.  nearest: the
   coordinate rounded half to even (PyTorch's nearbyint), weight 1;
3. for each corner (four, or one): the weight is the product of the two axis weights; a corner
   outside the image (zeros padding) has a 0/1 validity mask from VCMP; the row index
   ``clamp(y) * W + clamp(x)`` is converted to int32, VGATHER fetches the C channels of every
   pixel's corner, VSEL zeroes the rows of invalid corners (so an infinite pixel beside the
   border does not make 0 * inf), and VBIN mac accumulates ``row * weight`` in fp32;
4. the fp32 sum is rounded to fp16 and stored.

Reflection padding and bicubic interpolation are refused (the rule says so: the op runs on the
CPU).  An image whose table does not fit the scratchpad beside one tile is refused too.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.codegen.epilogue import ALIGN, MAX_COUNT, Tile, channels_last_block, dma_nd, f32, load_pieces, rows_block, store_pieces
from npuc.codegen.kernel import SramArena, register_kernel
from npuc.codegen.kernels.vector_common import burst_bytes, dtype_problem, estimate_cycles, largest_fitting
from npuc.errors import CompileError
from npuc.isa.enums import DType
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan

F32, I32, F16 = DType.fp32, DType.int32, DType.fp16
MAX_TILE = MAX_COUNT // 2  # the grid block converts as one row of 2 x P values
_SCALARS = 4  # 0.0, W - 1, H - 1 and 0 (fp16), in fp32 words


@dataclass(frozen=True)
class GridPlan:
    """Tiles of ``tile`` output pixels per image; ``table`` bytes hold one image."""

    tile: int
    table: int


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# The fp32 (or int32) vectors of one pixel tile: four per axis, then the corner temporaries.
_VEC32 = tuple(f"axis{i}.{w}" for i in range(2) for w in ("coord", "floor", "w0", "w1")) + (
    "i32", "mask", "cx", "cy", "wt", "tx", "ty", "idx")


def _tile_bytes(p: int, c: int) -> int:
    """Scratchpad bytes of one tile of ``p`` pixels with ``c`` channels (every temporary)."""
    return (_aligned(4 * p) + _aligned(8 * p) + len(_VEC32) * _aligned(4 * p) + _aligned(2 * p)
            + 2 * _aligned(2 * p * c) + _aligned(4 * p * c))


class _Vec:
    """1-D vector instructions over ``n`` elements (dense unless a stride is given)."""

    def __init__(self, em, n: int) -> None:
        self.em, self.n = em, n

    def un(self, op: str, dst: int, src: int, imm0: float = 0.0, imm1: float = 0.0, src_s0: int = 4) -> None:
        self.em.emit("VUN", op=op, dtype="fp32", n0=self.n, dst=dst, src=src, src_s0=src_s0 if self.n > 1 else 0,
                     imm0=f32(imm0), imm1=f32(imm1))

    def bin(self, op: str, dst: int, a: int, b: int, b_s0: int = 4) -> None:
        self.em.emit("VBIN", op=op, dtype="fp32", n0=self.n, dst=dst, a=a, b=b, b_s0=b_s0 if self.n > 1 else 0)

    def cmp(self, op: str, dst: int, a: int, b: int, b_s0: int = 4) -> None:
        self.em.emit("VCMP", op=op, dtype="fp32", n0=self.n, dst=dst, a=a, b=b, b_s0=b_s0 if self.n > 1 else 0)

    def cvt(self, src_dt: DType, dst_dt: DType, dst: int, src: int) -> None:
        self.em.emit("VCVT", src_dtype=src_dt.name, dst_dtype=dst_dt.name, n0=self.n, dst=dst, src=src)


class GridSampleKernel:
    """The ``grid_sample`` kind (docs/kernels.md)."""

    kind = "grid_sample"

    def supports(self, kernel: Kernel, target) -> str | None:
        a = kernel.attrs
        if a is None or a.mode not in ("bilinear", "nearest"):
            return f"grid_sample mode {getattr(a, 'mode', None)!r}: the NPU samples bilinear or nearest only"
        if a.padding_mode not in ("zeros", "border"):
            return f"grid_sample padding_mode {a.padding_mode!r}: the NPU pads with zeros or the border only"
        if len(kernel.inputs) != 2 or kernel.epilogue:
            return "grid_sample takes x and the grid, and no epilogue"
        x, grid = kernel.inputs
        n, c, h, w = x.shape
        es = x.dtype.size
        if grid.shape[-1] != 2 or kernel.output.shape != (n, c) + tuple(grid.shape[1:3]):
            return f"grid_sample shapes do not match: x {list(x.shape)}, grid {list(grid.shape)}"
        if h * w > MAX_COUNT:
            return f"grid_sample of a {h}x{w} image: more than {MAX_COUNT} table rows"
        problem = dtype_problem(kernel.dtype, target)
        if problem:
            return problem
        table = _aligned(h * w * c * es) + _aligned(4 * _SCALARS)
        if table + _tile_bytes(1, c) > target.scratchpad.size_bytes:
            return (f"grid_sample of a {h}x{w}x{c} image: its {h * w * c * es} bytes and a one-pixel tile do not "
                    f"fit the {target.scratchpad.size_bytes}-byte scratchpad")
        return None

    def plan(self, kernel: Kernel, target) -> Plan:
        x, grid = kernel.inputs
        n, c, h, w = x.shape
        pixels = grid.shape[1] * grid.shape[2]
        table = _aligned(h * w * c * x.dtype.size) + _aligned(4 * _SCALARS)
        p = largest_fitting(lambda t: _tile_bytes(t, c), target.scratchpad.size_bytes - table, min(pixels, MAX_TILE))
        if p == 0:
            raise CompileError(f"kernel '{kernel.name}': no grid_sample tile fits beside the image")
        corners = 4 if kernel.attrs.mode == "bilinear" else 1
        tiles = n * -(-pixels // p)
        dram = sum(burst_bytes(t, target.dma.burst_bytes) for t in kernel.tensors())
        lane = n * pixels * (30 + corners * (16 + 3 * c))
        est = estimate_cycles(target, dram, lane, tiles * (12 + corners * 16))
        summary = f"grid_sample {kernel.attrs.mode}/{kernel.attrs.padding_mode}: {n} images of {h}x{w}x{c}, " \
                  f"tiles of {p} of {pixels} pixels, {corners} corners"
        return Plan(summary, table + _tile_bytes(p, c), 0, est, GridPlan(p, table))

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        x, grid = kernel.inputs
        a = kernel.attrs
        n, c, h, w = x.shape
        ho, wo = grid.shape[1:3]
        es = x.dtype.size
        gp: GridPlan = plan.details
        arena = SramArena("scratchpad", em.target.scratchpad.size_bytes, owner=kernel.name)
        table = arena.alloc(h * w * c * es, "image table")
        scal = arena.alloc(4 * _SCALARS, "scalars")
        p = gp.tile
        buf = _Buffers(arena, p, c)
        em.emit("VFILL", dtype="fp32", n0=1, dst=scal, value=0.0)
        em.emit("VFILL", dtype="fp32", n0=1, dst=scal + 4, value=f32(w - 1))
        em.emit("VFILL", dtype="fp32", n0=1, dst=scal + 8, value=f32(h - 1))
        em.emit("VFILL", dtype="fp16", n0=1, dst=scal + 12, value=0.0)
        for b in range(n):
            dma_nd(em, "DMA_LOAD", x.offset((b, 0, 0, 0)), (h, w, c), (x.strides[2], x.strides[3], x.strides[1]),
                   table, (w * c * es, c * es, es), es)
            for p0 in range(0, ho * wo, p):
                np_ = min(p, ho * wo - p0)
                r0 = b * ho * wo + p0
                load_pieces(em, rows_block(grid, (0, 1, 2), 3, r0, np_, 0, 2), Tile(buf.g16, np_, 2, F16))
                self._tile(em, a, buf, np_, c, h, w, table, scal)
                store_pieces(em, Tile(buf.out, np_, c, F16), channels_last_block(kernel.output, r0, np_, 0, c))

    def _tile(self, em, a, buf: "_Buffers", p: int, c: int, h: int, w: int, table: int, scal: int) -> None:
        v = _Vec(em, p)
        _Vec(em, 2 * p).cvt(F16, F32, buf.g32, buf.g16)
        axes = []
        for col, size, lim in ((0, w, scal + 4), (1, h, scal + 8)):
            cc, f0, w0, w1 = buf.axis[col]
            v.un("adds", cc, buf.g32 + 4 * col, 1.0, src_s0=8)
            if a.align_corners:
                v.un("muls", cc, cc, (size - 1) / 2)
            else:
                v.un("muls", cc, cc, size / 2)
                v.un("adds", cc, cc, -0.5)
            if a.padding_mode == "border":
                v.un("clamp", cc, cc, 0.0, float(size - 1))
            v.cvt(F32, I32, buf.i32, cc)
            v.cvt(I32, F32, f0, buf.i32)  # the coordinate rounded half to even
            if a.mode == "bilinear":
                v.cmp("gt", buf.mask, f0, cc)  # 1 where rounding went up
                v.bin("sub", f0, f0, buf.mask)  # floor
                v.bin("sub", w1, cc, f0)
                v.un("neg", w0, w1)
                v.un("adds", w0, w0, 1.0)
            axes.append((f0, w0, w1, lim))
        (fx, wx0, wx1, limx), (fy, wy0, wy1, limy) = axes
        if a.mode == "bilinear":
            corners = [(dx, dy, wxs, wys) for dy, wys in ((0, wy0), (1, wy1)) for dx, wxs in ((0, wx0), (1, wx1))]
        else:
            corners = [(0, 0, None, None)]
        em.emit("VFILL", dtype="fp32", n0=p * c, dst=buf.acc, value=0.0)
        for dx, dy, wxs, wys in corners:
            cx, cy = buf.cx, buf.cy
            v.un("adds", cx, fx, float(dx))
            v.un("adds", cy, fy, float(dy))
            if wxs is not None:
                v.bin("mul", buf.wt, wxs, wys)
            else:
                em.emit("VFILL", dtype="fp32", n0=p, dst=buf.wt, value=1.0)
            zeros = a.padding_mode == "zeros"
            if zeros:  # valid = 0 <= cx <= W-1 and 0 <= cy <= H-1
                for coord, lim in ((cx, limx), (cy, limy)):
                    v.cmp("ge", buf.mask, coord, scal, b_s0=0)
                    v.bin("mul", buf.wt, buf.wt, buf.mask)
                    v.cmp("le", buf.mask, coord, lim, b_s0=0)
                    v.bin("mul", buf.wt, buf.wt, buf.mask)
            v.un("clamp", buf.tx, cx, 0.0, float(w - 1))
            v.un("clamp", buf.ty, cy, 0.0, float(h - 1))
            v.un("muls", buf.ty, buf.ty, float(w))
            v.bin("add", buf.tx, buf.tx, buf.ty)
            v.cvt(F32, I32, buf.idx, buf.tx)
            em.emit("VGATHER", dtype="fp16", n0=c, n1=p, dst=buf.rows, idx=buf.idx, table=table,
                    table_rows=h * w, table_s1=c * 2)
            if zeros:  # rows of corners outside the image become 0 (no 0 * inf)
                v.cmp("eq", buf.mask, buf.wt, scal, b_s0=0)
                v.cvt(F32, F16, buf.w16, buf.mask)
                em.emit("VSEL", dtype="fp16", n0=c, n1=p, dst=buf.rows, dst_s1=c * 2 if p > 1 else 0,
                        mask=buf.w16, mask_s0=0, mask_s1=2 if p > 1 else 0, a=scal + 12, a_s0=0, a_s1=0)
            v.cvt(F32, F16, buf.w16, buf.wt)
            em.emit("VBIN", op="mac", dtype="fp16", n0=c, n1=p, dst=buf.acc, dst_s1=4 * c if p > 1 else 0,
                    a=buf.rows, a_s1=2 * c if p > 1 else 0, b=buf.w16, b_s0=0, b_s1=2 if p > 1 else 0)
        _Vec(em, p * c).cvt(F32, F16, buf.out, buf.acc)


class _Buffers:
    """The scratchpad temporaries of one tile of ``p`` pixels (see :func:`_tile_bytes`)."""

    def __init__(self, arena: SramArena, p: int, c: int) -> None:
        v = 4 * p
        self.g16 = arena.alloc(4 * p, "grid fp16")
        self.g32 = arena.alloc(8 * p, "grid fp32")
        self.axis = [tuple(arena.alloc(v, name) for name in _VEC32[4 * i:4 * i + 4]) for i in range(2)]
        for name in _VEC32[8:]:
            setattr(self, name, arena.alloc(v, name))
        self.w16 = arena.alloc(2 * p, "weights fp16")
        self.rows = arena.alloc(2 * p * c, "gathered rows")
        self.out = arena.alloc(2 * p * c, "output tile")
        self.acc = arena.alloc(4 * p * c, "fp32 sums")


register_kernel(GridSampleKernel())
