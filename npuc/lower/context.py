"""The lowering context: the DRAM tensors of values, constants and temporaries as rules ask.

Rules (``npuc.lower.rules``) turn one graph node into kernels; they ask the context for the
tensor of each input (created on first use with the value's layout), for the output tensor, for
constants as the kernel sees them, and for temporary buffers.  Every tensor is named after its
buffer and addressed from the buffer's start; memory planning places the buffers later.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from npuc.isa.enums import DType
from npuc.kir.kernel import EpilogueOp, Kernel
from npuc.kir.tensor import DramTensor
from npuc.ir.graph import Graph, Node, Value
from npuc.kir.storage import IR_OF_ISA
from npuc.lower.layout import order_of
from npuc.kir.program import ACTIVATION, CONSTANT, Buffer, ConstData


@dataclass(frozen=True)
class Lowered:
    """What a rule made of a node: its kernels, and the outputs that are views (no kernel)."""

    kernels: tuple[Kernel, ...] = ()
    views: tuple[tuple[Value, DramTensor], ...] = ()


class LowerContext:
    """Tensors of one graph for one target and precision (see the module docstring)."""

    def __init__(self, g: Graph, target, precision, images: set[Value]) -> None:
        self.g = g
        self.target = target
        self.dtype = precision.dtype
        self.ir_dtype = precision.ir_dtype
        self.images = images
        self.const_of: dict[Value, str] = {n.outputs[0]: n.attrs.name for n in g.nodes if n.op == "const"}
        self.homes: dict[Value, DramTensor] = {}
        self.buffers: dict[str, Buffer] = {}
        self._temps = 0
        self._int_ranges = None
        self.users = g.users()

    @property
    def int_ranges(self):
        """The range of every integer value of the graph (:func:`npuc.lower.int_range.int_ranges`)."""
        if self._int_ranges is None:
            from npuc.lower.int_range import int_ranges

            self._int_ranges = int_ranges(self.g)
        return self._int_ranges

    # ------------------------------------------------------------------ values

    def const(self, v: Value) -> torch.Tensor | None:
        """The data of ``v`` when a ``const`` node produces it, else None."""
        name = self.const_of.get(v)
        return None if name is None else self.g.constants[name]

    def scalar(self, v: Value) -> float | None:
        """The value of a one-element float constant, else None."""
        t = self.const(v)
        if t is None or t.numel() != 1 or not (t.dtype.is_floating_point or t.dtype in (torch.int32, torch.int64)):
            return None
        return float(t.reshape(()).item())

    def tensor(self, v: Value) -> DramTensor:
        """The NPU-side tensor of value ``v`` (its own buffer, a view, or a constant)."""
        if v in self.const_of:
            name = self.const_of[v]
            return self.const_tensor(name, self.g.constants[name])
        if v not in self.homes:
            order = order_of(v, self.images)
            self.homes[v] = self._new_buffer(v.name, v.type.shape, order)
        return self.homes[v]

    def index_words(self, v: Value) -> DramTensor | None:
        """The int32 words of the integer value ``v`` as a ``gather`` kernel reads them, shape
        ``[*v.shape, W]`` (``[1, W]`` for a scalar): W = 2 for int64 (low word first, as stored
        little-endian), 1 for int32; None for other dtypes.  A run-time value keeps its own dtype
        in DRAM (its buffer is the one the CPU or the caller writes, named after it); a constant
        becomes an int32 constant, a value outside int32 replaced by -2**31 (an invalid index)."""
        shape = v.type.shape or (1,)
        data = self.const(v)
        if data is not None:
            if data.dtype.is_floating_point or data.dtype == torch.bool:
                return None
            d = data.to(torch.int64).reshape(shape)
            low = -(2 ** 31)
            d = torch.where((d >= low) & (d < 2 ** 31), d, torch.full_like(d, low)).to(torch.int32)
            return self.const_tensor(self.const_of[v], d.reshape(shape + (1,)), ".i32", dtype=DType.int32)
        if self.is_npu_int32(v):  # computed on the NPU in int32 (npuc.lower.rules_int)
            t = self.homes[v]
            if not v.type.shape:
                return DramTensor(t.name, (1, 1), t.dtype, t.addr, (4, 4))
            return DramTensor(t.name, t.shape + (1,), t.dtype, t.addr, t.strides + (4,))
        words = {"i64": 2, "i32": 1}.get(v.type.dtype.value)
        if words is None:
            return None
        return DramTensor.dense(v.name, shape + (words,), DType.int32)

    def is_npu_int32(self, v: Value) -> bool:
        """Whether an NPU kernel computes ``v`` in int32 (an integer, or a 0/1 mask of integers)."""
        t = self.homes.get(v)
        return t is not None and t.dtype is DType.int32 and v not in self.const_of

    def int_out(self, v: Value) -> DramTensor:
        """The int32 buffer an NPU kernel writes the integer (or integer mask) ``v`` to."""
        if v not in self.homes:
            self.homes[v] = self._new_buffer(v.name, v.type.shape, None, DType.int32)
        return self.homes[v]

    def out(self, v: Value) -> DramTensor:
        """The tensor a kernel writes ``v`` to (its own buffer, in the value's layout)."""
        return self.tensor(v)

    def has_home(self, v: Value) -> bool:
        return v in self.homes

    def set_view(self, v: Value, t: DramTensor) -> None:
        self.homes[v] = t

    # ------------------------------------------------------------------ buffers

    def const_tensor(self, const: str, data: torch.Tensor, tag: str = "", dtype=None) -> DramTensor:
        """A constant as a kernel sees it (``data``, e.g. a transposed weight), row-major, in the
        NPU's dtype or in ``dtype`` (an ISA DType: int32 biases and REQUANT records of int8)."""
        dt = self.dtype if dtype is None else dtype
        name = f"@{const}{tag}"
        if name not in self.buffers:
            nbytes = max(data.numel(), 1) * dt.size
            self.buffers[name] = Buffer(name, nbytes, CONSTANT, ConstData(const, data, IR_OF_ISA[dt], None))
        return DramTensor.dense(name, tuple(data.shape), dt)

    def relayout_constant(self, t: DramTensor, order: tuple[int, ...]) -> DramTensor:
        """The constant behind ``t`` stored with its dims in ``order`` (a kernel asked for it)."""
        base = self.buffers[t.name]
        if base.const is None or tuple(base.const.data.shape) != t.shape or order == tuple(range(t.rank)):
            return t
        name = f"{base.name}/{''.join(str(d) for d in order)}"
        if name not in self.buffers:
            c = base.const
            self.buffers[name] = Buffer(name, base.nbytes, CONSTANT, ConstData(c.const, c.data, c.dtype, tuple(order)))
        return DramTensor.dense(name, t.shape, t.dtype, 0, tuple(order))

    def is_constant(self, t: DramTensor) -> bool:
        b = self.buffers.get(t.name)
        return b is not None and b.kind == CONSTANT

    def temp(self, hint: str, shape: tuple[int, ...], order: tuple[int, ...] | None = None,
             dtype: DType | None = None) -> DramTensor:
        """A fresh activation buffer for an intermediate result (a layout copy), in the NPU's
        dtype or in ``dtype``."""
        self._temps += 1
        return self._new_buffer(f"{hint}~{self._temps}", tuple(shape), order, dtype)

    def _new_buffer(self, name: str, shape: tuple[int, ...], order: tuple[int, ...] | None,
                    dtype: DType | None = None) -> DramTensor:
        dt = self.dtype if dtype is None else dtype
        t = DramTensor.dense(name, tuple(shape), dt, 0, order)
        self.buffers[name] = Buffer(name, max(t.nbytes, dt.size), ACTIVATION)
        return t

    # ------------------------------------------------------------------ kernels

    def kernel(self, node: Node, kind: str, inputs: tuple[DramTensor, ...], output: DramTensor, attrs=None,
               epilogue: tuple[EpilogueOp, ...] = (), suffix: str = "", dtype: DType | None = None) -> Kernel:
        """A kernel of ``node``, named after its value (the module path the frontend gave it,
        ``layer1.0.conv1``) or ``<op>_<number>`` for a numbered value, plus ``suffix``.  A value
        whose parameters are named ``<number>.weight`` / ``<number>.bias`` is the module of that
        number (a ``Sequential`` child) and keeps it: ``0``, not ``conv2d_0``."""
        v = node.outputs[0].name
        module = any(x.name.startswith(f"{v}.") for x in node.inputs)
        base = f"{node.op}_{v}" if v.isdigit() and not module else v
        dt = self.dtype if dtype is None else dtype
        return Kernel(f"{base}{suffix}", kind, tuple(inputs), output, attrs, tuple(epilogue), dt, (v,))
