"""The array problem: a batch of implicit GEMMs over windows, and how one is tiled.

A convolution (per image and group) and a matrix product (per batch index) are the same thing
to the systolic array: output pixels (oy, ox) are the GEMM's rows, output channels its columns,
and the window (ky, kx, c) its reduction.  A gemm is a convolution of a 1 x M "image" with a
1 x 1 kernel.  :class:`ArrayProblem` says it once, with every DRAM layout as byte strides and
one base address per batch; :class:`ArrayTiling` is a schedule for it; :func:`steps` is the
loop nest that both the code generator (``npuc.codegen.kernels.array_engine``) and the cost
model (``npuc.schedule.cost``) walk, so the two agree on what is loaded, computed and stored.

Scratchpad layouts (element size ``es``):

* input band: ``[rows][cols][slot]``: ``slot`` = the tile's channels (``tc``), or, when rows are
  *unfolded*, ``kh`` x ``tc`` (pixel (r, x) holds input row ``(oy0 + r) * sy + ky * dy`` for
  every ky), so that a whole window is one contiguous run of ``kw * kh * tc`` elements.  A band
  holds the input rows of ``ArrayTiling.band`` output rows (several output tiles): its rows are
  loaded as the tiles first need them, so the rows that neighbouring tiles share (the halo) and
  the band itself are read from DRAM once for every output-channel tile and every row tile;
* weight block: ``[krow][tn]`` (k-major) or ``[n][krows]`` (n-major, for a weight stored with its
  reduction dimension contiguous, e.g. a linear layer's ``[N, K]``); krow runs over (ky, kx, c),
  or (kx, ky, c) for unfolded rows;
* output tile: ``[th * tw][tn]`` (fp32 in the accumulator, the element type in the scratchpad).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from npuc.kir import records
from npuc.kir.kernel import EpilogueOp
from npuc.isa.enums import Dataflow, DType


@dataclass(frozen=True)
class Axis:
    """One spatial axis: input ``size``, ``kernel`` taps, ``stride``, leading ``pad``,
    ``dilation`` and ``out`` outputs.

    A 1-tap axis is *sampled*: a tile loads only the input positions the outputs read (every
    ``stride``-th), so a strided 1x1 convolution moves no unused bytes.  Otherwise the tile holds
    the dense input span the windows cover.
    """

    size: int
    kernel: int
    stride: int
    pad: int
    dilation: int
    out: int

    @property
    def sampled(self) -> bool:
        return self.kernel == 1

    @property
    def out_step(self) -> int:
        """Local (tile) positions between neighbouring outputs."""
        return 1 if self.sampled else self.stride

    @property
    def tap_step(self) -> int:
        """Local positions between neighbouring kernel taps."""
        return self.dilation

    @property
    def in_step(self) -> int:
        """Input positions between neighbouring local positions."""
        return self.stride if self.sampled else 1

    def span(self, t: int) -> int:
        """Local positions a tile of ``t`` outputs needs."""
        if self.sampled:
            return t
        return (t - 1) * self.stride + (self.kernel - 1) * self.dilation + 1

    def start(self, o0: int) -> int:
        """Input position of local position 0 for a tile starting at output ``o0``."""
        return o0 * self.stride - self.pad

    def valid(self, o0: int, t: int) -> tuple[int, int]:
        """Local range [lo, hi) of a tile that lies inside the input (the rest is padding)."""
        return _valid_range(self.start(o0), self.in_step, self.span(t), self.size)


def _valid_range(start: int, step: int, length: int, size: int) -> tuple[int, int]:
    lo = 0 if start >= 0 else min(length, -(-(-start) // step))
    hi = max(lo, min(length, -(-(size - start) // step)))
    return lo, hi


@dataclass(frozen=True)
class OperandLayout:
    """An epilogue operand over the output's (oy, ox, n) positions: byte strides (zero where it
    broadcasts) and one base address per batch."""

    addrs: tuple[int, ...]
    strides: tuple[int, int, int]

    @property
    def spatial_broadcast(self) -> bool:
        return self.strides[0] == 0 and self.strides[1] == 0

    @property
    def channel_broadcast(self) -> bool:
        return self.strides[2] == 0


@dataclass(frozen=True)
class ArrayQuant:
    """The int8 side of an array problem.

    Per batch, the folded int32 bias ``[n]`` (``b - zx * sum(w)``, from ``npuc.quant.arith``) at
    ``bias_addrs[b]`` and the REQUANT records of its ``n`` channels at ``records_addrs[b]``,
    stored as :mod:`npuc.kir.records` says (5 bytes a channel); ``pad_value`` fills padding
    cells (the input zero point), and the int32
    accumulator becomes int8 with ``zero_point`` and the clamp [``qmin``, ``qmax``].
    ``add_records`` has one entry per epilogue step: the DRAM address of a fused qadd's REQUANT
    record ``[1, 2]`` (``npuc.schedule.int8_epilogue``), None for other steps.
    """

    bias_addrs: tuple[int, ...]
    records_addrs: tuple[int, ...]
    pad_value: int
    zero_point: int
    qmin: int = -128
    qmax: int = 127
    add_records: tuple[int | None, ...] = ()

    @property
    def adds(self) -> int:
        """Fused qadd steps."""
        return sum(a is not None for a in self.add_records)


@dataclass(frozen=True)
class ArrayProblem:
    """A batch of implicit GEMMs with DRAM layouts (see the module docstring).

    Per batch b: input ``[y.size][x.size][c]`` at ``x_addrs[b]`` with strides ``x_strides``
    (row, pixel, channel), weights ``[kh][kw][c][n]`` at ``w_addrs[b]`` with ``w_strides``,
    output ``[y.out][x.out][n]`` at ``out_addrs[b]`` with ``out_strides``; ``epilogue`` ops with
    the layouts of their DRAM operands (None for unary or scalar ops).
    """

    name: str
    dtype: DType
    y: Axis
    x: Axis
    c: int
    n: int
    x_addrs: tuple[int, ...]
    w_addrs: tuple[int, ...]
    out_addrs: tuple[int, ...]
    x_strides: tuple[int, int, int]
    w_strides: tuple[int, int, int, int]
    out_strides: tuple[int, int, int]
    epilogue: tuple[EpilogueOp, ...] = ()
    operands: tuple[OperandLayout | None, ...] = ()
    quant: ArrayQuant | None = None

    @property
    def pad_value(self) -> int:
        """What padding cells of an input tile hold: 0, or the int8 input's zero point."""
        return self.quant.pad_value if self.quant is not None else 0

    @property
    def batches(self) -> int:
        return len(self.out_addrs)

    @property
    def es(self) -> int:
        return self.dtype.size

    @property
    def macs(self) -> int:
        return self.batches * self.y.out * self.x.out * self.n * self.c * self.y.kernel * self.x.kernel

    @property
    def weights_n_major(self) -> bool:
        """Whether weight blocks are best stored [n][krows]: reduction contiguous in DRAM."""
        return self.w_strides[3] != self.es and self.w_strides[2] == self.es


