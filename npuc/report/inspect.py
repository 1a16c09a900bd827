"""Looking inside a .npub: its header, sections, IO signature, segments, code and memory plan
(``npuc inspect``), and its programs as assembly with the layer of every instruction
(``npuc disasm``)."""

from __future__ import annotations

import json

from npuc.isa import format_instr
from npuc.runtime.npub import SectionKind, SegmentKind, split_container


def _io(t) -> dict:
    ty = t.type
    d = {"name": t.name, "shape": list(ty.shape), "dtype": ty.dtype.value, "layout": ty.layout,
         "dram_offset": t.dram_offset, "bytes": ty.nbytes}
    if ty.quant is not None:
        d["quant"] = {"scale": list(ty.quant.scale), "zero_point": list(ty.quant.zero_point), "axis": ty.quant.axis}
    return d


def _section_name(kind: int) -> str:
    try:
        return SectionKind(kind).name.lower()
    except ValueError:
        return f"unknown({kind})"


def inspect_npub(data: bytes, art) -> dict:
    """What ``npuc inspect`` shows, as JSON-ready values; ``art`` is the loaded Artifact of ``data``."""
    npub = art.npub
    c = split_container(data)
    meta = dict(npub.metadata.extra) if npub.metadata else {}
    layers = json.loads(meta.get("npuc.layers", "[]"))
    segments = []
    for seg in npub.segments:
        d = {"name": seg.name, "kind": seg.kind.name.lower(), "index": seg.index,
             "inputs": list(seg.inputs), "outputs": list(seg.outputs)}
        if seg.kind == SegmentKind.NPU:
            prog = art.programs[seg.index]
            sram = npub.memory_plan.sram[seg.index] if seg.index < len(npub.memory_plan.sram) else None
            d.update(instructions=len(prog), code_bytes=len(npub.code_segments[seg.index]),
                     kernels=len(layers[seg.index]) if seg.index < len(layers) else None,
                     scratchpad_bytes=sram.scratchpad_bytes if sram else None,
                     accumulator_bytes=sram.accumulator_bytes if sram else None)
        else:
            sub = npub.cpu_fallback[seg.index]
            d.update(graph_lines=sub.graph_text.count("\n"), bindings=len(sub.bindings))
        segments.append(d)
    return {
        "format_version": f"{c.version[0]}.{c.version[1]}",
        "file_bytes": len(data),
        "target": npub.target_name,
        "target_fingerprint": npub.target_fingerprint.hex(),
        "compiler_version": npub.metadata.compiler_version if npub.metadata else None,
        "model": art.model_name,
        "precision": meta.get("precision"),
        "sections": [{"kind": _section_name(s.kind), "bytes": len(s.payload)} for s in c.sections],
        "inputs": [_io(t) for t in npub.io_signature.inputs],
        "outputs": [_io(t) for t in npub.io_signature.outputs],
        "segments": segments,
        "code_bytes": sum(len(p) for p in npub.code_segments),
        "instructions": sum(len(p) for p in art.programs),
        "constant_bytes": len(npub.constants),
        "memory_plan": {
            "dram_arena_bytes": npub.memory_plan.dram_arena_size,
            "regions": [{"name": r.name, "kind": r.kind.name.lower(), "offset": r.offset, "bytes": r.size,
                         "memory": _memory_at(art.target, r.offset)}
                        for r in npub.memory_plan.regions],
            "sram": [{"scratchpad_bytes": s.scratchpad_bytes, "accumulator_bytes": s.accumulator_bytes}
                     for s in npub.memory_plan.sram],
            "on_chip": [{"buffer": b, "scratchpad_addr": a, "bytes": n, "first_step": f, "last_step": l}
                        for b, a, n, f, l in json.loads(meta.get("npuc.on_chip", "[]"))],
        },
        "metadata_keys": sorted(meta),
    }


