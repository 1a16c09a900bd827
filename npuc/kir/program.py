"""The lowered program: what partition, fusion and memory planning pass along.

A :class:`LoweredModel` is the graph split into segments in execution order: NPU segments hold
:class:`LKernel` s (a :class:`~npuc.kir.kernel.Kernel` plus where it came from), CPU segments
hold a subgraph run by the reference interpreter.  Every DRAM tensor of a kernel is named after
its :class:`Buffer` and addressed relative to it until memory planning places the buffers.
Values that cross segments or are model inputs/outputs have a :class:`Home`: where and how they
are stored, which is what the runtime and the CPU bindings read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from npuc.isa.enums import DType
from npuc.kir.kernel import Kernel
from npuc.kir.storage import IR_OF_ISA
from npuc.ir.graph import Graph
from npuc.ir.types import DType as IRType
from npuc.ir.types import QuantParams, TensorType

CONSTANT, INPUT, OUTPUT, ACTIVATION = "constant", "input", "output", "activation"


@dataclass(frozen=True, eq=False)
class ConstData:
    """The contents of a constant buffer: a graph constant as a kernel sees it (``data``, logical
    shape), stored as ``dtype`` with its dims in ``order`` (None: row-major)."""

    const: str
    data: torch.Tensor = field(repr=False)
    dtype: IRType
    order: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Buffer:
    """A block of the DRAM arena: one constant, a model input/output, or an activation."""

    name: str
    nbytes: int
    kind: str
    const: ConstData | None = None


@dataclass(frozen=True)
class Home:
    """Where a value that crosses segments (or is a model input/output) is stored.

    ``shape`` is the physical shape (dims in storage order), ``layout`` names that order (None:
    row-major), ``offset`` is from the start of ``buffer``.
    """

    value: str
    buffer: str
    offset: int
    shape: tuple[int, ...]
    dtype: IRType
    layout: str | None = None
    quant: QuantParams | None = None  # an int8 value's scale and zero point (the runtime converts)

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype, self.quant, self.layout)

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


@dataclass(frozen=True)
class LKernel:
    """A kernel and its provenance: the graph ops it covers, the source location, its MACs."""

    kernel: Kernel
    ops: tuple[str, ...]
    loc: str | None
    macs: int = 0

    @property
    def name(self) -> str:
        return self.kernel.name

    def label(self) -> str:
        return f"{self.kernel.name} ({'+'.join(self.ops)})"

    def min_bytes(self) -> int:
        """Compulsory DRAM traffic: every distinct tensor read or written, once; of a windowed
        kernel's input (convolution, pooling) only the pixels some window reads (a strided 1x1
        convolution reads one pixel in stride x stride)."""
        return sum(self.compulsory().values())

    def compulsory(self) -> dict[tuple, int]:
        """The compulsory bytes of each distinct tensor (keyed by name, address, shape, strides)."""
        seen: dict[tuple, int] = {}
        window = _window(self.kernel)
        for i, t in enumerate(self.kernel.tensors()):
            key = (t.name, t.addr, t.shape, t.strides)
            n = _distinct_bytes(t)
            if i == 0 and window is not None and t.rank == 4:
                n = n * window[0] // max(t.shape[2], 1) * window[1] // max(t.shape[3], 1)
            seen[key] = max(seen.get(key, 0), n)
        return seen


def _distinct_bytes(t) -> int:
    n = t.dtype.size
    for size, stride in zip(t.shape, t.strides):
        if stride != 0:
            n *= size
    return n


def _window(k) -> tuple[int, int] | None:
    """(input rows, input columns) some window of a conv or pool kernel reads, or None."""
    a = k.attrs
    if k.kind not in ("conv2d", "depthwise_conv2d", "pool2d") or a is None or not k.inputs or k.output.rank != 4:
        return None
    x = k.inputs[0]
    if x.rank != 4:
        return None
    if k.kind == "pool2d":
        kh, kw = a.kernel
    else:
        w = k.inputs[1] if len(k.inputs) > 1 else None
        if w is None or w.rank != 4:
            return None
        kh, kw = w.shape[2], w.shape[3]
    out = k.output.shape
    return tuple(_touched(x.shape[2 + d], (kh, kw)[d], a.stride[d], a.padding[d], a.dilation[d], out[2 + d])
                 for d in range(2))


def _touched(n: int, k: int, stride: int, pad: int, dil: int, out: int) -> int:
    """How many of ``n`` input positions the ``out`` windows of ``k`` taps read."""
    return len({o * stride - pad + r * dil for o in range(out) for r in range(k)} & set(range(n)))



@dataclass(frozen=True)
class CpuOp:
    """A graph node that runs on the CPU: why, and what the fallback is estimated to cost."""

    value: str
    op: str
    loc: str | None
    reason: str
    seconds: float


@dataclass(frozen=True)
class NpuSegment:
    name: str
    kernels: tuple[LKernel, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class CpuSegment:
    name: str
    graph: Graph
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    seconds: float
    flops: int
    transfer_bytes: int


Segment = NpuSegment | CpuSegment


@dataclass(frozen=True)
class Precision:
    """How the NPU computes: ``dtype`` of every kernel and NPU-side DRAM tensor, or None when the
    NPU can take no node (``reason`` then says why)."""

    dtype: DType | None
    reason: str | None = None

    @property
    def ir_dtype(self) -> IRType:
        """The graph element type of NPU-side tensors (as stored in DRAM)."""
        return IR_OF_ISA[self.dtype] if self.dtype is not None else IRType.f32


@dataclass(frozen=True, eq=False)
class LoweredModel:
    """The model after partition (and later fusion): segments in order, buffers, homes."""

    name: str
    target: Any
    precision: Precision
    segments: tuple[Segment, ...]
    buffers: tuple[Buffer, ...]
    homes: tuple[Home, ...]
    inputs: tuple[tuple[str, str], ...]  # (IO name, value name)
    outputs: tuple[tuple[str, str], ...]
    cpu_ops: tuple[CpuOp, ...]
    placement: tuple[tuple[str, str, str, str], ...]  # (value, op, "npu"|"cpu", reason)

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def home(self, value: str) -> Home:
        for h in self.homes:
            if h.value == value:
                return h
        raise KeyError(value)

    def kernels(self) -> list[LKernel]:
        return [k for s in self.segments if isinstance(s, NpuSegment) for k in s.kernels]
