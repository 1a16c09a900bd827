"""The outputs of a sweep: results.csv, results.json and report.html in the --out folder.

results.csv has one row per design: the swept keys, then ``latency_s, energy_j, area_mm2,
dram_bytes, feasible, pareto``, then ``tier`` (which tier's figures the row shows), ``cycles``,
the analytical estimates, the reason of an infeasible design and the design's id.
results.json holds the same rows (and the sweep's description).  report.html is one
self-contained page (npuc.report.html): the Pareto plots, how far the two tiers disagreed, the
table of designs, and the per-layer cycles, energy and bounding resource of a chosen design.
Every file is written through a temporary file and renamed.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from npuc.errors import ExploreError
from npuc.dse.evaluate import RESOURCES
from npuc.dse.space import format_value
from npuc.report import html as rh

_LABEL = {"latency_s": "latency (ms)", "energy_j": "energy (mJ)", "area_mm2": "area (mm^2)",
          "dram_bytes": "DRAM (MB)", "cycles": "cycles (M)"}
_SCALE = {"latency_s": 1e3, "energy_j": 1e3, "area_mm2": 1.0, "dram_bytes": 1e-6, "cycles": 1e-6}


def cell(v: Any) -> Any:
    """A row value as results.csv and results.json hold it (lists joined by '+')."""
    return format_value(v) if isinstance(v, list) else v


def csv_text(res) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(res.columns)
    for r in res.rows:
        out = []
        for c in res.columns:
            v = cell(r[c])
            out.append("" if v is None else ("true" if v is True else "false" if v is False else
                                             repr(v) if isinstance(v, float) else v))
        w.writerow(out)
    return buf.getvalue()


def json_text(res) -> str:
    doc = {
        "model": res.model, "base": res.base, "objectives": list(res.objectives),
        "dimensions": {d.key: [cell(v) for v in d.values] for d in res.dimensions},
        "constraints": res.stats.get("constraints", []), "search": res.stats.get("search"),
        "columns": list(res.columns),
        "rows": [{c: cell(r[c]) for c in res.columns} for r in res.rows],
        "disagreement": res.disagreement,
    }
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def chosen_design(res, chosen: str | None) -> str | None:
    """The design the report details: ``chosen``, else the front's best in the first objective."""
    if chosen is not None:
        if chosen not in res.layers:
            raise ExploreError(f"design '{chosen}' was not simulated in this sweep; choose one of the front: "
                               f"{', '.join(r['design'] for r in res.front)}")
        return chosen
    front = sorted((r for r in res.front if r["design"] in res.layers), key=lambda r: r[res.objectives[0]])
    return front[0]["design"] if front else None


def write_outputs(res, out: Path, chosen: str | None = None) -> None:
    design = chosen_design(res, chosen)
    rh.write_text_atomic(out / "results.csv", csv_text(res))
    rh.write_text_atomic(out / "results.json", json_text(res))
    report_page(res, design).write(out / "report.html")


# ------------------------------------------------------------------------------------ the page


def _label(res, r) -> str:
    return ", ".join(f"{k}={format_value(r[k])}" for k in (d.key for d in res.dimensions))


def _pareto_figures(res) -> list:
    import plotly.graph_objects as go

    live = [r for r in res.rows if r["feasible"]]
    objs = list(res.objectives)
    pairs = [(objs[i], objs[j]) for i in range(len(objs)) for j in range(i + 1, len(objs))] or [(objs[0], objs[0])]
    figs = []
    for x, y in pairs:
        fig = go.Figure()
        for on_front, name, size in ((False, "dominated", 7), (True, "Pareto front", 11)):
            pts = sorted((r for r in live if r["pareto"] is on_front), key=lambda r: (r[x], r[y]))
            fig.add_trace(go.Scatter(
                x=[r[x] * _SCALE[x] for r in pts], y=[r[y] * _SCALE[y] for r in pts],
                mode="markers", name=name,
                text=[f"{r['design']}: {_label(res, r)} ({r['tier']})" for r in pts],
                marker={"size": size, "symbol": "diamond" if on_front else "circle",
                        "color": "#d62728" if on_front else "#7f9fbf"},
                hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>",
            ))
        fig.update_layout(title=f"{_LABEL[y]} against {_LABEL[x]}", template="plotly_white",
                          xaxis={"title": _LABEL[x]}, yaxis={"title": _LABEL[y]},
                          margin={"l": 60, "r": 20, "t": 50, "b": 50})
        figs.append(fig)
    return figs


