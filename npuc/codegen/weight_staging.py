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

:func:`prefetch_weights` (on wherever the weight memory is slower: the memory plan calls it
first) copies the constants of the kernels that the cost model finds much faster with them in
the faster memory, kernels ahead, in the weight memory's idle time (:func:`plan_prefetch`).
Weight compression keeps both kinds of copy compressed (``npuc.codegen.weight_compression``).

What :func:`stage_weights` stages is the cost model's choice: every kernel is planned and
counted as the on-chip plan does (``npuc.codegen.resident_plan.kernel_traffic``); a constant is
staged when the flash bytes its reads would save exceed what the copy costs (one read of it from
its memory, in whole bursts, one write and its re-reads in the faster memory), and only for
kernels that are not fused chains (whose members address their constants themselves).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from npuc.isa.enums import DType
from npuc.kir.kernel import Kernel
from npuc.kir.program import ACTIVATION, CONSTANT, Buffer, LKernel, LoweredModel, NpuSegment
from npuc.kir.tensor import DramTensor

STAGED = ".staged"


def copied_constant(name: str) -> str | None:
    """The constant whose staged copy is the buffer ``name`` (None: not a staged copy); every
    module that treats staged copies apart (the copy's order, its wait, its compression, its
    reader's bound) asks here."""
    return name[:-len(STAGED)] if name.endswith(STAGED) else None


def is_weight_copy(k: Kernel) -> bool:
    """Whether ``k`` is the copy kernel of a staged constant."""
    return k.kind == "copy" and copied_constant(k.output.name) is not None


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


PREFETCH_GAIN = 0.9  # a kernel's constants are prefetched when its estimate with them in the SRAM is below this share
ROOM = 0.85  # the share of the activation memory that activations and prefetched weights may fill together
LEND = 0.5  # a kernel lends the weight memory's idle time to copies when its own reads keep it busy at most this share


@dataclass(frozen=True)
class Prefetch:
    """The constants of one kernel copied ahead into the faster memory: the kernel (its index in
    its segment and name), the constants, the kernel before which the copy is issued (an index
    in the same segment) and the cycles the cost model expects the reader to save."""

    reader: int
    name: str
    consts: tuple[str, ...]
    at: int
    saving: int


def _estimates(m: LoweredModel, k: Kernel, buffers: dict, staged: tuple[str, ...] = ()):
    """The cost model's traffic of ``k`` planned on the whole scratchpad, with the constants
    ``staged`` in the fastest memory that holds activations (as their copies would be)."""
    from npuc.codegen.resident_plan import kernel_traffic

    if staged:
        buffers = {**buffers, **{n: replace(buffers[n], kind=ACTIVATION) for n in staged}}
    return kernel_traffic(k, m, m.target.scratchpad.size_bytes, buffers)


