"""Kernels: the unit of NPU code generation, and the contract every kernel implementation meets.

After partitioning, fusion and layout, an NPU segment is a sequence of :class:`Kernel` records:
one fused operation (a convolution with its bias, activation and residual add; a pooling window;
a softmax; a chain of elementwise ops ...) reading and writing :class:`DramTensor` s.  A
:class:`KernelImpl` turns a kernel into instructions in three steps:

``supports(kernel, target)``  why the NPU cannot run it (a sentence), or None;
``plan(kernel, target)``      the tiling: tile sizes, loop order, dataflow, buffers, chosen with
                              the cost model; a :class:`Plan` that prints on one line and says
                              how many scratchpad/accumulator bytes it needs and what it expects
                              to cost;
``emit(kernel, plan, em)``    the instructions, in program order, through an :class:`Emitter`
                              (which adds the dependency tokens).

Implementations register themselves by kind (``register_kernel``); :func:`get_kernel` finds them.
Constant operands (weights, biases, tables) may ask for a physical layout (``constant_layout``)
and the packer stores them that way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from npuc.codegen.tensor import DramTensor
from npuc.errors import CompileError
from npuc.isa.enums import DType


@dataclass(frozen=True)
class EpilogueOp:
    """One elementwise step applied to a kernel's result before it is stored.

    ``op`` is a graph elementwise op name: unary (``relu``, ``clamp``, ``sigmoid``, ``tanh``,
    ``silu``, ``gelu``, ``hardswish``, ``hardsigmoid``, ``exp``, ...) or binary (``add``,
    ``sub``, ``mul``, ``div``, ``maximum``, ``minimum``) whose other operand is ``operand``
    (a DRAM tensor broadcastable to the kernel output's logical shape: a per-channel bias, a
    residual of the same shape) or the constant ``scalar``.  ``operand_first`` marks
    ``operand op result`` for the non-commutative ops.  ``params`` holds op attributes
    (clamp bounds, gelu approximation) as (name, value) pairs.
    """

    op: str
    operand: DramTensor | None = None
    scalar: float | None = None
    operand_first: bool = False
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == name:
                return v
        return default

    def __str__(self) -> str:
        if self.operand is not None:
            arg = self.operand.name
        elif self.scalar is not None:
            arg = repr(self.scalar)
        else:
            arg = ""
        extra = ", ".join(f"{k}={v}" for k, v in self.params)
        inner = ", ".join(x for x in (arg, extra) if x)
        return f"{self.op}({inner})" if inner else self.op


@dataclass(frozen=True)
class Kernel:
    """One fused NPU operation over DRAM tensors.

    ``kind`` selects the implementation (``conv2d``, ``gemm``, ``eltwise``, ``pool``, ...).
    ``inputs`` are the operands in the order the kind defines; ``attrs`` its frozen attribute
    record (for example the graph op's attributes); ``epilogue`` the fused elementwise steps;
    ``dtype`` the element type of the computation (fp16 or int8); ``sources`` the graph values
    this kernel computes (the debug map and the per-layer profile name them).
    """

    name: str
    kind: str
    inputs: tuple[DramTensor, ...]
    output: DramTensor
    attrs: Any = None
    epilogue: tuple[EpilogueOp, ...] = ()
    dtype: DType = DType.fp16
    sources: tuple[str, ...] = ()
    quant: "QuantAttrs | None" = None

    def tensors(self) -> tuple[DramTensor, ...]:
        """Every DRAM tensor the kernel touches: inputs, epilogue operands, output."""
        extra = tuple(e.operand for e in self.epilogue if e.operand is not None)
        return self.inputs + extra + (self.output,)

    def __str__(self) -> str:
        ins = ", ".join(t.name for t in self.inputs)
        epi = "".join(f" -> {e}" for e in self.epilogue)
        q = f" {self.quant}" if self.quant is not None else ""
        return f"{self.output.name} = {self.kind}[{self.dtype.name}]({ins}){q}{epi}"


@dataclass(frozen=True)
class Plan:
    """A kernel's chosen schedule.

    ``summary`` says it in one line (tile sizes, loop order, dataflow, buffering);
    ``spad_bytes``/``acc_bytes`` the on-chip memory it uses; ``est_cycles`` the cost model's
    estimate; ``details`` the kind-specific choices the emitter reads.
    """

    summary: str
    spad_bytes: int
    acc_bytes: int
    est_cycles: int
    details: Any = None

    def __str__(self) -> str:
        return (
            f"{self.summary}  [spad {self.spad_bytes} B, acc {self.acc_bytes} B, "
            f"est {self.est_cycles} cycles]"
        )


class KernelImpl(Protocol):
    """What a kernel implementation provides (see the module docstring).

    ``constant_layout(kernel, i)`` (optional) returns the physical order (outermost logical
    dimension first) in which constant input ``i`` should be stored, or None for row-major.
    """

    kind: str

    def supports(self, kernel: Kernel, target: Any) -> str | None: ...

    def plan(self, kernel: Kernel, target: Any) -> Plan: ...

    def emit(self, kernel: Kernel, plan: Plan, em: Any) -> None: ...


def constant_layout(impl: KernelImpl, kernel: Kernel, index: int) -> tuple[int, ...] | None:
    """The physical order ``impl`` wants for constant input ``index`` (None: row-major)."""
    fn = getattr(impl, "constant_layout", None)
    return fn(kernel, index) if fn is not None else None


# ----------------------------------------------------------------------------- kind attributes
# Attribute records of the kernel kinds that have no graph-op record of their own (docs/kernels.md).


@dataclass(frozen=True)
class PoolAttrs:
    """``pool2d``: a max or average window over H and W (NCHW logical, channels-last physical)."""

    kind: str  # "max" or "avg"
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None


@dataclass(frozen=True)
class SoftmaxAttrs:
    """``softmax`` along ``dim`` (non-negative)."""

    dim: int


@dataclass(frozen=True)
class LayerNormAttrs:
    """``layernorm`` over the last ``normalized_rank`` dimensions."""

    normalized_rank: int
    eps: float


@dataclass(frozen=True)
class ReduceAttrs:
    """``reduce``: ``op`` in sum, mean, max, min over ``dims`` (non-negative, sorted)."""

    op: str
    dims: tuple[int, ...]
    keepdim: bool


@dataclass(frozen=True)
class FillAttrs:
    """``fill``: every element of the output view becomes ``value``."""

    value: float


@dataclass(frozen=True)
class QuantAttrs:
    """The integer side of an int8 kernel (docs/kernels.md, "int8 kernels").

    ``in_zero_point`` is the zero point of the activation input: the value padding cells hold
    (a padded int8 cell stands for the real value 0).  The kernel's int32 result becomes int8 by
    REQUANT with the (multiplier, shift) records of its ``requant`` constant input, plus
    ``out_zero_point``, clamped to [``qmin``, ``qmax``] (a fused ReLU raises ``qmin``).
    ``factors`` are the integer operand factors of ``qadd`` (one per operand), from
    ``npuc.quant.arith``; every constant a kernel loads comes from there.
    """

    in_zero_point: int = 0
    out_zero_point: int = 0
    qmin: int = -128
    qmax: int = 127
    in_zero_points: tuple[int, ...] = ()
    factors: tuple[int, ...] = ()

    def __str__(self) -> str:
        parts = [f"zx={self.in_zero_point}", f"zo={self.out_zero_point}"]
        if (self.qmin, self.qmax) != (-128, 127):
            parts.append(f"clamp=[{self.qmin}, {self.qmax}]")
        if self.in_zero_points:
            parts.append(f"zps={list(self.in_zero_points)}")
        if self.factors:
            parts.append(f"factors={list(self.factors)}")
        return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True)
class QBinaryAttrs:
    """``qbinary``: ``op`` "add" (qadd) or "mul" (qmul) of two int8 operands."""

    op: str


_KERNELS: dict[str, KernelImpl] = {}


def register_kernel(impl: KernelImpl) -> KernelImpl:
    if impl.kind in _KERNELS:
        raise RuntimeError(f"kernel kind '{impl.kind}' registered twice")
    _KERNELS[impl.kind] = impl
    return impl


def get_kernel(kind: str) -> KernelImpl:
    import npuc.codegen.kernels  # noqa: F401  (registers every implementation)

    try:
        return _KERNELS[kind]
    except KeyError:
        raise CompileError(f"no NPU kernel implements '{kind}'") from None


def kernel_kinds() -> list[str]:
    import npuc.codegen.kernels  # noqa: F401

    return sorted(_KERNELS)


@dataclass
class SramArena:
    """Bump allocation of one on-chip memory for one kernel (every kernel starts empty).

    Reusing addresses across kernels is safe: the emitter orders conflicting accesses.
    """

    name: str
    size: int
    top: int = 0
    owner: str = ""
    allocations: list[tuple[str, int, int]] = field(default_factory=list)

    def alloc(self, nbytes: int, what: str, align: int = 64) -> int:
        addr = -(-self.top // align) * align
        if addr + nbytes > self.size:
            raise CompileError(
                f"kernel '{self.owner}' needs {addr + nbytes} bytes of {self.name} for {what}, "
                f"but the target has {self.size}"
            )
        self.top = addr + nbytes
        self.allocations.append((what, addr, nbytes))
        return addr
