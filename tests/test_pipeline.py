"""The pass runner: verifies after every pass, prints and dumps stages as asked."""

from __future__ import annotations

import io
import json

import pytest
import torch

from npuc.errors import CompileError, VerifyError
from npuc.interp import interpret
from npuc.ir import Graph, Node, parse_graph
from npuc.pipeline import GRAPH_PASSES, StageRecord, import_model, run_graph_passes

TEXT = """
graph @"t"(%x: tensor<1x3x4x4xf32>) -> (tensor<1x2x4x4xf32>) {
  %w = const @"conv.weight" : tensor<2x3x1x1xf32>
  %g = const @"bn.weight" : tensor<2xf32>
  %b = const @"bn.bias" : tensor<2xf32>
  %m = const @"bn.running_mean" : tensor<2xf32>
  %v = const @"bn.running_var" : tensor<2xf32>
  %c = conv2d(%x, %w) {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1} : tensor<1x2x4x4xf32>
  %r = reshape(%c) {shape = [1, 2, 4, 4]} : tensor<1x2x4x4xf32>
  %y = batch_norm(%r, %g, %b, %m, %v) {eps = 1e-05} : tensor<1x2x4x4xf32>
  %z = relu(%y) : tensor<1x2x4x4xf32>
  return %z
}
"""


def sample() -> Graph:
    t = torch.arange
    return parse_graph(TEXT, {
        "conv.weight": torch.randn(2, 3, 1, 1, generator=torch.Generator().manual_seed(0)),
        "bn.weight": t(2.0) + 1, "bn.bias": t(2.0), "bn.running_mean": t(2.0) / 2, "bn.running_var": t(2.0) + 0.5,
    })


def test_graph_passes_run_in_order_and_fold_the_batch_norm():
    records: list[StageRecord] = []
    out = run_graph_passes(sample(), records=records)
    assert [r.name for r in records] == [p.__name__ for p in GRAPH_PASSES]
    assert [n.op for n in out.nodes if n.op != "const"] == ["conv2d", "relu"]
    x = torch.randn(1, 3, 4, 4)
    torch.testing.assert_close(interpret(out, x)[0], interpret(sample(), x)[0])


def test_print_after_named_pass_and_all():
    buf = io.StringIO()
    run_graph_passes(sample(), print_after=["fold_batchnorm"], out=buf)
    text = buf.getvalue()
    assert text.count("// ----- IR after") == 1
    assert "IR after fold_batchnorm (stage 3)" in text and "batch_norm(" not in text

    buf = io.StringIO()
    run_graph_passes(sample(), print_after_all=True, out=buf)
    headers = [line for line in buf.getvalue().splitlines() if line.startswith("// -----")]
    assert len(headers) == len(GRAPH_PASSES) + 1
    assert "IR after import (stage 0)" in headers[0]


def test_unknown_pass_name_is_an_error_listing_the_passes():
    with pytest.raises(CompileError, match="no stage named 'fold_everything'.*canonicalize, fold_constants"):
        run_graph_passes(sample(), print_after=["fold_everything"])


def test_dump_dir_has_every_stage_and_a_constants_manifest(tmp_path):
    out = run_graph_passes(sample(), dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "00-import.npuir" in names and "03-fold_batchnorm.npuir" in names
    assert "01-canonicalize.npuir" in names and "04-canonicalize.npuir" in names
    assert len([n for n in names if n.endswith(".npuir")]) == len(GRAPH_PASSES) + 1
    last = f"{len(GRAPH_PASSES):02d}-dce"
    assert parse_graph((tmp_path / f"{last}.npuir").read_text(), out.constants) is not None
    manifest = json.loads((tmp_path / f"{last}.constants.json").read_text())
    assert {m["name"] for m in manifest} == set(out.constants)
    assert all(set(m) == {"name", "dtype", "shape", "bytes", "sha256"} for m in manifest)


def test_a_pass_that_breaks_the_graph_is_caught_after_it_runs():
    def break_types(g: Graph) -> Graph:
        bad = g.nodes[-1]
        wrong = type(bad.outputs[0])(bad.outputs[0].name, bad.outputs[0].type.with_shape((7,)))
        nodes = g.nodes[:-1] + (Node(bad.op, bad.inputs, (wrong,), bad.attrs, bad.loc),)
        return Graph(g.name, g.inputs, nodes, (wrong,), g.constants)

    with pytest.raises(VerifyError, match=r"after stage 1 \(break_types\)"):
        run_graph_passes(sample(), passes=[break_types])
    run_graph_passes(sample(), passes=[break_types], verify_each=False)


def test_import_model_runs_frontend_and_passes():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    g = import_model(model, (x,), name="small")
    assert g.name == "small"
    assert not any(n.op == "batch_norm" for n in g.nodes)
    torch.testing.assert_close(interpret(g, x)[0], model(x), rtol=1e-4, atol=1e-5)


def test_a_stage_that_hands_on_its_input_is_not_verified_again_and_records_cpu_seconds():
    from npuc.pipeline import RunOptions, Stage, StageRecord, run_stages

    checked: list[str] = []

    def stage(name, fn):
        return Stage(name, fn, lambda ir: checked.append(name), str)

    records: list[StageRecord] = []
    out = run_stages([1], [stage("grow", lambda x: x + [2]), stage("same", lambda x: x), stage("grow2", lambda x: x + [3])],
                     RunOptions(records=records))
    assert out == [1, 2, 3]
    assert checked == ["grow", "grow2"]  # "same" handed on what "grow" had verified
    assert [r.name for r in records] == ["grow", "same", "grow2"]
    assert all(r.cpu_seconds >= 0.0 for r in records)
