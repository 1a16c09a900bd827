"""Where npuc's cycles and off-chip bytes exceed Vela's, layer by layer, from vela_compare's JSON.

Reads the figures ``python bench/vela_compare.py --layers --json PATH`` wrote (nothing is
compiled again) and prints, per network and system: npuc's off-chip bytes split into weights (DMA
reads of the constants region, in whole bursts; against the distinct weight bytes, so the factor
is how often the weights are read) and activations (the rest), and the layers with the largest
cycle excess over Vela's (npuc's attributed cycles against Vela's ``Op Cycles``; both name the
layers by the graph's names), with npuc's per-layer lower bound, its bytes per memory and its
weight-read factor.  Vela's per-layer memory figures are access cycles (``SRAM AC``, ``DRAM AC``,
``OffFlash AC``), printed as Vela gives them.

    python bench/vela_breakdown.py PATH.json [--top 8]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def off_chip(layer: dict, kinds: dict[str, str]) -> int:
    return sum(b for m, b in layer["memory_bytes"].items() if kinds.get(m) in ("dram", "flash"))


def breakdown(run: dict, top: int) -> list[str]:
    n, v = run["npuc"], run["vela"]
    kinds = {m: x["kind"] for m, x in n.get("memories", {}).items()}
    layers = n.get("layers")
    if not layers:
        return [f"{run['network']} {run['system']}: no per-layer figures (run vela_compare with --layers)"]
    w_read = sum(x.get("weight_bytes", 0) for x in layers)
    w_distinct = sum(x.get("weight_distinct_bytes", 0) for x in layers)
    total_off = n["off_chip_bytes"]
    w_off = w_read  # the presets keep every weight off chip (flash or DRAM)
    act_off = total_off - w_off
    out = [f"{run['network']} on {run['system']}: cycles {n['cycles']:,} vs Vela {v['cycles']:,} "
           f"({run['cycles_ratio']:.2f}); off-chip {total_off:,} vs {v['off_chip_bytes']:,} B ({run['off_chip_ratio']:.2f})",
           f"  npuc off-chip: weights {w_off:,} B (weights read {w_read / max(w_distinct, 1):.2f}x their "
           f"{w_distinct:,} distinct bytes), activations {act_off:,} B; Vela off-chip {v['off_chip_bytes']:,} B"]
    w = n.get("weights", {})
    if w.get("compressed_raw_bytes"):
        out.append(f"  npuc weights compressed: {w['compressed_raw_bytes']:,} B stored in {w['compressed_stored_bytes']:,} B")
    vela = {x["name"]: x for x in run.get("vela_layers", ())}
    rows = []
    for x in layers:
        vl = vela.get(x["name"])
        vc = vl["cycles"] if vl else 0
        rows.append((x["cycles"] - vc, x, vl))
    rows.sort(key=lambda r: -r[0])
    out.append(f"  {'layer':<28} {'kind':<16} {'npuc cyc':>11} {'bound':>11} {'Vela cyc':>11} {'excess':>11} "
               f"{'off-chip B':>12} {'w read':>7}  Vela access cycles")
    for excess, x, vl in rows[:top]:
        wf = x.get("weight_bytes", 0) / x.get("weight_distinct_bytes", 0) if x.get("weight_distinct_bytes", 0) else 0
        vac = (f"SRAM {vl['row'].get('SRAM AC', '?')}, DRAM {vl['row'].get('DRAM AC', '?')}, "
               f"flash {vl['row'].get('OffFlash AC', '?')}" if vl and "row" in vl else "-")
        out.append(f"  {x['name'][:28]:<28} {x['kind'][:16]:<16} {x['cycles']:>11,} {x['lower_bound_cycles']:>11,} "
                   f"{(vl['cycles'] if vl else 0):>11,} {excess:>11,} {off_chip(x, kinds):>12,} {wf:>6.2f}x  {vac}")
    by_kind: dict[str, list[int]] = {}
    for excess, x, _ in rows:
        k = by_kind.setdefault(x["kind"], [0, 0, 0])
        k[0] += excess
        k[1] += off_chip(x, kinds)
        k[2] += 1
    out.append("  excess by kernel kind: " + ", ".join(
        f"{k} {e:,} cycles / {b:,} B ({c} layers)" for k, (e, b, c) in sorted(by_kind.items(), key=lambda i: -i[1][0])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--top", type=int, default=8, help="layers listed per run")
    args = ap.parse_args()
    try:
        doc = json.loads(args.json.read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"vela_breakdown: cannot read {args.json}: {e}")
    for run in doc.get("runs", ()):
        print("\n".join(breakdown(run, args.top)))
        print()


if __name__ == "__main__":
    main()
