"""Partition: which nodes run where, the reasons given for the CPU, and segments."""

from __future__ import annotations

import pytest
import torch

import npuc
from npuc.codegen import kernel as kernel_mod
from npuc.lower.precision import NO_FP16_REASON
from npuc.kir.program import CpuSegment, NpuSegment

from lowerlib import SmallCnn, lower, seeded


class Gather(torch.nn.Module):
    """An embedding of rows of ``width``: rows wider than a count field (65535) keep it on the CPU."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(32, width)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, ids):
        return torch.relu(self.fc(self.emb(ids)[..., :16]))


class ErfInTheMiddle(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.b(torch.erf(self.a(x)))


def placement(m) -> dict[str, tuple[str, str]]:
    return {op: (side, reason) for _, op, side, reason in m.placement}


def test_cnn_runs_entirely_on_the_npu():
    m = lower(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),))
    assert all(side == "npu" for _, _, side, _ in m.placement)
    assert [type(s) for s in m.segments] == [NpuSegment]
    assert m.cpu_ops == ()


def test_an_embedding_runs_on_the_npu():
    m = lower(Gather().eval(), (torch.randint(0, 32, (1, 6)),))
    assert placement(m)["embedding"] == ("npu", "")
    assert [type(s) for s in m.segments] == [NpuSegment] and m.cpu_ops == ()


def test_embedding_falls_back_with_its_reason():
    ids = torch.randint(0, 32, (1, 6))
    m = lower(Gather(70000).eval(), (ids,))
    side, reason = placement(m)["embedding"]
    assert side == "cpu"
    assert "the gather kernel cannot run it: gather from a table of 32 rows of 70000" in reason
    assert [type(s) for s in m.segments] == [CpuSegment, NpuSegment]
    op = next(o for o in m.cpu_ops if o.op == "embedding")
    assert op.op == "embedding" and op.seconds > 0 and op.loc and "test_partition.py" in op.loc


def test_unsupported_op_splits_the_npu_work_and_still_computes_right():
    torch.manual_seed(0)
    model = ErfInTheMiddle().eval()
    x = torch.randn(4, 16)
    m = lower(model, (x,))
    assert placement(m)["erf"][0] == "cpu"
    assert "erf" in placement(m)["erf"][1]
    assert [type(s).__name__ for s in m.segments] == ["NpuSegment", "CpuSegment", "NpuSegment"]
    art = npuc.compile(model, (x,))
    (out,) = art.run(x)
    assert torch.allclose(out, model(x), atol=2e-2, rtol=2e-2)


def test_target_without_fp16_runs_a_float_model_on_the_cpu():
    m = lower(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),), target="npu-small")
    assert {reason for _, _, _, reason in m.placement} == {NO_FP16_REASON}
    assert [type(s) for s in m.segments] == [CpuSegment]


def test_missing_kernel_kind_is_the_reason(monkeypatch):
    kinds = dict(kernel_mod._KERNELS)
    kinds.pop("pool2d", None)
    monkeypatch.setattr(kernel_mod, "_KERNELS", kinds)
    m = lower(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),))
    side, reason = placement(m)["max_pool2d"]
    assert side == "cpu" and reason == "no NPU kernel implements 'pool2d' yet"


def test_a_refusing_kernel_gives_its_sentence(monkeypatch):
    real = kernel_mod.get_kernel("gemm")

    class Picky:
        kind = "gemm"

        def supports(self, kernel, target):
            return "this gemm is too picky"

        def plan(self, kernel, target):
            return real.plan(kernel, target)

        def emit(self, kernel, plan, em):
            return real.emit(kernel, plan, em)

    kinds = dict(kernel_mod._KERNELS)
    kinds["gemm"] = Picky()
    monkeypatch.setattr(kernel_mod, "_KERNELS", kinds)
    m = lower(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),))
    side, reason = placement(m)["linear"]
    assert side == "cpu" and reason == "the gemm kernel cannot run it: this gemm is too picky"


def test_compile_explains_cpu_ops():
    art = npuc.compile(ErfInTheMiddle().eval(), (torch.randn(6, 16),))
    text = art.report.explain()
    assert "erf" in text and "est. 250 ns on the host" in text  # not "0.0 us"
    assert "1 CPU segment: est. 10.2 us in all" in text  # with the hand-over


def test_unknown_quantization_is_refused():
    with pytest.raises(npuc.NpucError, match="'int4' is not a quantization npuc knows"):
        npuc.compile(Gather().eval(), (torch.randint(0, 32, (1, 6)),), quantize="int4")
