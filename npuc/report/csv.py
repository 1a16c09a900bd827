"""A profile as two CSV files, after Vela's: one row per layer, and one summary row.

``<stem>_per-layer.csv`` has the columns of :data:`PER_LAYER_COLUMNS` (a layer's share of the
network's cycles and MACs beside its own figures); ``<stem>_summary.csv`` has one row with the
columns of :data:`SUMMARY_COLUMNS`: the model, the target, the clock, the totals and the traffic per
memory.  After those fixed columns both files have, for each memory of the target (in its order,
``NAME`` its ``[memory.NAME]``), ``NAME.read_bytes``, ``NAME.write_bytes`` and ``NAME.energy_pj``;
the summary also ``NAME.bandwidth_use_pct`` and ``NAME.compulsory_bytes``.  Numbers are plain (no thousands separators, no units in the cells; energies to 0.001 pJ,
percentages to 0.0001); names say the unit.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from npuc.report.files import write_report_file
from npuc.report.profile import Profile, _at

PER_LAYER_COLUMNS = (
    "name", "op", "kind", "segment", "source", "cycles", "cycles_pct", "macs", "macs_pct", "array_macs",
    "utilization_pct", "dram_bytes", "dram_read_bytes", "dram_write_bytes", "sram_bytes", "spad_bytes",
    "acc_bytes", "energy_pj", "energy_pct", "bound", "lower_bound_cycles", "min_dram_bytes", "instructions",
)

SUMMARY_COLUMNS = (
    "model", "target", "clock_hz", "layers", "cpu_segments", "total_cycles", "npu_cycles", "cpu_seconds",
    "inference_time_s", "inferences_per_s", "macs", "utilization_pct", "energy_pj", "energy_per_inference_j",
    "average_power_w", "dram_bytes", "dram_read_bytes", "dram_write_bytes", "sram_bytes", "spad_bytes",
    "acc_bytes", "lower_bound_cycles",
)

MEMORY_LAYER_COLUMNS = ("read_bytes", "write_bytes", "energy_pj")  # each as NAME.<column>, per memory
MEMORY_SUMMARY_COLUMNS = (*MEMORY_LAYER_COLUMNS, "bandwidth_use_pct", "compulsory_bytes")


def memory_columns(p: Profile, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The per-memory columns of ``p``'s target: NAME.<column> for each memory and column."""
    return tuple(f"{m.name}.{c}" for m in p.target.memories for c in columns)


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 4) if whole else 0.0


def per_layer_rows(p: Profile) -> list[dict]:
    """One dict per layer, keyed by :data:`PER_LAYER_COLUMNS`."""
    rows = []
    for layer in p.layers:
        d = layer.to_dict()
        d.update(energy_pj=round(layer.energy_pj, 3),
                 cycles_pct=_pct(layer.cycles, p.total_cycles), macs_pct=_pct(layer.macs, p.macs),
                 utilization_pct=round(100.0 * layer.utilization, 4), energy_pct=_pct(layer.energy_pj, p.energy_pj))
        row = {k: d[k] for k in PER_LAYER_COLUMNS}
        for i, m in enumerate(p.target.memories):
            row[f"{m.name}.read_bytes"] = _at(layer.memory_read_bytes, i)
            row[f"{m.name}.write_bytes"] = _at(layer.memory_write_bytes, i)
            row[f"{m.name}.energy_pj"] = round(_at(layer.memory_energy_pj, i), 3)
        rows.append(row)
    return rows


def summary_row(p: Profile) -> dict:
    """The summary, keyed by :data:`SUMMARY_COLUMNS`."""
    traffic = p.memory_traffic()
    return {
        "model": p.model, "target": p.target.name, "clock_hz": p.target.clock_hz,
        "layers": sum(1 for layer in p.layers if layer.kind != "cpu"),
        "cpu_segments": sum(1 for layer in p.layers if layer.kind == "cpu"),
        "total_cycles": p.total_cycles, "npu_cycles": p.npu_cycles, "cpu_seconds": p.cpu_seconds,
        "inference_time_s": p.latency_s, "inferences_per_s": p.inferences_per_s, "macs": p.macs,
        "utilization_pct": round(100.0 * p.utilization, 4), "energy_pj": round(p.energy_pj, 3),
        "energy_per_inference_j": p.energy_per_inference_j, "average_power_w": p.average_power_w,
        "dram_bytes": p.dram_bytes, "dram_read_bytes": traffic["dram_read"], "dram_write_bytes": traffic["dram_write"],
        "sram_bytes": p.sram_bytes, "spad_bytes": traffic["spad"], "acc_bytes": traffic["acc"],
        "lower_bound_cycles": p.lower_bound_cycles,
        **{f"{f['memory']}.{k}": v for f in p.memory_figures() for k, v in (
            ("read_bytes", f["read_bytes"]), ("write_bytes", f["write_bytes"]), ("energy_pj", round(f["energy_pj"], 3)),
            ("bandwidth_use_pct", round(100.0 * f["bandwidth_use"], 4)), ("compulsory_bytes", f["compulsory_bytes"]))},
    }


def _csv_text(columns, rows) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_profile_csv(p: Profile, directory: str | Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>_per-layer.csv`` and ``<stem>_summary.csv`` into ``directory`` (created if
    missing); the two paths."""
    from npuc.fileio import make_dir

    d = make_dir(directory, "the CSV folder")
    layers, summary = d / f"{stem}_per-layer.csv", d / f"{stem}_summary.csv"
    write_report_file(layers, _csv_text(PER_LAYER_COLUMNS + memory_columns(p, MEMORY_LAYER_COLUMNS), per_layer_rows(p)))
    write_report_file(summary, _csv_text(SUMMARY_COLUMNS + memory_columns(p, MEMORY_SUMMARY_COLUMNS), [summary_row(p)]))
    return layers, summary
