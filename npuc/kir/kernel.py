"""Kernel records: the unit of NPU work that lowering produces and scheduling/codegen consume.

After partitioning, fusion and layout, an NPU segment is a sequence of :class:`Kernel` records:
one fused operation (a convolution with its bias, activation and residual add; a pooling window;
a softmax; a chain of elementwise ops ...) reading and writing :class:`DramTensor` s.  ``kind``
names the implementation in ``npuc.codegen.kernels`` that turns it into instructions; the kinds
without a graph-op attribute record of their own have theirs here (docs/kernels.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npuc.ir.opdef import Trait, ops_with
from npuc.isa.enums import DType
from npuc.kir.tensor import DramTensor

# The graph ops an epilogue step may be, derived from the op registry: unary (no operand) and
# binary (a DRAM operand or a scalar) elementwise ops with the EPILOGUE trait.
UNARY_EPILOGUE_OPS = ops_with(Trait.EPILOGUE, Trait.UNARY)
BINARY_EPILOGUE_OPS = ops_with(Trait.EPILOGUE, Trait.BINARY)
COMMUTATIVE_EPILOGUE_OPS = ops_with(Trait.EPILOGUE, Trait.BINARY, Trait.COMMUTATIVE)


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
class QAddStep:
    """An int8 ``qadd`` fused into the epilogue of an int8 array kernel (the ``quant`` param of
    an ``add`` epilogue step whose operand is the other int8 summand).

    The kernel's requantized int8 result ``y`` and the operand ``r`` are added by
    ``npuc.quant.arith.run_qadd`` as the ``qbinary`` kernel runs it, one QADD instruction: less
    ``zero_points``, times ``factors`` (result first, operand second), added, requantized with
    the record ``[1, 2]`` that is the kernel's input number ``record``, zero point
    ``out_zero_point``, clamp [``qmin``, ``qmax``].  The same instruction, so the same bits.
    """

    zero_points: tuple[int, int]
    factors: tuple[int, int]
    out_zero_point: int
    qmin: int
    qmax: int
    record: int

    def __str__(self) -> str:
        return (f"qadd{{zps={list(self.zero_points)}, factors={list(self.factors)}, zo={self.out_zero_point}, "
                f"clamp=[{self.qmin}, {self.qmax}], record=in{self.record}}}")


def qadd_step(e: EpilogueOp) -> QAddStep | None:
    """The fused qadd of an epilogue step, or None for a plain step."""
    q = e.param("quant")
    return q if isinstance(q, QAddStep) else None


@dataclass(frozen=True)
class QBinaryAttrs:
    """``qbinary``: ``op`` "add" (qadd) or "mul" (qmul) of two int8 operands."""

    op: str


@dataclass(frozen=True)
class CompareAttrs:
    """``compare``: ``op`` one of eq, ne, lt, le, gt, ge (the VCMP comparisons); the result is a
    0/1 mask in the kernel's dtype, the NPU's form of a boolean."""

    op: str


@dataclass(frozen=True)
class GatherRowsAttrs:
    """``gather``: output row r is table row ``base[r] + scale * i`` for the index ``i`` of row r
    (negative ``i`` plus ``size`` first when ``wrap``); an index outside ``[0, size)`` (after the
    wrap) stops the NPU with an error instead of reading another row (docs/kernels.md)."""

    size: int
    scale: int = 1
    wrap: bool = False


def _grid_attrs() -> type:
    from npuc.ir.ops.resample import GridSampleAttrs

    return GridSampleAttrs


@dataclass(frozen=True)
class ChainAttrs:
    """``fused_chain``: member kernels run depth-first in stripes of output rows (docs/kernels.md,
    "Fused chains"; chosen by ``npuc.lower.cascade``).

    ``members`` are the chain's kernels in execution order over whole tensors, as partition and
    fusion made them; ``intermediates`` names the buffers that live only in scratchpad (each
    written by one member, read only by later ones); ``stripe_rows`` is the height of a stripe
    of the last member's output (the last stripe may be shorter); ``resident_weights`` keeps
    every member's constants in scratchpad for the whole chain (else they are reloaded per
    stripe).  The fused kernel's own inputs are every tensor of the members that is not an
    intermediate, in first-use order.

    ``sram_bytes``: when not 0, the stripes of the intermediates live in a block of that many
    bytes of the target's on-chip SRAM instead of the scratchpad (the fused kernel's last input,
    an activation buffer of its own: ``npuc.schedule.cascade_cost.stripes_tensor``); the members'
    transfers to and from an intermediate stay DMAs, between the scratchpad and that block, so
    only the chain's inputs, constants and last output reach off-chip memory, and the members
    plan in the whole scratchpad (a small scratchpad beside a large SRAM, as Ethos-U's, holds
    few rows of a wide tensor).

    ``staged``: the chain's activation inputs that every member views the same way
    (``npuc.schedule.cascade_cost.staged_inputs``) are loaded a stripe at a time into scratchpad
    buffers that every member reads by copies (a member's re-reads and the reads of several
    members cost scratchpad copies, not transfers).  When False the members read them where they
    lie: each read is a transfer again, which costs little when the input is in an on-chip SRAM,
    and the scratchpad the buffers would take goes to the members' bands.

    ``pooled_chain`` kernels (``npuc.lower.cascade_se``) hold the same record: their last member
    is a global pool of the row members' last output, which is an intermediate too (it is pooled
    stripe by stripe, never stored); stripes cut the pooled tensor's rows.
    """

    stripe_rows: int
    resident_weights: bool
    intermediates: tuple[str, ...]
    members: tuple[Kernel, ...] = ()
    sram_bytes: int = 0
    staged: bool = True


def _conv_attrs() -> type:
    from npuc.ir.ops.linalg import Conv2dAttrs

    return Conv2dAttrs


@dataclass(frozen=True)
class KindDef:
    """A kernel kind: the attribute record its ``attrs`` holds (None: no attributes; a function
    returning the type: a graph-op record, resolved on use), and whether its int8 form always
    requantizes an int32 result (so carries a :class:`QuantAttrs`)."""

    name: str
    attrs: Any = None
    int8_requantizes: bool = False
    takes_epilogue: bool = False  # fusion may append elementwise steps to its epilogue
    counts_macs: bool = False  # its work is multiply-accumulates (the profile's MAC count)
    int32_inputs: tuple[int, ...] = ()  # inputs that are int32 whatever the kernel's dtype (indices)

    def attrs_type(self) -> type | None:
        return self.attrs() if callable(self.attrs) and not isinstance(self.attrs, type) else self.attrs


# The kernel kinds.  Code generation registers exactly one implementation per kind
# (npuc.codegen.kernel.register_kernel checks it); the verifier checks every kernel against it.
KERNEL_KINDS: dict[str, KindDef] = {d.name: d for d in (
    KindDef("conv2d", _conv_attrs, int8_requantizes=True, takes_epilogue=True, counts_macs=True),
    KindDef("depthwise_conv2d", _conv_attrs, int8_requantizes=True, takes_epilogue=True, counts_macs=True),
    KindDef("gemm", None, int8_requantizes=True, takes_epilogue=True, counts_macs=True),
    KindDef("eltwise", takes_epilogue=True),
    KindDef("pool2d", PoolAttrs),
    KindDef("reduce", ReduceAttrs),
    KindDef("softmax", SoftmaxAttrs),
    KindDef("layernorm", LayerNormAttrs),
    KindDef("copy"),
    KindDef("fill", FillAttrs),
    KindDef("qbinary", QBinaryAttrs, int8_requantizes=True),
    KindDef("lut"),
    KindDef("compare", CompareAttrs),
    KindDef("select"),
    KindDef("grid_sample", _grid_attrs),
    KindDef("gather", GatherRowsAttrs, int32_inputs=(1, 2)),
    KindDef("fused_chain", ChainAttrs),  # its LKernel counts its members' MACs
    KindDef("pooled_chain", ChainAttrs),  # a chain whose last member is a global pool of its last row output
)}
