"""Packaging: the compiled model as a .npub container (docs/binary-format.md).

Besides the required sections, the metadata carries what the runtime's profile needs and the
binary does not otherwise say, as canonical JSON (sorted keys, no time stamps):

``npuc.target``  the target's full description (a loaded binary rebuilds its Target from it);
``npuc.layers``  per program, per kernel: name, kind, graph ops, source location, MACs and the
                 compulsory DRAM bytes (for the per-layer lower bound);
``npuc.cpu``     per CPU segment: estimated seconds, FLOPs, bytes moved, and each op with its reason.
"""

from __future__ import annotations

import dataclasses
import json

from npuc.codegen.driver import SegmentCode
from npuc.codegen.memory_plan import MemoryPlanResult
from npuc.ir.text import print_graph
from npuc.ir.types import DType as IRType
from npuc.ir.types import TensorType
from npuc.kir.program import CpuSegment, LoweredModel, NpuSegment
from npuc.kir.storage import storage_dtype
from npuc.runtime.npub import (
    BindingRole,
    CpuBinding,
    CpuSubgraph,
    IOSignature,
    IOTensor,
    MemoryPlan,
    Metadata,
    Npub,
    Region,
    RegionKind,
    Segment,
    SegmentKind,
    SramUsage,
    WeightStreams,
)


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _sorted(obj, keep_order: bool = False):
    """``obj`` with every mapping's keys sorted, except where ``keep_order``."""
    if isinstance(obj, dict):
        keys = list(obj) if keep_order else sorted(obj)
        return {k: _sorted(obj[k]) for k in keys}
    if isinstance(obj, (list, tuple)):
        return [_sorted(v) for v in obj]
    return obj


def target_json(target) -> str:
    """The target's document as canonical JSON: keys sorted, except the ``memory`` tables, whose
    order is the order of the system address map (and so part of the fingerprint)."""
    doc = target.document()
    out = {k: _sorted(v, keep_order=(k == "memory")) for k, v in sorted(doc.items())}
    return json.dumps(out, separators=(",", ":"))


def build_npub(plan: MemoryPlanResult, codes: tuple[SegmentCode, ...], model_name: str, *,
               extra: dict[str, str] | None = None, compression: WeightStreams | None = None) -> Npub:
    """The container of a planned, compiled model (``compression``: the weight streams the
    codegen stored in the blob, npuc.codegen.weight_compression)."""
    import npuc

    m = plan.model
    target = m.target
    homes = {h.value: h for h in m.homes}

    def addr(value: str) -> int:
        h = homes[value]
        return plan.offset(h.buffer) + h.offset

    io = IOSignature(
        tuple(IOTensor(io_name, homes[v].type, addr(v)) for io_name, v in m.inputs),
        tuple(IOTensor(io_name, homes[v].type, addr(v)) for io_name, v in m.outputs),
    )
    segments, cpu = [], []
    n_npu = 0
    for s in m.segments:
        if isinstance(s, NpuSegment):
            segments.append(Segment(SegmentKind.NPU, s.name, n_npu, s.inputs, s.outputs))
            n_npu += 1
        else:
            segments.append(Segment(SegmentKind.CPU, s.name, len(cpu), s.inputs, s.outputs))
            cpu.append(_cpu_subgraph(s, homes, plan, addr))
    # IO outputs that no segment writes (an output that is an input) need no segment.
    written = {o for s in segments for o in s.outputs} | {v for _, v in m.inputs}
    segments = _name_duplicate_outputs(segments, m.outputs, written)
    regions = tuple(Region(name, RegionKind[kind], off, size) for name, kind, off, size in plan.regions)
    sram = tuple(SramUsage(c.spad_bytes, c.acc_bytes) for c in codes)
    copies = _copy_sources(plan)
    meta = {
        "npuc.target": target_json(target),
        "npuc.layers": canonical_json([[_layer(lk, target, compression, copies) for lk in c.segment.kernels]
                                       for c in codes]),
        "npuc.cpu": canonical_json([_cpu_meta(s, m) for s in m.segments if isinstance(s, CpuSegment)]),
        "precision": m.precision.dtype.name if m.precision.dtype is not None else "cpu",
    }
    on_chip = _on_chip_meta(plan)
    if on_chip:
        meta["npuc.on_chip"] = canonical_json(on_chip)
    meta.update(extra or {})
    return Npub(
        target_name=target.name,
        target_fingerprint=target.fingerprint(),
        code_segments=tuple(c.program.encode() for c in codes),
        constants=plan.constants,
        memory_plan=MemoryPlan(plan.arena_size, regions, sram),
        io_signature=io,
        segments=tuple(segments),
        cpu_fallback=tuple(cpu),
        debug_map=tuple(c.debug for c in codes),
        metadata=Metadata(npuc.__version__, model_name, tuple(sorted(meta.items()))),
        weight_streams=compression if compression is not None and compression.constants else None,
    )


