"""MLIR export checked by an independent compiler: IREE compiles the TOSA that npuc writes
(llvm-cpu) and its runtime's outputs match npuc's reference interpreter and PyTorch (fp32), and
npuc's integer reference bit for bit (int8)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip("xdsl")
pytest.importorskip("iree.compiler")
pytest.importorskip("iree.runtime")

import npuc  # noqa: E402
from npuc.interp import interpret  # noqa: E402
from npuc.mlir.export import graph_to_mlir  # noqa: E402
from npuc.mlir.iree import run_mlir  # noqa: E402
from npuc.mlir.tosa_table import TOSA_TABLE  # noqa: E402
from npuc.report.accuracy import rel_l2  # noqa: E402
from npuc.zoo import ZOO  # noqa: E402

FP32_TOL = 1e-5


class ManyOps(nn.Module):
    """A small model touching most lowerings of the TOSA table."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.norm = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 6)
        self.emb = nn.Embedding(10, 16)

    def forward(self, x, ids):
        y = F.relu(self.conv(x))
        y = F.hardswish(self.dw(y)) + torch.sigmoid(y)
        y = F.max_pool2d(y, 3, stride=2, padding=1, ceil_mode=True)
        y = F.avg_pool2d(F.pad(y, (1, 0, 0, 1)), 2, stride=1, count_include_pad=False)
        y = torch.cat([y, F.silu(y)], dim=1)                    # [1, 16, 4, 4]
        t = y.flatten(2).transpose(1, 2)                        # [1, 16, 16]
        t = self.norm(t + self.emb(ids))
        a = torch.softmax(t @ t.transpose(1, 2) / 4.0, dim=-1)
        t = F.gelu(a @ t, approximate="tanh") - torch.tanh(t).clamp(-0.5, 0.5)
        t = torch.where(t > 0, t, t * 0.1)[:, ::2, :]
        return self.fc(t).log_softmax(-1), t.mean(dim=1).exp().sqrt()


def _check(g, inputs, tol=FP32_TOL):
    got = run_mlir(graph_to_mlir(g), inputs)
    ref = interpret(g, *inputs)
    assert len(got) == len(ref)
    for k, (o, r) in enumerate(zip(got, ref)):
        assert tuple(o.shape) == tuple(r.shape)
        assert rel_l2(o.float(), r.float()) <= tol, f"output {k}: {rel_l2(o.float(), r.float()):.2e}"
    return got


def test_many_ops_through_iree_match_the_interpreter_and_pytorch():
    torch.manual_seed(0)
    model = ManyOps().eval()
    inputs = (torch.randn(1, 3, 14, 14), torch.randint(0, 10, (1, 16)))
    g = npuc.import_model(model, inputs)
    got = _check(g, inputs)
    with torch.no_grad():
        eager = model(*inputs)
    for o, e in zip(got, eager):
        assert rel_l2(o, e) <= FP32_TOL


def test_export_mlir_api_and_cli_write_the_same_text(tmp_path):
    from click.testing import CliRunner

    from npuc.cli import main

    m, x = ZOO["transformers:bert-tiny"].load()
    text = npuc.export_mlir(m, x)
    assert text.startswith('"builtin.module"()') and '"tosa.matmul"' in text and "dialect_resources" in text
    assert text == npuc.export_mlir(m, x), "export is not deterministic"
    out = runner_out = CliRunner().invoke(main, ["export-mlir", "transformers:bert-tiny", "-o", str(tmp_path / "b.mlir")])
    assert out.exit_code == 0, runner_out.output
    assert (tmp_path / "b.mlir").read_text() == text


def test_unsupported_graph_op_is_a_clear_error():
    g = npuc.import_model(nn.Sequential(nn.Upsample(scale_factor=1.5)).eval(), (torch.randn(1, 2, 4, 4),))
    if all(n.op in TOSA_TABLE or n.op == "const" for n in g.nodes):
        with pytest.raises(npuc.NpucError, match="has no TOSA lowering|no lowering"):
            graph_to_mlir(g)
    with pytest.raises(npuc.NpucError, match="unknown MLIR dialect"):
        graph_to_mlir(g, dialect="stablehlo")


