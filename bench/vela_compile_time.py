"""npuc's compile time against Arm Vela 5.2's on the int8 TFLite of the same networks, in one run.

For ResNet-18, ResNet-50, MobileNetV2 and ViT-B/16 (``--quick``: ResNet-18 and MobileNetV2) the
script compiles each network with npuc in fp16 and in int8 (calibration included), three times
each, and takes the median CPU seconds of the compile without torch.export: the process's CPU
time over ``npuc.compile`` less the CPU time spent inside ``torch.export.export`` (counted by
wrapping it).  Every timed compile starts cold: the choices and prices npuc memoises within a
process (tilings, depthwise schedules, instruction times) are forgotten first, so the second and
third runs measure what the first does.  ``CompileReport.stage_seconds`` gives the wall time of
every stage; the stages after export are printed beside it.  Then it restates npuc's int8 graph
as int8 TFLite (bench/vela_peer.py), compiles that three times with ``vela`` (whole process,
user + system CPU seconds, in Vela's own environment) and prints the ratios (issue 8's target:
npuc / Vela <= 0.5), the int8 compile's quantize stage alone (torchao's PT2E prepare, the
calibration forwards, convert) against Vela, and ``CompileReport.code_bytes`` against the constant bytes (target: <= 2%
for the int8 CNNs).  A network whose graph has an op int8 TFLite cannot express (ViT-B/16: its
softmax and layer norms stay float) gets its npuc figures and the op that stops the
restatement.  torch runs single-threaded (``--threads``), as vela does.

``--npuc-only`` runs no Vela and prints, per network and precision, the median CPU seconds of
every stage (``StageRecord.cpu_seconds``) (export, quantize -- calibration included --, import, the graph passes, the backend
stages) beside the CPU seconds without export, so that a change to the compiler is checked in
minutes.

    python bench/vela_compile_time.py [--quick] [--networks resnet18,mobilenet_v2] [--target npu-mid]
        [--target-file PATH] [--system u55|u65] [--repeat 3] [--calibration 8] [--resident]
        [--npuc-only] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))  # npuc, unless PYTHONPATH or the venv has it

import torch  # noqa: E402

import vela_peer as vp  # noqa: E402

ALL = ("resnet18", "resnet50", "mobilenet_v2", "vit_b_16")
QUICK = ("resnet18", "mobilenet_v2")


class ExportClock:
    """Counts torch.export.export's calls and the CPU seconds spent in them, while installed."""

    def __init__(self) -> None:
        self.calls = 0
        self.cpu = 0.0
        self._real = torch.export.export

    def __enter__(self) -> "ExportClock":
        real = self._real

        def counted(*args, **kwargs):
            start = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.calls += 1
                self.cpu += time.process_time() - start

        torch.export.export = counted
        return self

    def __exit__(self, *exc) -> None:
        torch.export.export = self._real


def cold_start() -> None:
    """Forget what npuc memoises within a process (tiling choices and prices, depthwise
    schedules and their code sizes, fused band plans, chain-copy accesses, instruction times),
    so that a compile costs what a fresh process's would."""
    from npuc import memo

    memo.forget_all()


def timed_compile(model, example, target, int8: bool, samples, resident: bool = False):
    """(artifact, CPU seconds without torch.export, torch.export calls, stage wall seconds after
    export, wall seconds per stage)."""
    import npuc

    cold_start()
    records: list = []
    with ExportClock() as clock:
        start = time.process_time()
        art = npuc.compile(model, example, target=target, quantize="int8" if int8 else None,
                           calibration=samples if int8 else None, resident=resident, records=records)
        cpu = time.process_time() - start - clock.cpu
    stages = sum(s for n, s in art.report.stage_seconds if n != "export")
    per_stage: dict[str, float] = {}
    for r in records:  # CPU seconds (a stage that runs twice, canonicalize, counts both runs)
        per_stage[r.name] = per_stage.get(r.name, 0.0) + r.cpu_seconds
    return art, cpu, clock.calls, stages, per_stage


