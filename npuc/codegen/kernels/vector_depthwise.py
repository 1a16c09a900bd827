"""``depthwise_conv2d``: one kh x kw filter per channel (groups = C = O), on the vector unit.

Channels-last tensors.  A tile is a block of output rows of one image, of output columns (all of
them, or column tiles when a row of every channel does not fit: cutting the channels instead
would make every pixel's run shorter than a burst) and of channels.
Its input rows land in a scratchpad buffer ``[rows][padded width][channels]`` whose padding
border is zero-filled by VFILL (only where the tile has one).  The weights are loaded once,
tap-major (``[kh*kw][C]``: ``constant_layout`` asks the packer for that order, so the load is one
contiguous run).  Then, per tap (dy, dx), one VBIN multiplies the shifted input window by the
tap's per-channel weights and one VBIN adds it into the accumulator tile; the first tap writes
the accumulator directly.  With horizontal stride 1 the weights are first repeated along a whole
output row (when that fits), so each tap is a single instruction over ``rows x (width x
channels)``; otherwise each tap is a few instructions (``vector_nd``).  The epilogue (bias,
activation, residual ...) runs on the accumulator tile, which is then stored.  Tiles rotate
through three buffer sets, software-pipelined (``pipeline``), so DMA overlaps the vector work.

int8 (``QuantAttrs``; inputs x, w, the folded int32 bias ``[C]`` and the REQUANT records,
stored in 5 bytes a channel: npuc.kir.records): the padding holds the input zero point, the int32 sums start at the bias, each tap
is one widening ``VBIN mac`` (exact), and REQUANT writes the int8 tile per channel.

Numerics (fp16): products and sums are computed in fp32 by the vector unit and rounded to fp16
after each multiply and each add (2 kh kw - 1 roundings per output; relative error ~1e-3 for
3x3).  This keeps the vector unit lane-bound (fp32 operands would make it scratchpad-bound at
1.5x the cycles).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from npuc.codegen.epilogue import (
    ALIGN,
    MAX_COUNT,
    Tile,
    emit_bias_requant,
    alloc_epilogue,
    apply_epilogue,
    channels_last_rows,
    dma_nd,
    epilogue_blocks,
    epilogue_spad_bytes,
    epilogue_supports,
    load_channel_records,
    load_epilogue_operands,
    store_pieces,
    vector_nd,
)
from npuc.codegen.kernel import SramArena, register_kernel
from npuc.codegen.program_size import encoded_bytes
from npuc.codegen.kernels.depthwise_on_array import ArrayDepthwisePlan, array_matmul_cycles, array_program, array_tilings
from npuc.codegen.tile_builder import TileBuilder, emit_program, placement_free, planned_program, tile_plan
from npuc.kir.tile_program import TileProgram
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan
from npuc.codegen.kernels.vector_common import (
    column_tilings,
    dtype_problem,
    fetch_padded,
    largest_fitting,
    overlap_cap,
    pipeline,
    quant_problem,
)
from npuc.errors import CompileError
from npuc.isa.enums import DType, Mem, Unit
from npuc.isa.instr import build_args, get_def
from npuc.memo import Memo

NSETS = 3
_EXPAND_SHARE = 8  # repeated weights may take up to 1/8 of the scratchpad


@dataclass(frozen=True)
class DepthwisePlan:
    """``rows`` output rows x ``chans`` channels per tile; ``expand``: weights repeated along a row."""

    rows: int
    chans: int
    expand: bool
    cols: int = 0  # output columns per tile (0: all of them)


def _r(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _geometry(k: Kernel, rows: int, cols: int = 0) -> tuple[int, int]:
    """(input rows, padded width) a tile of ``rows`` output rows and ``cols`` output columns
    (0: all) reads."""
    a = k.attrs
    (kh, kw), (sy, sx), (dy, dx) = _kernel_hw(k), a.stride, a.dilation
    ow = cols or k.output.shape[3]
    return (rows - 1) * sy + (kh - 1) * dy + 1, (ow - 1) * sx + (kw - 1) * dx + 1


def _kernel_hw(k: Kernel) -> tuple[int, int]:
    return k.inputs[1].shape[2], k.inputs[1].shape[3]


def _acc_size(k: Kernel) -> int:
    """Bytes per accumulator element: the element size, or 4 (int32) for int8."""
    return k.dtype.size if k.dtype.is_float else 4


def _set_bytes(k: Kernel, rows: int, chans: int, cols: int = 0) -> int:
    es = k.dtype.size
    rin, wp = _geometry(k, rows, cols)
    ow = cols or k.output.shape[3]
    out = rows * ow * chans * es
    acc = 0 if k.dtype.is_float else _r(rows * ow * chans * 4)  # int8: int32 sums beside the int8 tile
    return _r(rin * wp * chans * es) + _r(out) + acc + epilogue_spad_bytes(k.epilogue, rows * ow, chans, k.dtype, col_dim=1)


def _fixed_bytes(k: Kernel, rows: int, chans: int, expand: bool, cols: int = 0) -> int:
    """Weights (plain or repeated along a row) and the product scratch tile (fp16), or the bias
    and REQUANT records (int8), shared by all sets."""
    es = k.dtype.size
    kh, kw = _kernel_hw(k)
    ow = cols or k.output.shape[3]
    c = k.inputs[0].shape[1]
    w = kh * kw * c * es + (kh * kw * ow * chans * es if expand else 0)
    if not k.dtype.is_float:
        return _r(w) + _r(c * 4) + _r(c * 8)
    return _r(w) + _r(rows * ow * chans * es)


CYCLE_SLACK = 0.02  # schedules this much slower than the fastest count as fast
OFFCHIP_SLACK = 0.10  # of those, schedules that move this many more off-chip bytes than the fewest count as lean


def offchip_bytes(prog: TileProgram) -> int:
    """The off-chip bytes a tile program's transfers move (their DRAM regions, by definition)."""
    total = 0
    for s in prog.steps:
        d = get_def(s.op)
        if d.unit is Unit.dma:
            total += sum(r.nbytes for r in d.regions(build_args(d, dict(s.fields))) if r.mem is Mem.dram)
    return total


