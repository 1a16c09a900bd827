"""Profiles side by side (``npuc compare``): per layer and in total, each against the first.

Layers are matched by name (the module path); a layer that only some profiles have is shown
with blanks for the others.  Ratios are ``other / first``.
"""

from __future__ import annotations

FIGURES = ("cycles", "energy_pj", "dram_bytes", "macs")


def compare_profiles(labelled: list[tuple[str, object]]) -> dict:
    """The comparison of profiles ``[(label, Profile), ...]`` as JSON-ready values."""
    names: list[str] = []
    per: list[dict[str, object]] = []
    for _, p in labelled:
        by_name = {}
        for layer in p.layers:
            by_name.setdefault(layer.name, layer)
            if layer.name not in names:
                names.append(layer.name)
        per.append(by_name)
    layers = []
    for name in names:
        row = {"name": name, "op": next((d[name].op for d in per if name in d), "")}
        for (label, _), d in zip(labelled, per):
            layer = d.get(name)
            row[label] = None if layer is None else {k: getattr(layer, k) for k in FIGURES}
        layers.append(row)
    totals = []
    first = labelled[0][1]
    for label, p in labelled:
        t = {"label": label, "model": p.model, "target": p.target.name, "total_cycles": p.total_cycles,
             "latency_s": p.latency_s, "energy_pj": p.energy_pj, "dram_bytes": p.dram_bytes, "macs": p.macs,
             "utilization": p.utilization}
        t["cycles_ratio"] = p.total_cycles / first.total_cycles if first.total_cycles else None
        t["energy_ratio"] = p.energy_pj / first.energy_pj if first.energy_pj else None
        totals.append(t)
    return {"labels": [label for label, _ in labelled], "totals": totals, "layers": layers}
