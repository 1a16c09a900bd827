"""Epilogues: a kernel's chain of elementwise steps on a result tile, and the tile transfers it needs.

A kernel computes a block of its output into a 2-D :class:`Tile` in the scratchpad (rows x cols
with byte strides; for a channels-last convolution rows are pixels and cols are channels), then
applies its epilogue (docs/kernels.md, "Epilogue ops") and stores the tile.  This module is the
shared piece of that last step:

* **Mapping a tile to DRAM.**  An epilogue operand has the output's logical shape (zero strides
  where it broadcasts).  :func:`channels_last_block`, :func:`row_major_block` and the general
  :func:`rows_block` give the DRAM views (:class:`Piece` s) that hold the same block of any such
  tensor, the output included.
* **Budgeting and loading operands.**  :func:`epilogue_spad_bytes` says how many scratchpad
  bytes the operand tiles of a ``rows x cols`` tile need (planners budget it);
  :func:`alloc_epilogue` takes them from a :class:`SramArena`; :func:`load_epilogue_operands`
  moves each operand block with the fewest bytes: a block that is the same in every row (a
  per-channel bias) is loaded as one row and broadcast by a zero row stride of the vector op, a
  block constant along the row as one column, a scalar as one element.
* **The chain.**  :func:`apply_epilogue` emits the steps on the tile in place; ``div`` by a
  scalar is a multiply by its reciprocal, by a tensor a reciprocal then a multiply,
  ``operand - x`` a negation then an add, ``maximum(x, s)`` a clamp, and so on.
  :func:`emit_epilogue` loads and applies in one call.
* **The array's result.**  :func:`emit_acc_to_tile` converts an fp32 accumulator tile into an
  fp16 scratchpad tile (VCVT), the step between the array and the epilogue.
* **N-D transfers and vector ops.**  :func:`dma_nd` moves any strided N-D block between DRAM and
  on-chip memory with as few 3-D DMAs as possible; :func:`vector_nd` runs a 2-D vector
  instruction over an N-D block the same way.  The vector and data-movement kernels use both.

Typical use by a kernel that double-buffers its output tiles::

    bufs = [alloc_epilogue(arena, k.epilogue, rows, cols, k.dtype, col_dim=1) for _ in range(2)]
    ...
    blocks = epilogue_blocks(k.epilogue, lambda t: channels_last_block(t, r0, nr, c0, nc))
    loaded = load_epilogue_operands(em, k.epilogue, bufs[i % 2], blocks, nr, nc)  # early: overlaps
    ...compute the tile...
    emit_acc_to_tile(em, acc_tile, tile)
    apply_epilogue(em, k.epilogue, tile, loaded)
    store_pieces(em, tile, channels_last_block(k.output, r0, nr, c0, nc))

Emit a tile's loads one or two tiles ahead of its compute (after the previous tile's compute), not
just before it: a load into a buffer that an earlier store read is ordered by a relay NOP placed
in the compute queue where the load is emitted (see ``npuc.codegen.kernels.vector_common.pipeline``).

Numerics: fp16 tiles are transformed in place, each step computed in fp32 by the vector unit and
rounded to fp16 (as PyTorch's fp16 elementwise ops do).  The dtype-specific choices (which
instruction computes an activation, how the accumulator becomes the tile's type) sit in small
functions (:func:`_unary_steps`, :func:`emit_acc_to_tile`) so an int8 variant (LUT activations,
REQUANT) replaces them without touching the rest.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from npuc.codegen.kernel import SramArena
from npuc.errors import CompileError
from npuc.isa.enums import DType, UnOp
from npuc.isa.instr import field_max
from npuc.kir import records as channel_records
from npuc.kir.kernel import BINARY_EPILOGUE_OPS, COMMUTATIVE_EPILOGUE_OPS, UNARY_EPILOGUE_OPS, EpilogueOp, qadd_step
from npuc.kir.tensor import DramTensor
from npuc.schedule.int8_epilogue import Block, requant_instrs

# Field limits of the instruction set, read from its definitions (docs/isa.md).
MAX_COUNT = field_max("VFILL", "n0")  # n0 / n1 / n2 and VPOOL sizes: every count field
MAX_VEC_S0 = field_max("VBIN", "dst_s0")  # vector operands: inner stride
MAX_S1 = field_max("VBIN", "dst_s1")  # vector outer strides, local DMA strides
MAX_DRAM_S0 = field_max("DMA_LOAD", "dram_s0")  # DMA dram_s0
MAX_DRAM_S = field_max("DMA_LOAD", "dram_s1")  # DMA dram_s1 / dram_s2
ALIGN = 64  # alignment of every buffer this module allocates

_VBIN = {"add": "add", "sub": "sub", "mul": "mul", "maximum": "max", "minimum": "min"}


def _lane_ops(vun_op: str) -> int:
    """Vector lane-operations per element of VUN op ``vun_op`` (its ISA definition); 1 for VBIN."""
    return UnOp[vun_op].lane_ops if vun_op in UnOp.__members__ else 1


def f32(x: float) -> float:
    """``x`` rounded to fp32 (instruction immediates must be exact fp32 values)."""
    return float(np.float32(x))


# ============================================================================ tiles and pieces


@dataclass(frozen=True)
class Tile:
    """A 2-D block in on-chip memory: element (r, c) at ``addr + r*s1 + c*s0`` in ``space``.

    ``s1``/``s0`` default to a dense row-major block.  A zero stride broadcasts (an operand tile
    that holds one row has ``s1 = 0``).
    """

    addr: int
    rows: int
    cols: int
    dtype: DType
    s1: int = -1
    s0: int = -1
    space: str = "spad"

    def __post_init__(self) -> None:
        if self.s0 < 0:
            object.__setattr__(self, "s0", self.dtype.size)
        if self.s1 < 0:
            object.__setattr__(self, "s1", self.cols * self.dtype.size)

    @property
    def nbytes(self) -> int:
        """Bytes of a dense block of this size."""
        return self.rows * self.cols * self.dtype.size

    def block(self, r0: int, nr: int, c0: int = 0, nc: int | None = None) -> "Tile":
        """Rows ``r0 .. r0+nr`` and columns ``c0 .. c0+nc`` of this tile."""
        nc = self.cols - c0 if nc is None else nc
        return replace(self, addr=self.addr + r0 * self.s1 + c0 * self.s0, rows=nr, cols=nc)


@dataclass(frozen=True)
class Piece:
    """Part of a tile in DRAM: tile rows ``row ..`` come from ``view`` (shape ``[..., cols]``,
    leading dimensions flattened row-major into tile rows)."""

    row: int
    view: DramTensor

    @property
    def rows(self) -> int:
        return math.prod(self.view.shape[:-1])


def merge_dims(shape: Sequence[int], *strides: Sequence[int]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 dimensions and merge neighbours that are contiguous in every stride list.

    Dimensions are outermost first; the result keeps their order.  Zero strides merge with zero
    strides (a broadcast over two dimensions is a broadcast over their product).
    """
    dims = [(n, tuple(s[i] for s in strides)) for i, n in enumerate(shape) if n != 1]
    out: list[tuple[int, tuple[int, ...]]] = []
    for n, ss in reversed(dims):
        if out and all(so == out[-1][0] * si for so, si in zip(ss, out[-1][1])):
            m, inner = out.pop()
            out.append((m * n, inner))
        else:
            out.append((n, ss))
    out.reverse()
    return tuple(n for n, _ in out), tuple(tuple(ss[k] for _, ss in out) for k in range(len(strides)))