def finalists(plans: list[Plan]) -> list[Plan]:
    """Of ``plans``, those within CYCLE_SLACK of the fewest estimated cycles that move at most
    OFFCHIP_SLACK more off-chip bytes than the fewest of them (off-chip bytes are most of an
    inference's energy)."""
    fastest = min(p.est_cycles for p in plans)
    near = [p for p in plans if p.est_cycles <= fastest * (1 + CYCLE_SLACK)]
    moved = {id(p): offchip_bytes(p.details) for p in near}
    fewest = min(moved.values())
    return [p for p in near if moved[id(p)] <= fewest * (1 + OFFCHIP_SLACK)]


def cheapest(plans: list[Plan], kernel: Kernel, target) -> Plan:
    """Of the :func:`finalists` of ``plans`` (schedules of ``kernel``), the one whose code
    takes the fewest bytes (:func:`code_bytes`), then the fewest off-chip bytes, then the fewest
    cycles, then the first.  A large tile of few iterations rolls poorly: its code can be many
    times a small tile's for a percent of cycles."""
    lean = finalists(plans)
    if len(lean) == 1:
        return lean[0]
    return min(lean, key=lambda p: (code_bytes(p, kernel, target), offchip_bytes(p.details), p.est_cycles))


_CODE: Memo[tuple, int] = Memo(4096, "depthwise code bytes")  # (target, code_key, tiling) -> encoded bytes


def code_key(kernel: Kernel) -> tuple:
    """A key equal for two kernels whose schedules at one tiling encode to the same code, to a
    few bytes: the placement-free kernel (:func:`placement_free`) without its source names and
    quantization values (a zero point or a clamp bound is one field of an instruction, not a
    different loop structure)."""
    placed, overlaps = placement_free(kernel)
    return replace(placed, sources=(), quant=None), overlaps


def code_bytes(plan: Plan, kernel: Kernel, target) -> int:
    """The encoded bytes of ``plan``'s tile program (:func:`npuc.codegen.program_size.encoded_bytes`:
    emitted, rolled into LOOPs and encoded), measured once per target, :func:`code_key` and
    tiling (the repeated blocks of a network share it)."""
    key = (target, code_key(kernel), plan.details.choice)
    got = _CODE.get(key)
    return _CODE.put(key, encoded_bytes(plan.details, target)) if got is None else got


