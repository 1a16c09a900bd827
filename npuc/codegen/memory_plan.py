"""Memory planning: where every tensor lives in the target's memories, and when.

The target's memories (flash, DRAM, shared SRAM: ``[memory.NAME]``) each own a window of the
system address map; a buffer's address says which memory holds it.  Within a memory the layout is
(every block 64-byte aligned)::

    [ constants | inputs | outputs | activations ]      (the parts that memory holds)

* constants are packed once each, in the order lowering created them, in the physical order the
  kernels asked for (the CONSTANTS section of the .npub is exactly this region), in the fastest
  memory that holds ``weights`` (the flash of u55-like-256, the DRAM otherwise);
* model inputs and outputs get their own blocks (the runtime writes and reads them), all in the
  fastest memory that holds ``io`` and has room for them;
* activations share memory by liveness: each buffer lives from the first step that writes it to
  the last step that reads it (a step is one kernel, or one whole CPU segment).  They are placed
  in the fastest memory that holds ``activations`` first (an on-chip SRAM before DRAM): greedily,
  largest first, at the lowest offset that overlaps no placed buffer whose lifetime meets its own;
  a buffer that would end past that memory's room spills to the next memory, placed there the
  same way.  The plan reports, per memory, the peak and the bytes of each part, and the naive sum
  of the activations (no reuse).

With one DRAM that holds everything (npu-small, npu-mid, npu-large) this is one arena from
address 0, as before memories were data.  A plan that does not fit is a :class:`CompileError`
naming the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from npuc.kir.kernel import Kernel
from npuc.kir.tensor import DramTensor
from npuc.errors import CompileError
from npuc.kir.program import ACTIVATION, CONSTANT, INPUT, OUTPUT, Buffer, ConstData, LoweredModel, NpuSegment
from npuc.schedule.cascade_cost import stripe_count

ALIGN = 64


def align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class Placed:
    """A buffer at its address in the system address map, the memory that holds it, and its
    lifetime in steps (activations only)."""

    buffer: Buffer
    offset: int
    first: int = -1
    last: int = -1
    memory: str = ""


@dataclass(frozen=True)
class MemoryUse:
    """What the plan puts in one memory: bytes of constants, of inputs and outputs, the peak of
    the activations placed there (by liveness), and the top of it all (its window's used part)."""

    memory: str
    constants: int = 0
    io: int = 0
    activations: int = 0
    used: int = 0


@dataclass(frozen=True, eq=False)
class MemoryPlanResult:
    """Where every buffer lives; the regions; the constants blob; the model with absolute addresses."""

    model: LoweredModel
    placed: tuple[Placed, ...]
    regions: tuple[tuple[str, str, int, int], ...]  # (name, kind, offset, size)
    arena_size: int                                 # one past the last byte any buffer uses
    constants: bytes
    activation_peak: int                            # over every memory
    activation_naive: int
    memories: tuple[MemoryUse, ...] = ()            # one per memory of the target, in its order
    resident_bytes: int = 0                         # top of the scratchpad kept for on-chip tensors (the most)
    on_chip: Any = None                             # the choice (npuc.codegen.resident_plan.OnChip)
    staged: Any = None                              # weights staged: constant -> (reader, saving pJ)
    prefetched: tuple = ()                          # weights copied ahead (npuc.codegen.weight_staging.Prefetch)

    def offset(self, buffer: str) -> int:
        return self._offsets[buffer]

    def kernel_splits(self, segment: int) -> tuple[int, ...]:
        """Per kernel of NPU segment ``segment`` (counted among NPU segments): the top bytes of
        the scratchpad it leaves to the tensors kept on chip (0 without any)."""
        segs = [s for s in self.model.segments if isinstance(s, NpuSegment)]
        if self.on_chip is None or not self.on_chip.kernel_split:
            return (0,) * len(segs[segment].kernels)
        start = sum(len(s.kernels) for s in segs[:segment])
        return tuple(self.on_chip.kernel_split[start:start + len(segs[segment].kernels)])

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


def plan_memory(m: LoweredModel, resident: bool | str = False) -> MemoryPlanResult:
    """Place every buffer of ``m`` and relocate its kernels to absolute addresses.

    On a target whose weights live in a slower memory than its activations, the kernels that
    the cost model finds much faster with their weights in the faster memory read copies of
    them made ahead, in the weight memory's idle time (``npuc.codegen.weight_staging``,
    :func:`~npuc.codegen.weight_staging.prefetch_weights`; planned without them when they do not
    fit).  ``resident``: also stage the weights that a kernel re-reads from a slow memory in a
    faster one (when the staged copies fit) and let the cost model keep activations in the
    scratchpad across kernels (``npuc.codegen.resident_plan``); ``"not-slower"``: keep only
    those that make no kernel slower (``choose_on_chip(cycles_not_worse=True)``), and stage no
    weights."""
    from npuc.codegen.weight_staging import prefetch_weights

    ahead, prefetched = prefetch_weights(m)
    if prefetched:
        try:
            return replace(_plan_staged(ahead, resident), prefetched=tuple(prefetched))
        except CompileError:
            pass  # the copies do not fit beside the activations: plan without them
    return _plan_staged(m, resident)


def _plan_staged(m: LoweredModel, resident: bool | str) -> MemoryPlanResult:
    if resident is True:
        from npuc.codegen.weight_staging import stage_weights

        staged_model, staged = stage_weights(m)
        if staged:
            try:
                return replace(_plan(staged_model, True), staged=staged)
            except CompileError:
                pass  # the staged copies do not fit beside the activations: plan without them
    return _plan(m, resident)


def _plan(m: LoweredModel, resident: bool | str) -> MemoryPlanResult:
    from npuc.codegen.local_memory import RESIDENT_BASE
    from npuc.codegen.resident_plan import NOT_SLOWER, choose_on_chip

    t = m.target
    on_chip = choose_on_chip(m, cycles_not_worse=resident == NOT_SLOWER) if resident else None
    kept = on_chip.offsets if on_chip is not None else {}
    placed: list[Placed] = []
    regions: list[tuple[str, str, int, int]] = []
    top = {mem.name: 0 for mem in t.memories}  # bytes used from each window's base
    use = {mem.name: {"constants": 0, "io": 0, "activations": 0} for mem in t.memories}
    blob, consts = _pack_constants(m)
    const_size = align(len(blob))
    life = lifetimes(m)
    acts = [b for b in m.buffers if b.kind == ACTIVATION and b.name in life and b.name not in kept]
    io = [b for kind in (INPUT, OUTPUT) for b in m.buffers if b.kind == kind]
    if len(t.memories) == 1:
        _check_fits_one(m, const_size, sum(align(b.nbytes) for b in io), greedy_by_size(acts, life)[1])
    wmem = t.weight_memory
    if const_size > wmem.size_bytes:
        _refuse(m, "the constants", const_size, "weights", top, const_size)
    base = t.window_of(wmem.name).base
    placed += [Placed(b, base + off, memory=wmem.name) for b, off in consts]
    regions.append(("constants", "CONSTANTS", base, const_size))
    top[wmem.name] = use[wmem.name]["constants"] = const_size
    blocks = chain_blocks(m)
    layout = _place_io_and_activations(m, io, acts, life, top, use, io_first=True, blocks=blocks)
    if layout.spilled:  # activations left the fastest memory: would the io's room keep more of them?
        other = _place_io_and_activations(m, io, acts, life, top, use, io_first=False, blocks=blocks)
        if other.off_chip_traffic < layout.off_chip_traffic:
            layout = other
    if layout.refused:
        _refuse(m, *layout.refused, layout.top, const_size)
    placed += layout.placed
    regions += layout.regions
    top, use, peak_all = layout.top, layout.use, layout.peak
    if kept:  # offsets from the top of the scratchpad
        spad_end = RESIDENT_BASE + t.scratchpad.size_bytes
        placed += [Placed(b, spad_end - kept[b.name] - align(b.nbytes), *life[b.name], memory="scratchpad")
                   for b in m.buffers if b.name in kept]
    arena = max(t.window_of(n).base + used for n, used in top.items() if used) if any(top.values()) else 0
    naive = sum(align(b.nbytes) for b in m.buffers if b.kind == ACTIVATION and b.name in life)
    offs = {p.buffer.name: p.offset for p in placed}
    model = relocate(m, offs)
    memories = tuple(MemoryUse(n, u["constants"], u["io"], u["activations"], top[n]) for n, u in use.items())
    return MemoryPlanResult(model, tuple(placed), tuple(regions), arena, blob, peak_all, naive, memories,
                            on_chip.resident_bytes if kept else 0, on_chip)


def chain_blocks(m: LoweredModel) -> dict[str, int]:
    """The SRAM blocks of the fused chains that keep their intermediates there
    (``ChainAttrs.sram_bytes``), with the bytes each moves (every stripe writes and reads about
    the whole block): placed before any other activation, since off chip they cost that many."""
    out = {}
    for s in m.segments:
        if isinstance(s, NpuSegment):
            for lk in s.kernels:
                k = lk.kernel
                if k.kind == "fused_chain" and k.attrs.sram_bytes:
                    out[k.inputs[-1].name] = 2 * stripe_count(k.attrs) * k.attrs.sram_bytes
    return out


@dataclass(frozen=True)
class _Layout:
    """Inputs, outputs and activations placed in the memories that hold them (``_plan``)."""

    placed: list
    regions: list
    top: dict
    use: dict
    peak: int
    spilled: bool  # some activations live outside the fastest memory that holds activations
    off_chip_traffic: int  # bytes the spills cost at least: spilled io once, spilled activations twice
    refused: tuple = ()  # (what, bytes, holds) when something fits nowhere


def _place_io_and_activations(m: LoweredModel, io: list[Buffer], acts: list[Buffer], life, top0: dict, use0: dict,
                              io_first: bool, blocks: dict[str, int] | None = None) -> _Layout:
    """Inputs and outputs in their own blocks in the fastest memory that holds io and has room;
    activations by liveness in the fastest memory that holds them, spilling to the next.
    ``io_first``: the io blocks take their room before the activations (the layout
    ``[constants | inputs | outputs | activations]``); else after the fastest memory's
    activations, so that a small on-chip SRAM keeps activations (written and read) rather than
    a model input read once.  ``blocks``: fused chains' SRAM blocks and the bytes each moves
    (:func:`chain_blocks`), placed first and counted at those bytes when they spill."""
    t = m.target
    blocks = blocks or {}
    top = dict(top0)
    use = {k: dict(v) for k, v in use0.items()}
    placed: list[Placed] = []
    regions: list[tuple[str, str, int, int]] = []
    io_bytes = sum(align(b.nbytes) for b in io)

    def place_io() -> bool:
        io_mem = _first_with_room(t, "io", top, io_bytes)
        if io_mem is None:
            return False
        io_base = t.window_of(io_mem.name).base
        before_io = top[io_mem.name]
        for kind, region in ((INPUT, "inputs"), (OUTPUT, "outputs")):
            start = top[io_mem.name]
            for b in m.buffers:
                if b.kind == kind:
                    placed.append(Placed(b, io_base + top[io_mem.name], memory=io_mem.name))
                    top[io_mem.name] = align(top[io_mem.name] + b.nbytes)
            regions.append((region, "IO", io_base + start, top[io_mem.name] - start))
        use[io_mem.name]["io"] = top[io_mem.name] - before_io
        return True

    if io_first and not place_io():
        return _Layout(placed, regions, top, use, 0, False, 0, ("its inputs and outputs", io_bytes, "io"))
    io_placed = io_first
    peak_all = spilled_traffic = 0
    fastest = t.memories_holding("activations")[0]
    left = acts
    for i, mem in enumerate(t.memories_holding("activations")):
        if not left and i:
            break
        room = mem.size_bytes - top[mem.name]
        offsets, peak, left = greedy_by_size(left, life, room, frozenset(blocks))
        w = t.window_of(mem.name)
        start = w.base + top[mem.name]
        for b in m.buffers:
            if b.name in offsets:
                placed.append(Placed(b, start + offsets[b.name], *life[b.name], memory=mem.name))
        name = "activations" if i == 0 else f"activations.{mem.name}"
        if i == 0 or peak:
            regions.append((name, "ACTIVATIONS", start, align(peak)))
        top[mem.name] += align(peak)
        use[mem.name]["activations"] = align(peak)
        peak_all += align(peak)
        if i and mem.kind != "sram":
            spilled_traffic += sum(blocks.get(b.name, 2 * b.nbytes) for b in acts if b.name in offsets)
        if not io_placed:
            io_placed = place_io()
    if not io_placed and not place_io():
        return _Layout(placed, regions, top, use, peak_all, False, 0, ("its inputs and outputs", io_bytes, "io"))
    if left:
        return _Layout(placed, regions, top, use, peak_all, False, 0,
                       (f"{len(left)} activations ({sum(align(b.nbytes) for b in left):,} bytes) that fit no memory "
                        "beside what the plan already placed", 0, "activations"))
    io_off = sum(pl.buffer.nbytes for pl in placed if pl.buffer.kind in (INPUT, OUTPUT) and t.memory(pl.memory).kind != "sram")
    spilled = any(pl.memory != fastest.name for pl in placed if pl.buffer.kind == ACTIVATION)
    return _Layout(placed, regions, top, use, peak_all, spilled, spilled_traffic + io_off)


def _pack_constants(m: LoweredModel) -> tuple[bytes, list[tuple[Buffer, int]]]:
    """The constants blob and each constant's offset in it."""
    blob = bytearray()
    out = []
    for b in m.buffers:
        if b.kind == CONSTANT:
            data = pack(b.const)
            if len(data) != b.nbytes and not (b.nbytes and not data):
                data = data[: b.nbytes].ljust(b.nbytes, b"\0")
            blob += bytes(align(len(blob)) - len(blob))
            out.append((b, len(blob)))
            blob += data
    return bytes(blob), out


def _first_with_room(t, what: str, top: dict[str, int], nbytes: int):
    for mem in t.memories_holding(what):
        if top[mem.name] + nbytes <= mem.size_bytes:
            return mem
    return None


def _check_fits_one(m: LoweredModel, consts: int, io: int, acts: int) -> None:
    """With one memory: the whole arena against it, named as the DRAM."""
    have = m.target.memories[0].size_bytes
    arena = consts + io + align(acts)
    if arena > have:
        raise CompileError(
            f"model '{m.name}' needs {arena:,} bytes of DRAM (constants {consts:,}, inputs and outputs "
            f"{io:,}, activations {acts:,}) but target '{m.target.name}' has {have:,}"
        )


def _refuse(m: LoweredModel, what: str, nbytes: int, holds: str, top: dict[str, int], consts: int) -> None:
    t = m.target
    have = ", ".join(f"{mem.name} {mem.size_bytes:,} bytes ({top[mem.name]:,} used)" for mem in t.memories_holding(holds))
    need = f" ({nbytes:,} bytes)" if nbytes else ""
    raise CompileError(
        f"model '{m.name}' does not fit target '{t.name}': no memory that holds {holds} has room for {what}{need}; "
        f"constants take {consts:,} bytes; the memories that may hold {holds}: {have}"
    )


def greedy_by_size(bufs: list[Buffer], life: dict[str, tuple[int, int]], room: int | None = None,
                   first: frozenset[str] = frozenset()) -> tuple[dict[str, int], int, list[Buffer]]:
    """Offsets (from 0) for buffers with lifetimes: the buffers named in ``first``, then the rest,
    each largest first, at the lowest non-conflicting offset.  A buffer that would end past
    ``room`` bytes is left out; returns (offsets, peak, left out, in the order given)."""
    order = sorted(bufs, key=lambda b: (b.name not in first, -align(b.nbytes), life[b.name][0], b.name))
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
        if room is not None and at + size > room:
            continue
        offsets[b.name] = at
        done.append((at, at + size, first, last))
        peak = max(peak, at + size)
    return offsets, peak, [b for b in bufs if b.name not in offsets]


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
    for u in p.memories:
        lines.append(f"  memory {u.memory:<10} constants {u.constants:,} B, inputs and outputs {u.io:,} B, "
                     f"activations peak {u.activations:,} B; {u.used:,} B used")
    for name, kind, off, size in p.regions:
        lines.append(f"  region {name:<12} {kind:<12} [0x{off:x}, 0x{off + size:x})  {size:,} B")
    lines += _on_chip_lines(p)
    for c, (reader, saved) in sorted((p.staged or {}).items()):
        lines.append(f"  staged: {c} copied to a faster memory before {reader} (estimated saving {saved / 1e6:.3f} uJ)")
    for f in p.prefetched:
        lines.append(f"  prefetched: {', '.join(f.consts)} copied to a faster memory {f.reader - f.at} kernels ahead of "
                     f"{f.name} (estimated saving {f.saving:,} cycles)")
    for pl in sorted(p.placed, key=lambda x: (x.offset, x.buffer.name)):
        if pl.memory == "scratchpad":
            continue
        life = f"  steps {pl.first}..{pl.last}" if pl.first >= 0 else ""
        lines.append(f"  0x{pl.offset:08x} {pl.buffer.nbytes:>12,} B  {pl.buffer.kind:<10} {pl.memory:<8} {pl.buffer.name}{life}")
    return "\n".join(lines) + "\n"


def _on_chip_lines(p: MemoryPlanResult) -> list[str]:
    """The split of the scratchpad and every tensor kept on chip, with its lifetime."""
    from npuc.codegen.local_memory import RESIDENT_BASE

    c = p.on_chip
    if c is None:
        return []
    tried = ", ".join(f"{r // 1024} KiB {e / 1e6:.3f} uJ" if r % 1024 == 0 else f"{r:,} B {e / 1e6:.3f} uJ"
                      for r, e in c.considered)
    lines = [f"  on chip: up to {p.resident_bytes:,} B at the top of the scratchpad keep {len(c.offsets)} activations "
             f"across kernels (estimated {c.energy_pj / 1e6:.3f} uJ against {c.baseline_pj / 1e6:.3f} uJ with none; "
             f"largest splits tried {tried})"]
    if c.kernel_split:
        lines.append("  on chip: bytes each kernel leaves, in program order: " + " ".join(str(x) for x in c.kernel_split))
    for pl in sorted((x for x in p.placed if x.memory == "scratchpad"), key=lambda x: (x.first, x.offset)):
        lines.append(f"  spad 0x{pl.offset - RESIDENT_BASE:06x} {pl.buffer.nbytes:>10,} B  {pl.buffer.kind:<10} scratchpad "
                     f"{pl.buffer.name}  steps {pl.first}..{pl.last}  saves {c.saved_pj[pl.buffer.name] / 1e6:.3f} uJ")
    return lines


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
