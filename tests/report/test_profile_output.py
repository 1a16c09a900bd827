"""Profile.to_dict(), the JSON of `npuc profile`, the CSV files and every MAC counted."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from npuc.cli import main
from npuc.frontend.summary import graph_summary
from npuc.pipeline import import_model
from npuc.report.csv import PER_LAYER_COLUMNS, SUMMARY_COLUMNS
from tests.report.analysislib import compiled, tiny_model

LAYER_KEYS = {"name", "op", "cycles", "macs", "dram_bytes", "energy_pj", "bound"}
TOTAL_KEYS = {"layers", "total_cycles", "energy_pj", "dram_bytes", "macs"}


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    path = tmp_path_factory.mktemp("bin") / "tiny.npub"
    compiled().save(path)
    return path


def test_every_mac_is_counted_depthwise_included():
    model, inputs = tiny_model()
    _, totals = graph_summary(import_model(model, inputs))
    p = compiled().profile(*inputs)
    assert p.macs == totals.macs  # what `npuc import` says
    dw = [layer for layer in p.layers if layer.kind == "depthwise_conv2d"]
    assert dw and all(layer.macs == 32 * 16 * 16 * 9 and layer.utilization > 0 for layer in dw)
    plans = {p.summary for code in compiled().compiled.codes for p in code.plans}
    on_array = any("depthwise" in s and "on the array" in s for s in plans)
    for layer in dw:  # counted all the same; the array's own count includes its diagonal tiles' zeros
        assert (layer.array_macs >= layer.macs) if on_array else (layer.array_macs == 0)
    assert p.utilization == pytest.approx(p.macs / (p.npu_cycles * p.target.peak_macs_per_cycle))


def test_to_dict_schema_and_totals():
    p = compiled().profile(*tiny_model()[1])
    d = p.to_dict()
    assert TOTAL_KEYS <= set(d) and d["schema"] == "npuc.profile/1"
    assert all(LAYER_KEYS <= set(layer) for layer in d["layers"])
    assert d["total_cycles"] == sum(layer["cycles"] for layer in d["layers"]) == p.total_cycles
    assert d["macs"] == sum(layer["macs"] for layer in d["layers"])
    assert d["dram_bytes"] == d["traffic_bytes"]["dram_read"] + d["traffic_bytes"]["dram_write"]
    assert d["energy_pj"] == pytest.approx(sum(layer["energy_pj"] for layer in d["layers"]))
    assert {layer["bound"] for layer in d["layers"]} <= {"compute", "memory", "host"}
    json.dumps(d, allow_nan=False)


def test_profile_json_and_csv_from_the_cli(binary, tmp_path):
    out = CliRunner().invoke(main, ["profile", str(binary), "--json", "--csv", str(tmp_path / "csv")])
    assert out.exit_code == 0, out.output
    d = json.loads(out.stdout)
    assert d == json.loads(json.dumps(compiled().profile(*tiny_model()[1]).to_dict()))
    with open(tmp_path / "csv" / "tiny_per-layer.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == PER_LAYER_COLUMNS + ("dram.read_bytes", "dram.write_bytes", "dram.energy_pj")
    assert len(rows) == len(d["layers"])
    assert sum(int(r["dram.read_bytes"]) + int(r["dram.write_bytes"]) for r in rows) == d["dram_bytes"]
    assert sum(int(r["cycles"]) for r in rows) == d["total_cycles"]
    assert sum(int(r["macs"]) for r in rows) == d["macs"]
    assert sum(float(r["cycles_pct"]) for r in rows) == pytest.approx(100, abs=0.01)
    with open(tmp_path / "csv" / "tiny_summary.csv") as f:
        (summary,) = list(csv.DictReader(f))
    assert tuple(summary) == SUMMARY_COLUMNS + tuple(f"dram.{c}" for c in (
        "read_bytes", "write_bytes", "energy_pj", "bandwidth_use_pct", "compulsory_bytes"))
    assert int(summary["lower_bound_cycles"]) == d["lower_bound_cycles"] <= d["total_cycles"]
    assert int(summary["total_cycles"]) == d["total_cycles"] and int(summary["macs"]) == d["macs"]
    assert summary["target"] == "npu-mid" and summary["model"] == "tinynet"


def test_profile_table_is_still_the_default(binary):
    out = CliRunner().invoke(main, ["profile", str(binary)])
    assert out.exit_code == 0 and "total:" in out.output and "block.dw" in out.output
