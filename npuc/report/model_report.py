"""The HTML report of one compiled model (``npuc report``): one self-contained page.

Sections: the totals; the roofline of every NPU layer against the target (operations = 2 per MAC
over DRAM bytes; the compute roof and a bandwidth roof per memory, npuc.report.html); cycles and
energy per layer; traffic per memory per layer; the CPU fallbacks with their reasons and estimated
cost; and the per-layer table (every column of ``Profile.to_dict()``).  The plotting is the shared
page shell of npuc.report.html.
"""

from __future__ import annotations

import json

from npuc.report import html as rh


def _layer_names(p) -> list[str]:
    return [f"{i}: {layer.name}" for i, layer in enumerate(p.layers)]


def _bars(p, series: list[tuple[str, list[float]]], title: str, yaxis: str, stacked: bool = False):
    go = rh._plotly()
    names = _layer_names(p)
    fig = go.Figure([go.Bar(x=names, y=values, name=label) for label, values in series])
    fig.update_layout(title=title, template="plotly_white", barmode="stack" if stacked else "group",
                      margin={"l": 60, "r": 20, "t": 50, "b": 140}, yaxis={"title": yaxis},
                      xaxis={"tickangle": -60, "tickfont": {"size": 9}})
    return fig


def _cpu_rows(npub) -> list[list]:
    meta = dict(npub.metadata.extra) if npub.metadata else {}
    rows = []
    for seg in json.loads(meta.get("npuc.cpu", "[]")):
        name, seconds, flops, moved, ops = seg
        for value, op, reason, op_seconds in ops:
            rows.append([name, f"%{value}", op, reason, op_seconds * 1e6, seconds * 1e6, flops, moved])
    return rows


def model_report(p, npub) -> rh.Page:
    """The report page of profile ``p`` of the container ``npub``."""
    t = p.target
    d = p.to_dict()
    page = rh.Page(f"{p.model or 'model'} on {t.name}",
                   f"npuc report: {len(p.layers)} layers, {p.total_cycles:,} cycles, "
                   f"{d['latency_s'] * 1e3:.3f} ms at {t.clock.mhz:g} MHz")
    traffic = p.memory_traffic()
    page.section("Totals", rh.table(
        ["figure", "value"],
        [["cycles", p.total_cycles], ["NPU cycles", p.npu_cycles], ["CPU time (ms, estimated)", p.cpu_seconds * 1e3],
         ["latency (ms)", p.latency_s * 1e3], ["inferences per second", p.inferences_per_s],
         ["MACs", p.macs], ["array utilization (%)", 100 * p.utilization], ["energy per inference (mJ)", p.energy_pj * 1e-9],
         ["average power (mW)", p.average_power_w * 1e3], ["DRAM bytes read", traffic["dram_read"]],
         ["DRAM bytes written", traffic["dram_write"]], ["scratchpad bytes", traffic["spad"]],
         ["accumulator bytes", traffic["acc"]]],
        sortable=False))
    npu = [layer for layer in p.layers if layer.kind != "cpu"]
    points = [rh.RooflinePoint(layer.name, 2.0 * layer.macs, layer.dram_bytes, layer.cycles) for layer in npu]
    page.section(
        "Roofline",
        rh.Paragraph("Every NPU layer: operations (2 per MAC) per DRAM byte against the operations it achieved per "
                     "cycle, under the array's compute roof and each memory's bandwidth roof. Layers without MACs "
                     "(data movement, vector work) are in the tables, not on this plot."),
        rh.Figure(rh.roofline_figure(points, rh.target_roofs(t), title=f"Roofline of {t.name}")))
    page.section(
        "Cycles and energy per layer",
        rh.Figure(_bars(p, [("cycles", [layer.cycles for layer in p.layers]),
                            ("lower bound", [layer.lower_bound_cycles for layer in p.layers])],
                        "Cycles per layer (and the lower bound max(MACs/PEs, compulsory DRAM bytes/bandwidth))", "cycles")),
        rh.Figure(_bars(p, [("energy (uJ)", [layer.energy_pj * 1e-6 for layer in p.layers])],
                        "Energy per layer", "uJ")))
    page.section(
        "Traffic per memory",
        rh.Figure(_bars(p, [("DRAM read", [layer.dram_read_bytes for layer in p.layers]),
                            ("DRAM written", [layer.dram_write_bytes for layer in p.layers]),
                            ("scratchpad", [layer.spad_bytes for layer in p.layers]),
                            ("accumulator", [layer.acc_bytes for layer in p.layers])],
                        "Bytes moved per layer and memory", "bytes", stacked=True)))
    cpu = _cpu_rows(npub)
    if cpu:
        page.section("CPU fallbacks", rh.Paragraph(
            "Each op that runs on the host CPU, why the NPU cannot take it, and the CPU model's estimate "
            "(npuc.lower.cpu_cost): the op alone, and its whole segment with the hand-over."),
            rh.table(["segment", "value", "op", "reason", "op est. (us)", "segment est. (us)", "segment FLOPs",
                      "segment bytes moved"], cpu, formats={"op est. (us)": ".3g", "segment est. (us)": ".3g"}))
    else:
        page.section("CPU fallbacks", rh.Paragraph("Every op runs on the NPU: there is no CPU segment."))
    cols = ["layer", "op", "kind", "cycles", "share", "MACs", "utilization", "DRAM B", "SRAM B", "energy uJ",
            "bound", "lower bound", "source"]
    total = p.total_cycles or 1
    rows = [[layer.name, layer.op, layer.kind, layer.cycles, layer.cycles / total, layer.macs, layer.utilization,
             layer.dram_bytes, layer.sram_bytes, layer.energy_pj * 1e-6, layer.bound, layer.lower_bound_cycles,
             layer.source] for layer in p.layers]
    page.section("Layers", rh.table(cols, rows, formats={"share": ".1%", "utilization": ".1%", "energy uJ": ".3f"},
                                    highlight=[i for i, layer in enumerate(p.layers) if layer.kind == "cpu"]))
    return page
