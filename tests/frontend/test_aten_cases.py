"""Hand-picked uses of table entries that OpInfo samples do not reach, and refusals with reasons."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from atenlib import run_case

_G = torch.Generator().manual_seed(0)
W2 = torch.randn(4, 3, 3, 3, generator=_G)
W1 = torch.randn(4, 3, 3, generator=_G)
X = torch.randn(2, 3, 9, 9, generator=_G)

CASES = {
    "conv2d unbatched": (lambda x, w: F.conv2d(x, w, stride=2, padding=1), (X[0], W2)),
    "conv2d padding=same": (lambda x, w: F.conv2d(x, w, padding="same", dilation=2), (X, W2)),
    "conv1d unbatched, dilated": (lambda x, w: F.conv1d(x, w, stride=2, padding=1, dilation=2), (X[0, :, 0], W1)),
    "depthwise conv2d": (lambda x, w: F.conv2d(x, w, groups=3), (X, torch.randn(6, 1, 3, 3, generator=_G))),
    "max_pool2d ceil_mode": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (X,)),
    "avg_pool2d no pad count": (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (X,)),
    "upsample to a size": (lambda x: F.interpolate(x, size=(18, 27), mode="nearest"), (X,)),
    "index one dim": (lambda x, i: x[:, i], (X, torch.tensor([[0, 2], [1, 1]]))),
    "index last dim": (lambda x, i: x[..., i], (X, torch.tensor([8, 0, 3]))),
    "index negative": (lambda x, i: x[:, :, i], (X, torch.tensor([-1, 0, -9]))),
    "index two adjacent dims": (lambda x, i, j: x[i, j], (X, torch.tensor([[0, 1], [1, -1]]), torch.tensor([2, -3]))),
    "index two dims apart": (lambda x, i, j: x[:, i, :, j], (X, torch.tensor([0, -1, 2]), torch.tensor([[8], [-9]]))),
    "int tensor true division": (lambda a, b: a / b, (torch.arange(1, 7), torch.arange(6, 0, -1))),
    "bool sum": (lambda x: (x > 0).sum(dim=1), (X,)),
    "any of bool": (lambda x: (x > 1).any(dim=-1), (X,)),
    "layer norm without affine": (lambda x: F.layer_norm(x, (9, 9)), (X,)),
    "batch norm without affine": (lambda x: F.batch_norm(x, torch.zeros(3), torch.ones(3) * 2), (X,)),
    "softmax of fp16 to fp32": (lambda x: torch.softmax(x.half(), -1, dtype=torch.float32), (X,)),
    "cat with promotion": (lambda x, i: torch.cat([x[:, 0, 0], i.float()], dim=1), (X, torch.ones(2, 2, dtype=torch.int64))),
    "addmm with alpha and beta": (lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0), (torch.randn(5), torch.randn(3, 4), torch.randn(4, 5))),
    "matmul vector": (lambda x, v: x @ v, (torch.randn(3, 4), torch.randn(4))),
    "leaky relu": (lambda x: F.leaky_relu(x, 0.2), (X,)),
    "relu6": (F.relu6, (X,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_matches_eager(case):
    fn, args = CASES[case]
    r = run_case(fn, args, {})
    assert r.status == "ok", r.error


REFUSED = {
    "3-D transposed convolution": (lambda x, w: F.conv_transpose3d(x, w), (torch.randn(1, 3, 4, 4, 4), torch.randn(3, 2, 2, 2, 2))),
    "3-D convolution": (lambda x, w: F.conv3d(x, w), (torch.randn(1, 3, 4, 4, 4), torch.randn(2, 3, 2, 2, 2))),
    "bitwise ops on integers": (lambda a: a & 3, (torch.arange(6),)),
    "only a constant single-element exponent": (lambda x, e: x ** e, (X.abs(), X)),
    "random ops": (lambda x: x + torch.rand(3), (torch.randn(3),)),
}


@pytest.mark.parametrize("reason", sorted(REFUSED))
def test_refused_with_the_reason(reason):
    fn, args = REFUSED[reason]
    r = run_case(fn, args, {})
    assert r.status == "unsupported"
    assert reason in r.error
