"""Run one kernel on the simulator: the test bench of every kernel implementation.

``run_kernel`` places the kernel's tensors in a fresh DRAM image (each keeps its layout, gets its
own address), writes the given input values, plans and emits the kernel, simulates the program and
reads the output back.  Kernel tests compare that output with the reference interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np
import torch

from npuc.codegen.emitter import Emitter
from npuc.codegen.kernel import get_kernel
from npuc.kir.kernel import EpilogueOp, Kernel
from npuc.kir.plan import Plan
from npuc.kir.tensor import DramTensor
from npuc.errors import CompileError
from npuc.ir.opdef import get_op
from npuc.isa.instr import Program
from npuc.runtime.sim import simulate
from npuc.runtime.sim.result import SimResult
from npuc.targets import Target

_ALIGN = 64


@dataclass(frozen=True)
class KernelRun:
    """What running one kernel gave: the output, the simulation, the program and the plan."""

    output: np.ndarray
    result: SimResult
    program: Program
    plan: Plan
    kernel: Kernel


def place(kernel: Kernel) -> tuple[Kernel, int]:
    """The kernel with every distinct tensor (by name) at its own DRAM address; the DRAM size."""
    addrs: dict[str, int] = {}
    ends: dict[str, int] = {}
    for t in kernel.tensors():
        ends[t.name] = max(ends.get(t.name, 0), t.addr + t.span)
    top = _ALIGN
    for t in kernel.tensors():
        if t.name not in addrs:
            addrs[t.name] = top
            # a view may start past its base (a slot of a concat output): reserve through its end
            top += -(-max(ends[t.name], 1) // _ALIGN) * _ALIGN

    def moved(t: DramTensor) -> DramTensor:
        return t.at(addrs[t.name] + t.addr)

    epilogue = tuple(replace(e, operand=moved(e.operand)) if e.operand is not None else e for e in kernel.epilogue)
    placed = replace(kernel, inputs=tuple(moved(t) for t in kernel.inputs), output=moved(kernel.output), epilogue=epilogue)
    return placed, top


def run_kernel(kernel: Kernel, target: Target, values: Mapping[str, np.ndarray], *, functional: bool = True) -> KernelRun:
    """Simulate ``kernel`` on ``target`` with input ``values`` keyed by tensor name.

    Tensor addresses in ``kernel`` are offsets from the tensor's own base (0 for a fresh tensor).
    """
    impl = get_kernel(kernel.kind)
    reason = impl.supports(kernel, target)
    if reason:
        raise CompileError(f"kernel '{kernel.name}' cannot run on '{target.name}': {reason}")
    placed, size = place(kernel)
    dram = np.zeros(size, np.uint8)
    for t in placed.tensors():
        if t.name == placed.output.name:
            continue
        if t.name not in values:
            raise CompileError(f"no value given for tensor '{t.name}' of kernel '{kernel.name}'")
        t.write_numpy(dram, values[t.name])
    plan = impl.plan(placed, target)
    em = Emitter(target)
    with em.source(kernel.name):
        impl.emit(placed, plan, em)
    program, _ = em.finish()
    result = simulate(program, target, dram, functional=functional)
    out = placed.output.to_numpy(np.frombuffer(result.dram, np.uint8)) if functional else np.empty(0)
    return KernelRun(out, result, program, plan, placed)


def epilogue_reference(x: torch.Tensor, epilogue: tuple[EpilogueOp, ...], values: Mapping[str, np.ndarray]) -> torch.Tensor:
    """Apply an epilogue in fp32 with each op's reference from the graph-op registry (for tests)."""
    for e in epilogue:
        opdef = get_op(e.op)
        attrs = opdef.attrs(**dict(e.params))
        if opdef.max_inputs == 1:
            (x,) = opdef.reference((x,), attrs)
            continue
        if e.operand is not None:
            other = torch.from_numpy(np.asarray(values[e.operand.name], dtype=np.float32))
        else:
            other = torch.tensor(float(e.scalar))
        (x,) = opdef.reference((other, x) if e.operand_first else (x, other), attrs)
    return x