def split_range(shape: tuple[int, ...], start: int, count: int) -> Iterator[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """Rectangles (first linear index, start index, block shape) covering the row-major range
    ``start .. start+count`` of a multi-index over ``shape``."""
    if count <= 0:
        return
    if not shape:
        yield start, (), ()
        return
    inner = math.prod(shape[1:])
    i0, off = divmod(start, inner)
    pos = start
    if off:
        n = min(count, inner - off)
        for p, idx, blk in split_range(shape[1:], off, n):
            yield pos + p - off, (i0,) + idx, (1,) + blk
        pos += n
        count -= n
        i0 += 1
    full = count // inner
    if full:
        yield pos, (i0,) + (0,) * (len(shape) - 1), (full,) + tuple(shape[1:])
        pos += full * inner
        count -= full * inner
        i0 += full
    if count:
        for p, idx, blk in split_range(shape[1:], 0, count):
            yield pos + p, (i0,) + idx, (1,) + blk


def rows_block(t: DramTensor, row_dims: Sequence[int], col_dim: int, r0: int, nr: int, c0: int, nc: int) -> tuple[Piece, ...]:
    """The DRAM pieces of a tile block of ``t``: tile rows are the row-major flattening of
    ``row_dims`` (rows ``r0 .. r0+nr``), tile columns index ``col_dim`` (``c0 .. c0+nc``).

    Dimensions of ``t`` in neither are taken at index 0 (they have size 1)."""
    rshape, (rstr,) = merge_dims([t.shape[d] for d in row_dims], [t.strides[d] for d in row_dims])
    cs = t.strides[col_dim] if col_dim is not None else 0
    base = t.addr + c0 * cs
    pieces = []
    for first, idx, blk in split_range(rshape, r0, nr):
        addr = base + sum(i * s for i, s in zip(idx, rstr))
        view = DramTensor(t.name, tuple(blk) + (nc,), t.dtype, addr, tuple(rstr) + (cs,))
        pieces.append(Piece(first - r0, view))
    return tuple(pieces)


def channels_last_block(t: DramTensor, r0: int, nr: int, c0: int, nc: int) -> tuple[Piece, ...]:
    """Tile block of a logical ``[N, C, H, W]`` tensor whose rows are pixels (n, h, w flattened,
    rows ``r0 .. r0+nr``) and whose columns are channels ``c0 .. c0+nc``: the output tile of a
    channels-last convolution, pooling or depthwise kernel."""
    if t.rank != 4:
        raise CompileError(f"tensor {t.name}: a channels-last block needs a 4-D tensor, not {t.rank}-D")
    return rows_block(t, (0, 2, 3), 1, r0, nr, c0, nc)


def channels_last_rows(t: DramTensor, r0: int, nr: int, width: int, nq: int, c0: int, nc: int) -> tuple[Piece, ...]:
    """Tile block of ``nr`` rows of ``nq`` pixels each, channels ``c0 .. c0+nc``, of a logical
    ``[N, C, H, W]`` tensor of ``width`` pixels a row: pixel ``r0`` (n, h, w flattened) starts
    the first row, ``r0 + width`` the next, ...; the tile's rows are the block's pixels in
    order.  A tile of some output columns of a channels-last kernel (every column:
    :func:`channels_last_block`)."""
    if nq == width:
        return channels_last_block(t, r0, nr * width, c0, nc)
    out: list[Piece] = []
    for i in range(nr):
        out += [Piece(p.row + i * nq, p.view) for p in channels_last_block(t, r0 + i * width, nq, c0, nc)]
    return tuple(out)


def row_major_block(t: DramTensor, r0: int, nr: int, c0: int, nc: int) -> tuple[Piece, ...]:
    """Tile block of a tensor whose rows flatten every dimension but the last (rows ``r0 ..
    r0+nr``) and whose columns are the last dimension (``c0 .. c0+nc``): a gemm's output tile."""
    if t.rank == 0:
        return (Piece(0, DramTensor(t.name, (1,), t.dtype, t.addr, (0,))),)
    return rows_block(t, tuple(range(t.rank - 1)), t.rank - 1, r0, nr, c0, nc)


# ============================================================================ N-D transfers


def _factor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit``."""
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def _split_large(dims: list[tuple[int, tuple[int, ...]]], limit: int) -> list[tuple[int, tuple[int, ...]]]:
    """Dimensions (n, strides) with each n > limit split in two when a divisor allows it (the
    others are left for :func:`_ragged`)."""
    out: list[tuple[int, tuple[int, ...]]] = []
    for n, ss in dims:
        r = _factor(n, limit) if n > limit else n
        if n > limit and r > 1 and n // r <= limit:
            out.append((n // r, tuple(s * r for s in ss)))
            out.append((r, ss))
        else:
            out.append((n, ss))
    return out


def _ragged(dims: list[tuple[int, tuple[int, ...]]], limit: int) -> Iterator[tuple[tuple[int, ...], list[tuple[int, tuple[int, ...]]]]]:
    """Split any dimension still larger than ``limit`` into chunks: (offsets per stride list, dims)."""
    for i, (n, ss) in enumerate(dims):
        if n > limit:
            for c in range(0, n, limit):
                sub = dims[:i] + [(min(limit, n - c), ss)] + dims[i + 1:]
                for off, d in _ragged(sub, limit):
                    yield tuple(o + c * s for o, s in zip(off, ss)), d
            return
    k = len(dims[0][1]) if dims else 0
    yield (0,) * k, dims


def dma_nd(em: Any, op: str, dram_addr: int, shape: Sequence[int], dram_strides: Sequence[int], local_addr: int,
           local_strides: Sequence[int], esize: int, local: str = "spad") -> int:
    """Move an N-D block between DRAM and on-chip memory (``op`` is DMA_LOAD or DMA_STORE).

    Element ``idx`` is at ``dram_addr + idx . dram_strides`` and ``local_addr + idx .
    local_strides``.  Dimensions are merged where both sides allow it, the local-contiguous one
    becomes the DMA row, up to three go in one instruction and the rest are looped.  Zero local
    strides (a store that repeats a row) and zero DRAM strides (a load that repeats) are allowed.
    Returns the number of DMAs emitted.
    """
    if math.prod(shape) == 0:
        return 0
    order = sorted(range(len(shape)), key=lambda d: (-local_strides[d] if local_strides[d] else -(1 << 62), -abs(dram_strides[d])))
    sh, (ds, ls) = merge_dims([shape[d] for d in order], [dram_strides[d] for d in order], [local_strides[d] for d in order])
    dims = list(zip(sh, zip(ds, ls)))
    if not dims or dims[-1][1][1] != esize or dims[-1][1][0] > MAX_DRAM_S0:
        dims.append((1, (esize, esize)))
    dims = _split_large(dims, MAX_COUNT)
    count = 0
    for off, dd in _ragged(dims, MAX_COUNT):
        head, tail = dd[:-3], dd[-3:]
        while len(tail) < 3:
            tail.insert(0, (1, (0, 0)))
        (n2, (d2, l2)), (n1, (d1, l1)), (n0, (d0, _)) = tail
        for idx in itertools.product(*(range(n) for n, _ in head)):
            da = dram_addr + off[0] + sum(i * s[0] for i, (_, s) in zip(idx, head))
            la = local_addr + off[1] + sum(i * s[1] for i, (_, s) in zip(idx, head))
            em.emit(op, local=local, esize=esize, dram_addr=da, local_addr=la, n0=n0, n1=n1, n2=n2,
                    dram_s0=d0, dram_s1=d1 if n1 > 1 else 0, dram_s2=d2 if n2 > 1 else 0,
                    local_s1=l1 if n1 > 1 else 0, local_s2=l2 if n2 > 1 else 0)
            count += 1
    return count


def vector_nd(em: Any, instr: str, shape: Sequence[int], operands: dict[str, tuple[int, Sequence[int]]],
              /, spaces: dict[str, str] | None = None, **fields: Any) -> int:
    """Run a 2-D vector instruction (VUN, VBIN, VCVT, VFILL) over an N-D block.

    ``operands`` maps each operand prefix of the instruction (``dst``, ``src``, ``a``, ``b``) to
    (address, byte strides per dimension); zero strides broadcast; ``spaces`` gives an operand's
    memory space when it is not the scratchpad; ``fields`` are the other fields (op, dtype, ...).  The two largest dimensions
    whose strides fit the fields become (n1, n0) and the rest are looped.  Returns the number of
    instructions emitted.
    """
    if math.prod(shape) == 0:
        return 0
    names = list(operands)
    dst_strides = operands["dst"][1]
    order = sorted(range(len(shape)), key=lambda d: -dst_strides[d])
    sh, sts = merge_dims([shape[d] for d in order], *[[operands[k][1][d] for d in order] for k in names])
    dims = list(zip(sh, zip(*sts))) if sh else []
    dims = _split_large(dims, MAX_COUNT)
    count = 0
    base = tuple(operands[k][0] for k in names)
    for off, dd in _ragged(dims, MAX_COUNT):
        inner = _pick_inner(dd)
        rest = [d for i, d in enumerate(dd) if i not in inner]
        pick = [dd[i] for i in inner]
        while len(pick) < 2:
            pick.insert(0, (1, (0,) * len(names)))
        (n1, s1), (n0, s0) = pick
        for idx in itertools.product(*(range(n) for n, _ in rest)):
            f = dict(fields)
            for k, name in enumerate(names):
                f[name] = base[k] + off[k] + sum(i * s[k] for i, (_, s) in zip(idx, rest))
                f[f"{name}_s0"] = s0[k] if n0 > 1 else 0
                f[f"{name}_s1"] = s1[k] if n1 > 1 else 0
                if spaces and name in spaces:
                    f[f"{name}_space"] = spaces[name]
            em.emit(instr, n0=n0, n1=n1, **f)
            count += 1
    return count


def _pick_inner(dims: list[tuple[int, tuple[int, ...]]]) -> list[int]:
    """Indices of (n1, n0) among ``dims``: the two largest whose strides fit 24 / 16 bits."""
    fits0 = [i for i, (_, ss) in enumerate(dims) if all(s <= MAX_VEC_S0 for s in ss)]
    fits1 = [i for i, (_, ss) in enumerate(dims) if all(s <= MAX_S1 for s in ss)]
    best: tuple[int, list[int]] = (0, [])
    for i0 in fits0:
        for i1 in [None] + fits1:
            if i1 == i0:
                continue
            size = dims[i0][0] * (dims[i1][0] if i1 is not None else 1)
            if size > best[0]:
                best = (size, [i0] if i1 is None else [i1, i0])
    return best[1]


def load_pieces(em: Any, pieces: Sequence[Piece], tile: Tile) -> None:
    """DMA the DRAM pieces of a tile into ``tile`` (dense columns, ``tile.s0`` = element size)."""
    for p in pieces:
        _move_piece(em, "DMA_LOAD", p, tile)


def store_pieces(em: Any, tile: Tile, pieces: Sequence[Piece]) -> None:
    """DMA ``tile`` out to its DRAM pieces."""
    for p in pieces:
        _move_piece(em, "DMA_STORE", p, tile)


def _move_piece(em: Any, op: str, p: Piece, tile: Tile) -> None:
    v = p.view
    lead = v.shape[:-1]
    lstr = [0] * len(lead)
    step = tile.s1
    for d in range(len(lead) - 1, -1, -1):
        lstr[d] = step
        step *= lead[d]
    if tile.s0 != tile.dtype.size:
        raise CompileError(f"internal error: tile transfers need contiguous columns, got stride {tile.s0}")
    dma_nd(em, op, v.addr, v.shape, v.strides, tile.addr + p.row * tile.s1, tuple(lstr) + (tile.s0,),
           tile.dtype.size, tile.space)


# ============================================================================ operands


@dataclass(frozen=True)
class EpilogueBuffers:
    """Scratchpad space for the operand tiles of one epilogue: (address, bytes) per step
    (None for steps without a DRAM operand)."""

    slots: tuple[tuple[int, int] | None, ...]


def _operand_bytes(op: EpilogueOp, rows: int, cols: int, dtype: DType, col_dim: int | None) -> int:
    t = op.operand
    es = dtype.size
    if t is None:
        return 0
    if all(s == 0 or n == 1 for n, s in zip(t.shape, t.strides)):
        return es
    if col_dim is not None:
        others = [(n, s) for d, (n, s) in enumerate(zip(t.shape, t.strides)) if d != col_dim]
        if all(s == 0 or n == 1 for n, s in others):
            return cols * es
        if t.strides[col_dim] == 0 or t.shape[col_dim] == 1:
            return rows * es
    return rows * cols * es


def epilogue_spad_bytes(epilogue: Sequence[EpilogueOp], rows: int, cols: int, dtype: DType,
                        col_dim: int | None = None) -> int:
    """Scratchpad bytes the operand tiles of ``epilogue`` need for a ``rows x cols`` tile.

    ``col_dim`` is the output's logical dimension that the tile's columns index (1 for a
    channels-last block, the last for a row-major block); with it, an operand that broadcasts
    over every other dimension (a bias) is budgeted as one row.  Without it every operand is
    budgeted as a full tile.  Each buffer is rounded up to 64 bytes.
    """
    total = 0
    for op in epilogue:
        b = _operand_bytes(op, rows, cols, dtype, col_dim)
        total += -(-b // ALIGN) * ALIGN
    return total


def alloc_epilogue(arena: SramArena, epilogue: Sequence[EpilogueOp], rows: int, cols: int, dtype: DType,
                   col_dim: int | None = None) -> EpilogueBuffers:
    """Take the operand buffers of ``epilogue`` for ``rows x cols`` tiles from ``arena``
    (:func:`epilogue_spad_bytes` bytes; call twice to double-buffer)."""
    slots: list[tuple[int, int] | None] = []
    for i, op in enumerate(epilogue):
        b = _operand_bytes(op, rows, cols, dtype, col_dim)
        slots.append((arena.alloc(b, f"epilogue operand {i} ({op.op})", ALIGN), b) if b else None)
    return EpilogueBuffers(tuple(slots))


def epilogue_blocks(epilogue: Sequence[EpilogueOp], block: Callable[[DramTensor], tuple[Piece, ...]]) -> tuple[tuple[Piece, ...] | None, ...]:
    """``block(operand)`` for each step with a DRAM operand (None for the others)."""
    return tuple(block(e.operand) if e.operand is not None else None for e in epilogue)


def broadcast_kind(pieces: Sequence[Piece]) -> str:
    """'scalar', 'row' (every row the same), 'col' (one value per row) or 'full'."""
    col0 = all(p.view.strides[-1] == 0 or p.view.shape[-1] == 1 for p in pieces)
    same_rows = all(
        all(s == 0 or n == 1 for n, s in zip(p.view.shape[:-1], p.view.strides[:-1])) for p in pieces
    ) and len({p.view.addr for p in pieces}) == 1
    if col0 and same_rows:
        return "scalar"
    if same_rows:
        return "row"
    if col0:
        return "col"
    return "full"


def load_operand(em: Any, pieces: Sequence[Piece], rows: int, cols: int, dtype: DType, addr: int, capacity: int) -> Tile:
    """Load one operand block with the fewest bytes into ``addr``; the returned tile has zero
    strides where the block broadcasts (so ``tile.rows x tile.cols`` covers the whole block)."""
    kind = broadcast_kind(pieces)
    es = dtype.size
    v = pieces[0].view
    need = {"scalar": es, "row": cols * es, "col": rows * es, "full": rows * cols * es}[kind]
    if need > capacity:
        raise CompileError(
            f"internal error: epilogue operand {v.name} needs {need} bytes for a {rows}x{cols} tile, "
            f"{capacity} were budgeted"
        )
    if kind == "scalar":
        dma_nd(em, "DMA_LOAD", v.addr, (1,), (es,), addr, (es,), es)
        return Tile(addr, rows, cols, dtype, s1=0, s0=0)
    if kind == "row":
        dma_nd(em, "DMA_LOAD", v.addr, (cols,), (v.strides[-1],), addr, (es,), es)
        return Tile(addr, rows, cols, dtype, s1=0, s0=es)
    if kind == "col":
        col = [replace(p, view=DramTensor(p.view.name, p.view.shape[:-1] + (1,), dtype, p.view.addr,
                                          p.view.strides[:-1] + (es,))) for p in pieces]
        load_pieces(em, col, Tile(addr, rows, 1, dtype))
        return Tile(addr, rows, cols, dtype, s1=es, s0=0)
    load_pieces(em, pieces, Tile(addr, rows, cols, dtype))
    return Tile(addr, rows, cols, dtype)


def load_step_operand(em: Any, e: EpilogueOp, pieces: Sequence[Piece], rows: int, cols: int, addr: int,
                      capacity: int) -> Tile:
    """Load the operand of epilogue step ``e`` (:func:`load_operand`) in the form the step uses:
    a divisor is turned into its reciprocal once, right after the load, so the loaded tile is
    never changed by the step itself and a kernel may keep it for later tiles."""
    opnd = load_operand(em, pieces, rows, cols, e.operand.dtype, addr, capacity)
    if e.op == "div" and not e.operand_first:
        emit_vun(em, _stored_part(opnd), "reciprocal")
    return opnd


def _stored_part(t: Tile) -> Tile:
    """The elements a broadcasting tile really stores (one row, one column or one element)."""
    return Tile(t.addr, 1 if t.s1 == 0 else t.rows, 1 if t.s0 == 0 else t.cols, t.dtype, space=t.space)


def load_epilogue_operands(em: Any, epilogue: Sequence[EpilogueOp], bufs: EpilogueBuffers,
                           blocks: Sequence[Sequence[Piece] | None], rows: int, cols: int) -> tuple[Tile | None, ...]:
    """Load the operand block of every step (``blocks[i]``: the pieces of step i's operand for
    this ``rows x cols`` tile, see :func:`epilogue_blocks`) into ``bufs``.  Emit this before the
    tile's compute so the loads overlap it."""
    out: list[Tile | None] = []
    for e, slot, blk in zip(epilogue, bufs.slots, blocks):
        if e.operand is None:
            out.append(None)
            continue
        if slot is None or blk is None:
            raise CompileError(f"internal error: epilogue step {e} has no buffer or block")
        out.append(load_step_operand(em, e, blk, rows, cols, slot[0], slot[1]))
    return tuple(out)


# ============================================================================ the chain


def epilogue_supports(epilogue: Sequence[EpilogueOp], dtype: DType, target: Any, int8_adds: bool = False) -> str | None:
    """Why the vector unit cannot apply ``epilogue`` to ``dtype`` tiles on ``target``, or None
    (``int8_adds``: the kernel runs fused qadd steps, :class:`~npuc.kir.kernel.QAddStep`)."""
    for e in epilogue:
        if e.op not in UNARY_EPILOGUE_OPS and e.op not in BINARY_EPILOGUE_OPS:
            return f"epilogue op '{e.op}' is not an elementwise op the vector unit implements"
        if e.op in BINARY_EPILOGUE_OPS and (e.operand is None) == (e.scalar is None):
            return f"epilogue step {e} needs exactly one of a DRAM operand and a scalar"
        if e.op == "gelu" and e.param("approximate", "none") not in ("none", "tanh"):
            return f"gelu approximation '{e.param('approximate')}' is unknown"
    if dtype.is_float and not target.has_fp16:
        return f"target '{target.name}' has no fp16 vector arithmetic"
    if dtype is DType.int32:  # integer arithmetic (npuc.lower.rules_int): VBIN int32 of tensor operands
        for e in epilogue:
            if e.op not in _VBIN or e.operand is None or e.operand.dtype is not DType.int32:
                return (f"int32 epilogues take only add, sub, mul, maximum and minimum of an int32 tensor "
                        f"operand, not {e}")
        return None
    if not dtype.is_float:
        for e in epilogue:
            if int8_adds and e.operand is not None and qadd_step(e) is not None:
                continue
            if e.op != "clamp" or e.operand is not None:
                adds = " and fused residual adds (qadd)" if int8_adds else ""
                return (f"{dtype.name} epilogues of this kernel take only an integer clamp (a quantized ReLU){adds}; "
                        f"'{e.op}' needs its own int8 kernel")
    return None


def epilogue_lane_ops(epilogue: Sequence[EpilogueOp]) -> int:
    """Vector lane-operations per output element of ``epilogue`` (for cost estimates)."""
    total = 0
    for e in epilogue:
        op = e.op
        if op == "gelu":
            op = "gelu_tanh" if e.param("approximate", "none") == "tanh" else "gelu"
        total += _lane_ops(op)
        if op == "div":
            total += _lane_ops("reciprocal")
        elif op == "sub" and e.operand_first and e.scalar is not None:
            total += _lane_ops("neg")
    return total


def emit_vun(em: Any, tile: Tile, op: str, imm0: float = 0.0, imm1: float = 0.0, src: Tile | None = None) -> None:
    """One VUN over ``tile`` (in place, or from ``src`` of the same size), rows split if needed."""
    src = src or tile
    for r0 in range(0, tile.rows, MAX_COUNT):
        n1 = min(MAX_COUNT, tile.rows - r0)
        em.emit("VUN", op=op, dtype=tile.dtype.name, n0=tile.cols, n1=n1,
                dst_space=tile.space, dst=tile.addr + r0 * tile.s1, dst_s0=tile.s0, dst_s1=tile.s1 if n1 > 1 else 0,
                src_space=src.space, src=src.addr + r0 * src.s1, src_s0=src.s0 if tile.cols > 1 else 0,
                src_s1=src.s1 if n1 > 1 else 0, imm0=f32(imm0), imm1=f32(imm1))


def emit_vbin(em: Any, dst: Tile, op: str, a: Tile, b: Tile) -> None:
    """One VBIN dst = a op b (all the size of ``dst``; zero strides broadcast)."""
    for r0 in range(0, dst.rows, MAX_COUNT):
        n1 = min(MAX_COUNT, dst.rows - r0)
        em.emit("VBIN", op=op, dtype=dst.dtype.name, n0=dst.cols, n1=n1,
                dst_space=dst.space, dst=dst.addr + r0 * dst.s1, dst_s0=dst.s0, dst_s1=dst.s1 if n1 > 1 else 0,
                a_space=a.space, a=a.addr + r0 * a.s1, a_s0=a.s0 if dst.cols > 1 else 0, a_s1=a.s1 if n1 > 1 else 0,
                b_space=b.space, b=b.addr + r0 * b.s1, b_s0=b.s0 if dst.cols > 1 else 0, b_s1=b.s1 if n1 > 1 else 0)


def _unary_steps(e: EpilogueOp, dtype: DType) -> list[tuple[str, float, float]]:
    """VUN steps (op, imm0, imm1) of a unary epilogue op on a float tile."""
    if not dtype.is_float:
        if e.op != "clamp":
            raise CompileError(f"{dtype.name} epilogue op '{e.op}' needs its own int8 kernel (LUT, REQUANT)")
        lo, hi = -(1 << 31) if e.param("min") is None else e.param("min"), (1 << 31) - 1 if e.param("max") is None else e.param("max")
        return [("clamp", float(max(lo, -(1 << 31))), float(min(hi, (1 << 31) - 1)))]
    if e.op == "clamp":
        lo, hi = e.param("min"), e.param("max")
        return [("clamp", -math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))]
    if e.op == "gelu":
        return [("gelu_tanh" if e.param("approximate", "none") == "tanh" else "gelu", 0.0, 0.0)]
    return [(UnOp[e.op].name, 0.0, 0.0)]


