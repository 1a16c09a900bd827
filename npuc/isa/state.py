"""The architectural state of the NPU that instruction semantics act on.

DRAM, scratchpad and accumulator are byte arrays; a :class:`Region` of any of them is read or
written through a numpy view with the region's shape, strides and element type.  The array keeps
the stationary weights last loaded by ``LOAD_WEIGHTS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npuc.isa.enums import DType, Mem
from npuc.isa.region import Region


@dataclass
class MachineState:
    """Memories and array registers of one NPU (mutable: the simulator steps it)."""

    dram: np.ndarray
    spad: np.ndarray
    acc: np.ndarray
    weights: np.ndarray | None = None
    weights_dtype: DType | None = None
    _mems: tuple[np.ndarray, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._mems = (self.dram, self.spad, self.acc)

    @staticmethod
    def zeros(dram_bytes: int, spad_bytes: int, acc_bytes: int) -> "MachineState":
        return MachineState(
            np.zeros(dram_bytes, np.uint8), np.zeros(spad_bytes, np.uint8), np.zeros(acc_bytes, np.uint8)
        )

    def memory(self, mem: Mem) -> np.ndarray:
        return self._mems[mem]

    def view(self, r: Region) -> np.ndarray:
        """A live view of the region (writes through); the region was checked in bounds."""
        return np.ndarray(r.shape, r.dtype, buffer=self._mems[r.mem], offset=r.addr, strides=r.strides)

    def read(self, r: Region) -> np.ndarray:
        """A copy of the region's elements."""
        return self.view(r).copy()

    def write(self, r: Region, values: np.ndarray) -> None:
        """Store ``values`` (already of the region's element type) into the region."""
        self.view(r)[...] = values