def inspect_text(d: dict) -> str:
    """The ``inspect_npub`` dict as plain text."""
    lines = [
        f"format {d['format_version']}, {d['file_bytes']:,} bytes, compiled by npuc {d['compiler_version']}",
        f"model {d['model'] or '(unnamed)'} for target {d['target']} (fingerprint {d['target_fingerprint'][:16]}...)"
        + (f", {d['precision']}" if d['precision'] else ""),
        "sections:",
        *(f"  {s['kind']:<14} {s['bytes']:>12,} bytes" for s in d["sections"]),
        "inputs:",
        *(f"  {t['name']}: {t['dtype']}{t['shape']}{' ' + t['layout'] if t['layout'] else ''} at DRAM {t['dram_offset']:,}"
          + (f", scale {t['quant']['scale'][0]:.6g} zero point {t['quant']['zero_point'][0]}" if "quant" in t else "")
          for t in d["inputs"]),
        "outputs:",
        *(f"  {t['name']}: {t['dtype']}{t['shape']}{' ' + t['layout'] if t['layout'] else ''} at DRAM {t['dram_offset']:,}"
          + (f", scale {t['quant']['scale'][0]:.6g} zero point {t['quant']['zero_point'][0]}" if "quant" in t else "")
          for t in d["outputs"]),
        "segments:",
    ]
    for s in d["segments"]:
        if s["kind"] == "npu":
            lines.append(f"  {s['name']} (NPU program {s['index']}): {s['kernels']} kernels, {s['instructions']:,} "
                         f"instructions, {s['code_bytes']:,} bytes of code; scratchpad {s['scratchpad_bytes']:,} B, "
                         f"accumulator {s['accumulator_bytes']:,} B")
        else:
            lines.append(f"  {s['name']} (CPU subgraph {s['index']}): {s['graph_lines']} lines of graph IR, "
                         f"{s['bindings']} bindings")
    mp = d["memory_plan"]
    lines.append(f"code: {d['instructions']:,} instructions, {d['code_bytes']:,} bytes; constants {d['constant_bytes']:,} bytes")
    lines.append(f"memory plan: DRAM arena {mp['dram_arena_bytes']:,} bytes")
    for r in mp["regions"]:
        lines.append(f"  {r['kind']:<12} {r['name']:<24} offset {r['offset']:>12,}  {r['bytes']:>12,} bytes"
                     + (f"  in {r['memory']}" if r.get("memory") else ""))
    if mp.get("on_chip"):
        lines.append(f"  kept in the scratchpad across kernels: {len(mp['on_chip'])} activations")
        for t in mp["on_chip"]:
            lines.append(f"    {t['buffer']:<36} scratchpad 0x{t['scratchpad_addr']:06x}  {t['bytes']:>10,} bytes  "
                         f"steps {t['first_step']}..{t['last_step']}")
    return "\n".join(lines) + "\n"


def _memory_at(target, offset: int) -> str | None:
    """The memory of the target's system address map that holds ``offset`` (None: unknown)."""
    window_at = getattr(target, "window_at", None)
    w = window_at(offset) if window_at is not None else None
    return w.memory.name if w is not None else None


def disassemble_npub(art) -> str:
    """Every NPU program of ``art`` as assembly: a comment heads each program and each layer (its
    graph ops and source line); every instruction line ends with its index.  The text assembles
    back to the programs (comments are ignored)."""
    npub = art.npub
    meta = dict(npub.metadata.extra) if npub.metadata else {}
    layers = json.loads(meta.get("npuc.layers", "[]"))
    names = {seg.index: seg.name for seg in npub.segments if seg.kind == SegmentKind.NPU}
    out: list[str] = []
    for p, prog in enumerate(art.programs):
        info = {row[0]: row for row in (layers[p] if p < len(layers) else [])}
        debug = list(npub.debug_map[p]) if npub.debug_map and p < len(npub.debug_map) else []
        starts = {e.instr_index: e for e in debug}
        out.append(f"# program {p} (segment {names.get(p, '?')}): {len(prog)} instructions, "
                   f"{len(npub.code_segments[p])} bytes")
        for i, ins in enumerate(prog):
            e = starts.get(i)
            if e is not None:
                row = info.get(e.op)
                ops = f" ({'+'.join(row[2])}, {row[1]} kernel)" if row else ""
                out.append(f"# layer {e.op}{ops}" + (f" at {e.loc}" if e.loc else ""))
            out.append(f"{format_instr(ins):<80} # {i}")
    return "\n".join(out) + "\n"