@dataclass(frozen=True)
class ArrayTiling:
    """A schedule of an :class:`ArrayProblem`.

    ``th`` x ``tw`` output pixels by ``tn`` output channels per accumulator tile, ``tc`` input
    channels per reduction block; ``order`` "m_outer" (pixels outside, the input tile stays while
    every channel block of the output is computed) or "n_outer" (output channel blocks outside,
    the weight block stays while every pixel tile is computed); ``unfold`` the unfolded-row
    input layout; ``x_slots``/``w_slots`` the scratchpad buffers for input tiles and weight
    blocks (2: double buffered; more: every block resident, loaded once); ``dataflow``
    weight-stationary (LOAD_WEIGHTS + MATMUL per reduction chunk) or output-stationary (one MATMUL_OS per rows x cols block of
    the output tile over the whole reduction block: for 1x1 windows, see :func:`can_os`);
    ``acc_slots`` the accumulator tiles (2: the vector queue turns one into the result while the
    array fills the other; 1: the array waits for the epilogue of every tile); ``band`` the
    output rows whose input one buffer holds (0: ``th``, one tile; more: the input band of
    several row tiles, loaded row by row as they need it; unfolded rows use 0);
    ``wide_weights`` a weight block holding every output channel of its reduction block (the
    channel tiles read their columns from it), so that its DRAM rows are whole runs of
    ``n`` elements instead of ``tn``-element pieces (for k-major weights that stay resident);
    ``tail_cols`` the output channels of each tile the last output tile of a batch is cut into
    (``m_outer`` order; 0: ``tn``): the kernel's last epilogue and store, which no matrix product
    overlaps, then cover only that many channels, while the array computes the tile's other
    channels before them (the pipeline's drain); the weights stay one block of every channel.
    ``head_rows`` the height of a first row tile of its own (0: none): the array starts once
    that many output rows' input has arrived, not a whole tile's (the pipeline's fill).
    ``quant_once`` (int8): every channel's bias and REQUANT records loaded once for the kernel
    into one scratchpad buffer, not each channel block's into one of two (``quant_block``):
    fewer loads, fewer bursts, a larger buffer.
    """

    th: int
    tw: int
    tn: int
    tc: int
    order: str = "m_outer"
    unfold: bool = False
    x_slots: int = 2
    w_slots: int = 2
    dataflow: Dataflow = Dataflow.weight_stationary
    acc_slots: int = 1
    band: int = 0
    wide_weights: bool = False
    tail_cols: int = 0
    head_rows: int = 0
    quant_once: bool = False

    def weight_cols(self, p: "ArrayProblem") -> int:
        """Output channels of one weight block: ``tn``, or every channel (``wide_weights``)."""
        return p.n if self.wide_weights else self.tn

    @property
    def band_rows(self) -> int:
        """Output rows of one input band (unfolded rows: one tile)."""
        return self.th if self.unfold else max(self.band, self.th)

    def __str__(self) -> str:
        extra = " unfold" if self.unfold else ""
        if self.band_rows > self.th:
            extra += f" band {self.band_rows}"
        if self.wide_weights:
            extra += " wide-w"
        if self.tail_cols:
            extra += f" tail n{self.tail_cols}"
        if self.head_rows:
            extra += f" head {self.head_rows}"
        if self.quant_once:
            extra += " quant-once"
        return (
            f"{self.dataflow.short} {self.order} tile {self.th}x{self.tw}x{self.tn} c{self.tc}{extra} "
            f"x-bufs {self.x_slots} w-bufs {self.w_slots} acc-bufs {self.acc_slots}"
        )