def _tier_figure(res):
    import plotly.graph_objects as go

    pts = [r for r in res.rows if r["tier"] == "simulated" and r["feasible"] and r["est_latency_s"] is not None]
    xs = [r["latency_s"] * 1e3 for r in pts]
    ys = [r["est_latency_s"] * 1e3 for r in pts]
    fig = go.Figure()
    if xs:
        lo, hi = min(xs + ys), max(xs + ys)
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="estimate = simulated",
                                 line={"color": "#999", "dash": "dash"}))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="simulated designs",
                             text=[f"{r['design']}: {_label(res, r)}" for r in pts],
                             hovertemplate="%{text}<br>simulated %{x:.4g} ms, estimated %{y:.4g} ms<extra></extra>"))
    fig.update_layout(title="Analytical estimate against the simulator (latency)", template="plotly_white",
                      xaxis={"title": "simulated latency (ms)"}, yaxis={"title": "estimated latency (ms)"},
                      margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig


def _layers_figure(res, design: str):
    """Per-layer cycles and energy of the simulated front designs, one shown at a time (a menu)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ids = [design] + [r["design"] for r in res.front if r["design"] in res.layers and r["design"] != design]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("cycles per layer", "energy per layer (uJ)"))
    buttons = []
    for k, did in enumerate(ids):
        layers = res.layers[did]
        names = [f"{i}:{l['name']}" for i, l in enumerate(layers)]
        text = [f"{l['name']} ({l['op']}), bound by {l['bound']}" for l in layers]
        fig.add_trace(go.Bar(x=names, y=[l["cycles"] for l in layers], name=f"{did} cycles", visible=k == 0,
                             hovertext=text, hovertemplate="%{hovertext}<br>%{y:,} cycles<extra></extra>",
                             marker={"color": "#1f77b4"}), row=1, col=1)
        fig.add_trace(go.Bar(x=names, y=[l["energy_pj"] / 1e6 for l in layers], name=f"{did} energy",
                             visible=k == 0, hovertext=text, hovertemplate="%{hovertext}<br>%{y:.4g} uJ<extra></extra>",
                             marker={"color": "#ff7f0e"}), row=2, col=1)
        vis = [False] * (2 * len(ids))
        vis[2 * k] = vis[2 * k + 1] = True
        buttons.append({"label": f"{did}: {_label(res, res.row(did))}", "method": "update", "args": [{"visible": vis}]})
    fig.update_layout(template="plotly_white", showlegend=False, height=640,
                      margin={"l": 60, "r": 20, "t": 90, "b": 120},
                      updatemenus=[{"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.16, "yanchor": "top"}]
                      if len(ids) > 1 else [])
    fig.update_xaxes(showticklabels=False, row=1, col=1)
    return fig


def _bound_table(layers) -> rh.Table:
    by: dict[str, list[int]] = {}
    for l in layers:
        by.setdefault(l["bound"] or "-", []).append(l["cycles"])
    total = sum(l["cycles"] for l in layers) or 1
    rows = [[b, len(c), sum(c), sum(c) / total] for b, c in sorted(by.items(), key=lambda kv: -sum(kv[1]))]
    return rh.table(["bound by", "layers", "cycles", "share of cycles"], rows, formats={"share of cycles": ".1%"})


def report_page(res, design: str | None) -> rh.Page:
    objs = ", ".join(res.objectives)
    page = rh.Page(f"npuc explore: {res.model} around {res.base}",
                   f"{res.stats['designs']} designs of a space of {res.stats['space']} ({res.stats['search']} search); "
                   f"objectives {objs} (all minimized)")
    feasible = [r for r in res.rows if r["feasible"]]
    front = res.front
    dims = "; ".join(f"{d.key} in {{{', '.join(format_value(v) for v in d.values)}}}" for d in res.dimensions)
    cons = ", ".join(res.stats.get("constraints") or []) or "none"
    page.section("Sweep", rh.Paragraph(
        f"Swept: {dims}. Constraints: {cons}. {len(feasible)} of {len(res.rows)} designs are feasible; "
        f"{len(front)} are on the Pareto front. Every design was screened by the analytical cost model; "
        f"{res.disagreement.get('simulated', 0)} were compiled and simulated, every front design among them. "
        "Area is an estimate from the target's [area] figures (docs/targets.md)."))
    s = page.section("Pareto front")
    for fig in _pareto_figures(res):
        s.blocks.append(rh.Figure(fig, 460))
    page.section("The two tiers", rh.Paragraph(_tier_text(res.disagreement)), _tier_table(res.disagreement),
                 rh.Figure(_tier_figure(res), 420))
    cols = [d.key for d in res.dimensions] + ["latency_s", "energy_j", "area_mm2", "dram_bytes", "feasible",
                                              "pareto", "tier", "est_latency_s", "reason", "design"]
    rows = [[cell(r[c]) for c in cols] for r in res.rows]
    marked = [i for i, r in enumerate(res.rows) if r["pareto"]]
    page.section("Designs", rh.table(cols, rows, highlight=marked, formats={
        "latency_s": ".4g", "energy_j": ".4g", "area_mm2": ".4g", "est_latency_s": ".4g"},
        caption="Click a column to sort; Pareto-optimal designs are highlighted."))
    if design is None:
        page.section("Chosen design", rh.Paragraph("No design was simulated, so there are no per-layer figures."))
        return page
    layers = res.layers[design]
    r = res.row(design)
    tgt = res.targets[design]
    page.section(
        f"Chosen design {design}",
        rh.Paragraph(f"{_label(res, r)}: {r['latency_s'] * 1e3:.4g} ms, {r['energy_j'] * 1e3:.4g} mJ, "
                     f"{r['area_mm2']:.4g} mm^2, {r['dram_bytes']:,} DRAM bytes. Each layer is bound by the "
                     "resource whose work at its peak rate takes longest: the array (MACs / PEs), DRAM "
                     "(bytes / DMA bytes per cycle), the scratchpad (bytes / banks x width) or the vector "
                     "unit (lane-operations / lanes); the shares are that time over the layer's cycles."),
        rh.Figure(_layers_figure(res, design), 660),
        _bound_table(layers),
        rh.table(["layer", "op", "cycles", "energy uJ", "DRAM B", "bound", *(f"{x} busy" for x in RESOURCES)],
                 [[l["name"], l["op"], l["cycles"], l["energy_pj"] / 1e6, l["dram_bytes"], l["bound"],
                   *(l[f"{x}_share"] for x in RESOURCES)] for l in layers],
                 formats={"energy uJ": ".4g", **{f"{x} busy": ".0%" for x in RESOURCES}}),
        rh.Figure(rh.roofline_figure([rh.RooflinePoint(l["name"], 2 * l["macs"], l["dram_bytes"], l["cycles"])
                                      for l in layers if l["kind"] != "cpu"], rh.target_roofs(tgt),
                                     f"Roofline of {design}"), 480),
    )
    return page


def _tier_text(d: dict) -> str:
    n = d.get("designs_compared", 0)
    if not n:
        return "No design was evaluated by both tiers."
    lat = d.get("latency_s", {})
    return (f"On the {n} designs both tiers evaluated, the analytical latency was off by "
            f"{100 * lat.get('median_abs', 0):.1f}% at the median and {100 * lat.get('max_abs', 0):.1f}% at worst. "
            f"The screen alone gave a front of {d['screen_front']} designs; the confirmed front has "
            f"{d['confirmed_front']}, {d['front_overlap']} of them on both. The analytical energy counts MACs and "
            "compulsory DRAM traffic only, so it is a lower estimate; the front is always decided on simulated "
            "figures.")


def _tier_table(d: dict) -> rh.Table:
    rows = []
    for k, label in (("latency_s", "latency"), ("energy_j", "energy"), ("dram_bytes", "DRAM bytes")):
        if k in d:
            rows.append([label, d[k]["median_abs"], d[k]["max_abs"], d[k]["mean"]])
    return rh.table(["figure", "median |estimate/simulated - 1|", "max", "mean (signed)"], rows, sortable=False,
                    formats={"median |estimate/simulated - 1|": ".1%", "max": ".1%", "mean (signed)": "+.1%"})
