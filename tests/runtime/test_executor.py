"""The runtime executor: layout and dtype conversion at the edges, CPU segments, target checks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import npuc
from npuc.errors import BinaryFormatError
from npuc.ir.types import DType, TensorType
from npuc.runtime.executor import Executor, logical_shape, read_tensor, write_tensor

sys.path.insert(0, str(Path(__file__).parents[1] / "lower"))
from lowerlib import edited_target  # noqa: E402


def test_write_then_read_converts_layout_and_dtype():
    t = TensorType((1, 4, 5, 3), DType.f16, None, "NHWC")  # stored NHWC, logical [1, 3, 4, 5]
    assert logical_shape(t) == (1, 3, 4, 5)
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32)
    dram = np.zeros(256, np.uint8)
    write_tensor(dram, 64, t, x)
    stored = dram[64:64 + t.nbytes].view(np.float16).reshape(1, 4, 5, 3)
    assert np.array_equal(stored, x.transpose(0, 2, 3, 1).astype(np.float16))
    back = read_tensor(dram, 64, t)
    assert back.shape == (1, 3, 4, 5) and np.array_equal(back, x.astype(np.float16))


def test_integer_tensors_keep_their_type():
    t = TensorType((2, 3), DType.i64)
    dram = np.zeros(64, np.uint8)
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    write_tensor(dram, 8, t, ids)
    assert np.array_equal(read_tensor(dram, 8, t), ids)


class Head(torch.nn.Module):
    """NPU linear, CPU embedding lookup of a constant table (rows too wide for the NPU's gather),
    NPU log and add."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 70000)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, ids, x):
        return torch.log(torch.sigmoid(self.fc(x))) + self.emb(ids)[..., :8]


def test_cpu_segments_read_constants_and_npu_results():
    torch.manual_seed(0)
    model = Head().eval()
    ids, x = torch.tensor([[1, 7, 3]]), torch.randn(1, 3, 8)
    art = npuc.compile(model, (ids, x))
    kinds = [s.kind.name for s in art.npub.segments]
    assert "CPU" in kinds and "NPU" in kinds
    consts = [b for sub in art.npub.cpu_fallback for b in sub.bindings if b.role.name == "CONSTANT"]
    assert any(b.value == "emb.weight" and b.type.dtype == DType.f32 for b in consts)
    (out,) = art.run(ids, x)
    with torch.no_grad():
        ref = model(ids, x)
    assert torch.allclose(out, ref, atol=2e-2, rtol=1e-2)
    loaded = npuc.load(art.to_bytes())
    assert torch.equal(loaded.run(ids, x)[0], out)


def test_a_changed_configuration_of_the_same_target_is_refused():
    art = npuc.compile(torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),))
    other = edited_target(**{"memory.dram__latency_cycles": 81})  # still named npu-mid
    with pytest.raises(BinaryFormatError, match="a different configuration of target 'npu-mid'"):
        Executor(art.npub, other)
