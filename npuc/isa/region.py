"""Memory regions: the strided blocks of memory an instruction reads or writes.

Every instruction describes its memory operands as :class:`Region` records (a memory, a base
byte address, a shape, byte strides, an element type and whether it is read, written or both).  That one
description serves the static checks (bounds, alignment, a written element written once), the
functional simulator (a numpy view of the block), the energy model (bytes moved per memory) and
the DMA timing (DRAM bursts).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from npuc.isa.enums import Mem


class _Fields(NamedTuple):
    mem: Mem
    addr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    access: str  # "r", "w" or "rw" (read-modify-write: accumulate)
    name: str
    count: int  # elements accessed
    nbytes: int  # bytes moved (broadcasts counted each time)
    end: int  # one past the last byte touched


_GIVEN = ("mem", "addr", "shape", "strides", "dtype", "access", "name")


class Region(_Fields):
    """A strided block: element ``idx`` lives at ``addr + sum(idx[i] * strides[i])``.

    An immutable value (a named tuple: every instruction the emitter checks builds a few, so
    construction is kept cheap); ``count``, ``nbytes`` and ``end`` are derived from the rest."""

    __slots__ = ()

    def __new__(cls, mem: Mem, addr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype,
                access: str = "r", name: str = "") -> "Region":
        es = dtype.itemsize
        count, end = 1, addr + es
        for n, s in zip(shape, strides):
            count *= n
            end += (n - 1) * s
        return tuple.__new__(cls, (mem, addr, shape, strides, dtype, access, name, count, count * es, end))

    def _replace(self, **changes) -> "Region":
        """A copy with some of the given fields changed (the derived ones computed anew)."""
        derived = {"count", "nbytes", "end"} & changes.keys()
        if derived:
            raise ValueError(f"Region fields {sorted(derived)} are derived, not given")
        unknown = changes.keys() - set(_GIVEN)
        if unknown:
            raise ValueError(f"Region has no fields {sorted(unknown)}")
        return Region(*[changes.get(k, getattr(self, k)) for k in _GIVEN])

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def reads(self) -> bool:
        return "r" in self.access

    @property
    def writes(self) -> bool:
        return "w" in self.access

    def problem(self, mem_size: int) -> str | None:
        """Why this region is illegal in a memory of ``mem_size`` bytes, or None."""
        es = self.dtype.itemsize
        if self.addr % es != 0:
            return f"{self._what()}: address 0x{self.addr:x} is not aligned to its {es}-byte elements"
        for n, s in zip(self.shape, self.strides):
            if n > 1 and s % es != 0:
                return f"{self._what()}: stride {s} is not a multiple of its {es}-byte elements"
        if self.end > mem_size:
            return (
                f"{self._what()}: bytes 0x{self.addr:x}..0x{self.end - 1:x} run past the end of the "
                f"{mem_size}-byte memory"
            )
        if self.nbytes > mem_size:  # broadcasts count: the simulator materializes the operand
            return (
                f"{self._what()}: {self.count:,} elements ({self.nbytes:,} bytes) are more than the "
                f"{mem_size}-byte memory holds"
            )
        if self.writes and not self.writes_each_once():
            return f"{self._what()}: the strides {self.strides} for shape {self.shape} write some element twice"
        return None

    def _what(self) -> str:
        return f"operand '{self.name}' in {self.mem.name.upper()}" if self.name else self.mem.name.upper()

    def writes_each_once(self) -> bool:
        """True when no two indices share an address (checked on strides sorted ascending:
        each stride must step over everything the smaller ones span)."""
        dims = sorted((s, n) for n, s in zip(self.shape, self.strides) if n > 1)
        span = self.itemsize
        for s, n in dims:
            if s < span:
                return False
            span = s * (n - 1) + span
        return True

    def dram_runs(self) -> tuple[int, int]:
        """(number of contiguous runs, bytes per run), merging dimensions from the innermost."""
        run = self.itemsize
        dims = list(zip(self.shape, self.strides))
        while dims:
            n, s = dims[-1]
            if n == 1:
                dims.pop()
            elif s == run:
                run *= n
                dims.pop()
            else:
                break
        return math.prod(n for n, _ in dims), run

    def burst_bytes(self, burst: int) -> int:
        """Bytes the DRAM actually transfers: each contiguous run rounded up to whole bursts."""
        runs, run = self.dram_runs()
        return runs * -(-run // burst) * burst