def _scalar_steps(e: EpilogueOp) -> list[tuple[str, float, float]]:
    """VUN steps (op, imm0, imm1) of a binary epilogue op with a constant scalar."""
    s = float(e.scalar)
    first = e.operand_first
    if e.op == "add":
        return [("adds", s, 0.0)]
    if e.op == "mul":
        return [("muls", s, 0.0)]
    if e.op == "sub":
        return [("neg", 0.0, 0.0), ("adds", s, 0.0)] if first else [("adds", -s, 0.0)]
    if e.op == "div":
        if first:
            return [("reciprocal", 0.0, 0.0), ("muls", s, 0.0)]
        return [("muls", 1.0 / s if s != 0 else math.copysign(math.inf, s), 0.0)]
    if e.op == "maximum":
        return [("clamp", s, math.inf)]
    if e.op == "minimum":
        return [("clamp", -math.inf, s)]
    raise CompileError(f"epilogue op '{e.op}' with a scalar is not supported")


def _operand_step(em: Any, e: EpilogueOp, tile: Tile, opnd: Tile) -> None:
    """A binary epilogue op with a DRAM operand already loaded as ``opnd``."""
    if e.op in COMMUTATIVE_EPILOGUE_OPS:
        emit_vbin(em, tile, _VBIN[e.op], tile, opnd)
    elif e.op == "sub":
        emit_vbin(em, tile, "sub", opnd, tile) if e.operand_first else emit_vbin(em, tile, "sub", tile, opnd)
    elif e.op == "div":
        # operand / x: the reciprocal of the tile; x / operand: the operand was loaded as its
        # reciprocal (load_step_operand), so the step never changes a tile a kernel may keep.
        if e.operand_first:
            emit_vun(em, tile, "reciprocal")
        emit_vbin(em, tile, "mul", tile, opnd)
    else:
        raise CompileError(f"epilogue op '{e.op}' with a tensor operand is not supported")


