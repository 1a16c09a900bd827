"""``depthwise_conv2d`` on the array, in its depthwise mode: one MATMUL_DW per tap and block of channels.

The vector unit computes a depthwise convolution with one multiply and one add per tap
(``vector_depthwise``).  The weight-stationary array can do it too: for tap (dy, dx) and a block
of ``kb`` channels (``kb`` = the smaller array side), the weights ``w[dy, dx, c0 .. c0+kb]`` on
the array's diagonal turn the shifted input window (``kb`` contiguous channels per pixel) into
that tap's products of the block, and the accumulator adds the taps up for free.  ``MATMUL_DW``
is that mode of the array (docs/isa.md): only the ``kb`` diagonal processing elements multiply,
the others are clock-gated, and it reads the ``kb`` diagonal weights straight from the tap-major
weight buffer, so no ``kb x kb`` tile of zeros is built, stored, loaded or multiplied.  The
array is as fast per tap as a vector unit with as many lanes, but it needs no add step and
leaves the vector unit to the epilogue, which runs beside the next tile's products.
``DepthwiseKernel.plan`` builds both tile programs and keeps the one the cost model finds
cheaper, per layer.

Layout.  Tiles are (image, channel block, output rows, output columns: all of them, or column
tiles when a tile of every column holds few rows), channel blocks outer.  The weights are
loaded once tap-major (``[kh*kw][C]``, as for the vector kernel); int8's folded bias and REQUANT
records either with them, or (``quant_groups``, a tiling of its own for the cost model to weigh:
faster where the weight memory is slow, more code) a group of channels at a time with the fetch
of the group's first tile, so the first epilogue waits only for its own channels'
(``quant_constants``).  Per tile: input rows into a
padded buffer (``fetch_padded``, borders VFILLed with 0 or the int8 zero point), then per tap
and channel block one MATMUL_DW walking the whole output tile (two-level row loop: horizontal
stride, then rows) into an accumulator tile (taps outer, blocks inner); two accumulator tiles
alternate.  The epilogue converts the accumulator tile (fp16: VCVT fp32 -> fp16; int8: the
folded bias added in int32, then REQUANT per channel: the same integer sums as the vector
kernel's, so the same bits), applies the fused epilogue ops and stores it.

Numerics (fp16): products exact in fp32 and sums in fp32, one rounding to fp16 per output
(the vector kernel rounds after every multiply and add).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from npuc.codegen.epilogue import (
    ALIGN,
    MAX_COUNT,
    Tile,
    alloc_epilogue,
    apply_epilogue,
    channels_last_rows,
    dma_nd,
    emit_acc_to_tile,
    emit_bias_requant,
    epilogue_blocks,
    epilogue_spad_bytes,
    load_epilogue_operands,
    store_pieces,
    vector_nd,
)
from npuc.codegen.kernels.vector_common import column_tilings, fetch_padded, largest_fitting, overlap_cap
from npuc.codegen.tile_builder import TileBuilder
from npuc.isa.enums import Dataflow, DType
from npuc.kir import records as channel_records
from npuc.kir.kernel import Kernel
from npuc.kir.tile_program import TileProgram

NSETS = 3
ACC_TILES = 2


@dataclass(frozen=True)
class ArrayDepthwisePlan:
    """``rows`` output rows x ``chans`` channels per tile, on the array."""

    rows: int
    chans: int
    kh: int
    kw: int
    cols: int = 0  # output columns per tile (0: all of them)
    quant_groups: bool = False  # int8: bias and records loaded per channel group, with its first tile


def _r(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _block(target) -> int:
    return min(target.array.rows, target.array.cols)


def array_problem(k: Kernel, target) -> str | None:
    """Why this depthwise kernel cannot run on the array of ``target``, or None."""
    if k.dtype.name not in target.array.dtypes:
        return f"the array of '{target.name}' has no {k.dtype.name} MACs"
    if not target.supports_dataflow(Dataflow.weight_stationary):
        return f"the array of '{target.name}' has no weight-stationary dataflow"
    return None


def _geometry(k: Kernel, rows: int, cols: int = 0) -> tuple[int, int]:
    """(input rows, padded width) of a tile of ``rows`` output rows and ``cols`` columns (0: all)."""
    a = k.attrs
    kh, kw = k.inputs[1].shape[2:]
    ow = cols or k.output.shape[3]
    return (rows - 1) * a.stride[0] + (kh - 1) * a.dilation[0] + 1, (ow - 1) * a.stride[1] + (kw - 1) * a.dilation[1] + 1


def _fixed_spad(k: Kernel) -> int:
    es = k.dtype.size
    kh, kw = k.inputs[1].shape[2:]
    c = k.inputs[0].shape[1]
    fixed = _r(kh * kw * c * es)
    if not k.dtype.is_float:
        fixed += _r(c * 4) + _r(c * 8)
    return fixed


def _set_spad(k: Kernel, rows: int, chans: int, cols: int = 0) -> int:
    es = k.dtype.size
    rin, wp = _geometry(k, rows, cols)
    ow = cols or k.output.shape[3]
    return (_r(rin * wp * chans * es) + _r(rows * ow * chans * es)
            + epilogue_spad_bytes(k.epilogue, rows * ow, chans, k.dtype, col_dim=1))


def array_tilings(k: Kernel, target) -> list[ArrayDepthwisePlan]:
    """The tilings worth costing: all channels per tile, and blocks of 2 and 4 array widths of
    channels, each with as many output rows as the scratchpad and accumulator allow (wide
    blocks make fewer tiles, narrow ones longer MATMULs; the cost model decides), every column
    per tile and, when a tile of every column holds few rows (its input rows overlap, read two
    or three times), in column tiles shaped to read the least input per output."""
    if array_problem(k, target):
        return []
    kb = _block(target)
    n, c = k.inputs[0].shape[:2]
    oh, ow = k.output.shape[2:]
    spad, acc = target.scratchpad.size_bytes, target.accumulator.size_bytes
    out: list[ArrayDepthwisePlan] = []
    for chans in sorted({min(c, (MAX_COUNT // kb) * kb), min(c, 4 * kb), min(c, 2 * kb)}, reverse=True):
        def fits(r: int, ch: int = chans) -> int:
            over_acc = ACC_TILES * _r(r * ow * ch * 4) > acc
            return spad + 1 if over_acc else _fixed_spad(k) + NSETS * _set_spad(k, r, ch)

        rows = largest_fitting(fits, spad, min(oh, MAX_COUNT))
        if rows:
            rows = overlap_cap(n * oh * -(-c // chans), rows, max(1, 2048 // (ow * chans * k.dtype.size)))
            out.append(ArrayDepthwisePlan(rows, chans, *k.inputs[1].shape[2:]))

        def fits_q(r: int, q: int, ch: int = chans) -> int:
            over_acc = ACC_TILES * _r(r * q * ch * 4) > acc
            return spad + 1 if over_acc else _fixed_spad(k) + NSETS * _set_spad(k, r, ch, q)

        def read(r: int, q: int) -> float:
            rin, wp = _geometry(k, r, q)
            return rin * wp / (r * q)

        tilings = column_tilings(fits_q, spad, min(oh, MAX_COUNT), ow, read)
        if tilings and (not rows or read(*tilings[0]) < 0.9 * read(rows, 0 or ow)):
            r, q = tilings[0]
            tiles = -(-ow // q) * -(-c // chans)
            r = overlap_cap(n * oh * tiles, r, max(1, 2048 // (q * chans * k.dtype.size)))
            out.append(ArrayDepthwisePlan(r, chans, *k.inputs[1].shape[2:], q))
    if not k.dtype.is_float:  # each tiling also with its bias and records loaded a channel group at a time
        out += [replace(p, quant_groups=True) for p in out if p.chans < c]
    return out


def array_matmul_cycles(k: Kernel, target) -> int:
    """A lower bound of the array schedule: one input row per cycle for every output pixel, tap
    and block of channels (the MATMULs' own time, nothing else)."""
    n, c = k.inputs[0].shape[:2]
    oh, ow = k.output.shape[2:]
    kh, kw = k.inputs[1].shape[2:]
    return n * oh * ow * kh * kw * -(-c // _block(target))


def array_program(k: Kernel, p: ArrayDepthwisePlan, target) -> TileProgram:
    """The schedule of depthwise kernel ``k`` on the array at tiling ``p``, as data."""
    tb = TileBuilder(target, k)
    _ArrayDepthwise(k, p, tb).run()
    cols = f" x {p.cols} columns" if p.cols else ""
    return tb.finish(f"{p.rows} output rows{cols} x {p.chans} channels on the array", p)


class _ArrayDepthwise:
    """The steps of one depthwise kernel on the array (state shared by the per-tile steps)."""

    def __init__(self, k: Kernel, p: ArrayDepthwisePlan, tb: TileBuilder) -> None:
        self.k, self.p, self.tb = k, p, tb
        x = k.inputs[0]
        self.n, self.c = x.shape[:2]
        self.oh, self.ow = k.output.shape[2:]
        self.kh, self.kw = k.inputs[1].shape[2:]
        self.taps = self.kh * self.kw
        self.es = k.dtype.size
        self.int8 = not k.dtype.is_float
        self.kb = _block(tb.target)
        self.rin, self.wp = _geometry(k, p.rows, p.cols)
        self.qw = p.cols or self.ow  # output columns of a full tile
        es, ow = self.es, self.qw
        self.wbuf = tb.alloc(self.taps * self.c * es, "weights")
        if self.int8:
            self.bias = tb.alloc(self.c * 4, "bias")
            self.records = tb.alloc(self.c * 8, "requant records")
        self.sets = []
        for i in range(NSETS):
            ibuf = tb.alloc(self.rin * self.wp * p.chans * es, f"input {i}")
            obuf = tb.alloc(p.rows * ow * p.chans * es, f"output {i}")
            bufs = alloc_epilogue(tb, k.epilogue, p.rows * ow, p.chans, k.dtype, col_dim=1)
            self.sets.append((ibuf, obuf, bufs))
        self.accs = [tb.alloc(p.rows * ow * p.chans * 4, f"accumulator {i}", mem="acc") for i in range(ACC_TILES)]
        self.tiles = [(b, c0, o0, q0) for b in range(self.n) for c0 in range(0, self.c, p.chans)
                      for o0 in range(0, self.oh, p.rows) for q0 in range(0, self.ow, self.qw)]
        self.loaded: dict[int, tuple] = {}
        self.quant_loaded: set[int] = set()  # channel groups whose bias and records are loaded

    def run(self) -> None:
        k, tb, es = self.k, self.tb, self.es
        w = k.inputs[1]
        dma_nd(tb, "DMA_LOAD", w.addr, (self.kh, self.kw, self.c), (w.strides[2], w.strides[3], w.strides[0]),
               self.wbuf, (self.kw * self.c * es, self.c * es, es), es)
        if self.int8 and not self.p.quant_groups:
            self.quant_constants(0, self.c)
        self._pipeline()

    def quant_constants(self, c0: int, nc: int) -> None:
        """int8: the folded bias and the REQUANT records of channels ``c0 .. c0+nc``: every
        channel's before the first tile, or with ``quant_groups`` a group's with the fetch of
        the group's first tile (two tiles ahead of its epilogue), so that on a slow weight memory
        the first epilogue does not wait for every channel's.  Each is a contiguous run of its
        constant, so on a target with stream buffers the groups' loads continue one stream."""
        bias, rec = self.k.inputs[2], self.k.inputs[3]
        dma_nd(self.tb, "DMA_LOAD", bias.addr + c0 * bias.strides[0], (nc,), bias.strides, self.bias + c0 * 4, (4,), 4)
        for op, f in channel_records.load_instrs(channel_records.record_addr(rec.addr, c0), nc, self.records + c0 * 8):
            self.tb.emit(op, **f)

    def _pipeline(self) -> None:
        """``pipeline``'s order, with tile i+2's fetch between tile i's products and its
        epilogue: the fetch is ready before the epilogue's stores (its buffer set was freed by
        tile i-1), and a DMA port serves the transfer that asks first, so issuing it first is
        the order the machine runs them in, and the cost walk, which takes transfers in program
        order, sees that order too."""
        tb, n, depth = self.tb, len(self.tiles), NSETS - 1
        for j in range(min(depth, n)):
            tb.at(j)
            self.fetch(j)
        for i in range(n):
            tb.at(i)
            self.products(i)
            if i + depth < n:
                tb.at(i + depth)
                self.fetch(i + depth)
            tb.at(i)
            self.finish(i)

    def _view(self, i: int) -> tuple[int, int, int, int, int, int]:
        """Tile i: (image, first channel, first output row, rows, channels, flat index of its
        first output pixel); its columns are :meth:`_cols`."""
        b, c0, o0, q0 = self.tiles[i]
        nr, nc = min(self.p.rows, self.oh - o0), min(self.p.chans, self.c - c0)
        return b, c0, o0, nr, nc, (b * self.oh + o0) * self.ow + q0

    def _cols(self, i: int) -> tuple[int, int, int]:
        """Tile i's first output column, its columns and the width of its input rows."""
        a = self.k.attrs
        q0 = self.tiles[i][3]
        nq = min(self.qw, self.ow - q0)
        return q0, nq, (nq - 1) * a.stride[1] + (self.kw - 1) * a.dilation[1] + 1

    def fetch(self, i: int) -> None:
        a = self.k.attrs
        b, c0, o0, nr, nc, r0 = self._view(i)
        q0, nq, wp = self._cols(i)
        ibuf, _, bufs = self.sets[i % NSETS]
        if self.int8 and self.p.quant_groups and c0 not in self.quant_loaded:
            self.quant_loaded.add(c0)
            self.quant_constants(c0, nc)
        rin = (nr - 1) * a.stride[0] + (self.kh - 1) * a.dilation[0] + 1
        pad = float(self.k.quant.in_zero_point) if self.int8 else 0.0
        left = q0 * a.stride[1] - a.padding[1]  # input column of the tile's first window
        fetch_padded(self.tb, self.k.inputs[0], b, c0, nc, o0 * a.stride[0] - a.padding[0], rin, wp, max(0, -left),
                     ibuf, pad, max(0, left))
        blocks = epilogue_blocks(self.k.epilogue, lambda t: channels_last_rows(t, r0, nr, self.ow, nq, c0, nc))
        self.loaded[i] = load_epilogue_operands(self.tb, self.k.epilogue, bufs, blocks, nr * nq, nc)

    def products(self, i: int) -> None:
        """Tile i's MATMUL_DWs: every tap of every channel block into its accumulator tile."""
        a, k, tb, es = self.k.attrs, self.k, self.tb, self.es
        b, c0, o0, nr, nc, r0 = self._view(i)
        _, ow, wp = self._cols(i)  # this tile's output columns
        ibuf = self.sets[i % NSETS][0]
        acc = self.accs[i % ACC_TILES]
        row_s, px_s = wp * nc * es, nc * es
        dt = k.dtype.name
        kb = self.kb
        # taps outer, channel blocks inner: the blocks of a tap are evenly strided (one LOOP body),
        # and each block's accumulator still adds its taps in order (the same sums, the same bits)
        for t in range(self.taps):
            dy, dx = divmod(t, self.kw)
            for blk in range(-(-nc // kb)):
                n = min(kb, nc - blk * kb)
                tb.emit("MATMUL_DW", dtype=dt, acc=int(t > 0), n=n, w_addr=self.wbuf + (t * self.c + c0 + blk * kb) * es,
                        in_addr=ibuf + dy * a.dilation[0] * row_s + dx * a.dilation[1] * px_s + blk * kb * es,
                        m0=ow, m1=nr, in_s0=a.stride[1] * px_s, in_s1=a.stride[0] * row_s,
                        out_addr=acc + blk * kb * 4, out_s0=nc * 4, out_s1=ow * nc * 4)

    def finish(self, i: int) -> None:
        """Tile i's epilogue on its accumulator tile, and its stores."""
        k, tb = self.k, self.tb
        b, c0, o0, nr, nc, r0 = self._view(i)
        ow = self._cols(i)[1]
        obuf = self.sets[i % NSETS][1]
        acc = self.accs[i % ACC_TILES]
        q = k.quant
        tile = Tile(obuf, nr * ow, nc, k.dtype)
        if self.int8:
            sums = Tile(acc, nr * ow, nc, DType.int32, space="acc")
            bias = Tile(self.bias + c0 * 4, nr * ow, nc, DType.int32, s1=0)
            emit_bias_requant(tb, sums, tile, bias, self.records + c0 * 8, q.out_zero_point, q.qmin, q.qmax)
        else:
            emit_acc_to_tile(tb, Tile(acc, nr * ow, nc, DType.fp32, space="acc"), tile)
        apply_epilogue(tb, k.epilogue, tile, self.loaded.pop(i))
        store_pieces(tb, tile, channels_last_rows(k.output, r0, nr, self.ow, ow, c0, nc))
