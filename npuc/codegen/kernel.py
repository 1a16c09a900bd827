"""Kernel implementations: the contract every one meets, and the registry of them by kind.

The kernel records they consume (:class:`~npuc.kir.kernel.Kernel` and its attribute records)
and the :class:`~npuc.kir.plan.Plan` they choose are the kernel-level IR (``npuc.kir``).  A
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

from npuc.errors import CompileError
from npuc.kir.kernel import KERNEL_KINDS, Kernel
from npuc.kir.plan import Plan


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


_KERNELS: dict[str, KernelImpl] = {}


def register_kernel(impl: KernelImpl) -> KernelImpl:
    if impl.kind not in KERNEL_KINDS:
        raise RuntimeError(f"kernel kind '{impl.kind}' is not a kind of npuc.kir.kernel.KERNEL_KINDS")
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
