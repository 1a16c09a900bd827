"""Fusion: elementwise work joins the kernel that produces its input, as that kernel's epilogue.

A ``conv2d``, ``gemm``, ``depthwise_conv2d`` or ``eltwise`` kernel P absorbs a later ``eltwise``
kernel C of the same NPU segment when

* C reads P's result exactly (same tensor, the output's full shape), either as its input or as the
  DRAM operand of its first epilogue step (then the step's operands swap sides);
* nothing else reads P's result: no other kernel, no CPU segment, not a model output;
* everything else C reads (its input or its operands) already exists when P runs (written before
  P, or outside the segment): the fused kernel runs at P's place;
* C's result has P's result's shape, and the fused kernel is accepted by its implementation.

Then P's epilogue grows by C's steps and P writes C's result; P's result is never stored.  Chains
(conv -> add -> relu) fuse step by step.
"""

from __future__ import annotations

from dataclasses import replace

from npuc.codegen.kernel import get_kernel
from npuc.kir.kernel import BINARY_EPILOGUE_OPS, COMMUTATIVE_EPILOGUE_OPS, KERNEL_KINDS, EpilogueOp, Kernel
from npuc.errors import NpucError
from npuc.lower.layout import dense_order
from npuc.kir.program import CONSTANT, LKernel, LoweredModel, NpuSegment

# The kernel kinds that take elementwise work into their epilogue.
PRODUCERS = frozenset(k for k, d in KERNEL_KINDS.items() if d.takes_epilogue)


def fuse(m: LoweredModel) -> LoweredModel:
    """``m`` with every fusable elementwise kernel merged into its producer."""
    pinned = {h.buffer for h in m.homes} | {b.name for b in m.buffers if b.kind == CONSTANT}
    seen_in: dict[str, set[int]] = {}
    for i, s in enumerate(m.segments):
        if isinstance(s, NpuSegment):
            for k in s.kernels:
                for t in k.kernel.tensors():
                    seen_in.setdefault(t.name, set()).add(i)
    pinned |= {name for name, segs in seen_in.items() if len(segs) > 1}  # read by another segment
    segments = tuple(
        replace(s, kernels=tuple(fuse_kernels(list(s.kernels), pinned, m.target))) if isinstance(s, NpuSegment) else s
        for s in m.segments
    )
    used = {h.buffer for h in m.homes}
    for s in segments:
        if isinstance(s, NpuSegment):
            for k in s.kernels:
                used.update(t.name for t in k.kernel.tensors())
        else:
            used.update(f"#{c}" for c in s.graph.constants)
    buffers = tuple(b for b in m.buffers if b.name in used)
    return replace(m, segments=segments, buffers=buffers)


def fuse_kernels(kernels: list[LKernel], pinned: set[str], target) -> list[LKernel]:
    """Fuse within one segment's kernel list (program order is kept)."""
    i = 0
    while i < len(kernels):
        j = _fusable_consumer(kernels, i, pinned)
        if j is not None:
            fused = _merge(kernels[i], kernels[j])
            if fused is not None and _accepted(fused.kernel, target):
                kernels[i] = fused
                del kernels[j]
                continue  # try to extend the chain
        i += 1
    return kernels


def _writers(kernels: list[LKernel], name: str) -> list[int]:
    return [i for i, k in enumerate(kernels) if k.kernel.output.name == name]


def _readers(kernels: list[LKernel], name: str) -> list[int]:
    out = []
    for i, k in enumerate(kernels):
        reads = list(k.kernel.inputs) + [e.operand for e in k.kernel.epilogue if e.operand is not None]
        if any(t.name == name for t in reads):
            out.append(i)
    return out


def _fusable_consumer(kernels: list[LKernel], i: int, pinned: set[str]) -> int | None:
    p = kernels[i].kernel
    if p.kind not in PRODUCERS or p.output.name in pinned:
        return None
    if _writers(kernels, p.output.name) != [i] or not p.output.is_dense():
        return None
    readers = _readers(kernels, p.output.name)
    if len(readers) != 1 or readers[0] <= i:
        return None
    j = readers[0]
    c = kernels[j].kernel
    if c.kind != "eltwise" or c.dtype != p.dtype or c.output.numel != p.output.numel:
        return None
    if _consumer_steps(c, p.output) is None:
        return None
    # everything else C reads (its input too, which becomes an operand when the steps swap
    # sides) must exist before P runs: the fused kernel runs at P's place in the program
    reads = list(c.inputs) + [e.operand for e in c.epilogue if e.operand is not None]
    for t in reads:
        if t.name != p.output.name and any(w >= i for w in _writers(kernels, t.name)):
            return None
    return j


def _same(a, b) -> bool:
    """``a`` is the tensor ``b`` (possibly reshaped: the same dense row-major bytes)."""
    if (a.name, a.addr, a.shape, a.strides) == (b.name, b.addr, b.shape, b.strides):
        return True
    return (a.name == b.name and a.addr == b.addr and a.numel == b.numel and a.dtype == b.dtype
            and _row_major(a) and _row_major(b))


def _row_major(t) -> bool:
    return dense_order(t) == tuple(range(t.rank))


def _consumer_steps(c: Kernel, produced) -> tuple[EpilogueOp, ...] | None:
    """C's steps applied to P's result, or None when C reads P's result some other way."""
    steps = list(c.epilogue)
    refs = [e for e in steps if e.operand is not None and e.operand.name == produced.name]
    if _same(c.inputs[0], produced):
        return tuple(steps) if not refs else None
    if not steps or len(refs) != 1 or steps[0] is not refs[0] or not _same(steps[0].operand, produced):
        return None
    first = steps[0]
    if first.op not in BINARY_EPILOGUE_OPS:
        return None
    swapped = replace(first, operand=c.inputs[0], operand_first=not first.operand_first if first.op not in COMMUTATIVE_EPILOGUE_OPS else False)
    return (swapped, *steps[1:])


def _merge(pk: LKernel, ck: LKernel) -> LKernel | None:
    p, c = pk.kernel, ck.kernel
    steps = _consumer_steps(c, p.output)
    if steps is None:
        return None
    shape = p.output.shape
    output = _as_shape(c.output, shape)
    if output is None:
        return None
    reshaped = []
    for e in steps:
        if e.operand is not None:
            operand = _as_shape(e.operand, shape)
            if operand is None:
                return None
            e = replace(e, operand=operand)
        reshaped.append(e)
    kernel = replace(p, output=output, epilogue=p.epilogue + tuple(reshaped), sources=p.sources + c.sources)
    return replace(pk, kernel=kernel, ops=pk.ops + ck.ops)


def _accepted(k: Kernel, target) -> bool:
    try:
        return get_kernel(k.kind).supports(k, target) is None
    except NpucError:
        return False


def _as_shape(t, shape):
    """``t`` with ``shape`` (itself when the shape is already that), or None."""
    return t if t.shape == shape else t.reshape(shape)
