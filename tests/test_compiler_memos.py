"""The compiler's memos (npuc.memo): bounded, forgotten all at once, and never part of the output:
a compile after ``forget_all`` gives the bytes a warm one gives."""

from __future__ import annotations

import torch
from torch import nn

import npuc
from npuc import memo
from npuc.codegen.kernels import chain_copies, fused_chain, vector_depthwise
from npuc.schedule import cost, search, vector_cost


def test_a_full_memo_forgets_everything_before_it_takes_more():
    m = memo.Memo(3, "test")
    for k in range(3):
        assert m.put(k, k * k) == k * k
    assert dict(m) == {0: 0, 1: 1, 2: 4}
    m.put(3, 9)
    assert dict(m) == {3: 9}
    assert "test" in repr(m)


def test_forget_all_runs_every_registered_clear():
    before = list(memo._FORGET)
    try:
        m = memo.Memo(8, "test registered")
        m.put("k", 1)
        calls = []
        memo.on_forget(lambda: calls.append(1))
        memo.forget_all()
        assert not m and calls == [1]
    finally:  # the registry is process state: leave it as the compiler made it
        memo._FORGET[:] = before


class _Block(nn.Module):
    """A conv, a depthwise conv and a pointwise conv: every memo of the plain and fused paths."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(8, 16, 3, padding=1)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.b = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.b(torch.relu(self.dw(torch.relu(self.a(x)))))


def test_forget_all_empties_the_compilers_memos_and_changes_no_byte():
    torch.manual_seed(0)
    model, x = _Block().eval(), (torch.randn(1, 8, 20, 20),)
    warm = npuc.compile(model, x, target="npu-mid", fuse_layers=True).to_bytes()
    filled = (search._MEMO, search._PRICES, vector_depthwise._CHOICES, fused_chain._BAND_PLANS,
              chain_copies._SEEN, vector_cost._PLACED, vector_cost._WALKS)
    assert all(filled) and cost._table.cache_info().currsize
    memo.forget_all()
    for m in (*filled, vector_depthwise._CODE):
        assert not m, m
    assert cost._table.cache_info().currsize == 0
    assert npuc.compile(model, x, target="npu-mid", fuse_layers=True).to_bytes() == warm
