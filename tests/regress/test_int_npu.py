"""Integer arithmetic proven to fit int32 on the NPU (issue 14, npuc/lower/rules_int.py): RoBERTa's
position ids, cumsum of int masks along every dim, the two-word equality of int64 token ids of any
value, and what stays on the CPU (a value the range analysis cannot bound within int32, an int64
model output).  Every comparison with eager is exact integer equality."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import npuc


def _cpu_ops(art) -> list[str]:
    return [o.op for o in art.report.cpu_ops]


def _exact(art, m, inputs) -> None:
    got, want = art.run(*inputs), m(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)


class PositionIds(nn.Module):
    """transformers' create_position_ids_from_input_ids (RoBERTa), as int32."""

    def __init__(self, pad: int = 1, past: int = 0) -> None:
        super().__init__()
        self.pad, self.past = pad, past

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        pos = (torch.cumsum(mask, dim=1).type_as(mask) + self.past) * mask
        return (pos.long() + self.pad).int()


@pytest.mark.parametrize("past", [0, 5])
def test_roberta_position_ids_run_on_the_npu_exactly(past):
    torch.manual_seed(past)
    ids = torch.randint(2, 50265, (3, 17))
    ids[0, 11:] = 1  # padding at the end
    ids[1, :4] = 1  # and at the start
    m = PositionIds(past=past)
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    _exact(art, m, (ids,))


def test_token_ids_of_any_int64_value_compare_by_both_words():
    # the padding index 1 in the low word with another high word is not padding; ids of the
    # whole int64 range need no run-time check
    ids = torch.tensor([[1, 1 + 2 ** 32, -(2 ** 63), 2 ** 63 - 1, 1, -1 + 2 ** 32, 7, 1 - 2 ** 32]])
    m = PositionIds()
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    _exact(art, m, (ids,))
    eq = EqualTo()
    art = npuc.compile(eq.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    _exact(art, eq, (ids,))


class EqualTo(nn.Module):
    def forward(self, ids):
        return ids.eq(-1 + 2 ** 32).int() * 3 - ids.eq(1).int()


class CumsumMask(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x):
        mask = x.gt(0).int()
        return torch.cumsum(mask, self.dim).int(), (torch.cumsum(mask, self.dim) * mask - 2).int()


@pytest.mark.parametrize("shape", [(3, 7), (2, 13, 5), (1, 1, 31), (17,)], ids=lambda s: "x".join(map(str, s)))
def test_cumsum_of_int_masks_along_each_dim(shape):
    torch.manual_seed(len(shape))
    x = torch.randn(shape)
    for dim in range(len(shape)):
        m = CumsumMask(dim)
        art = npuc.compile(m.eval(), (x,), target="npu-mid")
        # gt of a float input is a float mask: its cast to int32 stays on the CPU; the sums run on the NPU
        assert "cumsum" not in _cpu_ops(art), art.report.explain()
        _exact(art, m, (x,))


class IdsCumsum(nn.Module):
    def forward(self, ids):
        return torch.cumsum(ids.ne(0).int(), 1).int() * 2


def test_cumsum_of_int_masks_of_ids_along_a_prime_length():
    torch.manual_seed(9)
    ids = torch.randint(0, 3, (2, 97))
    m = IdsCumsum()
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    _exact(art, m, (ids,))


class Overflow(nn.Module):
    def forward(self, ids):
        big = ids.ne(0).long() * 1_000_000_000  # fits int32 ...
        return torch.cumsum(big, 1).int()  # ... but 3 of them summed do not (and the cast wraps)


def test_a_cumsum_that_would_overflow_int32_stays_on_the_cpu():
    ids = torch.tensor([[5, 6, 7, 0, 9]])
    m = Overflow()
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    reasons = {o.op: o.reason for o in art.report.cpu_ops}
    assert "cumsum" in reasons and "not proven to fit int32" in reasons["cumsum"], art.report.explain()
    _exact(art, m, (ids,))  # eager's int64 sums, wrapped by its own cast


class Int64Out(nn.Module):
    def forward(self, ids):
        return torch.cumsum(ids.ne(1).int(), 1) + 1, ids.ne(1).float()


def test_int64_outputs_and_float_readers_of_int_masks_stay_on_the_cpu():
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2]])
    m = Int64Out()
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    reasons = {o.op: o.reason for o in art.report.cpu_ops}
    assert "int64 model output" in reasons.get("add", "") or "i64 model output" in reasons.get("add", ""), \
        art.report.explain()
    assert "cumsum" not in reasons, art.report.explain()
    _exact(art, m, (ids,))


def test_integer_kernels_compile_deterministically():
    ids = torch.randint(2, 99, (2, 9))
    m = PositionIds(past=2)
    assert npuc.compile(m, (ids,)).to_bytes() == npuc.compile(m, (ids,)).to_bytes()


class TokenTypes(nn.Module):
    """RoBERTa's token type ids: a constant int64 buffer gathered by the position ids."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("types", torch.tensor([[0, 1, 1, 0, 2, 0, 1, 0, 0, 3, 1, 0, 2, 2, 0, 1, 4]]))

    def forward(self, ids):
        mask = ids.ne(1).int()
        pos = torch.cumsum(mask, dim=1).type_as(mask) * mask
        return torch.gather(self.types, 1, pos.long() + 1).int()


def test_gather_of_an_integer_table_by_position_ids_on_the_npu():
    torch.manual_seed(4)
    ids = torch.randint(2, 30, (1, 15))
    ids[0, 12:] = 1
    m = TokenTypes()
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    _exact(art, m, (ids,))


def test_roberta_tiny_runs_every_op_on_the_npu():
    tf = pytest.importorskip("transformers")
    from npuc.report.accuracy import check_outputs

    class Out(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(ids).last_hidden_state

    torch.manual_seed(0)
    cfg = tf.RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=40)
    m = Out(tf.RobertaModel(cfg, add_pooling_layer=False)).eval()
    ids = torch.randint(3, 100, (1, 12))
    ids[0, 9:] = cfg.pad_token_id
    art = npuc.compile(m, (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    checks = check_outputs(art.run(ids), m, (ids,))
    assert all(c.ok for c in checks), checks


class SignedScan(nn.Module):
    """Negative partial sums, a compare of bounded values and maximum/minimum of integers."""

    def forward(self, ids):
        step = ids.ne(0).int() * 2 - 1  # [-1, 1]
        cs = torch.cumsum(step, 1)  # [-n, n], int64
        low = cs.lt(-2).int() - cs.ge(3).int()
        return (torch.maximum(cs, torch.full_like(cs, -4)) * 10 + low).int(), torch.minimum(cs, low.long()).int()


@pytest.mark.parametrize("n", [2, 3, 29])
def test_signed_scans_compares_and_extrema_on_the_npu(n):
    torch.manual_seed(n)
    ids = torch.randint(0, 2, (3, n))
    m = SignedScan()
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    _exact(art, m, (ids,))


class StridedView(nn.Module):
    """A bounded int64 CPU result the NPU reads in place (its int32 words) and multiplies in
    int32, and an int32 NPU result the CPU reads back."""

    def forward(self, ids):
        small = ids.clamp(0, 9)  # on the CPU, [0, 9]
        return (small.int() * 3).float() + small.int().float()


def test_integers_cross_between_the_cpu_and_the_npu_exactly():
    ids = torch.tensor([[3, -4, 12, 7, 0, 9]])
    m = StridedView()
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    ops = _cpu_ops(art)
    assert "mul" not in ops, art.report.explain()
    _exact(art, m, (ids,))
