"""``gemm`` on the systolic array: ``[*B, M, K] x [*B, K, N] -> [*B, M, N]``, any strides.

A gemm is the array engine's problem with a 1 x M "image" and a 1 x 1 kernel: rows of ``a``
are the input pixels, ``b`` the weights.  Batch dimensions broadcast by zero strides (a weight
shared by every batch stays resident: equal addresses are not reloaded).  ``b`` stored with its
reduction dimension contiguous (the transposed view of a linear weight ``[N, K]``, or ``k^T`` in
attention) is loaded as it is and LOAD_WEIGHTS reads it transposed.  An ``a`` whose reduction
dimension is not contiguous is gathered element by element (correct, but every element costs a
DRAM burst).
"""

from __future__ import annotations

import itertools

from npuc.codegen.emitter import Emitter
from npuc.codegen.epilogue import epilogue_supports
from npuc.codegen.kernel import register_kernel
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan
from npuc.codegen.kernels.array_engine import ArrayEngine
from npuc.codegen.kernels.array_plan import (
    array_plan, array_quant, input_count, int8_inputs_problem, operand_names, operand_strides,
)
from npuc.kir.tensor import DramTensor
from npuc.schedule.problem import ArrayProblem, Axis, OperandLayout
from npuc.targets import Target


def _batch_strides(t: DramTensor, batch: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of ``t``'s leading (batch) dimensions aligned to ``batch``, zero where broadcast."""
    lead = t.rank - 2
    out = []
    for i in range(len(batch)):
        d = lead - len(batch) + i
        out.append(0 if d < 0 or t.shape[d] == 1 else t.strides[d])
    return tuple(out)


def _addrs(t: DramTensor, batch: tuple[int, ...]) -> tuple[int, ...]:
    st = _batch_strides(t, batch)
    return tuple(t.addr + sum(i * s for i, s in zip(idx, st)) for idx in itertools.product(*(range(n) for n in batch)))


def gemm_problem(k: Kernel) -> ArrayProblem:
    a, b = k.inputs[:2]
    out = k.output
    batch = out.shape[:-2]
    m, kk = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    operands = []
    for e in k.epilogue:
        if e.operand is None:
            operands.append(None)
            continue
        st = operand_strides(e.operand, out.shape, k.name)
        view = DramTensor(e.operand.name, out.shape, e.operand.dtype, e.operand.addr, st)
        operands.append(OperandLayout(_addrs(view, batch), (0, st[-2], st[-1])))
    return ArrayProblem(
        name=k.name,
        dtype=k.dtype,
        y=Axis(1, 1, 1, 0, 1, 1),
        x=Axis(m, 1, 1, 0, 1, m),
        c=kk,
        n=n,
        x_addrs=_addrs(a, batch),
        w_addrs=_addrs(b, batch),
        out_addrs=_addrs(out, batch),
        x_strides=(0, a.strides[-2], a.strides[-1]),
        w_strides=(0, 0, b.strides[-2], b.strides[-1]),
        out_strides=(0, out.strides[-2], out.strides[-1]),
        epilogue=k.epilogue,
        operands=tuple(operands),
        quant=array_quant(k, [0] * len(_addrs(out, batch))),
    )


class GemmOnArray:
    """The ``gemm`` kernel (docs/kernels.md) on the weight-stationary array."""

    kind = "gemm"

    def supports(self, k: Kernel, target: Target) -> str | None:
        if k.dtype.name not in target.array.dtypes:
            return f"target '{target.name}' has no {k.dtype.name} array (array.dtypes = {list(target.array.dtypes)})"
        problem = int8_inputs_problem(k)
        if problem:
            return problem
        if len(k.inputs) != input_count(k):
            return "gemm takes two inputs a [*B, M, K] and b [*B, K, N]"
        a, b = k.inputs[:2]
        out = k.output
        if a.rank < 2 or b.rank < 2 or out.rank < 2:
            return "gemm operands must have at least 2 dimensions"
        if a.shape[-1] != b.shape[-2] or out.shape[-2:] != (a.shape[-2], b.shape[-1]):
            return f"gemm shapes do not match: {list(a.shape)} x {list(b.shape)} -> {list(out.shape)}"
        for t in (a, b):
            batch = t.shape[:-2]
            if len(batch) > len(out.shape) - 2 or any(
                n not in (1, o) for n, o in zip(reversed(batch), reversed(out.shape[:-2]))
            ):
                return f"gemm operand {t.name} {list(t.shape)} does not broadcast to {list(out.shape)}"
        return epilogue_supports(k.epilogue, k.dtype, target, int8_adds=True)

    def plan(self, k: Kernel, target: Target) -> Plan:
        return array_plan(gemm_problem(k), target)

    def emit(self, k: Kernel, plan: Plan, em: Emitter) -> None:
        ArrayEngine(gemm_problem(k), plan.details, em, operand_names(k)).run()


register_kernel(GemmOnArray())
