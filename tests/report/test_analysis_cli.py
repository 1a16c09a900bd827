"""The analysis commands: --json on run/targets/ops/compile, inspect, disasm of a .npub, compare, report."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from npuc.artifact import format_seconds
from npuc.cli import main
from npuc.isa import assemble
from tests.report.analysislib import compiled, write_model_file


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("analysis")
    compiled("npu-mid").save(d / "mid.npub")
    compiled("npu-large").save(d / "large.npub")
    return d


def _json(args):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_targets_and_ops_as_json():
    t = _json(["targets", "--json"])
    assert t["default"] == "npu-mid" and len(t["targets"]) >= 3
    mid = next(x for x in t["targets"] if x["name"] == "npu-mid")
    assert mid["array"]["rows"] == 16 and mid["derived"]["peak_macs_per_cycle"] == 256
    ops = _json(["ops", "--json"])
    conv = next(o for o in ops["ops"] if o["name"] == "conv2d")
    assert "aten.convolution.default" in conv["imported_from"] and ops["aten_ops"] > 50


def test_run_as_json(files, tmp_path):
    import numpy as np

    from tests.report.analysislib import tiny_model

    x = tmp_path / "x.npy"
    np.save(x, tiny_model()[1][0].numpy())
    d = _json(["run", str(files / "mid.npub"), "--input", str(x), "--model", write_model_file(tmp_path) + ":build",
               "--json"])
    assert d["ok"] is True and d["outputs"][0]["shape"] == [1, 10]
    assert d["checks"][0]["rel_l2"] <= d["checks"][0]["tolerance"]
    plain = _json(["run", str(files / "mid.npub"), "--input", str(x), "--json"])
    assert plain["ok"] is None and plain["checks"] == []


def test_compile_json_explains_cpu_ops(tmp_path):
    model = write_model_file(tmp_path) + ":build"
    d = _json(["compile", model, "--target", "npu-small", "-o", str(tmp_path / "s.npub"), "--explain", "--json"])
    assert d["target"] == "npu-small" and d["cpu_ops"]  # no fp16 on npu-small: the float model runs on the CPU
    assert all(o["reason"] and o["seconds"] > 0 for o in d["cpu_ops"])
    assert d["binary_bytes"] == (tmp_path / "s.npub").stat().st_size
    assert {s["kind"] for s in d["segments"]} == {"cpu"}


def test_explain_shows_small_costs_in_their_unit():
    assert format_seconds(2.4e-8) == "24 ns" and format_seconds(3.45e-6) == "3.45 us"
    assert format_seconds(0.0125) == "12.5 ms" and format_seconds(2.5) == "2.5 s"


def test_inspect(files):
    out = CliRunner().invoke(main, ["inspect", str(files / "mid.npub")])
    assert out.exit_code == 0, out.output
    for word in ("sections:", "code", "constants", "inputs:", "outputs:", "segments:", "memory plan", "npu-mid"):
        assert word in out.output
    d = _json(["inspect", str(files / "mid.npub"), "--json"])
    assert d["file_bytes"] == (files / "mid.npub").stat().st_size
    assert sum(s["bytes"] for s in d["sections"]) <= d["file_bytes"]
    assert d["inputs"][0]["shape"] == [1, 32, 32, 3] and d["inputs"][0]["layout"] == "NHWC"
    assert d["instructions"] == sum(s.get("instructions", 0) for s in d["segments"])


def test_disasm_of_a_npub_names_the_layer_of_every_instruction(files):
    out = CliRunner().invoke(main, ["disasm", str(files / "mid.npub")])
    assert out.exit_code == 0, out.output
    art = compiled("npu-mid")
    assert assemble(out.stdout) == art.programs[0]  # valid assembly: comments name programs and layers
    layers = [line for line in out.stdout.splitlines() if line.startswith("# layer ")]
    kernels = [lk.name for lk in art.compiled.codes[0].segment.kernels]
    assert [line.split()[2] for line in layers] == kernels
    assert "block.dw (conv2d+relu, depthwise_conv2d kernel)" in out.stdout


def test_compare_two_binaries(files):
    d = _json(["compare", str(files / "mid.npub"), str(files / "large.npub"), "--json"])
    assert d["labels"] == ["mid.npub", "large.npub"]
    mid, large = d["totals"]
    assert mid["cycles_ratio"] == 1.0 and large["cycles_ratio"] == pytest.approx(large["total_cycles"] / mid["total_cycles"])
    assert mid["macs"] == large["macs"]
    stem = next(r for r in d["layers"] if r["name"] == "stem")
    assert stem["mid.npub"]["cycles"] > 0 and stem["large.npub"]["cycles"] > 0
    out = CliRunner().invoke(main, ["compare", str(files / "mid.npub"), str(files / "large.npub")])
    assert out.exit_code == 0 and "totals" in out.output and "large.npub / mid.npub" in out.output


def test_compare_one_model_on_two_targets(tmp_path):
    model = write_model_file(tmp_path) + ":build"
    d = _json(["compare", model, "--target", "npu-mid", "--target", "npu-large", "--json"])
    assert [t["target"] for t in d["totals"]] == ["npu-mid", "npu-large"]
    bad = CliRunner().invoke(main, ["compare", model])
    assert bad.exit_code == 2 and "two or more --target" in bad.output


def test_report_is_a_self_contained_page_that_draws(files, tmp_path):
    pytest.importorskip("plotly")
    from tests.browser import render

    out = CliRunner().invoke(main, ["report", str(files / "mid.npub"), "-o", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    text = (tmp_path / "r.html").read_text()
    for heading in ("Roofline", "Cycles and energy per layer", "Traffic per memory", "CPU fallbacks", "Layers"):
        assert f"<h2>{heading}</h2>" in text
    assert "block.dw" in text and "<script src" not in text
    got = render(tmp_path / "r.html")
    assert got.console == () and len(got.plots) == 4 and got.all_plots_drawn


def test_report_lists_cpu_fallbacks_with_reasons(tmp_path):
    pytest.importorskip("plotly")
    compiled("npu-small").save(tmp_path / "small.npub")
    out = CliRunner().invoke(main, ["report", str(tmp_path / "small.npub")])
    assert out.exit_code == 0, out.output
    text = (tmp_path / "small.html").read_text()
    section = text.split("<h2>CPU fallbacks</h2>")[1].split("</section>")[0]
    assert "fp16" in section and "conv2d" in section


def test_report_files_that_cannot_be_written_are_one_sentence(files, tmp_path):
    (tmp_path / "afile").write_text("")
    for args in (["report", str(files / "mid.npub"), "-o", str(tmp_path / "afile" / "r.html")],
                 ["profile", str(files / "mid.npub"), "--csv", str(tmp_path / "afile" / "csv")],
                 ["profile", str(files / "mid.npub"), "--trace", str(tmp_path / "afile" / "t.json")]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 1 and "is a file, not a folder" in out.output and "Traceback" not in out.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing half-written


def test_inspect_refuses_a_file_that_is_not_a_npub(tmp_path):
    bad = tmp_path / "bad.npub"
    bad.write_bytes(b"not a container at all")
    for cmd in ("inspect", "disasm"):
        out = CliRunner().invoke(main, [cmd, str(bad)])
        assert out.exit_code == 1 and "error:" in out.output and "Traceback" not in out.output
