"""DRAM memory planning: one arena for constants, model inputs and outputs, and activations.

Layout of the arena (every block 64-byte aligned)::

    [ constants | inputs | outputs | activations ]

* constants are packed once each, in the order lowering created them, in the physical order the
  kernels asked for (the CONSTANTS section of the .npub is exactly this region);
* model inputs and outputs get their own blocks (the runtime writes and reads them);
* activations share memory by liveness: each buffer lives from the first step that writes it to
  the last step that reads it (a step is one kernel, or one whole CPU segment), and buffers are
  placed greedily, largest first, at the lowest offset that overlaps no placed buffer whose
  lifetime meets its own.  The plan reports the peak and the naive sum (no reuse).

A plan that does not fit the target's DRAM is a :class:`CompileError` naming the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from npuc.kir.kernel import Kernel
from npuc.kir.tensor import DramTensor
from npuc.errors import CompileError
from npuc.kir.program import ACTIVATION, CONSTANT, INPUT, OUTPUT, Buffer, ConstData, LoweredModel, NpuSegment

ALIGN = 64


def align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class Placed:
    """A buffer at its arena offset, with its lifetime in steps (activations only)."""

    buffer: Buffer
    offset: int
    first: int = -1
    last: int = -1


@dataclass(frozen=True, eq=False)
class MemoryPlanResult:
    """Where every buffer lives; the regions; the constants blob; the model with absolute addresses."""

    model: LoweredModel
    placed: tuple[Placed, ...]
    regions: tuple[tuple[str, str, int, int], ...]  # (name, kind, offset, size)
    arena_size: int
    constants: bytes
    activation_peak: int
    activation_naive: int

    def offset(self, buffer: str) -> int:
        return self._offsets[buffer]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_offsets", {p.buffer.name: p.offset for p in self.placed})


def pack(c: ConstData) -> bytes:
    """The bytes of a constant buffer."""
    t = c.data.detach()
    if c.order is not None and t.dim() > 0:
        t = t.permute(c.order)
    t = t.to(c.dtype.torch).contiguous()
    if t.dtype == torch.bool:
        return t.numpy().astype("?").tobytes()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def lifetimes(m: LoweredModel) -> dict[str, tuple[int, int]]:
    """For each buffer touched by a step: (first step, last step), steps in execution order."""
    life: dict[str, list[int]] = {}

    def touch(name: str, step: int) -> None:
        span = life.setdefault(name, [step, step])
        span[0] = min(span[0], step)
        span[1] = max(span[1], step)

    step = 0
    homes = {h.value: h for h in m.homes}
    for s in m.segments:
        if isinstance(s, NpuSegment):
            for k in s.kernels:
                for t in k.kernel.tensors():
                    touch(t.name, step)
                step += 1
        else:
            for v in s.inputs + s.outputs:
                touch(homes[v].buffer, step)
            step += 1
    return {k: (a, b) for k, (a, b) in life.items()}


def plan_memory(m: LoweredModel) -> MemoryPlanResult:
    """Place every buffer of ``m`` and relocate its kernels to absolute DRAM addresses."""
    placed: list[Placed] = []
    blob = bytearray()
    for b in m.buffers:
        if b.kind == CONSTANT:
            data = pack(b.const)
            if len(data) != b.nbytes and not (b.nbytes and not data):
                data = data[: b.nbytes].ljust(b.nbytes, b"\0")
            blob += bytes(align(len(blob)) - len(blob))
            placed.append(Placed(b, len(blob)))
            blob += data
    const_size = align(len(blob))
    blob = bytes(blob)
    regions = [("constants", "CONSTANTS", 0, const_size)]
    top = const_size
    for kind, region in ((INPUT, "inputs"), (OUTPUT, "outputs")):
        start = top
        for b in m.buffers:
            if b.kind == kind:
                placed.append(Placed(b, top))
                top = align(top + b.nbytes)
        regions.append((region, "IO", start, top - start))
    life = lifetimes(m)
    acts = [b for b in m.buffers if b.kind == ACTIVATION and b.name in life]
    offsets, peak = greedy_by_size(acts, life)
    for b in acts:
        placed.append(Placed(b, top + offsets[b.name], *life[b.name]))
    regions.append(("activations", "ACTIVATIONS", top, align(peak)))
    arena = top + align(peak)
    naive = sum(align(b.nbytes) for b in acts)
    _check_fits(m, arena, const_size, top - const_size, peak)
    offs = {p.buffer.name: p.offset for p in placed}
    model = relocate(m, offs)
    return MemoryPlanResult(model, tuple(placed), tuple(regions), arena, blob, peak, naive)


def greedy_by_size(bufs: list[Buffer], life: dict[str, tuple[int, int]]) -> tuple[dict[str, int], int]:
    """Offsets (from 0) for buffers with lifetimes: largest first, lowest non-conflicting offset."""
    order = sorted(bufs, key=lambda b: (-align(b.nbytes), life[b.name][0], b.name))
    done: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[str, int] = {}
    peak = 0
    for b in order:
        first, last = life[b.name]
        size = align(b.nbytes)
        busy = sorted((o, e) for o, e, f, l in done if f <= last and first <= l)
        at = 0
        for o, e in busy:
            if at + size <= o:
                break
            at = max(at, e)
        offsets[b.name] = at
        done.append((at, at + size, first, last))
        peak = max(peak, at + size)
    return offsets, peak


def _check_fits(m: LoweredModel, arena: int, consts: int, io: int, acts: int) -> None:
    have = m.target.dram.size_bytes
    if arena > have:
        raise CompileError(
            f"model '{m.name}' needs {arena:,} bytes of DRAM (constants {consts:,}, inputs and outputs "
            f"{io:,}, activations {acts:,}) but target '{m.target.name}' has {have:,}"
        )


def _moved(t: DramTensor, offs: dict[str, int]) -> DramTensor:
    return t.at(offs[t.name] + t.addr)


def relocate_kernel(k: Kernel, offs: dict[str, int]) -> Kernel:
    epilogue = tuple(replace(e, operand=_moved(e.operand, offs)) if e.operand is not None else e for e in k.epilogue)
    return replace(k, inputs=tuple(_moved(t, offs) for t in k.inputs), output=_moved(k.output, offs), epilogue=epilogue)


def relocate(m: LoweredModel, offs: dict[str, int]) -> LoweredModel:
    segments = tuple(
        replace(s, kernels=tuple(replace(k, kernel=relocate_kernel(k.kernel, offs)) for k in s.kernels))
        if isinstance(s, NpuSegment) else s
        for s in m.segments
    )
    return replace(m, segments=segments)


def memory_plan_text(p: MemoryPlanResult) -> str:
    """The regions and every buffer's place (for --print-after memory_plan)."""
    lines = [f"memory plan: arena {p.arena_size:,} bytes; activations peak {p.activation_peak:,} bytes "
             f"(naive sum {p.activation_naive:,})"]
    for name, kind, off, size in p.regions:
        lines.append(f"  region {name:<12} {kind:<12} [0x{off:x}, 0x{off + size:x})  {size:,} B")
    for pl in sorted(p.placed, key=lambda x: (x.offset, x.buffer.name)):
        life = f"  steps {pl.first}..{pl.last}" if pl.first >= 0 else ""
        lines.append(f"  0x{pl.offset:08x} {pl.buffer.nbytes:>12,} B  {pl.buffer.kind:<10} {pl.buffer.name}{life}")
    return "\n".join(lines) + "\n"


def check_no_overlap(p: MemoryPlanResult) -> None:
    """CompileError if two buffers whose lifetimes meet share bytes (the plan's invariant)."""
    items = sorted(p.placed, key=lambda x: x.offset)
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if b.offset >= a.offset + a.buffer.nbytes:
                break
            both_acts = a.first >= 0 and b.first >= 0
            if both_acts and not (a.first <= b.last and b.first <= a.last):
                continue
            if a.buffer.nbytes and b.buffer.nbytes:
                raise CompileError(f"memory plan: buffers {a.buffer.name} and {b.buffer.name} overlap while both live")
