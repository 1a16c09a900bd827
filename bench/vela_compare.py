"""npuc's cycles and off-chip bytes against Arm Vela 5.2's, int8, on the same networks, in one run.

For the 56x56x64->64 3x3 convolution, ResNet-18 and MobileNetV2 (``--quick``: the conv and
MobileNetV2), on npuc's ``u55-like-256`` and ``u65-like-256`` targets against Vela's
Ethos_U55_High_End_Embedded / Shared_Sram and Ethos_U65_High_End / Dedicated_Sram (both 256 MACs
a cycle): npuc quantizes the network for the target, compiles its int8 graph and simulates it;
the same graph, restated as int8 TFLite (bench/vela_peer.py), goes through ``vela``.  Printed:
total cycles (npuc: ``Profile.total_cycles``; Vela: ``cycles_total``), off-chip bytes (npuc:
``Profile.dram_bytes``, or, on a target with memories as data, the bytes of its DRAM and flash
memories, its system SRAM apart as Vela counts it; Vela: ``dram_total_bytes +
off_chip_flash_total_bytes``)
and the ratios npuc / Vela (issue 9's target: <= 1 for both), with the MACs of both as a check that
they compiled the same network.  ``--layers`` adds Vela's per-layer cycles and MAC use;
``--check`` runs each restated network with TFLite's reference kernels (LiteRT) against npuc's
integer reference interpreter.

npuc's side runs on the presets ``u55-like-256`` and ``u65-like-256``; ``--target-file u55=PATH``
(and ``u65=PATH``) names other npuc target files instead, to ask what another memory system buys.

    python bench/vela_compare.py [--quick] [--target-file u55=PATH --target-file u65=PATH]
        [--systems u55,u65] [--layers] [--fuse-layers [--not-slower]] [--check] [--calibration 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))  # npuc, unless PYTHONPATH or the venv has it

import vela_peer as vp  # noqa: E402

ALL = ("conv56", "resnet18", "mobilenet_v2")
QUICK = ("conv56", "mobilenet_v2")
PRESETS = {"u55": "u55-like-256", "u65": "u65-like-256"}
# memory kinds counted off-chip, as Vela counts dram_total_bytes + off_chip_flash_total_bytes (its
# system SRAM, sram_total_bytes, is apart)
OFF_CHIP_KINDS = ("dram", "flash")


def resolve_targets(args) -> dict:
    """System -> npuc Target: --target-file, else the preset (a sentence when it is missing)."""
    from npuc.errors import NpucError
    from npuc.targets import list_presets, load_target

    files = {}
    for item in args.target_file or ():
        system, sep, path = item.partition("=")
        if not sep or system not in PRESETS:
            sys.exit(f"vela_compare: --target-file takes SYSTEM=PATH with SYSTEM one of {', '.join(PRESETS)}, got {item!r}")
        files[system] = Path(path)
    out = {}
    for system in args.systems:
        if system in files:
            spec = files[system]
        elif PRESETS[system] in list_presets():
            spec = PRESETS[system]
        else:
            sys.exit(f"vela_compare: npuc has no preset '{PRESETS[system]}'; pass --target-file {system}=PATH")
        try:
            out[system] = load_target(spec)
        except NpucError as e:
            sys.exit(f"vela_compare: {e}")
    return out


def npuc_figures(g, target, fuse_layers: bool | str = False, per_layer: bool = False) -> dict:
    from npuc.artifact import compile_graph, zero_inputs

    art = compile_graph(g, target, quantize="int8", fuse_layers=fuse_layers)
    prof = art.profile(*zero_inputs(art))
    doc = {"cycles": prof.total_cycles, "npu_cycles": prof.npu_cycles, "dram_bytes": prof.dram_bytes,
           "off_chip_bytes": prof.dram_bytes, "macs": prof.macs, "energy_pj": prof.energy_pj,
           "cpu_segments": art.cpu_segments}
    if hasattr(prof, "memory_figures"):  # a target with memories as data: split as Vela does
        mems = prof.memory_figures()
        doc["memories"] = {m["memory"]: {"kind": m["kind"], "bytes": m["read_bytes"] + m["write_bytes"]} for m in mems}
        doc["off_chip_bytes"] = sum(m["read_bytes"] + m["write_bytes"] for m in mems if m["kind"] in OFF_CHIP_KINDS)
    ws = art.npub.weight_streams
    doc["weights"] = {"blob_bytes": len(art.npub.constants), "saved_bytes": ws.saved_bytes if ws else 0,
                      "compressed_raw_bytes": sum(c.raw_bytes for c in ws.constants) if ws else 0,
                      "compressed_stored_bytes": sum(c.stored_bytes for c in ws.constants) if ws else 0,
                      "streams": len(ws.streams) if ws else 0}
    if per_layer:
        names = [m.name for m in target.memories]
        split = weight_traffic(art)
        doc["layers"] = [{"name": lp.name, "op": lp.op, "kind": lp.kind, "cycles": lp.cycles, "macs": lp.macs,
                          "lower_bound_cycles": lp.lower_bound_cycles, "off_chip_bytes": lp.dram_bytes,
                          "memory_bytes": {n: r + w for n, r, w in zip(names, lp.memory_read_bytes, lp.memory_write_bytes)},
                          **split.get(lp.name, {"weight_bytes": 0, "weight_distinct_bytes": 0})}
                         for lp in prof.layers]
    return doc


def weight_traffic(art) -> dict[str, dict[str, int]]:
    """Per layer: the DMA-side bytes (whole bursts) its loads read from the constants region, and
    the bytes of the distinct blocks they read (about the layer's weights, stored form)."""
    from npuc.isa.enums import Mem
    from npuc.report.profile import executed, program_labels

    n, target = art.npub, art.target
    lo = next(r.offset for r in n.memory_plan.regions if r.name == "constants")
    hi = lo + len(n.constants)
    out: dict[str, dict[str, int]] = {}
    seen: set = set()
    for i, program in enumerate(art.programs):
        labels = program_labels(n.debug_map[i] if n.debug_map else (), len(program))
        dynamic, labs = executed(program, labels)
        for ins, lab in zip(dynamic, labs):
            if not ins.op.startswith("DMA_LOAD"):
                continue
            r = next(x for x in ins.defn.regions(ins.args) if x.mem is Mem.dram)
            if not (lo <= r.addr < hi):
                continue
            w = target.window_at(r.addr)
            row = out.setdefault(lab or "(program)", {"weight_bytes": 0, "weight_distinct_bytes": 0})
            row["weight_bytes"] += r.burst_bytes(w.memory.burst_bytes)
            key = (r.addr, r.shape, r.strides)
            if key not in seen:
                seen.add(key)
                row["weight_distinct_bytes"] += r.nbytes
    return out


def compare(name: str, system: str, target, vela: vp.Vela, litert, args) -> dict:
    model, example = vp.NETWORKS[name]()
    g = vp.int8_graph(model, example, target, vp.calibration_samples(name, args.calibration, example), name)
    fuse = ("not-slower" if args.not_slower else True) if args.fuse_layers else False
    ours = npuc_figures(g, target, fuse_layers=fuse, per_layer=args.layers)
    spec = vp.tflite_spec(g)
    theirs = vela.compile(vela.write(spec, f"{name}-{system}"), system, per_layer=args.layers)
    doc = {"network": name, "system": system, "npuc_target": target.name, "vela_system": list(vp.SYSTEMS[system]),
           "npuc": ours,
           "vela": {"cycles": theirs.cycles, "npu_cycles": theirs.npu_cycles, "off_chip_bytes": theirs.off_chip_bytes,
                    "dram_bytes": theirs.dram_bytes, "flash_bytes": theirs.flash_bytes, "sram_bytes": theirs.sram_bytes,
                    "macs": theirs.macs, "cpu_ops": theirs.cpu_ops},
           "cycles_ratio": ours["cycles"] / theirs.cycles,
           "off_chip_ratio": ours["off_chip_bytes"] / max(theirs.off_chip_bytes, 1),
           "notes": spec.notes}
    if litert is not None:
        exact = vp.tflite_spec(g, exact_pool_padding=True)
        agreement = litert.agreement(g, vela.write(exact, f"{name}-{system}-exact"), example)
        doc["tflite_check"] = {"outputs": agreement.outputs, "equal": agreement.equal, "max_lsb": agreement.max_lsb,
                               "text": str(agreement)}
    if args.layers:
        doc["vela_layers"] = [{"name": r["Name"], "op": r["NNG Operator"], "cycles": int(float(r["Op Cycles"])),
                               "mac_util_percent": float(r["Util% (MAC)"]), "row": dict(r)} for r in theirs.layers]
    return doc


def print_row(d: dict) -> None:
    n, v = d["npuc"], d["vela"]
    print(f"{d['network']:<13} {d['system']:<4} {n['cycles']:>12,} {v['cycles']:>12,} {d['cycles_ratio']:>6.2f} "
          f"{n['off_chip_bytes']:>12,} {v['off_chip_bytes']:>12,} {d['off_chip_ratio']:>6.2f} "
          f"{n['macs']:>14,} {v['macs']:>14,}")
    print(f"{'':<13} Vela: {v['npu_cycles']:,} NPU cycles, DRAM {v['dram_bytes']:,} B, flash {v['flash_bytes']:,} B, "
          f"SRAM {v['sram_bytes']:,} B, {v['cpu_ops']} CPU ops; npuc: {n['npu_cycles']:,} NPU cycles, "
          f"{n['energy_pj'] / 1e6:.3f} uJ, {n['cpu_segments']} CPU segments")
    if "memories" in n:
        per = ", ".join(f"{name} ({m['kind']}) {m['bytes']:,} B" for name, m in n["memories"].items())
        print(f"{'':<13} npuc per memory: {per}; Profile.dram_bytes {n['dram_bytes']:,} B")
    w = n["weights"]
    if w["compressed_raw_bytes"]:
        print(f"{'':<13} npuc weights: {w['streams']:,} streams, {w['compressed_raw_bytes']:,} B of weights stored in "
              f"{w['compressed_stored_bytes']:,} B ({w['compressed_stored_bytes'] / w['compressed_raw_bytes']:.3f}); "
              f"constants {w['blob_bytes'] - w['saved_bytes']:,} of {w['blob_bytes']:,} B")
    else:
        print(f"{'':<13} npuc weights: none compressed (constants {w['blob_bytes']:,} B)")
    for note in d["notes"]:
        print(f"{'':<13} note: {note}")
    if "tflite_check" in d:
        print(f"{'':<13} check: {d['tflite_check']['text']}")
    for layer in d.get("vela_layers", ()):
        print(f"{'':<13}   vela {layer['name'][:30]:<30} {layer['op']:<18} {layer['cycles']:>10,} cycles "
              f"{layer['mac_util_percent']:>6.1f}% MAC use")
    for layer in n.get("layers", ()):
        per = ", ".join(f"{k} {b:,}" for k, b in layer["memory_bytes"].items())
        print(f"{'':<13}   npuc {layer['name'][:30]:<30} {layer['kind'][:18]:<18} {layer['cycles']:>10,} cycles "
              f"(bound {layer['lower_bound_cycles']:,}) {per} B; weights read {layer['weight_bytes']:,} B "
              f"of {layer['weight_distinct_bytes']:,}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the conv and MobileNetV2 only")
    ap.add_argument("--networks", help=f"comma-separated, of: {', '.join(ALL)}")
    ap.add_argument("--systems", default="u55,u65", help="comma-separated, of: u55, u65")
    ap.add_argument("--target-file", action="append", metavar="SYSTEM=PATH", help="npuc target file for a system")
    ap.add_argument("--layers", action="store_true", help="Vela's and npuc's per-layer figures too")
    ap.add_argument("--fuse-layers", action="store_true", help="compile npuc's side with fusion across layers")
    ap.add_argument("--not-slower", action="store_true",
                    help="with --fuse-layers: only the chains that take no more cycles (fuse_layers='not-slower')")
    ap.add_argument("--check", action="store_true",
                    help="run each .tflite with TFLite's reference kernels (LiteRT, its own venv) against npuc's reference")
    ap.add_argument("--calibration", type=int, default=4, help="int8 calibration samples")
    ap.add_argument("--venv", type=Path, default=vp.DEFAULT_VENV, help="Vela's virtual environment")
    ap.add_argument("--json", type=Path, help="write the figures here (atomically)")
    args = ap.parse_args()
    args.systems = args.systems.split(",")
    bad = [s for s in args.systems if s not in PRESETS]
    names = args.networks.split(",") if args.networks else list(QUICK if args.quick else ALL)
    unknown = [n for n in names if n not in ALL]
    if bad or unknown:
        sys.exit(f"vela_compare: unknown {'system' if bad else 'network'} {', '.join(bad or unknown)}; "
                 f"choose from {', '.join(PRESETS if bad else ALL)}")
    if args.json is not None:
        from npuc.errors import NpucError
        from npuc.fileio import check_output_path

        try:
            check_output_path(args.json, "the figures")
        except NpucError as e:
            sys.exit(f"vela_compare: {e}")
    targets = resolve_targets(args)
    try:
        vela = vp.Vela(args.venv)
        litert = vp.LiteRT() if args.check else None
    except vp.PeerUnavailable as e:
        sys.exit(f"vela_compare: {e}")
    for system, t in targets.items():
        print(f"{system}: npuc {t.name} ({t.peak_macs_per_cycle} MACs/cycle, {t.clock_hz / 1e6:.0f} MHz, "
              f"{t.dram_bytes_per_cycle} B/cycle off-chip) against Vela {vp.VELA_VERSION} {' / '.join(vp.SYSTEMS[system])}")
    print(f"{'network':<13} {'sys':<4} {'npuc cycles':>12} {'Vela cycles':>12} {'ratio':>6} {'npuc offchip':>12} "
          f"{'Vela offchip':>12} {'ratio':>6} {'npuc MACs':>14} {'Vela MACs':>14}")
    docs = []
    for name in names:
        for system, t in targets.items():
            d = compare(name, system, t, vela, litert, args)
            docs.append(d)
            print_row(d)
            sys.stdout.flush()
            if args.json is not None:  # after every run, so an interrupted run keeps what it measured
                vp.write_json(args.json, {"benchmark": "vela_compare", "calibration": args.calibration, "runs": docs})


if __name__ == "__main__":
    main()