def apply_epilogue(em: Any, epilogue: Sequence[EpilogueOp], tile: Tile, operands: Sequence[Tile | None]) -> None:
    """Emit the epilogue chain on ``tile`` in place (``operands``: from
    :func:`load_epilogue_operands`, in the order of ``epilogue``)."""
    for e, opnd in zip(epilogue, operands):
        if e.op in UNARY_EPILOGUE_OPS:
            steps = _unary_steps(e, tile.dtype)
        elif e.operand is not None:
            if opnd is None:
                raise CompileError(f"internal error: epilogue step {e} has no loaded operand")
            _operand_step(em, e, tile, opnd)
            continue
        elif e.scalar is not None:
            steps = _scalar_steps(e)
        else:
            raise CompileError(f"epilogue step {e} has neither an operand nor a scalar")
        for op, i0, i1 in steps:
            emit_vun(em, tile, op, i0, i1)


def emit_epilogue(em: Any, epilogue: Sequence[EpilogueOp], tile: Tile, bufs: EpilogueBuffers,
                  blocks: Sequence[Sequence[Piece] | None]) -> None:
    """Load the operands of ``epilogue`` for ``tile`` and apply the chain (no overlap of the
    loads with earlier compute: use :func:`load_epilogue_operands` early when that matters)."""
    loaded = load_epilogue_operands(em, epilogue, bufs, blocks, tile.rows, tile.cols)
    apply_epilogue(em, epilogue, tile, loaded)