def _on_chip_meta(plan: MemoryPlanResult) -> list:
    """[[buffer, scratchpad address, bytes, first step, last step]] of the tensors the memory
    plan keeps on chip (``npuc inspect`` prints them)."""
    from npuc.codegen.local_memory import RESIDENT_BASE

    return [[p.buffer.name, p.offset - RESIDENT_BASE, p.buffer.nbytes, p.first, p.last]
            for p in sorted(plan.placed, key=lambda x: (x.first, x.offset, x.buffer.name)) if p.memory == "scratchpad"]


def _copy_sources(plan: MemoryPlanResult) -> dict[int, int]:
    """Address of each constant's staged copy (npuc.codegen.weight_staging) -> the constant's:
    a compressed constant's copy holds its streams (npuc.codegen.weight_compression)."""
    from npuc.codegen.weight_staging import copied_constant

    at = {p.buffer.name: p.offset for p in plan.placed}
    return {off: at[c] for name, off in at.items() if (c := copied_constant(name)) in at}


def _layer(lk, target, compression: WeightStreams | None = None, copies: dict[int, int] | None = None) -> list:
    k = lk.kernel
    per = _compulsory_per_memory(lk, target, compression, copies)
    saved = sum(n - _stored(addr, n, compression, copies) for (_, addr, _, _), n in lk.compulsory().items())
    return [k.name, k.kind, list(lk.ops), lk.loc or "", lk.macs, lk.min_bytes() - saved, per]


def _stored(addr: int, n: int, compression: WeightStreams | None, copies: dict[int, int] | None = None) -> int:
    """Compulsory bytes of a tensor at ``addr``: its stream bytes when its constant is compressed,
    or it is the staged copy of one (``copies``), rounded down, so that the bound stays a bound."""
    if compression is None:
        return n
    return int(n * compression.stored_fraction((copies or {}).get(addr, addr)))


def _compulsory_per_memory(lk, target, compression: WeightStreams | None = None,
                           copies: dict[int, int] | None = None) -> list:
    """[[memory, compulsory bytes]] of a kernel, each tensor counted in the memory its address is in
    (a tensor the memory plan keeps in the scratchpad is in none and moves no DMA bytes)."""
    from npuc.codegen.local_memory import is_resident_address

    per: dict[str, int] = {}
    for (_, addr, _, _), n in lk.compulsory().items():
        if is_resident_address(addr):
            continue
        n = _stored(addr, n, compression, copies)
        w = target.window_at(addr)
        name = w.memory.name if w is not None else target.activation_memory.name
        per[name] = per.get(name, 0) + n
    return [[m.name, per[m.name]] for m in target.memories if m.name in per]


def _cpu_meta(s: CpuSegment, m: LoweredModel) -> list:
    names = {n.outputs[0].name for n in s.graph.nodes}
    ops = [[o.value, o.op, o.reason, o.seconds] for o in m.cpu_ops if o.value in names]
    return [s.name, s.seconds, s.flops, s.transfer_bytes, ops]


def _cpu_subgraph(s: CpuSegment, homes, plan: MemoryPlanResult, addr) -> CpuSubgraph:
    bindings = [CpuBinding(v, BindingRole.INPUT, addr(v), homes[v].type) for v in s.inputs]
    bindings += [CpuBinding(v, BindingRole.OUTPUT, addr(v), homes[v].type) for v in s.outputs]
    # a constant binding's offset is into the constants blob, which starts at the base of the
    # memory that holds the weights (the flash of u55-like-256 is not at address 0)
    blob = next((off for _, kind, off, _ in plan.regions if kind == "CONSTANTS"), 0)
    for cname, data in s.graph.constants.items():
        t = TensorType(tuple(data.shape), storage_dtype(IRType.from_torch(data.dtype)))
        bindings.append(CpuBinding(cname, BindingRole.CONSTANT, plan.offset(f"#{cname}") - blob, t))
    return CpuSubgraph(s.name, print_graph(s.graph), tuple(bindings))


def _name_duplicate_outputs(segments, outputs, written) -> list[Segment]:
    """A value returned twice is listed under its second IO name by the segment that writes it."""
    extra: dict[str, list[str]] = {}
    for io_name, v in outputs:
        if io_name != v:
            extra.setdefault(v, []).append(io_name)
    if not extra:
        return segments
    out = []
    for s in segments:
        if s.kind == SegmentKind.CPU:  # its outputs are its subgraph's; the alias is stored with it
            out.append(s)
            continue
        more = [n for v in s.outputs for n in extra.get(v, [])]
        out.append(dataclasses.replace(s, outputs=tuple(s.outputs) + tuple(more)) if more else s)
    return out
