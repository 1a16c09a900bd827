"""The value-range analysis of integer graph values (npuc/lower/int_range.py, issue 14).

Soundness is checked against PyTorch: every value the reference interpreter computes (which equals
eager exactly on integers, checked on the outputs) lies within the range the analysis gives it,
for RoBERTa's position ids, cumsum of int masks along every dim with odd and prime lengths, and
values that leave int32; the proofs that matter (the position-id block fits int32 once the ids are
bounded) and the refusals (an overflowing cumsum, a wrapping cast) are checked exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import npuc
from npuc.interp import interpret_all
from npuc.lower.int_range import INT32, Interval, dtype_range, int32_problem, int_ranges
from npuc.ir.types import DType


def _graph(m: nn.Module, inputs):
    return npuc.import_model(m.eval(), inputs)


def _check_sound(g, inputs, eager, bounds=None):
    """Every integer value the interpreter computes lies in its range; outputs equal eager."""
    ranges = int_ranges(g, bounds)
    env = interpret_all(g, *inputs)
    by_name = {v.name: v for v in list(g.inputs) + [o for n in g.nodes for o in n.outputs]}
    checked = 0
    for name, t in env.items():
        v = by_name.get(name)
        if v is None or v not in ranges or t.numel() == 0:
            continue
        r, d = ranges[v], t.to(torch.int64)
        assert r.lo <= int(d.min()) and int(d.max()) <= r.hi, (name, r, int(d.min()), int(d.max()))
        checked += 1
    eager = eager if isinstance(eager, tuple) else (eager,)
    for v, e in zip(g.outputs, eager):
        assert torch.equal(env[v.name], e), v.name
    return ranges, checked


class PositionIds(nn.Module):
    """RoBERTa's create_position_ids_from_input_ids with past_key_values_length."""

    def __init__(self, pad: int = 1, past: int = 0) -> None:
        super().__init__()
        self.pad, self.past = pad, past

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        pos = (torch.cumsum(mask, dim=1).type_as(mask) + self.past) * mask
        return pos.long() + self.pad


@pytest.mark.parametrize("past", [0, 3])
def test_roberta_position_ids_fit_int32_once_the_ids_are_bounded(past):
    torch.manual_seed(past)
    ids = torch.randint(2, 50, (2, 13))
    ids[0, 9:] = 1
    m = PositionIds(past=past)
    g = _graph(m, (ids,))
    ranges, checked = _check_sound(g, (ids,), m(ids))
    assert checked >= 6
    out = g.outputs[0]
    assert ranges[out] == Interval(1, 1 + 13 + past)  # (cumsum in [0,13] + past) * {0,1} + pad
    ne = next(n for n in g.nodes if n.op == "ne")
    # the ids are a model input of unknown range: the compare is not proven
    assert "not proven to fit int32" in int32_problem(ne, ranges)
    assert all(int32_problem(n, ranges) is None for n in g.nodes if n is not ne and n.op != "const")
    # bounded ids (a run-time check of the caller's data): every node is proven
    bounded = int_ranges(g, {g.inputs[0].name: (0, 50264)})
    assert all(int32_problem(n, bounded) is None for n in g.nodes)


class CumsumMask(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x):
        mask = x.gt(0).int()
        s = torch.cumsum(mask, self.dim)
        return s, s * mask - 2, torch.cumsum(x.gt(0).long(), self.dim)


@pytest.mark.parametrize("shape", [(3, 7), (1, 13, 5), (2, 1, 11)], ids=lambda s: "x".join(map(str, s)))
def test_cumsum_of_int_masks_along_each_dim(shape):
    torch.manual_seed(len(shape))
    x = torch.randn(shape)
    for dim in range(len(shape)):
        m = CumsumMask(dim)
        g = _graph(m, (x,))
        ranges, _ = _check_sound(g, (x,), m(x))
        n = shape[dim]
        s, t, s64 = g.outputs
        assert ranges[s] == Interval(0, n) and ranges[s64] == Interval(0, n)
        assert ranges[t] == Interval(-2, n - 2)


class Overflow(nn.Module):
    def forward(self, ids):
        big = ids.ne(0).long() * 1_000_000_000  # [0, 1e9] fits int32 ...
        return torch.cumsum(big, 1)  # ... but a prefix of 3 of them does not


def test_a_cumsum_that_leaves_int32_is_not_proven():
    ids = torch.tensor([[5, 6, 7, 0, 9]])
    m = Overflow()
    g = _graph(m, (ids,))
    ranges, _ = _check_sound(g, (ids,), m(ids), bounds={g.inputs[0].name: (0, 10)})
    bounded = int_ranges(g, {g.inputs[0].name: (0, 10)})
    cs = next(n for n in g.nodes if n.op == "cumsum")
    assert bounded[cs.outputs[0]] == Interval(0, 5_000_000_000)
    assert bounded[cs.inputs[0]].within(INT32)
    why = int32_problem(cs, bounded)
    assert why and "result" in why and "[0, 5000000000]" in why
    assert int(m(ids).max()) > INT32.hi  # eager really leaves int32 here


class WrappingCast(nn.Module):
    def forward(self, ids):
        return (ids.ne(0).long() * (2 ** 40)).int() + 1


def test_a_cast_that_wraps_gets_the_whole_range_of_its_type():
    ids = torch.tensor([[1, 0, 3]])
    m = WrappingCast()
    g = _graph(m, (ids,))
    _check_sound(g, (ids,), m(ids))
    ranges = int_ranges(g)
    cast = next(n for n in g.nodes if n.op == "cast" and n.outputs[0].type.dtype == DType.i32
                and n.inputs[0].type.dtype == DType.i64)
    assert ranges[cast.outputs[0]] == INT32  # PyTorch wraps 2**40 to 0: no narrower claim holds
    assert ranges[g.outputs[0]] == INT32  # INT32 + 1 may wrap in int32: the whole range again


def test_interval_arithmetic_with_signs():
    a, b = Interval(-3, 2), Interval(-5, 7)
    assert a * b == Interval(-21, 15)
    assert a - b == Interval(-10, 7)
    assert a.abs() == Interval(0, 3) and (-a) == Interval(-2, 3)
    assert Interval(-2, 3).prefix_sums(7) == Interval(-14, 21)
    assert Interval(2, 3).prefix_sums(7) == Interval(2, 21)
    assert dtype_range(DType.f32) is None and dtype_range(DType.bool) == Interval(0, 1)
    with pytest.raises(ValueError):
        Interval(1, 0)


class Mixed(nn.Module):
    def forward(self, x, ids):
        m = ids.lt(4)
        w = torch.where(m, ids.clamp(0, 9), torch.full_like(ids, -3))
        return torch.maximum(w, torch.zeros_like(w) - 1).sum(dim=1), torch.cat([w, -w], 1).amax(1)


def test_where_clamp_maximum_sum_concat_are_sound():
    torch.manual_seed(3)
    x, ids = torch.randn(3, 7), torch.randint(-20, 20, (3, 7))
    m = Mixed()
    g = _graph(m, (x, ids))
    ranges, checked = _check_sound(g, (x, ids), m(x, ids))
    assert checked >= 5
    assert ranges[g.outputs[0]] == Interval(-7, 63)
