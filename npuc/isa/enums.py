"""Enumerations of the instruction set: element types, memory spaces, queues, units, op selectors.

The integer value of each member is its binary encoding; the member name is its assembly text.
"""

from __future__ import annotations

import enum

import numpy as np


class Dataflow(enum.StrEnum):
    """How the array holds its operands: ``weight_stationary`` (LOAD_WEIGHTS, then MATMUL streams
    the inputs past the resident weights) or ``output_stationary`` (MATMUL_OS accumulates each
    output in place).  The value is the one spelling, in target files and everywhere else."""

    weight_stationary = "weight_stationary"
    output_stationary = "output_stationary"

    @property
    def short(self) -> str:
        """The initials (``ws``, ``os``) that one-line plan summaries print."""
        return "".join(word[0] for word in self.value.split("_"))


class DType(enum.IntEnum):
    """Element types the NPU stores and computes on."""

    int8 = 0
    int16 = 1
    int32 = 2
    fp16 = 3
    fp32 = 4

    @property
    def size(self) -> int:
        return _SIZE[self]

    @property
    def np(self) -> np.dtype:
        return _NP[self]

    @property
    def is_float(self) -> bool:
        return self >= DType.fp16  # fp16 and fp32, the last two values


# Indexed by the member's value (a tuple index reads the int directly; a dict lookup would hash
# the member through Enum.__hash__, in Python, on every access of these hot properties).
_SIZE = (1, 2, 4, 2, 4)
_NP = (np.dtype(np.int8), np.dtype("<i2"), np.dtype("<i4"), np.dtype("<f2"), np.dtype("<f4"))


class Space(enum.IntEnum):
    """On-chip memory spaces an operand can live in (DRAM is reached by DMA only)."""

    spad = 0
    acc = 1


class Mem(enum.IntEnum):
    """Every memory of the machine, for regions and statistics."""

    dram = 0
    spad = 1
    acc = 2


class Queue(enum.IntEnum):
    """The five instruction queues of the decoupled access/execute machine.

    ``compute`` is the array's queue (and the control instructions'); ``vector`` the vector
    unit's, so that requantization, epilogues and vector kernels run beside array work;
    ``copy`` the background DMA's, which copies between memories of the system address map
    (weights from the flash into the shared SRAM) beside the load and store queues, so that a
    long copy never holds up the transfers the kernels wait on.
    """

    load = 0
    compute = 1
    store = 2
    vector = 3
    copy = 4

    @property
    def executes(self) -> bool:
        """True for the execute queues (compute, vector): an instruction starts when the one
        before it has completed, and they complete in order."""
        return self in (Queue.compute, Queue.vector)

    @property
    def reaches(self) -> frozenset["Mem"]:
        """The memories this queue's instructions may touch: the execute queues only the
        scratchpad and the accumulator, the copy queue only the system address map (``Mem.dram``),
        the load and store queues both sides.  The simulator refuses an instruction that
        touches another (npuc.runtime.sim.prepare); the emitter forgets an access once every
        queue that may conflict with it knows it complete."""
        return _REACHES[self]

    def others(self) -> tuple["Queue", ...]:
        """The queues this one exchanges tokens with (every other queue), in order."""
        return tuple(q for q in Queue if q is not self)


_REACHES = {Queue.load: frozenset(Mem), Queue.store: frozenset(Mem), Queue.compute: frozenset({Mem.spad, Mem.acc}),
            Queue.vector: frozenset({Mem.spad, Mem.acc}), Queue.copy: frozenset({Mem.dram})}


class Unit(enum.IntEnum):
    """Hardware units an instruction occupies while it runs."""

    dma = 0  # the DRAM port, shared by the load, store and copy queues
    wload = 1  # the array's weight loader (fills the shadow weight buffer)
    array = 2  # the systolic array
    vector = 3  # the vector unit
    ctrl = 4  # no unit: NOP, END


class BinOp(enum.IntEnum):
    """Elementwise binary operations of ``VBIN``."""

    add = 0
    sub = 1
    mul = 2
    max = 3
    min = 4
    mac = 5  # dst += a * b, dst widened (int32 or fp32)


class UnOp(enum.IntEnum):
    """Elementwise unary operations of ``VUN``."""

    copy = 0
    relu = 1
    clamp = 2
    neg = 3
    abs = 4
    adds = 5
    muls = 6
    exp = 7
    sigmoid = 8
    tanh = 9
    gelu = 10
    gelu_tanh = 11
    silu = 12
    hardswish = 13
    hardsigmoid = 14
    rsqrt = 15
    reciprocal = 16
    sqrt = 17
    log = 18
    log1p = 19

    @property
    def float_only(self) -> bool:
        return self.value >= UnOp.exp.value

    @property
    def lane_ops(self) -> int:
        """Vector lane-operations per element (cycles of one lane), npuc's assumption."""
        return _UNOP_COST.get(self, 1)


# Transcendentals are evaluated by a few multiply-add passes (range reduction + polynomial).
_UNOP_COST = {
    UnOp.exp: 4,
    UnOp.sigmoid: 6,
    UnOp.tanh: 6,
    UnOp.gelu: 8,
    UnOp.gelu_tanh: 8,
    UnOp.silu: 7,
    UnOp.hardswish: 3,
    UnOp.hardsigmoid: 2,
    UnOp.rsqrt: 4,
    UnOp.reciprocal: 4,
    UnOp.sqrt: 4,
    UnOp.log: 5,
    UnOp.log1p: 6,
}


class CmpOp(enum.IntEnum):
    """Comparisons of ``VCMP`` (IEEE: every comparison with a NaN is false, except ``ne``)."""

    eq = 0
    ne = 1
    lt = 2
    le = 3
    gt = 4
    ge = 5


class ReduceOp(enum.IntEnum):
    """Reductions of ``VREDUCE``."""

    sum = 0
    max = 1
    min = 2


class PoolOp(enum.IntEnum):
    """Window reductions of ``VPOOL``."""

    max = 0
    sum = 1