def _copied_bytes(m: LoweredModel, b: Buffer) -> int:
    """The bytes a copy of constant ``b`` reads from the weight memory, in whole bursts: its
    codec streams' where the target decodes weights and they save a burst (weight compression
    keeps a copied constant compressed; the streams of its reader's blocks come to about the
    streams of its bytes in order), else its raw bytes."""
    from npuc.codegen.memory_plan import pack
    from npuc.isa.weight_codec import encode_blocks, worth_compressing

    w = m.target.weight_memory
    n = b.nbytes
    if m.target.weight_decoder is not None and b.const is not None and n:
        data = np.frombuffer(pack(b.const)[:n], np.uint8)
        coded = sum(len(x) for x in encode_blocks(data))
        if worth_compressing(n, coded, w.burst_bytes):
            n = coded
    return -(-n // w.burst_bytes) * w.burst_bytes


def plan_prefetch(m: LoweredModel) -> list[Prefetch]:
    """Which kernels read their constants from copies made ahead, and where each copy is issued.

    A kernel whose cost-model estimate drops below :data:`PREFETCH_GAIN` of itself with its own
    constants (read by no other kernel) in the faster memory is a reader.  The copies run on the
    copy queue in program order, each in the weight memory's idle time: walking the segment
    forward, the copy of each reader in turn takes the idle cycles of the weight memory's port
    (a kernel's estimated cycles less the cycles its own reads of that memory take) from where
    the previous copy ended (a kernel lends none when its own reads keep the port busy more than
    :data:`LEND` of its time), and is issued before the kernel where its first cycle falls.  The
    part of a copy that no idle time hides delays its reader: a reader whose saving, net of it,
    is below 1 - :data:`PREFETCH_GAIN` of its estimate is left to read its weights where they
    lie.  A copy issued early holds its buffer longer: it is moved later until the activations
    live at each step and the copies live there fit :data:`ROOM` of the faster memory."""
    from npuc.codegen.memory_plan import align, lifetimes

    fast = _faster(m)
    if fast is None:
        return []
    w = m.target.weight_memory
    buffers = {b.name: b for b in m.buffers}
    users = _users(m)
    life = lifetimes(m)
    steps = 1 + max((b for _, b in life.values()), default=0)
    live = [0] * steps  # activation bytes live at each step, in the faster memory
    for b in m.buffers:
        if b.kind != CONSTANT and b.name in life:
            lo, hi = life[b.name]
            for st in range(lo, hi + 1):
                live[st] += align(b.nbytes)
    room = int(fast.size_bytes * ROOM)
    out: list[Prefetch] = []
    step = 0
    for s in m.segments:
        if not isinstance(s, NpuSegment):
            step += 1
            continue
        first = step
        step += len(s.kernels)
        idle, readers = [], []
        for i, lk in enumerate(s.kernels):
            k = lk.kernel
            now = _estimates(m, k, buffers)
            busy = now.memory_bytes.get(w.name, (0, 0))[0] / w.bytes_per_cycle
            # a kernel that keeps the port busier than LEND of its time has no idle time to lend:
            # a copy beside it would take the port from its own loads
            idle.append(now.cycles - busy if busy <= LEND * now.cycles else 0.0)
            if k.kind in ("fused_chain", "copy"):
                continue
            consts = tuple(sorted(n for n in {x.name for x in k.tensors()}
                                  if buffers[n].kind == CONSTANT and users[n] == [k.name]))
            if not consts:
                continue
            staged = _estimates(m, k, buffers, consts)
            if staged.cycles < now.cycles * PREFETCH_GAIN:
                readers.append((i, lk.name, consts, now.cycles, staged.cycles))
        cursor, used = 0, 0.0
        for i, name, consts, before, after in readers:
            nbytes = sum(align(buffers[n].nbytes) for n in consts)
            need = sum(_copied_bytes(m, buffers[n]) for n in consts) / w.bytes_per_cycle
            j, u = cursor, used
            while j < i and idle[j] - u <= 0:  # the copy starts in the first kernel with idle time left
                j, u = j + 1, 0.0
            at = j
            while j < i and need > 0:
                take = min(max(0.0, idle[j] - u), need)
                need -= take
                u += take
                if need > 0:
                    j, u = j + 1, 0.0
            saving = int(before - after - need)  # the part of the copy no idle time hides, the reader waits for
            if saving < (1 - PREFETCH_GAIN) * before:
                continue
            while at < i and any(live[st] + nbytes > room for st in range(first + at, first + i + 1)):
                at += 1
            if live[first + i] + nbytes > room:
                continue  # no room for the copy even beside its reader alone
            cursor, used = j, u
            for st in range(first + at, first + i + 1):
                live[st] += nbytes
            out.append(Prefetch(i, name, consts, at, saving))
    return out


def _renamed(x: DramTensor, names: dict[str, str]) -> DramTensor:
    return replace(x, name=names[x.name]) if x.name in names else x


def _reading_staged(k: Kernel, names: dict[str, str]) -> Kernel:
    epi = tuple(replace(op, operand=_renamed(op.operand, names)) if op.operand is not None else op for op in k.epilogue)
    return replace(k, inputs=tuple(_renamed(x, names) for x in k.inputs), output=_renamed(k.output, names),
                   epilogue=epi)


def _with_copies(m: LoweredModel, by_kernel: dict[str, list[str]], before: dict[str, str]) -> LoweredModel:
    """``m`` with a ``copy`` kernel for each constant of ``by_kernel`` (reader -> constants),
    issued before the kernel ``before[reader]`` names (the reader itself when absent), and each
    reader pointed at the copies."""
    buffers = {b.name: b for b in m.buffers}
    new_buffers = list(m.buffers)
    segments = []
    for s in m.segments:
        if not isinstance(s, NpuSegment):
            segments.append(s)
            continue
        copies: dict[str, list[LKernel]] = {}
        for lk in s.kernels:
            for i, c in enumerate(by_kernel.get(lk.name, [])):
                n = buffers[c].nbytes
                new_buffers.append(Buffer(c + STAGED, n, ACTIVATION))
                copy = Kernel(f"{lk.name}.weights{i or ''}", "copy", (DramTensor(c, (n,), DType.int8),),
                              DramTensor(c + STAGED, (n,), DType.int8), dtype=DType.int8)
                copies.setdefault(before.get(lk.name, lk.name), []).append(LKernel(copy, ("copy",), lk.loc, 0))
        kernels = []
        for lk in s.kernels:
            kernels += copies.get(lk.name, [])
            names = {c: c + STAGED for c in by_kernel.get(lk.name, [])}
            kernels.append(replace(lk, kernel=_reading_staged(lk.kernel, names)) if names else lk)
        segments.append(replace(s, kernels=tuple(kernels)))
    return replace(m, segments=tuple(segments), buffers=tuple(new_buffers))


def stage_weights(m: LoweredModel) -> tuple[LoweredModel, dict[str, tuple[str, float]]]:
    """``m`` with a ``copy`` kernel staging each constant worth it (module docstring), and what
    was staged (constant -> (reader, estimated saving))."""
    chosen = worth_staging(m)
    if not chosen:
        return m, {}
    by_kernel: dict[str, list[str]] = {}
    for c, (kname, _) in sorted(chosen.items()):
        by_kernel.setdefault(kname, []).append(c)
    return _with_copies(m, by_kernel, {}), chosen


def prefetch_weights(m: LoweredModel) -> tuple[LoweredModel, list[Prefetch]]:
    """``m`` with the copies :func:`plan_prefetch` chooses issued where it places them, and the
    choices."""
    chosen = plan_prefetch(m)
    if not chosen:
        return m, []
    by_kernel: dict[str, list[str]] = {}
    before: dict[str, str] = {}
    for s in m.segments:
        if not isinstance(s, NpuSegment):
            continue
        order = [lk.name for lk in s.kernels]
        for p in chosen:
            if p.name in order:
                by_kernel[p.name] = list(p.consts)
                before[p.name] = order[p.at]
    return _with_copies(m, by_kernel, before), chosen
