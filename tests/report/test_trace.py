"""The profile's Perfetto trace: slices that nest on every track, a layers track, counters."""

from __future__ import annotations

import json

from npuc.isa.enums import Mem, Queue, Unit
from npuc.report.trace import profile_trace
from tests.report.analysislib import compiled, tiny_model
from tests.report.tracecheck import partial_overlaps, track_names


def _trace():
    p = compiled().profile(*tiny_model()[1])
    return p, profile_trace(p)


def test_no_slice_overlaps_another_on_its_track():
    _, doc = _trace()
    assert partial_overlaps(doc) == []


def test_a_queue_with_transfers_in_flight_gets_one_track_per_slot():
    _, doc = _trace()
    names = set(track_names(doc).values())
    assert "load queue: dma" in names and any(n.startswith("load queue: dma (in flight #") for n in names)
    queue_tracks = {n.split(" (")[0] for n in names if " queue: " in n}
    for n in queue_tracks:  # named from the ISA's enums
        q, u = n.split(" queue: ")
        assert q in Queue.__members__ and u in Unit.__members__


def test_the_layers_track_is_the_profile():
    p, doc = _trace()
    tid = {name: t for t, name in track_names(doc).items()}["layers"]
    per_layer: dict[str, float] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e["tid"] == tid:
            per_layer[e["name"]] = per_layer.get(e["name"], 0) + e["dur"]
    us = 1e6 / p.clock_hz
    for layer in p.layers:
        assert abs(per_layer[layer.name] - layer.cycles * us) < 0.01 * len(p.layers)


def test_counters_of_bandwidth_and_occupancy():
    p, doc = _trace()
    counters: dict[str, list[float]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "C":
            counters.setdefault(e["name"], []).extend(e["args"].values())
    assert {f"{m.name} bandwidth" for m in Mem} <= set(counters)
    assert {"spad occupancy", "acc occupancy"} <= set(counters)
    assert 0 < max(counters["spad occupancy"]) <= p.target.scratchpad.size_bytes
    assert 0 < max(counters["acc occupancy"]) <= p.target.accumulator.size_bytes
    assert min(v for vs in counters.values() for v in vs) >= 0


def test_write_trace_is_deterministic(tmp_path):
    p, _ = _trace()
    p.write_trace(tmp_path / "a.json")
    p.write_trace(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    json.loads((tmp_path / "a.json").read_text())
