"""Tensors in the NPU's DRAM: a logical shape over a strided byte layout.

A :class:`DramTensor` is what a kernel reads or writes: the graph value's logical shape (NCHW for
images, as in PyTorch) at a DRAM address, with one byte stride per logical dimension.  The
physical order is free: a channels-last activation is a logical NCHW tensor whose channel stride
is the element size.  Views (permute, slice, select, reshape of a contiguous run) are new strides
over the same bytes, so layout changes cost a strided DMA, not a pass over memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from npuc.errors import CompileError
from npuc.isa.enums import DType

NCHW = (0, 1, 2, 3)
NHWC = (0, 2, 3, 1)


def row_major_strides(shape: tuple[int, ...], itemsize: int, order: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Byte strides of ``shape`` stored densely with dimensions in ``order`` (outermost first)."""
    order = tuple(range(len(shape))) if order is None else order
    strides = [0] * len(shape)
    step = itemsize
    for d in reversed(order):
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


@dataclass(frozen=True)
class DramTensor:
    """A tensor in DRAM: element ``idx`` lives at ``addr + sum(idx[i] * strides[i])``."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    addr: int = 0
    strides: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.strides:
            object.__setattr__(self, "strides", row_major_strides(self.shape, self.dtype.size))
        if len(self.strides) != len(self.shape):
            raise CompileError(f"tensor {self.name}: {len(self.shape)} dims but {len(self.strides)} strides")

    @staticmethod
    def dense(name: str, shape: tuple[int, ...], dtype: DType, addr: int = 0,
              order: tuple[int, ...] | None = None) -> "DramTensor":
        """A densely stored tensor with its dimensions laid out in ``order`` (outermost first)."""
        return DramTensor(name, tuple(shape), dtype, addr, row_major_strides(tuple(shape), dtype.size, order))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (not of the span they occupy)."""
        return self.numel * self.dtype.size

    @property
    def span(self) -> int:
        """Bytes from ``addr`` to one past the last element."""
        if self.numel == 0:
            return 0
        return sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + self.dtype.size

    @property
    def order(self) -> tuple[int, ...]:
        """Logical dimensions from the largest stride to the smallest (the physical order)."""
        return tuple(sorted(range(self.rank), key=lambda d: (-self.strides[d], d)))

    def is_dense(self) -> bool:
        """True when the elements fill ``span`` bytes exactly (no gaps, no overlap)."""
        return self.span == self.nbytes

    def at(self, addr: int) -> "DramTensor":
        """The same layout placed at another address."""
        return replace(self, addr=addr)

    def offset(self, idx: tuple[int, ...]) -> int:
        """Byte address of element ``idx``."""
        return self.addr + sum(i * s for i, s in zip(idx, self.strides))

    def permute(self, perm: tuple[int, ...]) -> "DramTensor":
        return replace(self, shape=tuple(self.shape[p] for p in perm), strides=tuple(self.strides[p] for p in perm))

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> "DramTensor":
        n = max(0, -(-(end - start) // step))
        shape = list(self.shape)
        strides = list(self.strides)
        shape[dim] = n
        strides[dim] = self.strides[dim] * step
        return replace(self, addr=self.addr + start * self.strides[dim], shape=tuple(shape), strides=tuple(strides))

    def select(self, dim: int, index: int) -> "DramTensor":
        return replace(
            self,
            addr=self.addr + index * self.strides[dim],
            shape=self.shape[:dim] + self.shape[dim + 1:],
            strides=self.strides[:dim] + self.strides[dim + 1:],
        )

    def reshape(self, shape: tuple[int, ...]) -> "DramTensor | None":
        """A view with ``shape`` when the layout allows it without copying, else None.

        The rule of ``torch.Tensor.view``: walk the old dimensions from the innermost, grouping
        those that are contiguous with each other; each group must be covered exactly by a run of
        new dimensions, which then get strides inside the group.
        """
        shape = tuple(shape)
        if math.prod(shape) != self.numel:
            return None
        if self.numel == 0 or self.rank == 0:
            return DramTensor.dense(self.name, shape, self.dtype, self.addr)
        new = [0] * len(shape)
        vd = len(shape) - 1
        base = self.strides[-1]
        t_numel = 1
        v_numel = 1
        for td in range(self.rank - 1, -1, -1):
            t_numel *= self.shape[td]
            group_ends = td == 0 or (
                self.shape[td - 1] != 1 and self.strides[td - 1] != t_numel * base
            )
            if not group_ends:
                continue
            while vd >= 0 and (v_numel < t_numel or shape[vd] == 1):
                new[vd] = v_numel * base
                v_numel *= shape[vd]
                vd -= 1
            if v_numel != t_numel:
                return None
            if td > 0:
                base = self.strides[td - 1]
                t_numel = 1
                v_numel = 1
        if vd != -1:
            return None
        return replace(self, shape=shape, strides=tuple(new))

    def to_numpy(self, dram: np.ndarray | bytes | bytearray) -> np.ndarray:
        """Read the tensor out of a DRAM image (a copy, logical order)."""
        buf = np.frombuffer(dram, dtype=np.uint8) if not isinstance(dram, np.ndarray) else dram
        view = np.ndarray(self.shape, self.dtype.np, buffer=buf, offset=self.addr, strides=self.strides)
        return view.copy()

    def write_numpy(self, dram: np.ndarray, values: np.ndarray) -> None:
        """Write ``values`` (logical order) into a DRAM image at this tensor's layout."""
        view = np.ndarray(self.shape, self.dtype.np, buffer=dram, offset=self.addr, strides=self.strides)
        view[...] = np.asarray(values).astype(self.dtype.np)

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"{self.name}<{dims}x{self.dtype.name} @0x{self.addr:x} strides={list(self.strides)}>"
