"""Planning shared by the array kernels: search a tiling, wrap it in a :class:`Plan`."""

from __future__ import annotations

from npuc.kir import records as stored_records
from npuc.kir.kernel import Kernel, qadd_step
from npuc.kir.plan import Plan
from npuc.kir.tensor import DramTensor
from npuc.errors import CompileError
from npuc.isa.enums import DType
from npuc.schedule.problem import ArrayProblem, ArrayQuant
from npuc.schedule.search import choose
from npuc.targets import Target


def array_plan(p: ArrayProblem, target: Target) -> Plan:
    """The cheapest tiling of ``p`` as a Plan (``details`` is the ArrayTiling)."""
    c = choose(target, p)
    e = c.estimate
    return Plan(str(c.tiling), e.spad_bytes, e.acc_bytes, e.cycles, c.tiling)


def operand_strides(t: DramTensor, shape: tuple[int, ...], kernel: str) -> tuple[int, ...]:
    """Strides of epilogue operand ``t`` over the output's ``shape`` (zero where it broadcasts)."""
    if t.rank != len(shape) or any(n not in (1, o) for n, o in zip(t.shape, shape)):
        raise CompileError(
            f"kernel '{kernel}': epilogue operand {t.name} {list(t.shape)} does not have the output's "
            f"shape {list(shape)}"
        )
    return tuple(0 if n == 1 else s for n, s in zip(t.shape, t.strides))


def operand_names(k: Kernel) -> tuple[str, ...]:
    return tuple(e.operand.name for e in k.epilogue if e.operand is not None)


def input_count(k: Kernel) -> int:
    """Inputs of an array kernel: x and w; int8: the bias and the records too, then one REQUANT
    record per fused qadd step."""
    if k.quant is None:
        return 2
    return 4 + sum(qadd_step(e) is not None for e in k.epilogue)


def int8_inputs_problem(k: Kernel) -> str | None:
    """Why an array kernel's int8 form is malformed, or None (fp16 kernels pass).

    An int8 conv2d/gemm takes x, w, the folded int32 bias ``[n]`` and the stored REQUANT records
    (int8 ``[5 n]``, npuc.kir.records; n output channels), then the record ``[1, 2]`` of each fused qadd step
    (:class:`~npuc.kir.kernel.QAddStep`), and a :class:`~npuc.codegen.kernel.QuantAttrs`."""
    if k.dtype.is_float:
        return "a float kernel takes no quantization parameters" if k.quant is not None else None
    if k.dtype is not DType.int8:
        return f"{k.dtype.name} array kernels are not supported (int8 or fp16)"
    if k.quant is None or len(k.inputs) != input_count(k):
        return ("an int8 array kernel takes x, w, the int32 bias and the REQUANT records, one record per fused "
                "qadd, and QuantAttrs")
    records = [q.record for q in map(qadd_step, k.epilogue) if q is not None]
    if records != list(range(4, len(k.inputs))):
        return f"the fused qadd steps must name the records after the kernel's own, in order (got inputs {records})"
    for i in records:
        r = k.inputs[i]
        if r.dtype is not DType.int32 or r.shape != (1, 2) or not r.is_dense():
            return f"a fused qadd's REQUANT record must be a dense int32 [1, 2] constant, got {r}"
    n = k.output.shape[1] if k.kind == "conv2d" else k.output.shape[-1]
    bias, rec = k.inputs[2], k.inputs[3]
    stored = stored_records.BYTES_PER_CHANNEL * n
    if bias.dtype is not DType.int32 or bias.shape != (n,) or rec.dtype is not DType.int8 or rec.shape != (stored,):
        return (f"the int8 bias must be int32 [{n}] and the records int8 [{stored}] (npuc.kir.records), "
                f"got {bias} and {rec}")
    if not (bias.is_dense() and rec.is_dense()):
        return f"the int8 bias and records must be dense constants, got {bias} and {rec}"
    if any(not -128 <= v <= 127 for v in (k.quant.in_zero_point, k.quant.out_zero_point, k.quant.qmin, k.quant.qmax)):
        return f"zero points and clamp bounds must be int8 values: {k.quant}"
    return None


def array_quant(k: Kernel, channel_offsets: list[int]) -> ArrayQuant | None:
    """The int8 side of an array kernel's problem: bias and records addresses per batch (its
    first output channel at ``channel_offsets[b]``), None for a float kernel."""
    if k.quant is None or len(k.inputs) < 4:
        return None
    bias, rec = k.inputs[2], k.inputs[3]
    q = k.quant
    steps = tuple(map(qadd_step, k.epilogue))
    return ArrayQuant(
        tuple(bias.addr + c * bias.strides[0] for c in channel_offsets),
        tuple(stored_records.record_addr(rec.addr, c) for c in channel_offsets),
        q.in_zero_point, q.out_zero_point, q.qmin, q.qmax,
        tuple(None if s is None else k.inputs[s.record].addr for s in steps),
    )
