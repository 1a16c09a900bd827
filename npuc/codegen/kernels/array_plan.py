"""Planning shared by the array kernels: search a tiling, wrap it in a :class:`Plan`."""

from __future__ import annotations

from npuc.codegen.kernel import Kernel, Plan
from npuc.codegen.tensor import DramTensor
from npuc.errors import CompileError
from npuc.schedule.problem import ArrayProblem
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