def median_stages(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per stage (in pipeline order), the median of its CPU seconds over the runs."""
    return {name: vp.median([r.get(name, 0.0) for r in runs]) for name in runs[0]}


def bench_network(name: str, args, vela: vp.Vela | None) -> dict:
    model, example = vp.NETWORKS[name]()
    samples = vp.calibration_samples(name, args.calibration, example)
    doc: dict = {"network": name}
    for precision in ("fp16", "int8"):
        runs = [timed_compile(model, example, args.target, precision == "int8", samples, args.resident)
                for _ in range(args.repeat)]
        art = runs[-1][0]
        doc[precision] = {
            "cpu_seconds": [r[1] for r in runs], "median_cpu_seconds": vp.median([r[1] for r in runs]),
            "stage_wall_seconds_after_export": vp.median([r[3] for r in runs]), "export_calls": runs[-1][2],
            "stage_cpu_seconds": median_stages([r[4] for r in runs]),
            "code_bytes": art.report.code_bytes, "constant_bytes": art.report.constant_bytes,
            "instructions": art.report.instructions,
        }
        del runs, art
    if vela is None:
        return doc
    g = vp.int8_graph(model, example, args.target, samples, name)
    try:
        spec = vp.tflite_spec(g)
    except vp.NotExpressible as e:
        doc["vela"] = {"stopped": str(e)}
        return doc
    path = vela.write(spec, name)
    runs = [vela.compile(path, args.system) for _ in range(args.repeat)]
    doc["vela"] = {"cpu_seconds": [r.cpu_seconds for r in runs], "median_cpu_seconds": vp.median([r.cpu_seconds for r in runs]),
                   "tflite_bytes": path.stat().st_size, "tflite_ops": spec.counts(), "cpu_ops": runs[-1].cpu_ops}
    for precision in ("fp16", "int8"):
        doc[precision]["ratio_to_vela"] = doc[precision]["median_cpu_seconds"] / doc["vela"]["median_cpu_seconds"]
    return doc


def print_row(doc: dict) -> None:
    f16, i8, v = doc["fp16"], doc["int8"], doc.get("vela")
    vela = v["median_cpu_seconds"] if v and "median_cpu_seconds" in v else None
    cells = [f"{doc['network']:<13}", f"{f16['median_cpu_seconds']:>9.2f}", f"{i8['median_cpu_seconds']:>9.2f}",
             f"{vela:>9.2f}" if vela is not None else f"{'-':>9}",
             f"{f16['ratio_to_vela']:>8.2f}" if vela else f"{'-':>8}", f"{i8['ratio_to_vela']:>8.2f}" if vela else f"{'-':>8}",
             f"{i8['code_bytes']:>11,}", f"{i8['constant_bytes']:>12,}",
             f"{100 * i8['code_bytes'] / max(i8['constant_bytes'], 1):>7.2f}%"]
    print(" ".join(cells))
    print(f"{'':<13} stages after export (wall, median): fp16 {f16['stage_wall_seconds_after_export']:.2f} s, "
          f"int8 {i8['stage_wall_seconds_after_export']:.2f} s; torch.export calls per compile: fp16 "
          f"{f16['export_calls']}, int8 {i8['export_calls']}; fp16 code {f16['code_bytes']:,} B of "
          f"{f16['constant_bytes']:,} B constants")
    if v and "stopped" in v:
        print(f"{'':<13} Vela: no int8 TFLite of this graph: {v['stopped']}")
    elif v:
        print(f"{'':<13} Vela: {v['tflite_bytes']:,} B of TFLite, CPU seconds {', '.join(f'{x:.2f}' for x in v['cpu_seconds'])}, "
              f"{v['cpu_ops']} ops left to the CPU")
    quant = i8["stage_cpu_seconds"].get("quantize")
    if vela and quant is not None:
        # torchao's prepare_pt2e, the calibration forwards and convert_pt2e: the floor of any
        # int8 compile through PT2E, whatever the backend costs
        print(f"{'':<13} int8 quantize stage (PT2E prepare, calibration, convert): "
              f"{quant:.2f} CPU s = {quant / vela:.2f} x Vela (the aim, 0.5 x Vela, is {0.5 * vela:.2f} s for the whole compile)")


def print_stages(doc: dict) -> None:
    """``--npuc-only``: every stage's median CPU seconds, fp16 and int8 side by side."""
    f16, i8 = doc["fp16"], doc["int8"]
    names = list(dict.fromkeys([*f16["stage_cpu_seconds"], *i8["stage_cpu_seconds"]]))
    print(f"{doc['network']}: CPU s without export fp16 {f16['median_cpu_seconds']:.2f} "
          f"({', '.join(f'{x:.2f}' for x in f16['cpu_seconds'])}), int8 {i8['median_cpu_seconds']:.2f} "
          f"({', '.join(f'{x:.2f}' for x in i8['cpu_seconds'])}); torch.export calls per compile: fp16 "
          f"{f16['export_calls']}, int8 {i8['export_calls']}; {f16['instructions']:,} / {i8['instructions']:,} instructions")
    print(f"  {'stage (CPU s, median)':<24} {'fp16':>8} {'int8':>8}")
    for n in names:
        a, b = f16["stage_cpu_seconds"].get(n), i8["stage_cpu_seconds"].get(n)
        print(f"  {n:<24} {'-' if a is None else f'{a:.3f}':>8} {'-' if b is None else f'{b:.3f}':>8}")
    print(f"  {'after export (wall s)':<24} {f16['stage_wall_seconds_after_export']:>8.3f} {i8['stage_wall_seconds_after_export']:>8.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="ResNet-18 and MobileNetV2 only")
    ap.add_argument("--networks", help=f"comma-separated, of: {', '.join(ALL)}")
    ap.add_argument("--target", default="npu-mid", help="npuc preset (default npu-mid)")
    ap.add_argument("--target-file", type=Path, help="an npuc target TOML file instead of a preset")
    ap.add_argument("--system", choices=sorted(vp.SYSTEMS), default="u55", help="Vela's system configuration")
    ap.add_argument("--repeat", type=int, default=3, help="compiles per figure (the median is printed)")
    ap.add_argument("--calibration", type=int, default=8, help="int8 calibration samples")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (vela is single-threaded)")
    ap.add_argument("--venv", type=Path, default=vp.DEFAULT_VENV, help="Vela's virtual environment")
    ap.add_argument("--no-vela", action="store_true", help="npuc's figures only")
    ap.add_argument("--npuc-only", action="store_true",
                    help="no Vela: npuc's CPU seconds and every stage's wall seconds, per network and precision")
    ap.add_argument("--resident", action="store_true", help="compile with resident=True (activations kept on chip)")
    ap.add_argument("--json", type=Path, help="write the figures here (atomically)")
    args = ap.parse_args()
    if args.target_file is not None:
        args.target = args.target_file
    names = args.networks.split(",") if args.networks else list(QUICK if args.quick else ALL)
    unknown = [n for n in names if n not in ALL]
    if unknown:
        sys.exit(f"vela_compile_time: unknown network {', '.join(unknown)}; choose from {', '.join(ALL)}")
    if args.json is not None:
        from npuc.errors import NpucError
        from npuc.fileio import check_output_path

        try:
            check_output_path(args.json, "the figures")
        except NpucError as e:
            sys.exit(f"vela_compile_time: {e}")
    torch.set_num_threads(args.threads)
    vela = None
    if not (args.no_vela or args.npuc_only):
        try:
            vela = vp.Vela(args.venv)
        except vp.PeerUnavailable as e:
            sys.exit(f"vela_compile_time: {e} (--no-vela prints npuc's figures alone)")
    peer = "no Vela" if vela is None else f"Vela {vp.VELA_VERSION} for {' / '.join(vp.SYSTEMS[args.system])}"
    print(f"compile CPU seconds without torch.export, median of {args.repeat}, each compile cold; npuc for "
          f"{args.target}{' (resident)' if args.resident else ''}, {peer}; torch threads {args.threads}, "
          f"{args.calibration} calibration samples")
    if not args.npuc_only:
        print(f"{'network':<13} {'npuc fp16':>9} {'npuc int8':>9} {'Vela':>9} {'fp16/V':>8} {'int8/V':>8} "
              f"{'code B int8':>11} {'constants B':>12} {'code %':>8}")
    docs = []
    for name in names:
        doc = bench_network(name, args, vela)
        docs.append(doc)
        print_stages(doc) if args.npuc_only else print_row(doc)
        sys.stdout.flush()
        if args.json is not None:  # after every network, so an interrupted run keeps what it measured
            vp.write_json(args.json, {"benchmark": "vela_compile_time", "target": str(args.target),
                                      "system": args.system, "repeat": args.repeat, "calibration": args.calibration, "networks": docs})


if __name__ == "__main__":
    main()
