"""Row spaces: the shared view of the kernels that reduce along some dimensions (softmax,
layernorm, reduce).

A :class:`RowSpace` splits a tensor's dimensions into *kept* ones (flattened into the row index
k) and *reduced* ones (flattened into the element index l), each group in the tensor's physical
order and merged where the strides allow.  A tile holds rows ``k0 .. k0+nk`` and elements ``l0 ..
l0+nl`` densely in the scratchpad, in one of two orientations chosen from the layout:

* **row mode** (the reduced elements are innermost in DRAM: softmax over the last dimension,
  layernorm): ``tile[k][l]``, the reduction runs along a scratchpad row;
* **column mode** (a kept dimension is innermost: softmax over channels of a channels-last
  tensor, a sum over H and W): ``tile[l][k]``, the reduction runs down the columns.

Either way the vector instructions see the tile as (n1 = rows k, n0 = elements l) with the
orientation's strides, so the kernels are written once.  :func:`move_tile` moves such a block
between DRAM and the tile with as few DMAs as the strides allow (one for the usual dense
layouts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from npuc.codegen.epilogue import split_range, dma_nd, merge_dims
from npuc.kir.tensor import DramTensor


@dataclass(frozen=True)
class RowSpace:
    """Kept and reduced dimensions of a tensor (each outermost first, merged).

    ``kept_strides``/``red_strides`` hold one tuple per tensor given to :func:`row_space` (a
    tensor without a dimension has stride 0 there)."""

    kept_shape: tuple[int, ...]
    red_shape: tuple[int, ...]
    kept_strides: tuple[tuple[int, ...], ...]
    red_strides: tuple[tuple[int, ...], ...]
    column_mode: bool

    @property
    def rows(self) -> int:
        return math.prod(self.kept_shape)

    @property
    def length(self) -> int:
        return math.prod(self.red_shape)


def row_space(x: DramTensor, reduced: Sequence[int], others: Sequence[Sequence[int] | None] = ()) -> RowSpace:
    """The row space of ``x`` reducing ``reduced`` dims; ``others`` are the byte strides of more
    tensors over x's logical dimensions (an output of the same shape; None entries are skipped)."""
    red = set(reduced)
    order = x.order
    stride_sets = [x.strides] + [s for s in others if s is not None]
    kept = [d for d in order if d not in red]
    reds = [d for d in order if d in red]
    ks, kst = merge_dims([x.shape[d] for d in kept], *[[s[d] for d in kept] for s in stride_sets])
    rs, rst = merge_dims([x.shape[d] for d in reds], *[[s[d] for d in reds] for s in stride_sets])
    if not ks:
        ks, kst = (1,), tuple((0,) for _ in stride_sets)
    if not rs:
        rs, rst = (1,), tuple((0,) for _ in stride_sets)
    inner = min((d for d in range(x.rank) if x.shape[d] > 1), key=lambda d: (x.strides[d], -d), default=None)
    column = inner is not None and inner not in red
    return RowSpace(ks, rs, kst, rst, column)


def tile_strides(space: RowSpace, nk: int, nl: int, es: int) -> tuple[int, int]:
    """(row stride, element stride) in bytes of a dense ``nk x nl`` tile in the space's orientation."""
    return (es, nk * es) if space.column_mode else (nl * es, es)


def move_tile(em: Any, op: str, space: RowSpace, which: int, addr: int, k0: int, nk: int, l0: int, nl: int,
              local: int, kst: int, lst: int, es: int) -> None:
    """DMA rows ``k0 .. k0+nk`` x elements ``l0 .. l0+nl`` of tensor ``which`` (index into the
    stride sets of the space) at DRAM ``addr`` to or from the tile at ``local`` (``op``:
    DMA_LOAD or DMA_STORE)."""
    kstr = space.kept_strides[which]
    rstr = space.red_strides[which]
    for kf, kidx, kblk in split_range(space.kept_shape, k0, nk):
        koff = sum(i * s for i, s in zip(kidx, kstr))
        kloc = _dense_local(kblk, kst)
        for lf, lidx, lblk in split_range(space.red_shape, l0, nl):
            loff = sum(i * s for i, s in zip(lidx, rstr))
            lloc = _dense_local(lblk, lst)
            dma_nd(em, op, addr + koff + loff, tuple(kblk) + tuple(lblk), tuple(kstr) + tuple(rstr),
                   local + (kf - k0) * kst + (lf - l0) * lst, kloc + lloc, es)


def _dense_local(block: Sequence[int], unit: int) -> tuple[int, ...]:
    """Local strides of a row-major block whose flat index has stride ``unit``."""
    out = [0] * len(block)
    step = unit
    for d in range(len(block) - 1, -1, -1):
        out[d] = step
        step *= block[d]
    return tuple(out)


MAX_N = 0xFFFF


@dataclass(frozen=True)
class Operand:
    """A (k, l) operand of a row-wise vector op: ``addr + k*ks + l*ls`` (zero strides broadcast)."""

    addr: int
    ks: int
    ls: int


def reduce_rows(em: Any, op: str, dtype: str, out_dtype: str, src: Operand, nk: int, nl: int, dst: int,
                dst_s: int, acc: bool = False) -> None:
    """dst[k] (=, or combined when ``acc``) reduce over l of src[k][l], in chunks of 65535."""
    for j, l0 in enumerate(range(0, nl, MAX_N)):
        n0 = min(MAX_N, nl - l0)
        em.emit("VREDUCE", op=op, dtype=dtype, out_dtype=out_dtype, acc=acc or j > 0, n0=n0, n1=nk, dst=dst,
                dst_s=dst_s if nk > 1 else 0, src=src.addr + l0 * src.ls, src_s0=src.ls if n0 > 1 else 0,
                src_s1=src.ks if nk > 1 else 0)


def binary_rows(em: Any, op: str, dtype: str, dst: Operand, a: Operand, b: Operand, nk: int, nl: int) -> None:
    """dst[k][l] = a[k][l] op b[k][l] (VBIN), in chunks of 65535 elements per row."""
    for l0 in range(0, nl, MAX_N):
        n0 = min(MAX_N, nl - l0)
        f = {}
        for name, o in (("dst", dst), ("a", a), ("b", b)):
            f[name] = o.addr + l0 * o.ls
            f[f"{name}_s0"] = o.ls if n0 > 1 else 0
            f[f"{name}_s1"] = o.ks if nk > 1 else 0
        em.emit("VBIN", op=op, dtype=dtype, n0=n0, n1=nk, **f)


def unary_rows(em: Any, instr: str, dst: Operand, src: Operand, nk: int, nl: int, **fields: Any) -> None:
    """dst[k][l] = f(src[k][l]) by VUN or VCVT, in chunks of 65535 elements per row."""
    for l0 in range(0, nl, MAX_N):
        n0 = min(MAX_N, nl - l0)
        em.emit(instr, n0=n0, n1=nk, dst=dst.addr + l0 * dst.ls, dst_s0=dst.ls if n0 > 1 else 0,
                dst_s1=dst.ks if nk > 1 else 0, src=src.addr + l0 * src.ls, src_s0=src.ls if n0 > 1 else 0,
                src_s1=src.ks if nk > 1 else 0, **fields)


def vector_of(addr: int, es: int) -> Operand:
    """A per-row value (a row max, a row sum) seen as a (k, l) operand: broadcast along l."""
    return Operand(addr, es, 0)
