"""Every value the NPU produces, read from the simulated DRAM the moment its kernel finishes.

A kernel's output is complete when the last of its instructions that write DRAM has taken effect
(the functional simulator applies effects in execution order); it is read then, before a later
kernel may reuse its memory.  A value computed by several kernels (a pad is a fill then a copy
into its interior, a concat one copy per operand) is read when the last of them finishes, through
the one of them whose output is the whole value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from npuc.isa.enums import Mem
from npuc.report.profile import executed, program_labels


@dataclass(frozen=True, eq=False)
class KernelValue:
    """A value an NPU kernel computed, as the run left it: ``data`` in logical order (None when no
    kernel of the value writes it whole)."""

    program: int
    kernel: object  # the LKernel that completes the value
    value: str      # the graph value
    data: np.ndarray | None


def _numel(t) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def _read(dram: np.ndarray, t) -> np.ndarray:
    """The DRAM tensor ``t`` (placed: absolute address, logical shape, byte strides), copied."""
    return np.ndarray(t.shape, t.dtype.np, buffer=dram, offset=t.addr, strides=t.strides).copy()


class Capture:
    """The observer of a functional run (``Executor.run(observe=...)``) that collects every value
    the NPU kernels compute; ``numel_of(value)`` is the element count of a graph value."""

    def __init__(self, compiled, numel_of: Callable[[str], int]) -> None:
        self.values: list[KernelValue] = []
        self._labels, self._writes, self._left, self._final = [], [], {}, []
        for p, code in enumerate(compiled.codes):  # kernels as placed by the memory plan
            program, labels = executed(code.program, program_labels(code.debug, len(code.program)))
            writes = [any(r.mem is Mem.dram and r.writes for r in ins.defn.regions(ins.args)) for ins in program]
            for label, w in zip(labels, writes):
                if w:
                    self._left[(p, label)] = self._left.get((p, label), 0) + 1
            by_value: dict[str, list] = {}
            for lk in code.segment.kernels:
                by_value.setdefault(lk.kernel.sources[-1], []).append(lk)
            final = {}
            for value, lks in by_value.items():
                whole = next((lk for lk in reversed(lks) if _numel(lk.kernel.output) == numel_of(value)), None)
                final[lks[-1].name] = (value, lks[-1], whole)
            self._labels.append(labels)
            self._writes.append(writes)
            self._final.append(final)

    def __call__(self, program: int, index: int, state) -> None:
        """After instruction ``index`` (of the executed stream) of NPU program ``program``."""
        if not self._writes[program][index]:
            return
        label = self._labels[program][index]
        key = (program, label)
        self._left[key] -= 1
        if self._left[key] == 0 and label in self._final[program]:
            value, last, whole = self._final[program][label]
            data = None
            if whole is not None:
                t = whole.kernel.output
                data = _read(state.dram, t)
            self.values.append(KernelValue(program, last, value, data))
