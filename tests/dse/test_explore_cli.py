"""`npuc explore` as the issue writes it, and the Ray backend on a local cluster."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

import npuc
from npuc.cli import main
from tests.dse.tiny import build

TINY = str(Path(__file__).with_name("tiny.py")) + ":build"


def test_cli_contract(tmp_path):
    out = tmp_path / "dse"
    args = ["explore", TINY, "--base", "npu-mid", "--sweep", "array.rows=8,16", "--sweep", "array.cols=8,16",
            "--sweep", "vector.lanes=8,16", "--objectives", "latency,energy,area", "--constraint", "area_mm2<=2.0",
            "--search", "grid", "--backend", "local", "--jobs", "1", "--cache", str(tmp_path / "cache"),
            "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "8 designs (8 feasible)" in r.output and "Pareto front" in r.output
    assert {p.name for p in out.iterdir()} == {"results.csv", "results.json", "report.html"}
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and list(rows[0])[:3] == ["array.rows", "array.cols", "vector.lanes"]
    again = CliRunner().invoke(main, args)
    assert "computed 0 screens and 0 simulations" in again.output


def test_cli_int8_random_budget(tmp_path):
    import numpy as np
    import torch

    from npuc.zoo import load_model

    (x,) = load_model(TINY)[1]
    g = torch.Generator().manual_seed(1)
    np.savez(tmp_path / "calib.npz", torch.stack([torch.randn(x.shape, generator=g) for _ in range(4)]).numpy())
    args = ["explore", TINY, "--sweep", "array.rows=8,16,32", "--sweep", "dma.bytes_per_cycle=4,16",
            "--quantize", "int8", "--search", "random", "--budget", "3", "--objectives", "latency,dram",
            "--jobs", "1", "--no-cache", "--out", str(tmp_path / "q")]
    r = CliRunner().invoke(main, args)  # a model outside the zoo brings its calibration samples
    assert r.exit_code == 2 and "--calibration-data" in r.output
    r = CliRunner().invoke(main, args + ["--calibration-data", str(tmp_path / "calib.npz")])
    assert r.exit_code == 0, r.output
    assert "3 designs" in r.output


def test_cli_errors_are_sentences(tmp_path):
    r = CliRunner().invoke(main, ["explore", TINY, "--sweep", "array.rowz=8", "--no-cache", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "error: the target file has no key 'array.rowz' to sweep" in r.output
    r = CliRunner().invoke(main, ["explore", TINY, "--sweep", "array.rows=8", "--constraint", "area>>2",
                                  "--no-cache", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "is not COLUMN OP NUMBER" in r.output


def test_ray_backend_gives_identical_results(tmp_path):
    pytest.importorskip("ray")
    model, inputs = build()
    g = npuc.import_model(model, inputs, name="tiny")
    sweep = {"array.rows": [8, 16], "scratchpad.size_bytes": [4096, 65536]}
    local = npuc.explore(g, sweep=sweep, jobs=1, cache_dir=None, out=tmp_path / "local")
    ray = npuc.explore(g, sweep=sweep, backend="ray", jobs=2, cache_dir=None, out=tmp_path / "ray")
    assert ray.stats["backend"] == "ray" and ray.stats["computed"] == local.stats["computed"]
    for name in ("results.csv", "results.json", "report.html"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