def emit_acc_to_tile(em: Any, src: Tile, dst: Tile) -> None:
    """Convert the array's result tile ``src`` (fp32 in ACC) into ``dst`` (fp16, scratchpad).

    The int8 path replaces this step by REQUANT (int32 -> int8)."""
    if not dst.dtype.is_float:
        raise CompileError(f"accumulator to {dst.dtype.name} conversion (REQUANT) is not implemented yet")
    for r0 in range(0, dst.rows, MAX_COUNT):
        n1 = min(MAX_COUNT, dst.rows - r0)
        em.emit("VCVT", src_dtype=src.dtype.name, dst_dtype=dst.dtype.name, n0=dst.cols, n1=n1,
                src_space=src.space, src=src.addr + r0 * src.s1, src_s0=src.s0, src_s1=src.s1 if n1 > 1 else 0,
                dst_space=dst.space, dst=dst.addr + r0 * dst.s1, dst_s0=dst.s0, dst_s1=dst.s1 if n1 > 1 else 0)


def load_channel_records(em: Any, rec: DramTensor, records: int) -> None:
    """Load every channel's REQUANT records from their stored form (``rec``, npuc.kir.records) into
    8-byte records at scratchpad address ``records``."""
    for op, f in channel_records.load_instrs(rec.addr, channel_records.channels(rec.shape[0]), records):
        em.emit(op, **f)


def emit_bias_requant(em: Any, acc: Tile, dst: Tile, bias: Tile | None, records: int, zero_point: int,
                      qmin: int = -128, qmax: int = 127, per_channel: bool = True) -> None:
    """int8: ``acc`` (int32, in ACC or the scratchpad) plus ``bias`` (int32, broadcast by its
    strides; None: no bias) requantized into ``dst`` (int8) by REQUANT with the (multiplier,
    shift) records at scratchpad address ``records`` (one per column when ``per_channel``), the
    output zero point and the clamp [qmin, qmax]; a per-channel bias row in the scratchpad is
    added by REQUANT itself (:func:`npuc.schedule.int8_epilogue.requant_instrs`).  The int8
    counterpart of :func:`emit_acc_to_tile`."""
    for op, f in requant_instrs(dst.rows, dst.cols, _block(acc), _block(dst), None if bias is None else _block(bias),
                                records, zero_point, qmin, qmax, per_channel):
        em.emit(op, **f)


def _block(t: Tile) -> Block:
    return Block(t.space, t.addr, t.s0, t.s1)
