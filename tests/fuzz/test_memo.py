"""The memos of npuc.fuzz.memo change no result: the shortcut of torchao's QAT conv + batch-norm
search gives the graph the search gives when no convolution reaches a batch norm, and leaves the
search to torchao where one does."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from npuc.fuzz import memo


class _LoneBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return self.conv(x) + 1, self.bn(torch.relu(x))


def _converted_before_folding(model: nn.Module, x: torch.Tensor):
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from npuc.quant.quantizer import NpuQuantizer

    m = prepare_pt2e(torch.export.export(model.eval(), (x,)).module(), NpuQuantizer())
    m(x)
    return m


def test_the_fold_shortcut_gives_the_graph_torchaos_search_gives():
    from torchao.quantization.pt2e import qat_utils

    memo.install()
    fold = qat_utils._fold_conv_bn_qat_helper
    original = fold.npuc_original
    x = torch.randn(1, 3, 6, 6)
    m = _converted_before_folding(_LoneBatchNorm(), x)
    assert not memo._conv_reaches_batch_norm(m)
    ex = (torch.randn(1, 1, 3, 3), torch.randn(1, 1, 1, 1), *(torch.randn(1) for _ in range(4)))
    a = original(copy.deepcopy(m), F.conv2d, ex, False)
    b = fold(copy.deepcopy(m), F.conv2d, ex, False)
    assert a.code == b.code
    for p, q in zip(a(x), b(x)):
        assert torch.equal(p, q)


def test_a_convolution_reaching_a_batch_norm_is_left_to_torchao():
    seq = nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU(), nn.BatchNorm2d(3))
    x = torch.randn(1, 3, 4, 4)
    assert memo._conv_reaches_batch_norm(torch.export.export(seq.eval(), (x,)).module())