@pytest.mark.zoo
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_through_iree_matches_pytorch(name):
    model, inputs = ZOO[name].load()
    g = npuc.import_model(model, inputs)
    got = _check(g, inputs)
    with torch.no_grad():
        eager = model(*inputs)
    eager = [eager] if isinstance(eager, torch.Tensor) else list(eager)
    for o, e in zip(got, eager):
        assert rel_l2(o, e) <= FP32_TOL, f"{name}: {rel_l2(o, e):.2e}"


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.c1(x))
        y = F.relu(self.c2(y)) + y
        y = F.avg_pool2d(y, 2)
        y = F.max_pool2d(y, 2)
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def _int8_graph(model, inputs, calibration):
    from npuc.frontend.quantized import import_quantized
    from npuc.pipeline import run_graph_passes

    return run_graph_passes(import_quantized(model, inputs, calibration))


def test_int8_graph_through_iree_is_bit_exact():
    pytest.importorskip("torchao")
    torch.manual_seed(0)
    model = SmallCnn().eval()
    x = (torch.randn(1, 3, 16, 16),)
    g = _int8_graph(model, x, [(torch.randn(1, 3, 16, 16),) for _ in range(2)])
    assert any(n.op.startswith("q") for n in g.nodes)
    got = run_mlir(graph_to_mlir(g), x)
    ref = interpret(g, *x)
    assert all(torch.equal(a, b) for a, b in zip(got, ref))


# Ops that only move or convert values: a graph whose other float ops are absent is all-integer.
_MOVES = {"const", "reshape", "permute", "expand", "slice", "select", "concat", "pad", "dequantize", "quantize",
          "embedding", "index_select", "max_pool2d", "upsample_nearest2d"}


def float_islands(g) -> list[str]:
    """Float compute ops the quantizer left in float (softmax, layer norm, ...): computed by IREE
    in fp32, they match PyTorch's to fp32 rounding, not bit for bit."""
    return sorted({n.op for n in g.nodes if n.op not in _MOVES and n.outputs[0].type.dtype.is_float})


@pytest.mark.zoo
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_int8_through_iree_is_bit_exact(name):
    """All-integer graphs (the CNNs): every output equal bit for bit.  Graphs with float islands
    (transformers: layer norm, softmax, ... in fp32): IREE's fp32 rounding differs from
    PyTorch's in the last bit, which can move a later int8 code by one step, and the steps
    compound over layers (ViT-B/16: 22 of 151,296 codes differ after 8 int8 ops, 7% relative L2
    at the logits).  There the first occurrence of every int8 op is checked bit for bit (its
    inputs are still identical), and the outputs within a relative L2 of 0.1."""
    pytest.importorskip("torchao")
    from npuc.interp import interpret_all
    from npuc.ir.graph import Graph

    model, inputs = ZOO[name].load()
    g = _int8_graph(model, inputs, [ZOO[name].make_inputs(s) for s in (1, 2)])
    islands = float_islands(g)
    firsts = {}
    for n in g.nodes:
        if n.op.startswith("q") and n.op not in firsts:
            firsts[n.op] = n.outputs[0]
    probes = tuple(firsts.values()) if islands else ()
    got = run_mlir(graph_to_mlir(Graph(g.name, g.inputs, g.nodes, g.outputs + probes, g.constants)), inputs)
    values = interpret_all(g, *inputs)
    for k, (a, v) in enumerate(zip(got, g.outputs + probes)):
        b = values[v.name]
        if not islands or k >= len(g.outputs):
            assert torch.equal(a, b), f"{name} %{v.name}: max difference {float((a.double() - b.double()).abs().max())}"
        else:
            assert rel_l2(a, b) <= 0.1, f"{name} output {k} (float ops {islands}): {rel_l2(a, b):.2e}"
