"""npuc.explore end to end on a small network: rows, front, tiers, cache, searches, report."""

from __future__ import annotations

import csv
import json

import pytest

import npuc
from npuc.dse import backend as dse_backend
from npuc.dse.pareto import dominates
from npuc.errors import ExploreError
from tests.browser import render
from tests.dse.tiny import build

pytestmark = pytest.mark.xdist_group("dse-explore")  # one worker builds the module's sweep once

SWEEP = {"array.rows": [8, 16], "array.cols": [8, 16], "scratchpad.size_bytes": [4096, 65536]}


@pytest.fixture(scope="module")
def graph():
    model, inputs = build()
    return npuc.import_model(model, inputs, name="tiny")


@pytest.fixture(scope="module")
def swept(graph, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    res = npuc.explore(graph, base="npu-mid", sweep=SWEEP, jobs=1, out=out / "out", cache_dir=out / "cache")
    return res, out


def _objectives(r, cols):
    return tuple(r[c] for c in cols)


def test_rows_columns_and_files(swept):
    res, out = swept
    assert len(res.rows) == 8
    with open(out / "out" / "results.csv") as f:
        table = list(csv.DictReader(f))
    header = list(table[0])
    assert header[:3] == ["array.rows", "array.cols", "scratchpad.size_bytes"]
    assert header[3:9] == ["latency_s", "energy_j", "area_mm2", "dram_bytes", "feasible", "pareto"]
    doc = json.loads((out / "out" / "results.json").read_text())
    assert doc["columns"] == header and len(doc["rows"]) == len(table) == 8
    for row_csv, row_json in zip(table, doc["rows"]):
        assert row_csv["design"] == row_json["design"]
        assert float(row_csv["latency_s"]) == row_json["latency_s"]
        assert row_csv["pareto"] == ("true" if row_json["pareto"] else "false")


def test_pareto_flag_is_exact(swept):
    res, _ = swept
    live = [r for r in res.rows if r["feasible"]]
    assert live and res.front
    for r in live:
        dominated = any(dominates(_objectives(q, res.objectives), _objectives(r, res.objectives)) for q in live)
        assert r["pareto"] is (not dominated), r
    assert all(r["tier"] == "simulated" for r in res.front)
    assert not any(r["pareto"] for r in res.rows if not r["feasible"])


def test_sampled_designs_equal_a_direct_compile(swept):
    res, _ = swept
    model, inputs = build()
    simulated = [r for r in res.rows if r["tier"] == "simulated" and r["feasible"]]
    for r in (simulated[0], simulated[-1]):
        art = npuc.compile(model, inputs, target=res.targets[r["design"]])
        prof = art.profile(*inputs)
        assert r["cycles"] == prof.total_cycles
        assert r["latency_s"] == pytest.approx(prof.latency_s, rel=1e-12)
        assert r["energy_j"] == pytest.approx(prof.energy_per_inference_j, rel=1e-12)
        assert r["dram_bytes"] == prof.dram_bytes
        assert [l["cycles"] for l in res.layers[r["design"]]] == [l.cycles for l in prof.layers]


def test_two_tiers_and_their_disagreement(swept):
    res, _ = swept
    d = res.disagreement
    assert d["designs_compared"] >= len(res.front) and d["simulated"] >= len(res.front)
    assert 0 <= d["latency_s"]["median_abs"] <= d["latency_s"]["max_abs"] < 0.5
    assert all(r["est_latency_s"] is not None for r in res.rows if r["feasible"])
    # Unconfirmed designs show the estimate scaled by the median simulated/estimated ratio.
    sim = [r for r in res.rows if r["tier"] == "simulated"]
    ratios = sorted(r["latency_s"] / r["est_latency_s"] for r in sim)
    n = len(ratios)
    median = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
    assert any(r["tier"] == "analytical" for r in res.rows)
    for r in res.rows:
        if r["tier"] == "analytical":
            assert r["latency_s"] == pytest.approx(r["est_latency_s"] * median, rel=1e-12)


def test_infeasible_designs_are_rows_with_a_reason(graph, tmp_path):
    res = npuc.explore(graph, sweep={"scratchpad.size_bytes": [1000, 256, 65536]}, jobs=1,
                       constraints=["area_mm2<=0.3"], cache_dir=None, objectives="latency,area")
    by = {r["scratchpad.size_bytes"]: r for r in res.rows}
    assert not by[1000]["feasible"] and by[1000]["tier"] == ""
    assert by[1000]["reason"].startswith("invalid target: ") and "multiple of banks x bank_width_bytes" in by[1000]["reason"]
    assert not by[256]["feasible"] and by[256]["latency_s"] is None
    assert "layer conv (conv2d+relu)" in by[256]["reason"] and "does not fit" in by[256]["reason"]
    assert by[65536]["feasible"] and by[65536]["pareto"]
    res2 = npuc.explore(graph, sweep={"scratchpad.size_bytes": [65536, 524288]}, jobs=1,
                        constraint="area_mm2<=0.3", cache_dir=None)
    big = next(r for r in res2.rows if r["scratchpad.size_bytes"] == 524288)
    assert not big["feasible"] and big["reason"].startswith("constraint area_mm2<=0.3 fails (area_mm2 = 0.33")


def test_cache_reruns_extends_and_resumes(graph, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = npuc.explore(graph, sweep={"array.rows": [8, 16]}, jobs=1, cache_dir=cache, confirm="all")
    assert first.stats["computed"] == {"analytical": 2, "simulated": 2}
    again = npuc.explore(graph, sweep={"array.rows": [8, 16]}, jobs=1, cache_dir=cache, confirm="all")
    assert again.stats["computed"] == {"analytical": 0, "simulated": 0} and again.rows == first.rows
    # Interrupt an extended sweep after one new result: what finished is kept.
    real = dse_backend.run_task
    calls = []

    def flaky(graph_, quantize, task):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(task)
        return real(graph_, quantize, task)

    monkeypatch.setattr(dse_backend, "run_task", flaky)
    with pytest.raises(KeyboardInterrupt):
        npuc.explore(graph, sweep={"array.rows": [8, 16, 32, 64]}, jobs=1, cache_dir=cache, confirm="all")
    monkeypatch.setattr(dse_backend, "run_task", real)
    resumed = npuc.explore(graph, sweep={"array.rows": [8, 16, 32, 64]}, jobs=1, cache_dir=cache, confirm="all")
    assert resumed.stats["computed"] == {"analytical": 1, "simulated": 2}
    assert resumed.stats["cached"] == {"analytical": 3, "simulated": 2}
    assert [r["latency_s"] for r in resumed.rows[:2]] == [r["latency_s"] for r in first.rows[:2]]


def test_random_and_nsga2_searches(graph):
    sweep = {"array.rows": [4, 8, 16, 32], "array.cols": [4, 8, 16, 32], "vector.lanes": [8, 16, 32]}
    rnd = npuc.explore(graph, sweep=sweep, search="random", budget=6, seed=3, jobs=1, cache_dir=None, confirm="none")
    assert len(rnd.rows) == 6 and len({r["design"] for r in rnd.rows}) == 6
    again = npuc.explore(graph, sweep=sweep, search="random", budget=6, seed=3, jobs=1, cache_dir=None, confirm="none")
    assert [r["design"] for r in again.rows] == [r["design"] for r in rnd.rows]
    ga = npuc.explore(graph, sweep=sweep, search="nsga2", budget=16, seed=1, jobs=1, cache_dir=None)
    assert 1 <= len(ga.rows) <= 16 and ga.front and all(r["tier"] == "simulated" for r in ga.front)
    with pytest.raises(ExploreError, match="--search grid evaluates all 48 designs"):
        npuc.explore(graph, sweep=sweep, budget=5, cache_dir=None)


def test_outputs_are_deterministic_and_the_report_renders(graph, swept, tmp_path):
    res, out = swept
    npuc.explore(graph, base="npu-mid", sweep=SWEEP, jobs=1, out=tmp_path / "again", cache_dir=out / "cache")
    for name in ("results.csv", "results.json", "report.html"):
        assert (tmp_path / "again" / name).read_bytes() == (out / "out" / name).read_bytes(), name
    page = render(out / "out" / "report.html")
    assert page.console == ()
    assert len(page.plots) >= 5 and page.all_plots_drawn
    html = (out / "out" / "report.html").read_text()
    for text in ("Pareto front", "The two tiers", "Designs", "Chosen design", "bound by", "Roofline"):
        assert text in html


def test_worker_processes_give_the_same_results(graph, swept, tmp_path):
    res, _ = swept
    par = npuc.explore(graph, base="npu-mid", sweep=SWEEP, jobs=2, cache_dir=None)
    assert par.rows == res.rows


def test_bad_arguments(graph):
    with pytest.raises(ExploreError, match="unknown objective"):
        npuc.explore(graph, sweep={"array.rows": [8]}, objectives="speed", cache_dir=None)
    with pytest.raises(ExploreError, match="unknown search"):
        npuc.explore(graph, sweep={"array.rows": [8]}, search="annealing", cache_dir=None)
    with pytest.raises(ExploreError, match="unknown backend"):
        npuc.explore(graph, sweep={"array.rows": [8]}, backend="slurm", cache_dir=None)
    from npuc.dse.space import target_document
    from npuc.targets import load_target, target_from_dict

    doc = target_document(load_target("npu-mid"))
    doc["area"] = None
    with pytest.raises(ExploreError, match=r"has no \[area\] section"):
        npuc.explore(graph, base=target_from_dict(doc), sweep={"array.rows": [8]}, cache_dir=None)


def test_a_compiler_bug_is_a_row_not_a_crash_and_is_not_cached(graph, tmp_path, monkeypatch):
    from npuc.dse import evaluate

    def broken(graph_, target, quantize):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(evaluate, "simulate", broken)
    res = npuc.explore(graph, sweep={"array.rows": [8]}, jobs=1, cache_dir=tmp_path / "c")
    (row,) = res.rows
    assert not row["feasible"] and "internal error in npuc (please report it): ZeroDivisionError: boom" in row["reason"]
    monkeypatch.undo()
    again = npuc.explore(graph, sweep={"array.rows": [8]}, jobs=1, cache_dir=tmp_path / "c")
    assert again.rows[0]["feasible"] and again.stats["computed"] == {"analytical": 0, "simulated": 1}
