"""Code size and compile time of the zoo's CNNs, int8 and fp16, on one target.

Per model and precision: the encoded NPU instructions (LOOPs and their bodies), the dynamic
instructions they expand to (what the simulator runs), the code bytes, the constant bytes, code
as a percentage of constants (the aim: <= 2% for the int8 CNNs), what the same program would
take as 32-byte words without LOOPs (the encoding before format 3), and the compile seconds per
stage (``CompileReport.stage_seconds``: export and quantization included) and in all (wall
seconds), the total without torch.export beside it, and the CPU seconds of the whole compile
(steadier than wall time on a shared machine).  Below each model, the code bytes per kernel kind
(conv2d, depthwise_conv2d, gemm, ...: each encoded instruction counted for the layer its debug
entry names), with the encoded and dynamic instructions of each kind.

``--json FILE`` writes the figures; ``--baseline FILE`` (figures written by another checkout,
e.g. ``PYTHONPATH=/path/to/old/npuc python bench/code_size.py --json old.json``) prints them
before these, as "before" and "after".  Prints; asserts nothing.

    python bench/code_size.py [--target npu-mid] [--models resnet18,mobilenet_v2] [--precisions int8,fp16]
                              [--calibration 2] [--json out.json] [--baseline old.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import npuc
from npuc.isa.encoding import instruction_spans
from npuc.isa.loops import dynamic_count, expand
from npuc.zoo import ZOO, load_model

CNNS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0")
OLD_WORD = 32  # bytes an instruction took before format 3 (fixed words)


def by_kernel_kind(art) -> dict[str, dict[str, int]]:
    """{kernel kind: {"code_bytes", "instructions", "dynamic_instructions"}} of a compiled model:
    each encoded instruction's bytes go to the kind of the layer its debug entry names."""
    npub = art.npub
    meta = dict(npub.metadata.extra) if npub.metadata else {}
    kinds = {layer[0]: layer[1] for seg in json.loads(meta.get("npuc.layers", "[]")) for layer in seg}
    out: dict[str, collections.Counter] = {}
    for code, debug, program in zip(npub.code_segments, npub.debug_map or (), art.programs):
        starts = [e.instr_index for e in debug]
        labels = [e.op for e in debug]
        where = []
        j = -1
        for i, (_, n) in enumerate(instruction_spans(code)):
            while j + 1 < len(starts) and starts[j + 1] <= i:
                j += 1
            kind = kinds.get(labels[j], "other") if j >= 0 else "other"
            where.append(kind)
            c = out.setdefault(kind, collections.Counter())
            c["code_bytes"] += n
            c["instructions"] += 1
        for e in expand(list(program))[1]:
            out[where[e]]["dynamic_instructions"] += 1
    return {k: dict(v) for k, v in sorted(out.items(), key=lambda kv: -kv[1]["code_bytes"])}


def measure(name: str, precision: str, target: str, calibration: int) -> dict:
    spec = f"torchvision:{name}"
    model, example = load_model(spec)
    kw = {}
    if precision == "int8":
        kw = {"quantize": "int8", "calibration": [ZOO[spec].make_inputs(s) for s in range(1, calibration + 1)]}
    start, cpu = time.perf_counter(), time.process_time()
    art = npuc.compile(model, example, target=target, **kw)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    r = art.report
    stages: dict[str, float] = {}
    for stage, seconds in r.stage_seconds:
        stages[stage] = stages.get(stage, 0.0) + seconds
    dynamic = sum(dynamic_count(list(p)) for p in art.programs)
    return {
        "model": name, "precision": precision, "target": target,
        "instructions": r.instructions, "dynamic_instructions": dynamic,
        "code_bytes": r.code_bytes, "constant_bytes": r.constant_bytes,
        "code_pct": 100.0 * r.code_bytes / max(1, r.constant_bytes),
        "unrolled_word_bytes": dynamic * OLD_WORD,
        "stage_seconds": stages, "compile_seconds": wall, "compile_cpu_seconds": cpu,
        "without_export_seconds": wall - stages.get("export", 0.0),
        "by_kind": by_kernel_kind(art),
    }


def row(d: dict, tag: str) -> str:
    return (f"{d['model']:20s} {d['precision']:5s} {tag:6s} {d['instructions']:8,d} {d['dynamic_instructions']:9,d} "
            f"{d['code_bytes']:11,d} {d['constant_bytes']:12,d} {d['code_pct']:7.2f}% {d['unrolled_word_bytes']:12,d} "
            f"{d['compile_seconds']:8.2f} {d['without_export_seconds']:8.2f} "
            + (f"{d['compile_cpu_seconds']:8.2f}" if "compile_cpu_seconds" in d else f"{'n/a':>8s}"))


def kind_lines(d: dict) -> str:
    total = max(1, d["code_bytes"])
    return "\n".join(f"      {k:22s} {v['code_bytes']:9,d} B ({100 * v['code_bytes'] / total:5.1f}%) "
                     f"{v['instructions']:7,d} instrs {v.get('dynamic_instructions', 0):9,d} dynamic"
                     for k, v in d.get("by_kind", {}).items())


def stage_line(d: dict) -> str:
    return "      stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in d["stage_seconds"].items() if v >= 0.005)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--models", default=",".join(CNNS))
    ap.add_argument("--precisions", default="int8,fp16")
    ap.add_argument("--calibration", type=int, default=2, help="calibration samples of an int8 compile")
    ap.add_argument("--json", dest="json_out", default=None, help="write the figures to this file")
    ap.add_argument("--baseline", default=None, help="figures of another checkout (--json), printed as 'before'")
    args = ap.parse_args()
    before = {}
    if args.baseline:
        with open(args.baseline) as f:
            before = {(d["model"], d["precision"]): d for d in json.load(f)}
    print(f"target {args.target}; code/const aim <= 2% for the int8 CNNs; '32B words' = the dynamic "
          f"instructions as fixed 32-byte words (no LOOP)")
    print(f"{'model':20s} {'prec':5s} {'':6s} {'instrs':>8s} {'dynamic':>9s} {'code B':>11s} {'const B':>12s} "
          f"{'code%':>8s} {'32B words':>12s} {'compile':>8s} {'-export':>8s} {'cpu':>8s}")
    out = []
    for name in args.models.split(","):
        for precision in args.precisions.split(","):
            d = measure(name, precision, args.target, args.calibration)
            out.append(d)
            old = before.get((name, precision))
            if old is not None:
                print(row(old, "before"))
            print(row(d, "after" if old is not None else ""))
            if old is not None:
                print(f"      code bytes x{old['code_bytes'] / max(1, d['code_bytes']):.2f} smaller, compile without "
                      f"export x{old['without_export_seconds'] / max(1e-9, d['without_export_seconds']):.2f} faster")
            print(stage_line(d))
            print(kind_lines(d), flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