# (target, placement-free kernel) -> (summary, tiling, estimate)
_CHOICES: Memo[tuple, tuple] = Memo(4096, "depthwise choices")


class DepthwiseKernel:
    """The ``depthwise_conv2d`` kind (docs/kernels.md)."""

    kind = "depthwise_conv2d"

    def constant_layout(self, kernel: Kernel, index: int) -> tuple[int, ...] | None:
        """The weights ``[C, 1, kh, kw]`` stored tap-major, channels innermost."""
        return (2, 3, 1, 0) if index == 1 else None

    def supports(self, kernel: Kernel, target) -> str | None:
        want = 2 if kernel.dtype.is_float else 4
        if len(kernel.inputs) != want:
            return (f"depthwise_conv2d takes x and w (int8: and the int32 bias and REQUANT records), "
                    f"got {len(kernel.inputs)} inputs")
        x, w = kernel.inputs[:2]
        out = kernel.output
        if x.rank != 4 or w.rank != 4 or out.rank != 4:
            return "depthwise_conv2d needs 4-D x, w and output"
        c = x.shape[1]
        if w.shape[:2] != (c, 1) or out.shape[1] != c or getattr(kernel.attrs, "groups", c) != c:
            return f"not depthwise: x has {c} channels, w is {list(w.shape)}, output has {out.shape[1]}"
        for t in (x, out):
            if t.strides[1] != t.dtype.size:
                return f"depthwise_conv2d needs channels-last tensors; {t.name} has channel stride {t.strides[1]}"
        return dtype_problem(kernel.dtype, target, int8=True) or quant_problem(kernel, c) or epilogue_supports(
            kernel.epilogue, kernel.dtype, target)

    def plan(self, kernel: Kernel, target) -> Plan:
        """The cheapest of :meth:`alternatives` (:func:`cheapest`): of those within
        ``CYCLE_SLACK`` of the fewest estimated cycles and ``OFFCHIP_SLACK`` of the fewest
        off-chip bytes among them, the one whose code takes the fewest bytes, then the fewest
        off-chip bytes, then the fewest cycles (the vector unit on a tie).
        The choice is memoised per target and placement-free kernel (the repeated blocks of a
        network): a layer like one already planned gets the same schedule, built for its own
        tensors, without costing the alternatives again."""
        key = (target, placement_free(kernel))
        hit = _CHOICES.get(key)
        if hit is not None:
            summary, choice, est = hit
            prog = self.program(kernel, choice, target)
            return Plan(summary, prog.spad_bytes, prog.acc_bytes, est, prog)
        best = cheapest(self.alternatives(kernel, target), kernel, target)
        _CHOICES.put(key, (best.summary, best.details.choice, best.est_cycles))
        return best

    def alternatives(self, kernel: Kernel, target) -> list[Plan]:
        """Every schedule worth costing for this layer: the vector unit's, then the array's
        (not built when even the array's MATMUL cycles alone would exceed the vector estimate)."""
        vectors = self._vector_plans(kernel, target)
        vector = min(vectors, key=lambda p: p.est_cycles)
        if array_matmul_cycles(kernel, target) >= vector.est_cycles:
            return vectors
        return vectors + [
            tile_plan(f"depthwise {p.kh}x{p.kw}/{kernel.attrs.stride[0]}x{kernel.attrs.stride[1]} on the array, "
                      f"{p.rows} output rows{f' x {p.cols} columns' if p.cols else ''} x {p.chans} channels per tile, "
                      f"one depthwise-mode MATMUL_DW per tap"
                      f"{', bias and records per channel group' if p.quant_groups else ''}",
                      array_program(kernel, p, target), target)
            for p in array_tilings(kernel, target)
        ]

    def _vector_plans(self, kernel: Kernel, target) -> list[Plan]:
        """The vector unit's schedule with every column per tile (channels halved until a row
        fits), and, when that cuts the channels, with every channel in column tiles."""
        first = self._vector_plan(kernel, target)
        c, ow = kernel.inputs[0].shape[1], kernel.output.shape[3]
        full = min(c, MAX_COUNT)
        if first.details.choice.chans >= full:
            return [first]
        size = target.scratchpad.size_bytes
        expand = kernel.attrs.stride[1] == 1

        def fits(r: int, q: int) -> int:
            grow = expand and _fixed_bytes(kernel, 1, full, True, q) - _fixed_bytes(kernel, 1, full, False, q) <= size // _EXPAND_SHARE
            return NSETS * _set_bytes(kernel, r, full, q) + _fixed_bytes(kernel, r, full, grow, q)

        def read(r: int, q: int) -> float:
            rin, wp = _geometry(kernel, r, q)
            return rin * wp / (r * q)

        tilings = column_tilings(fits, size, min(kernel.output.shape[2], MAX_COUNT), ow, read)
        if not tilings:
            return [first]
        rows, cols = tilings[0]
        grow = expand and _fixed_bytes(kernel, 1, full, True, cols) - _fixed_bytes(kernel, 1, full, False, cols) <= size // _EXPAND_SHARE
        kh, kw = _kernel_hw(kernel)
        summary = (f"depthwise {kh}x{kw}/{kernel.attrs.stride[0]}x{kernel.attrs.stride[1]}, {rows} output rows x "
                   f"{cols} columns x {full} channels per tile, "
                   f"{'fp16 multiply-add' if kernel.dtype.is_float else 'int8 mac into int32'} per tap"
                   f"{', weights repeated along rows' if grow else ''}")
        return [first, tile_plan(summary, self.program(kernel, DepthwisePlan(rows, full, grow, cols), target), target)]

    def _vector_plan(self, kernel: Kernel, target) -> Plan:
        x, out = kernel.inputs[0], kernel.output
        n, c, _, _ = x.shape
        oh, ow = out.shape[2], out.shape[3]
        size = target.scratchpad.size_bytes
        chans = min(c, MAX_COUNT)
        expand = kernel.attrs.stride[1] == 1
        while True:
            if expand and _fixed_bytes(kernel, 1, chans, True) - _fixed_bytes(kernel, 1, chans, False) > size // _EXPAND_SHARE:
                expand = False
            fits = lambda r: NSETS * _set_bytes(kernel, r, chans) + _fixed_bytes(kernel, r, chans, expand)
            rows = largest_fitting(fits, size, min(oh, MAX_COUNT))
            if rows or chans == 1:
                break
            chans = -(-chans // 2)
        if rows == 0:
            raise CompileError(
                f"kernel '{kernel.name}': one output row needs {fits(1)} bytes of scratchpad, the target has {size}"
            )
        rows = overlap_cap(n * oh * -(-c // chans), rows, max(1, 4096 // (ow * chans * kernel.dtype.size)))
        kh, kw = _kernel_hw(kernel)
        summary = (f"depthwise {kh}x{kw}/{kernel.attrs.stride[0]}x{kernel.attrs.stride[1]}, {rows} output rows x "
                   f"{chans} channels per tile, {'fp16 multiply-add' if kernel.dtype.is_float else 'int8 mac into int32'} per tap"
                   f"{', weights repeated along rows' if expand else ''}")
        return tile_plan(summary, self.program(kernel, DepthwisePlan(rows, chans, expand), target), target)

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, p, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``p`` (on the vector unit, or an
        :class:`ArrayDepthwisePlan`: on the array), as data."""
        if isinstance(p, ArrayDepthwisePlan):
            return array_program(kernel, p, target)
        tb = TileBuilder(target, kernel)
        _Emission(kernel, p, tb).run()
        return tb.finish(f"{p.rows} output rows x {p.chans} channels", p)


class _Emission:
    """The instruction stream of one depthwise kernel (state shared by the per-tile steps)."""

    def __init__(self, k: Kernel, p: DepthwisePlan, em) -> None:
        self.k, self.p, self.em = k, p, em
        x, w = k.inputs[:2]
        self.n, self.c, self.h, self.w = x.shape
        self.oh, self.ow = k.output.shape[2], k.output.shape[3]
        self.kh, self.kw = _kernel_hw(k)
        self.es = k.dtype.size
        self.rin, self.wp = _geometry(k, p.rows, p.cols)
        self.qw = p.cols or self.ow  # output columns of a full tile
        # a TileBuilder names the buffers; a plain emitter (a caller's own program) gets an arena
        arena = em if hasattr(em, "alloc") else SramArena("scratchpad", em.target.scratchpad.size_bytes, owner=k.name)
        es, ow = self.es, self.qw
        self.wbuf = arena.alloc(self.kh * self.kw * self.c * es, "weights")
        self.wexp = arena.alloc(self.kh * self.kw * ow * p.chans * es, "repeated weights") if p.expand else None
        self.int8 = not k.dtype.is_float
        if self.int8:  # int32 sums, the folded bias and the REQUANT records of every channel
            self.bias = arena.alloc(self.c * 4, "bias")
            self.records = arena.alloc(self.c * 8, "requant records")
        else:
            self.tmp = arena.alloc(p.rows * ow * p.chans * es, "products")
        self.sets = []
        for i in range(NSETS):
            ibuf = arena.alloc(self.rin * self.wp * p.chans * es, f"input {i}")
            acc = arena.alloc(p.rows * ow * p.chans * es, f"accumulator {i}" if not self.int8 else f"output {i}")
            sums = arena.alloc(p.rows * ow * p.chans * 4, f"int32 sums {i}") if self.int8 else None
            bufs = alloc_epilogue(arena, k.epilogue, p.rows * ow, p.chans, k.dtype, col_dim=1)
            self.sets.append((ibuf, acc, bufs, sums))
        self.tiles = [(b, o0, q0, c0) for b in range(self.n) for o0 in range(0, self.oh, p.rows)
                      for q0 in range(0, self.ow, self.qw) for c0 in range(0, self.c, p.chans)]
        self.loaded: dict[int, tuple] = {}

    def run(self) -> None:
        w = self.k.inputs[1]
        dma_nd(self.em, "DMA_LOAD", w.addr, (self.kh, self.kw, self.c), (w.strides[2], w.strides[3], w.strides[0]),
               self.wbuf, (self.kw * self.c * self.es, self.c * self.es, self.es), self.es)
        if self.int8:
            bias, rec = self.k.inputs[2], self.k.inputs[3]
            dma_nd(self.em, "DMA_LOAD", bias.addr, (self.c,), bias.strides, self.bias, (4,), 4)
            load_channel_records(self.em, rec, self.records)
        pipeline(len(self.tiles), self.fetch, self.compute, NSETS, self.em if hasattr(self.em, "at") else None)

    def _block(self, i: int) -> tuple[int, int, int, int, int, int]:
        """Tile i: (image, first output row, first channel, rows, channels, flat index of its
        first output pixel); its columns are :meth:`_cols`."""
        b, o0, q0, c0 = self.tiles[i]
        return b, o0, c0, min(self.p.rows, self.oh - o0), min(self.p.chans, self.c - c0), (b * self.oh + o0) * self.ow + q0

    def _cols(self, i: int) -> tuple[int, int, int]:
        """Tile i's first output column, its columns and the width of its input rows."""
        a = self.k.attrs
        q0 = self.tiles[i][2]
        nq = min(self.qw, self.ow - q0)
        return q0, nq, (nq - 1) * a.stride[1] + (self.kw - 1) * a.dilation[1] + 1

    def fetch(self, i: int) -> None:
        a = self.k.attrs
        b, o0, c0, nr, nc, r0 = self._block(i)
        q0, nq, wp = self._cols(i)
        ibuf, _, bufs, _ = self.sets[i % NSETS]
        rin = (nr - 1) * a.stride[0] + (self.kh - 1) * a.dilation[0] + 1
        pad = float(self.k.quant.in_zero_point) if self.int8 else 0.0  # int8 padding holds the zero point
        left = q0 * a.stride[1] - a.padding[1]  # input column of the tile's first window
        fetch_padded(self.em, self.k.inputs[0], b, c0, nc, o0 * a.stride[0] - a.padding[0], rin, wp, max(0, -left), ibuf,
                     pad, max(0, left))
        blocks = epilogue_blocks(self.k.epilogue, lambda t: channels_last_rows(t, r0, nr, self.ow, nq, c0, nc))
        self.loaded[i] = load_epilogue_operands(self.em, self.k.epilogue, bufs, blocks, nr * nq, nc)

    def _expand_weights(self, c0: int, nc: int) -> None:
        """Repeat each tap's channel weights along an output row (once per channel block)."""
        es, ow = self.es, self.qw
        taps = self.kh * self.kw
        vector_nd(self.em, "VUN", (taps, ow, nc),
                  {"dst": (self.wexp, (ow * nc * es, nc * es, es)), "src": (self.wbuf + c0 * es, (self.c * es, 0, es))},
                  op="copy", dtype=self.k.dtype.name)

    def compute(self, i: int) -> None:
        a = self.k.attrs
        k, em, es = self.k, self.em, self.es
        b, o0, c0, nr, nc, r0 = self._block(i)
        _, ow, wp = self._cols(i)  # this tile's output columns
        ibuf, acc, _, sums = self.sets[i % NSETS]
        if self.p.expand and (i == 0 or self._block(i - 1)[2] != c0):
            self._expand_weights(c0, nc)
        if self.int8:
            self._compute_int8(i, ibuf, acc, sums)
            return
        row_s, px_s = wp * nc * es, nc * es
        shape = (nr, ow, nc)
        out_str = (ow * nc * es, nc * es, es)
        dt = k.dtype.name
        for t in range(self.kh * self.kw):
            dy, dx = divmod(t, self.kw)
            src = ibuf + dy * a.dilation[0] * row_s + dx * a.dilation[1] * px_s
            src_str = (a.stride[0] * row_s, a.stride[1] * px_s, es)
            if self.p.expand:
                wt = (self.wexp + t * self.qw * nc * es, (0, nc * es, es))
            else:
                wt = (self.wbuf + (t * self.c + c0) * es, (0, 0, es))
            dst = acc if t == 0 else self.tmp
            vector_nd(em, "VBIN", shape, {"dst": (dst, out_str), "a": (src, src_str), "b": wt}, op="mul", dtype=dt)
            if t:
                vector_nd(em, "VBIN", shape, {"dst": (acc, out_str), "a": (acc, out_str), "b": (self.tmp, out_str)},
                          op="add", dtype=dt)
        tile = Tile(acc, nr * ow, nc, k.dtype)
        apply_epilogue(em, k.epilogue, tile, self.loaded.pop(i))
        store_pieces(em, tile, channels_last_rows(k.output, r0, nr, self.ow, ow, c0, nc))

    def _tap_weights(self, t: int, c0: int, nc: int) -> tuple[int, tuple[int, int, int]]:
        es, ow = self.es, self.qw
        if self.p.expand:
            return self.wexp + t * ow * nc * es, (0, nc * es, es)
        return self.wbuf + (t * self.c + c0) * es, (0, 0, es)

    def _compute_int8(self, i: int, ibuf: int, out: int, sums: int) -> None:
        """int8: int32 sums start at the folded bias, one widening VBIN mac per tap adds
        x * w exactly, REQUANT per channel writes the int8 tile."""
        a, k, em, es = self.k.attrs, self.k, self.em, self.es
        b, o0, c0, nr, nc, r0 = self._block(i)
        _, ow, wp = self._cols(i)  # this tile's output columns
        row_s, px_s = wp * nc * es, nc * es
        shape = (nr, ow, nc)
        sum_str = (ow * nc * 4, nc * 4, 4)
        vector_nd(em, "VUN", shape, {"dst": (sums, sum_str), "src": (self.bias + c0 * 4, (0, 0, 4))},
                  op="copy", dtype="int32")
        for t in range(self.kh * self.kw):
            dy, dx = divmod(t, self.kw)
            src = ibuf + dy * a.dilation[0] * row_s + dx * a.dilation[1] * px_s
            src_str = (a.stride[0] * row_s, a.stride[1] * px_s, es)
            vector_nd(em, "VBIN", shape, {"dst": (sums, sum_str), "a": (src, src_str), "b": self._tap_weights(t, c0, nc)},
                      op="mac", dtype=k.dtype.name)
        q = k.quant
        tile = Tile(out, nr * ow, nc, k.dtype)
        emit_bias_requant(em, Tile(sums, nr * ow, nc, DType.int32), tile, None, self.records + c0 * 8,
                          q.out_zero_point, q.qmin, q.qmax)
        apply_epilogue(em, k.epilogue, tile, self.loaded.pop(i))
        store_pieces(em, tile, channels_last_rows(k.output, r0, nr, self.ow, ow, c0, nc))


register_kernel(DepthwiseKernel())
