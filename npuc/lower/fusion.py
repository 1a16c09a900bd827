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

An int8 array kernel (``conv2d``, ``gemm``) also absorbs a ``qbinary`` add (a residual ``qadd``)
that reads its result as one summand: the step is an ``add`` with the other summand as operand
and a :class:`~npuc.kir.kernel.QAddStep` (zero points, factors, output zero point and clamp; its
REQUANT record joins the kernel's inputs), which the kernel runs after its own REQUANT with the
qbinary kernel's instruction (QADD).
"""

from __future__ import annotations

from dataclasses import replace

from npuc.codegen.kernel import get_kernel
from npuc.isa.enums import DType
from npuc.kir.kernel import BINARY_EPILOGUE_OPS, COMMUTATIVE_EPILOGUE_OPS, KERNEL_KINDS, EpilogueOp, Kernel, QAddStep
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
    """Fuse within one segment's kernel list (program order is kept, but for the writer of a
    residual qadd's other summand, which may move earlier: :func:`_hoist_other_summand`)."""
    i = 0
    while i < len(kernels):
        _hoist_other_summand(kernels, i)
        j = _fusable_consumer(kernels, i, pinned)
        if j is not None:
            fused = _merge(kernels[i], kernels[j])
            if fused is not None and _accepted(fused.kernel, target):
                kernels[i] = fused
                del kernels[j]
                continue  # try to extend the chain
        i += 1
    return kernels


def _hoist_other_summand(kernels: list[LKernel], i: int) -> None:
    """When kernel ``i`` is an int8 array kernel whose result only a qadd reads, and the qadd's
    other summand is written by a later kernel that does no more multiply-accumulates (ResNet's
    1x1 downsampling conv after the block's second 3x3 conv), move that writer before ``i`` when
    nothing between depends on it: the add then fuses into kernel ``i``, whose products hide its
    vector work, rather than into the smaller layer."""
    p = kernels[i].kernel
    readers = _readers(kernels, p.output.name)
    if p.kind not in ("conv2d", "gemm") or p.quant is None or len(readers) != 1:
        return
    c = kernels[readers[0]].kernel
    if c.kind != "qbinary" or not _qadd_into(p, c):
        return
    others = [t for t in c.inputs[:2] if t.name != p.output.name]
    writers = _writers(kernels, others[0].name) if len(others) == 1 else []
    if len(writers) != 1 or not i < writers[0] < readers[0] or kernels[writers[0]].macs > kernels[i].macs:
        return
    w = writers[0]
    moved = kernels[w].kernel
    reads = {t.name for t in moved.tensors() if t.name != moved.output.name}
    for k in kernels[i:w]:
        touched = {t.name for t in k.kernel.tensors()}
        if k.kernel.output.name in reads or moved.output.name in touched:
            return
    kernels.insert(i, kernels.pop(w))


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
    if c.kind not in ("eltwise", "qbinary") or c.dtype != p.dtype or c.output.numel != p.output.numel:
        return None
    if c.kind == "qbinary" and not _qadd_into(p, c):
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


def _qadd_into(p: Kernel, c: Kernel) -> bool:
    """Whether ``c`` is a qadd that int8 array kernel ``p`` may run in its epilogue."""
    return (c.attrs.op == "add" and p.dtype is DType.int8 and p.kind in ("conv2d", "gemm")
            and p.quant is not None and len(c.quant.factors) == 2)


def _qadd_step(c: Kernel, produced, record: int) -> tuple[EpilogueOp, ...] | None:
    """The qbinary add ``c`` as one epilogue step on P's result (the other summand its operand;
    its record becomes P's input number ``record``), or None when C reads P's result otherwise."""
    a, b = c.inputs[:2]
    mine = [i for i, t in enumerate((a, b)) if _same(t, produced)]
    if len(mine) != 1:
        return None
    i = mine[0]
    q = c.quant
    zps, fs = q.in_zero_points, q.factors
    step = QAddStep((zps[i], zps[1 - i]), (fs[i], fs[1 - i]), q.out_zero_point, q.qmin, q.qmax, record)
    return (EpilogueOp("add", operand=(b, a)[i], params=(("quant", step),)),)


def _consumer_steps(c: Kernel, produced, record: int = -1) -> tuple[EpilogueOp, ...] | None:
    """C's steps applied to P's result, or None when C reads P's result some other way
    (``record``: where a fused qadd's REQUANT record goes among P's inputs)."""
    if c.kind == "qbinary":
        return _qadd_step(c, produced, record)
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
    steps = _consumer_steps(c, p.output, len(p.inputs))
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
    inputs = p.inputs + (c.inputs[2],) if c.kind == "qbinary" else p.inputs  # the qadd's REQUANT record
    kernel = replace(p, inputs=inputs, output=output, epilogue=p.epilogue + tuple(reshaped), sources=p.sources + c.sources)
    return replace(pk, kernel=kernel, ops=pk.ops + ck.ops)


def _accepted(k: Kernel, target) -> bool:
    try:
        return get_kernel(k.kind).supports(k, target) is None
    except NpucError:
        return False


def _as_shape(t, shape):
    """``t`` with ``shape`` (itself when the shape is already that), or None."""
    return t if t.shape == shape else t.reshape(shape)