class Step(NamedTuple):
    """One iteration of the loop nest: batch ``b``, output tile rows [oy0, oy0+th), columns
    [ox0, ox0+tw), channels [n0, n0+tn), reduction block [c0, c0+tc); ``first``/``last``
    reduction block of its output tile; the tile lies in the input band of output rows
    [y0, y0+bh)."""

    b: int
    oy0: int
    th: int
    ox0: int
    tw: int
    n0: int
    tn: int
    c0: int
    tc: int
    first: bool
    last: bool
    y0: int
    bh: int

    @property
    def m(self) -> int:
        return self.th * self.tw

    def x_key(self, p: ArrayProblem) -> tuple[int, ...]:
        """What identifies the input band (equal keys: same bytes, no reload)."""
        return (p.x_addrs[self.b], self.y0, self.bh, self.ox0, self.tw, self.c0, self.tc)

    def x_rows(self, p: ArrayProblem) -> tuple[int, int]:
        """Local rows [lo, hi) of the band that this step's tile reads."""
        lo = (self.oy0 - self.y0) * p.y.out_step
        return lo, lo + p.y.span(self.th)

    def w_key(self, p: ArrayProblem, t: ArrayTiling | None = None) -> tuple[int, ...]:
        if t is not None and t.wide_weights:
            return (p.w_addrs[self.b], 0, p.n, self.c0, self.tc)
        return (p.w_addrs[self.b], self.n0, self.tn, self.c0, self.tc)

    def w_col(self, t: ArrayTiling) -> int:
        """Column of the step's first output channel in its weight block."""
        return self.n0 if t.wide_weights else 0


def blocks(total: int, size: int) -> list[tuple[int, int]]:
    """(start, length) of ``total`` cut in blocks of ``size``."""
    return [(s, min(size, total - s)) for s in range(0, total, size)]


class RowTile(NamedTuple):
    """Output rows [oy0, oy0+th) of a tile in the band of output rows [y0, y0+bh)."""

    y0: int
    bh: int
    oy0: int
    th: int


