"""ExecuTorch: NpucPartitioner delegates what npuc's own partition puts on the NPU (with its
reasons for the rest), NpucBackend.preprocess returns the .npub with debug handles, edge-dialect
programs import, and PteRunner runs the .pte (delegates on the simulator) as eager does."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("executorch", reason="the executorch extra (pip install 'npuc[executorch]')")

from executorch.exir import to_edge, to_edge_transform_and_lower  # noqa: E402

import npuc  # noqa: E402
from npuc.integrations.executorch import NpucBackend, NpucPartitioner, PteRunner, npu_placement  # noqa: E402
from npuc.integrations.executorch.backend import BACKEND_ID  # noqa: E402
from npuc.report.accuracy import check_outputs  # noqa: E402

from intlib import image  # noqa: E402


class WithCpuOp(torch.nn.Module):
    """Two NPU parts around an argmax, which npuc leaves to the CPU (int64 indices)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        idx = y.argmax(1, keepdim=True)
        return self.b(y), idx


def _program(model, x):
    torch.manual_seed(0)
    return torch.export.export(model.eval(), (x,))


def _delegate_calls(pte: bytes) -> int:
    return PteRunner(pte).plan.delegates.__len__()


def test_partitioner_follows_npuc_partition_and_says_why(small_cnn):
    torch.manual_seed(0)
    model = WithCpuOp().eval()
    x = image(0)
    ep = torch.export.export(model, (x,))
    part = NpucPartitioner(target="npu-mid")
    edge = to_edge_transform_and_lower(ep, partitioner=[part])
    # npuc's own compile of the model puts the argmax, and only it, on the CPU, for the same reason
    art = npuc.compile(model, (x,))
    (cpu,) = art.report.cpu_ops
    assert list(part.reasons.values()) == [cpu.reason] and "argmax" in next(iter(part.reasons))
    g = edge.exported_program().graph
    calls = [str(n.target) for n in g.nodes if n.op == "call_function"]
    assert calls.count("executorch_call_delegate") == 1 and any("argmax" in c for c in calls)
    assert not any("convolution" in c for c in calls)
    pte = edge.to_executorch().buffer
    runner = PteRunner(pte)
    y, idx = runner.run(x)
    ref_y, ref_idx = model(x)
    assert runner.delegate_calls == 1 and runner.kernel_calls >= 1
    assert torch.allclose(y, ref_y, atol=2e-2 * ref_y.abs().max().item())
    assert idx.dtype == torch.int64 and (idx == ref_idx).float().mean() > 0.95  # fp16 ties may differ


def test_small_model_pte_runs_like_eager(small_cnn):
    x = image(0)
    ep = torch.export.export(small_cnn, (x,))
    edge = to_edge_transform_and_lower(ep, partitioner=[NpucPartitioner("npu-large")])
    pte = edge.to_executorch().buffer
    runner = PteRunner(pte)
    (y,) = runner.run(x)
    assert runner.delegate_calls == 1 and runner.kernel_calls == 0
    (c,) = check_outputs([y], small_cnn, (x,))
    assert c.ok, c
    assert runner.delegates[0].target.name == "npu-large"


def test_preprocess_returns_the_npub_and_debug_handles(small_cnn):
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    x = image(0)
    edge_program = to_edge(torch.export.export(small_cnn, (x,))).exported_program()
    result = NpucBackend.preprocess(edge_program, [CompileSpec("target", b"npu-mid")])
    art = npuc.load(result.processed_bytes)
    assert art.target.name == "npu-mid"
    (c,) = check_outputs(art.run(x), small_cnn, (x,))
    assert c.ok, c
    handles = {n.meta["debug_handle"] for n in edge_program.graph.nodes if "debug_handle" in n.meta}
    assert result.debug_handle_map and set(result.debug_handle_map) == set(range(len(result.debug_handle_map)))
    covered = {h for hs in result.debug_handle_map.values() for h in hs}
    assert covered <= handles and len(covered) >= 3  # conv, depthwise conv, linear at least


def test_edge_dialect_programs_import():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Hardswish(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 14 * 14, 10)).eval()
    x = image(0)
    edge_program = to_edge(torch.export.export(model, (x,))).exported_program()
    targets = {str(n.target) for n in edge_program.graph.nodes if n.op == "call_function"}
    assert any("view_copy" in t or "permute_copy" in t for t in targets)
    (c,) = check_outputs(npuc.compile(edge_program).run(x), model, (x,))
    assert c.ok, c


def test_placement_of_an_unimportable_op_names_it():
    class Sorts(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x.flatten(1), dim=1).values

    ep = to_edge(torch.export.export(Sorts(), (image(0),))).exported_program()
    placement = npu_placement(ep, "npu-mid")
    reasons = [r for r in placement.values() if r]
    assert reasons and all("sort" in r for r in reasons)


def test_runner_refuses_what_it_cannot_run(tmp_path):
    with pytest.raises(npuc.NpucError, match="not an ExecuTorch program"):
        PteRunner(b"not a pte")
    with pytest.raises(npuc.NpucError, match="cannot read"):
        PteRunner(tmp_path / "missing.pte")


CNNS = ["torchvision:resnet18", "torchvision:resnet50", "torchvision:mobilenet_v2",
        "torchvision:mobilenet_v3_small", "torchvision:efficientnet_b0"]


@pytest.mark.zoo
@pytest.mark.parametrize("name", CNNS)
def test_zoo_cnn_pte_every_convolution_delegated(name):
    from npuc.zoo import ZOO, load_model

    assert set(CNNS) == {n for n in ZOO if n.startswith("torchvision:") and "vit" not in n}
    model, inputs = load_model(name)
    edge = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[NpucPartitioner("npu-mid")])
    g = edge.exported_program().graph
    outside = [str(n.target) for n in g.nodes if n.op == "call_function" and "convolution" in str(n.target)]
    assert outside == [], f"{len(outside)} convolutions left to ExecuTorch"
    pte = edge.to_executorch().buffer
    runner = PteRunner(pte)
    assert all(d.id == BACKEND_ID for d in runner.plan.delegates)
    outs = runner.run(*inputs)
    for c in check_outputs(outs, model, inputs):
        assert c.ok, c


def test_nothing_is_delegated_where_npuc_runs_nothing(small_cnn):
    """npu-small has no fp16 path: npuc runs a float model on the CPU, so nothing is delegated."""
    x = image(0)
    part = NpucPartitioner("npu-small")
    edge = to_edge_transform_and_lower(torch.export.export(small_cnn, (x,)), partitioner=[part])
    calls = [str(n.target) for n in edge.exported_program().graph.nodes if n.op == "call_function"]
    assert "executorch_call_delegate" not in calls
    assert part.reasons and all("no fp16 path" in r for r in part.reasons.values())
