"""Weights staged in a faster memory before the layer that reads them several times.

On a system whose weights live in a slow memory (the flash of ``u55-like-256``: about 1 byte a
cycle, the most energy per byte) a kernel that reads a weight tensor more than once (a
convolution whose weights do not fit the scratchpad beside its tiles, reloaded per input band)
pays each re-read at the flash's price.  :func:`stage_weights` puts a ``copy`` kernel before such
a kernel that moves the weights once into a buffer of the fastest memory that holds activations
(the shared SRAM), and points the kernel at that copy; the memory plan places the copy by
liveness like any activation (from the copy kernel to its reader).  The copy is ``DMA_COPY``
on the copy queue (``npuc.codegen.kernels.move_copy``): memory to memory, beside the previous
kernel's transfers and without its scratchpad, so the weights of the next layer are fetched
while the current one computes.

The choice is the cost model's: every kernel is planned and counted as the on-chip plan does
(``npuc.codegen.resident_plan.kernel_traffic``); a constant is staged when the flash bytes its
reads would save exceed what the copy costs (one read of it from its memory, in whole bursts, one write and
its re-reads in the faster memory), and only for kernels that are
not fused chains (whose members address their constants themselves).
"""

from __future__ import annotations

from dataclasses import replace

from npuc.isa.enums import DType
from npuc.kir.kernel import Kernel
from npuc.kir.program import ACTIVATION, CONSTANT, Buffer, LKernel, LoweredModel, NpuSegment
from npuc.kir.tensor import DramTensor

STAGED = ".staged"


def _faster(m: LoweredModel):
    """The memory staged weights go to: the fastest that holds activations, when it is cheaper
    per byte read than the weight memory (None: nothing to gain)."""
    t = m.target
    w = t.weight_memory
    fast = t.memories_holding("activations")[0]
    if fast.name == w.name or fast.read_pj_per_byte >= w.read_pj_per_byte:
        return None
    return fast


def _users(m: LoweredModel) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in m.segments:
        if isinstance(s, NpuSegment):
            for lk in s.kernels:
                for name in {x.name for x in lk.kernel.tensors()}:
                    out.setdefault(name, []).append(lk.name)
    return out


def worth_staging(m: LoweredModel) -> dict[str, tuple[str, float]]:
    """Constant buffer -> (the kernel that reads it, the estimated saving in pJ) for every
    constant worth staging."""
    from npuc.codegen.resident_plan import kernel_traffic

    fast = _faster(m)
    if fast is None:
        return {}
    t = m.target
    w = t.weight_memory
    buffers = {b.name: b for b in m.buffers}
    users = _users(m)
    out: dict[str, tuple[str, float]] = {}
    for s in m.segments:
        if not isinstance(s, NpuSegment):
            continue
        for lk in s.kernels:
            k = lk.kernel
            if k.kind == "fused_chain":
                continue
            consts = [n for n in {x.name for x in k.tensors()} if buffers[n].kind == CONSTANT and users[n] == [k.name]]
            if not consts:
                continue
            tr = kernel_traffic(k, m, t.scratchpad.size_bytes, buffers)
            for n in consts:
                reads, size = tr.loads.get(n, 0), buffers[n].nbytes
                if reads <= size:
                    continue
                now = reads * w.read_pj_per_byte
                copied = -(-size // w.burst_bytes) * w.burst_bytes  # the copy reads it as one run, in whole bursts
                staged = copied * w.read_pj_per_byte + size * fast.write_pj_per_byte + reads * fast.read_pj_per_byte
                if now > staged:
                    out[n] = (k.name, now - staged)
    return out


def _renamed(x: DramTensor, names: dict[str, str]) -> DramTensor:
    return replace(x, name=names[x.name]) if x.name in names else x


def _reading_staged(k: Kernel, names: dict[str, str]) -> Kernel:
    epi = tuple(replace(op, operand=_renamed(op.operand, names)) if op.operand is not None else op for op in k.epilogue)
    return replace(k, inputs=tuple(_renamed(x, names) for x in k.inputs), output=_renamed(k.output, names),
                   epilogue=epi)


def stage_weights(m: LoweredModel) -> tuple[LoweredModel, dict[str, tuple[str, float]]]:
    """``m`` with a ``copy`` kernel staging each constant worth it (module docstring), and what
    was staged (constant -> (reader, estimated saving))."""
    chosen = worth_staging(m)
    if not chosen:
        return m, {}
    buffers = {b.name: b for b in m.buffers}
    by_kernel: dict[str, list[str]] = {}
    for c, (kname, _) in sorted(chosen.items()):
        by_kernel.setdefault(kname, []).append(c)
    new_buffers = list(m.buffers)
    segments = []
    for s in m.segments:
        if not isinstance(s, NpuSegment):
            segments.append(s)
            continue
        kernels = []
        for lk in s.kernels:
            consts = by_kernel.get(lk.name, [])
            names = {c: c + STAGED for c in consts}
            for i, c in enumerate(consts):
                n = buffers[c].nbytes
                new_buffers.append(Buffer(names[c], n, ACTIVATION))
                copy = Kernel(f"{lk.name}.weights{i or ''}", "copy", (DramTensor(c, (n,), DType.int8),),
                              DramTensor(names[c], (n,), DType.int8), dtype=DType.int8)
                kernels.append(LKernel(copy, ("copy",), lk.loc, 0))
            kernels.append(replace(lk, kernel=_reading_staged(lk.kernel, names)) if names else lk)
        segments.append(replace(s, kernels=tuple(kernels)))
    return replace(m, segments=tuple(segments), buffers=tuple(new_buffers)), chosen
