"""Booleans as 0/1 masks on the NPU (issue 14): VCMP and VSEL bit for bit against numpy, and the
comparison, logical, ``where`` and bool-cast ops of a float model compiled onto the NPU (no CPU
segment) within the fp16 tolerance -- exactly, for comparisons of values exact in fp16 -- with
clean reasons for what stays on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import npuc
from npuc.isa import assemble
from npuc.report.accuracy import check_outputs
from npuc.runtime.sim import simulate
from npuc.targets import load_target

MID = load_target("npu-mid")


def _sim(text: str, image: np.ndarray) -> bytes:
    return simulate(assemble(text), MID, image).dram


@pytest.mark.parametrize("op,fn", [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                                   ("gt", np.greater), ("ge", np.greater_equal)])
def test_vcmp_is_numpy_comparison_with_nan_and_broadcast_threshold(op, fn):
    a = np.array([0.5, -1.0, np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0], np.float16)
    b = np.array([0.5, 0.0, 0.0, np.inf, 1.0, -0.0, 0.0, np.nan], np.float16)
    image = np.zeros(256, np.uint8)
    image[0:16] = a.view(np.uint8)
    image[16:32] = b.view(np.uint8)
    image[32:34] = np.array([0.0], np.float16).view(np.uint8)
    text = f"""
    DMA_LOAD esize=2 dram_addr=0 local_addr=0 n0=17 signal=vector
    VCMP op={op} dtype=fp16 n0=8 dst=0x100 a=0 b=16 wait=load
    VCMP op={op} dtype=fp16 n0=8 dst=0x200 a=0 b=32 b_s0=0 signal=store
    DMA_STORE esize=2 dram_addr=64 local_addr=0x100 n0=8 wait=vector
    DMA_STORE esize=2 dram_addr=96 local_addr=0x200 n0=8
    END"""
    dram = np.frombuffer(_sim(text, image), np.uint8)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(dram[64:80].view(np.float16), fn(a, b).astype(np.float16))
        np.testing.assert_array_equal(dram[96:112].view(np.float16), fn(a, np.float16(0)).astype(np.float16))


def test_vsel_moves_the_chosen_bits_and_keeps_the_rest():
    m = np.array([1, 0, 1, 0, 1, 0], np.float16)
    x = np.array([-np.inf, 1.0, np.nan, 2.0, -0.0, 3.0], np.float16)
    d = np.array([7.0, 8.0, 9.0, -np.inf, 10.0, 11.0], np.float16)
    image = np.zeros(256, np.uint8)
    for i, arr in enumerate((m, x, d)):
        image[16 * i:16 * i + 12] = arr.view(np.uint8)
    text = """
    DMA_LOAD esize=2 dram_addr=0 local_addr=0 n0=24 signal=vector
    VSEL dtype=fp16 n0=6 dst=32 mask=0 a=16 wait=load signal=store
    DMA_STORE esize=2 dram_addr=128 local_addr=32 n0=6 wait=vector
    END"""
    got = np.frombuffer(_sim(text, image), np.uint8)[128:140].view(np.uint16)
    want = np.where(m != 0, x, d).view(np.uint16)
    np.testing.assert_array_equal(got, want)  # bit for bit: the -inf, the NaN and -0.0 included


class SafeSoftmax(nn.Module):
    """Scaled-dot-product attention's mask arithmetic, as torch's decomposition writes it."""

    def forward(self, s, v):
        p = torch.softmax(s, -1)
        keep = torch.logical_not(s == float("-inf"))
        none = torch.logical_not(keep.float().amax(-1, keepdim=True).bool())
        return torch.where(none, torch.zeros_like(p), p) @ v


class Masks(nn.Module):
    def forward(self, x, y):
        band = ((x > 0.25) & (x <= 1.0)) | (x == 0.0) | torch.logical_not(y < -0.5)
        return torch.where(band, x, -1.5) + (x != y).float() * 2 + torch.where(x >= y, y, x).masked_fill(x < -1, 5.0)


def _grid(*shape, seed=0):  # multiples of 1/8: exact in fp16, so no comparison flips
    return torch.round(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 8) / 8


def test_safe_softmax_with_a_fully_masked_row_runs_on_the_npu():
    s = torch.randn(1, 2, 5, 7, generator=torch.Generator().manual_seed(1))
    s[0, 0, 1] = float("-inf")  # a row with nothing to attend to: 0, not NaN
    s[0, 1, 2, :3] = float("-inf")
    v = torch.randn(1, 2, 7, 4, generator=torch.Generator().manual_seed(2))
    m = SafeSoftmax().eval()
    art = npuc.compile(m, (s, v), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    (out,) = art.run(s, v)
    assert torch.isfinite(out).all()
    assert all(c.ok for c in check_outputs([out], m, (s, v)))


def test_comparisons_logical_ops_and_where_are_exact_on_the_npu():
    x, y = _grid(2, 3, 17, seed=3), _grid(2, 1, 17, seed=4)
    m = Masks().eval()
    art = npuc.compile(m, (x, y), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    (out,) = art.run(x, y)
    torch.testing.assert_close(out, m(x, y), rtol=0, atol=0)


def test_a_boolean_model_output_stays_on_the_cpu_with_a_reason():
    class Out(nn.Module):
        def forward(self, x):
            return torch.relu(x) > 0.5

    x = _grid(2, 5)
    art = npuc.compile(Out().eval(), (x,), target="npu-mid")
    reasons = {o.op: o.reason for o in art.report.cpu_ops}
    assert "boolean model output stays on the CPU" in reasons["gt"]
    assert torch.equal(art.run(x)[0], Out()(x))


def test_comparing_integer_token_ids_stays_on_the_cpu_with_a_reason():
    class Ids(nn.Module):
        def forward(self, ids, h):
            return h * (ids != 0).unsqueeze(-1).float()

    ids, h = torch.tensor([[3, 0, 5, 0]]), _grid(1, 4, 6)
    art = npuc.compile(Ids().eval(), (ids, h), target="npu-mid")
    reasons = {o.op: o.reason for o in art.report.cpu_ops}
    assert "i64 values" in reasons["ne"]
    assert "mul" not in reasons  # the float mask is used on the NPU
    torch.testing.assert_close(art.run(ids, h)[0], Ids()(ids, h))


def test_a_boolean_the_cpu_computes_is_a_mask_the_npu_selects_with():
    class Mixed(nn.Module):
        def forward(self, x, keep):
            return torch.where(torch.logical_not(keep), x, -2.0) * 3

    x, keep = _grid(2, 9, seed=6), _grid(2, 9, seed=7) > 0
    art = npuc.compile(Mixed().eval(), (x, keep), target="npu-mid")
    assert [o.op for o in art.report.cpu_ops] == ["logical_not"]  # it reads the boolean model input
    torch.testing.assert_close(art.run(x, keep)[0], Mixed()(x, keep), rtol=0, atol=0)