def row_tiles(p: ArrayProblem, t: ArrayTiling) -> list[RowTile]:
    """The output-row tiles in order: bands of ``t.band_rows`` rows cut in tiles of ``t.th``
    (with ``t.head_rows``, the first tile's first rows are a tile of their own)."""
    out = [RowTile(y0, bh, y0 + o, th) for y0, bh in blocks(p.y.out, t.band_rows) for o, th in blocks(bh, t.th)]
    first = out[0]
    if 0 < t.head_rows < first.th and not t.unfold:
        out[:1] = [first._replace(th=t.head_rows), first._replace(oy0=first.oy0 + t.head_rows, th=first.th - t.head_rows)]
    return out


def has_tail(p: ArrayProblem, t: ArrayTiling) -> bool:
    """Whether the last output tile of each batch is cut into ``t.tail_cols`` channel tiles."""
    return t.order == "m_outer" and 0 < t.tail_cols < min(t.tn, p.n)


def _tile_nest(p: ArrayProblem, t: ArrayTiling):
    """(row tile, column block, channel block) of every output tile of one batch, in order."""
    ys, xs, ns = row_tiles(p, t), blocks(p.x.out, t.tw), blocks(p.n, t.tn)
    if t.order != "m_outer":
        return [(yb, xb, nb) for nb in ns for yb in ys for xb in xs]
    nest = [(yb, xb, nb) for yb in ys for xb in xs for nb in ns]
    if has_tail(p, t):
        yb, xb, (n0, tn) = nest.pop()
        nest += [(yb, xb, (n0 + j, k)) for j, k in blocks(tn, t.tail_cols)]
    return nest


def steps(p: ArrayProblem, t: ArrayTiling) -> Iterator[Step]:
    """The loop nest in program order."""
    cs = blocks(p.c, t.tc)
    last_c = len(cs) - 1
    for b in range(p.batches):
        nest = _tile_nest(p, t)
        for r, (ox0, tw), (n0, tn) in nest:
            for i, (c0, tc) in enumerate(cs):
                yield Step(b, r.oy0, r.th, ox0, tw, n0, tn, c0, tc, i == 0, i == last_c, r.y0, r.bh)


def step_count(p: ArrayProblem, t: ArrayTiling) -> int:
    return p.batches * len(_tile_nest(p, t)) * math.ceil(p.c / t.tc)


# ----------------------------------------------------------------------------- tile geometry


@dataclass(frozen=True)
class Chunk:
    """One LOAD_WEIGHTS/MATMUL reduction chunk: ``k`` rows starting at element ``in_off`` of the
    window origin in the input tile and at weight row ``w_row``."""

    in_off: int
    w_row: int
    k: int


@dataclass(frozen=True)
class InputGeometry:
    """Element strides of an input tile in the scratchpad for a tiling (max tile sizes)."""

    rows: int  # local rows (max over tiles)
    cols: int  # local columns
    slot: int  # elements per pixel

    @property
    def row_elems(self) -> int:
        return self.cols * self.slot

    @property
    def elems(self) -> int:
        return self.rows * self.row_elems


def input_geometry(p: ArrayProblem, t: ArrayTiling, tc: int | None = None) -> InputGeometry:
    """Layout of input bands holding ``tc`` channels (default: the tiling's block); a narrower
    last reduction block packs its pixels tighter in the same buffer."""
    tc = t.tc if tc is None else tc
    cols = p.x.span(t.tw)
    if t.unfold:
        return InputGeometry(t.th, cols, p.y.kernel * tc)
    return InputGeometry(p.y.span(t.band_rows), cols, tc)


def can_unfold(p: ArrayProblem) -> bool:
    """Unfolded rows need a dense, undilated x axis and more than one row tap."""
    return p.y.kernel > 1 and not p.x.sampled and p.x.dilation == 1


def chunks(p: ArrayProblem, t: ArrayTiling, tc: int, rows: int) -> list[Chunk]:
    """The reduction of one block of ``tc`` channels cut in chunks of at most ``rows``."""
    g = input_geometry(p, t, tc)
    kh, kw = p.y.kernel, p.x.kernel
    runs: list[tuple[int, int, int]] = []  # (in_off, w_row, length)
    if t.unfold:
        runs.append((0, 0, kw * kh * tc))
    elif kw == 1 or p.x.dilation == 1:
        # (kx, c) of one window row are contiguous: one run per ky
        for ky in range(kh):
            runs.append((ky * p.y.tap_step * g.row_elems, ky * kw * tc, kw * tc))
    else:
        for ky in range(kh):
            for kx in range(kw):
                off = ky * p.y.tap_step * g.row_elems + kx * p.x.tap_step * g.slot
                runs.append((off, (ky * kw + kx) * tc, tc))
    out = []
    for off, row, length in runs:
        for s in range(0, length, rows):
            out.append(Chunk(off + s, row + s, min(rows, length - s)))
    return out


def can_os(p: ArrayProblem) -> bool:
    """Output-stationary needs the tile's pixels evenly strided with the reduction contiguous
    (1x1 windows: pixel i of a tile at i x slot) and weight rows with contiguous columns."""
    return p.y.kernel == 1 and p.x.kernel == 1 and not p.weights_n_major


def weight_rows(p: ArrayProblem, tc: int) -> int:
    return p.y.kernel * p.x.kernel * tc


# ----------------------------------------------------------------------------- footprint


def _align(n: int, a: int = 64) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class Footprint:
    """Scratchpad bytes of each buffer kind (per slot) and the accumulator bytes of a tiling
    (``acc``: every accumulator tile, ``acc_slot``: one)."""

    x_slot: int
    w_slot: int
    out_slot: int
    operand_slots: tuple[int, ...]
    acc: int
    quant_slot: int = 0  # int8: the bias and REQUANT records of a channel block (``quant_block``)
    acc_slot: int = 0
    add_records_slot: int = 0  # int8 with fused qadds: their REQUANT records (QADD needs no other buffer)
    quant_slots: int = 2  # 1 when the block is every channel (loaded once)

    def spad(self, t: ArrayTiling) -> int:
        return (
            t.x_slots * self.x_slot + t.w_slots * self.w_slot + 2 * self.out_slot
            + sum(2 * s for s in self.operand_slots) + self.quant_slots * self.quant_slot + self.add_records_slot
        )


def quant_records_offset(k: int) -> int:
    """Where ``k`` channels' REQUANT records (8 bytes each, npuc.kir.records) start in their
    scratchpad buffer: after the bias (int32 ``[k]``), 64-byte aligned."""
    return _align(k * 4)


def quant_bytes(k: int) -> int:
    """Scratchpad bytes of ``k`` channels' bias and REQUANT records."""
    return quant_records_offset(k) + _align(k * records.ON_CHIP_BYTES)


def quant_slots(p: "ArrayProblem", t: ArrayTiling) -> int:
    """Scratchpad buffers of the bias and records: 1 when one load serves the whole kernel
    (``quant_once``, and every batch reads the same constants), else 2 (double buffered)."""
    return 1 if t.quant_once and len(set(p.quant.bias_addrs)) == 1 else 2


def quant_block(p: "ArrayProblem", t: ArrayTiling) -> int:
    """Channels of the bias and records an int8 tiling loads at a time: every one (``p.n``) with
    ``quant_once``, else one channel block's (``t.tn``)."""
    return p.n if t.quant_once else t.tn


def operand_tile_elems(op: OperandLayout, m: int, tn: int) -> int:
    rows = 1 if op.spatial_broadcast else m
    cols = 1 if op.channel_broadcast else tn
    return rows * cols


def footprint(p: ArrayProblem, t: ArrayTiling) -> Footprint:
    es = p.es
    m = t.th * t.tw
    x_slot = _align(input_geometry(p, t).elems * es)
    w_slot = _align(weight_rows(p, t.tc) * t.weight_cols(p) * es)
    out_slot = _align(m * t.tn * es)
    ops = tuple(_align(operand_tile_elems(o, m, t.tn) * es) for o in p.operands if o is not None)
    # a division by an operand needs a reciprocal copy: the operand slot is reused in place
    quant = quant_bytes(quant_block(p, t)) if p.quant is not None else 0
    acc_slot = _align(m * t.tn * 4)
    adds = p.quant.adds if p.quant is not None else 0
    return Footprint(x_slot, w_slot, out_slot, ops, t.acc_slots * acc_slot, quant, acc_slot, adds * QADD_RECORD_BYTES,
                     quant_slots(p, t) if p.quant is not None else 2)


QADD_RECORD_BYTES = 64  # a fused qadd's REQUANT record (8 bytes) in its own aligned block
