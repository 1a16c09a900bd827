"""Gathers by indices known only at run time on the NPU (issue 14): ``embedding``,
``index_select``, ``gather`` and ``x[i0, i1, ...]`` (advanced indexing, negative indices counted
from the end as PyTorch does) as one ``gather`` kernel.  fp16: within the accuracy check's
tolerance of PyTorch eager (``max(1e-2, 3 x PyTorch's own fp16 error)``, npuc.report.accuracy);
the gather itself copies fp16 values bit for bit.  int8: bit-exact against the integer reference
(the output keeps the input's parameters).  An index outside its dim stops the run with an
NpucError (PyTorch raises too), never a row of another place."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import npuc
from npuc.report.accuracy import check_outputs


def _cpu_ops(art) -> list[str]:
    return [o.op for o in art.report.cpu_ops]


def _ok(art, m, inputs) -> None:
    checks = check_outputs(art.run(*inputs), m, inputs)
    assert all(c.ok for c in checks), checks


class EmbedLinear(nn.Module):
    def __init__(self, num: int, dim: int, out: int) -> None:
        super().__init__()
        self.emb, self.lin = nn.Embedding(num, dim), nn.Linear(dim, out)

    def forward(self, ids):
        return self.lin(self.emb(ids))


# (table rows, row width, index shape): prime and odd sizes, index ranks 0 to 3
EMBED = [(37, 13, (3, 7)), (101, 64, (1, 16)), (5, 1, (11,)), (7, 3, ()), (23, 17, (2, 3, 5))]


@pytest.mark.parametrize("case", EMBED, ids=lambda c: f"{c[0]}x{c[1]}-idx{'x'.join(map(str, c[2])) or 'scalar'}")
def test_embedding_then_linear_on_the_npu(case):
    num, dim, ishape = case
    torch.manual_seed(num)
    m = EmbedLinear(num, dim, 5)
    ids = torch.randint(0, num, ishape)
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    _ok(art, m, (ids,))


def test_embedding_of_int32_indices_and_the_last_row():
    torch.manual_seed(1)
    m = EmbedLinear(19, 8, 3)
    ids = torch.tensor([[18, 0, 18, 7]], dtype=torch.int32)
    art = npuc.compile(m.eval(), (ids,), target="npu-large")
    assert not art.report.cpu_ops, art.report.explain()
    _ok(art, m, (ids,))


class IndexSelect(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x, i):
        return torch.index_select(torch.relu(x), self.dim, i) * 2.0


class Gather(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x, i):
        return torch.gather(x + 1.0, self.dim, i)


# (x shape, dim, index count): every position of the indexed dim, images (channels-last) included
SELECT = [((5, 7), 0, 3), ((3, 11, 2), 1, 13), ((2, 3, 5, 7), 3, 4), ((1, 3, 5, 7), 1, 2), ((17,), 0, 5)]
# (x shape, index shape, dim)
GATHER = [((5, 7), (3, 7), 0), ((3, 11, 2), (3, 4, 2), 1), ((2, 3, 5, 7), (2, 3, 5, 3), 3), ((2, 3, 5, 7), (1, 2, 3, 4), 2)]


@pytest.mark.parametrize("case", SELECT, ids=lambda c: f"{'x'.join(map(str, c[0]))}-dim{c[1]}-k{c[2]}")
def test_index_select_on_the_npu(case):
    shape, dim, k = case
    g = torch.Generator().manual_seed(k)
    x, i = torch.randn(*shape, generator=g), torch.randint(0, shape[dim], (k,), generator=g)
    m = IndexSelect(dim)
    art = npuc.compile(m.eval(), (x, i), target="npu-mid")
    assert "index_select" not in _cpu_ops(art), art.report.explain()
    _ok(art, m, (x, i))


@pytest.mark.parametrize("case", GATHER, ids=lambda c: f"{'x'.join(map(str, c[0]))}-idx{'x'.join(map(str, c[1]))}-dim{c[2]}")
def test_gather_on_the_npu(case):
    shape, ishape, dim = case
    g = torch.Generator().manual_seed(dim)
    x, i = torch.randn(*shape, generator=g), torch.randint(0, shape[dim], ishape, generator=g)
    m = Gather(dim)
    art = npuc.compile(m.eval(), (x, i), target="npu-mid")
    assert "gather" not in _cpu_ops(art), art.report.explain()
    _ok(art, m, (x, i))


class Adjacent(nn.Module):
    def forward(self, x, i, j):
        return x[i, j] * 3.0


class Separated(nn.Module):
    def forward(self, x, i, j):
        return x[:, i, :, j] + 1.0


class One(nn.Module):
    def forward(self, x, i):
        return x[:, i] - 1.0


def _multi_cases():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(5, 7, 3, 11, generator=g)
    return [
        ("one-negative", One(), (x[:, :, 0], torch.tensor([[0, -1], [3, -7]]))),
        ("adjacent", Adjacent(), (x, torch.tensor([[0, -1, 4], [2, 3, -5]]), torch.tensor([6, -7, 0]))),
        ("separated", Separated(), (x, torch.randint(-7, 7, (2, 3), generator=g), torch.randint(-11, 11, (3,), generator=g))),
    ]


@pytest.mark.parametrize("i", range(3), ids=["one-negative", "adjacent", "separated"])
def test_advanced_indexing_imports_exactly_and_gathers_on_the_npu(i):
    _, m, inputs = _multi_cases()[i]
    with torch.no_grad():
        ref = m(*inputs)
    g = npuc.import_model(m.eval(), inputs)
    (y,) = npuc.interpret(g, *inputs)
    assert torch.equal(y, ref)
    art = npuc.compile(m.eval(), inputs, target="npu-mid")
    assert "index_select" not in _cpu_ops(art), art.report.explain()
    _ok(art, m, inputs)


@pytest.mark.parametrize("bad", [37, -1, 2**32 + 3, -(2**40)], ids=["size", "negative", "wraps-int32", "huge-negative"])
def test_an_index_outside_the_table_stops_the_run_with_an_error(bad):
    torch.manual_seed(0)
    m = EmbedLinear(37, 13, 5)
    ids = torch.randint(0, 37, (3, 7))
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    ids[1, 2] = bad
    with pytest.raises(IndexError):
        m(ids)  # PyTorch refuses it too
    with pytest.raises(npuc.NpucError, match="out of range"):
        art.run(ids)


def test_a_negative_index_of_x_idx_past_the_dim_is_an_error():
    m = One()
    x, i = torch.randn(4, 5), torch.tensor([1, -6])
    art = npuc.compile(m.eval(), (x, torch.tensor([1, -2])), target="npu-mid")
    with pytest.raises(npuc.NpucError):
        art.run(x, i)


def _instructions(art) -> set[str]:
    return {i.op for p in art.programs for i in p.instrs}


@pytest.mark.parametrize("rows,dim,tokens,instr", [(37, 13, 21, "VGATHER"), (70001, 8, 5, "DMA_GATHER"),
                                                   (4096, 64, 8, "DMA_GATHER")])
def test_the_table_is_read_from_the_scratchpad_or_its_rows_from_dram(rows, dim, tokens, instr):
    # the cost walk picks: a small table loaded whole (VGATHER), a large one (more than the
    # scratchpad or than a count field holds) left in DRAM and only the rows read (DMA_GATHER)
    torch.manual_seed(rows)
    m = EmbedLinear(rows, dim, 4)
    ids = torch.randint(0, rows, (1, tokens))
    ids[0, 0] = rows - 1
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    assert instr in _instructions(art) and ({"VGATHER", "DMA_GATHER"} - {instr}).isdisjoint(_instructions(art))
    _ok(art, m, (ids,))
    ids[0, 1] = rows
    with pytest.raises(npuc.NpucError, match=f"{instr} row index {rows} .* out of range"):
        art.run(ids)


# ------------------------------------------------------------------------------ int8

class _Int8Gathers(nn.Module):
    def __init__(self, which: str) -> None:
        super().__init__()
        self.c1, self.c2, self.which = nn.Conv2d(3, 6, 3, padding=1), nn.Conv2d(7, 4, 1), which

    def forward(self, x, i):
        y = torch.relu(self.c1(x))
        if self.which == "index_select":
            return self.c2(torch.index_select(y, 1, i))
        if self.which == "gather":
            return torch.gather(y, 3, i)
        return self.c2(y[:, i])


@pytest.mark.parametrize("which", ["index_select", "gather", "x[idx]"])
def test_int8_gathers_run_on_the_npu_bit_exact(which):
    from npuc.artifact import compile_graph, quantized_graph, resolve_target
    from npuc.interp import interpret
    from npuc.pipeline import run_graph_passes

    torch.manual_seed(3)
    m = _Int8Gathers(which).eval()
    x = torch.randn(1, 3, 7, 5)
    i = torch.randint(0, 5, (1, 6, 7, 3)) if which == "gather" else torch.tensor([5, 0, 0, 3, 1, 2, 4])
    if which == "x[idx]":
        i = i - 6  # negative, counted from the end
    calib = [(torch.randn(1, 3, 7, 5, generator=torch.Generator().manual_seed(s)), i) for s in range(4)]
    tgt = resolve_target("npu-mid")
    g = run_graph_passes(quantized_graph(m, (x, i), tgt, calib, f"int8_{which}"))
    op = "gather" if which == "gather" else "index_select"
    (node,) = [n for n in g.nodes if n.op == op]
    assert node.inputs[0].type.dtype.value == "i8" and node.outputs[0].type.quant == node.inputs[0].type.quant
    art = compile_graph(g, tgt, quantize="int8")
    assert op not in _cpu_ops(art), art.report.explain()
    (out,) = art.run(x, i)
    assert torch.equal(out, interpret(g, x, i)[0])


# ------------------------------------------------------------------------------ models

class PositionIds(nn.Module):
    """RoBERTa's embeddings: position ids from the padding mask (cumsum of the mask, times the
    mask, plus the padding index), word and position embeddings, layer norm, a linear head."""

    def __init__(self, vocab: int = 53, dim: int = 24, pad: int = 1, positions: int = 40) -> None:
        super().__init__()
        self.pad = pad
        self.words = nn.Embedding(vocab, dim, padding_idx=pad)
        self.positions = nn.Embedding(positions, dim, padding_idx=pad)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 7)

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        pos = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        return self.head(self.norm(self.words(ids) + self.positions(pos)))


def test_roberta_position_ids_block_gathers_on_the_npu():
    torch.manual_seed(5)
    m = PositionIds()
    ids = torch.randint(2, 53, (2, 13))
    ids[0, 9:] = 1  # padding at the end of the first sequence
    art = npuc.compile(m.eval(), (ids,), target="npu-mid")
    assert "embedding" not in _cpu_ops(art), art.report.explain()
    _ok(art, m, (ids,))


def test_gather_kernels_print_parse_and_compile_deterministically():
    from npuc.kir.text import parse_kernel, print_kernel
    from npuc.lower.partition import partition
    from npuc.lower.precision import choose_precision
    from npuc.targets import load_target

    torch.manual_seed(2)
    m, ids = PositionIds().eval(), torch.randint(2, 53, (2, 13))
    mid = load_target("npu-mid")
    lowered = partition(npuc.import_model(m, (ids,)), mid, choose_precision(mid, None))
    kernels = [lk for s in lowered.segments for lk in getattr(s, "kernels", ()) if lk.kernel.kind == "gather"]
    assert len(kernels) == 2
    assert all(parse_kernel(print_kernel(lk)) == lk for lk in kernels)
    assert npuc.compile(m, (ids,)).to_bytes() == npuc.compile(m, (ids,)).to_bytes()


@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_dma_gather_copies_rows_bit_for_bit_and_wraps_and_offsets(dtype):
    # the DRAM schedule on its own (a table of more rows than VGATHER's count field): every row
    # equal bit for bit, negative indices counted from the end (wrap), row offsets added
    import numpy as np

    from npuc.codegen.harness import run_kernel
    from npuc.isa.enums import DType
    from npuc.kir.kernel import GatherRowsAttrs, Kernel
    from npuc.kir.tensor import DramTensor
    from npuc.targets import load_target

    dt = DType[dtype]
    rng = np.random.default_rng(7)
    rows, b, size = 70001, 6, 35000
    table = rng.integers(-128, 128, (rows, b)).astype(dt.np)
    idx = rng.integers(-size, size, (3, 7)).astype(np.int64)
    base = np.repeat(np.array([0, size], np.int32), 21 // 2 + 1)[:21]
    k = Kernel("g", "gather", (DramTensor.dense("t", (rows, b), dt), DramTensor.dense("i", (3, 7, 2), DType.int32),
                               DramTensor.dense("b", (21,), DType.int32)),
               DramTensor.dense("y", (21, b), dt), GatherRowsAttrs(size, 1, True), (), dt)
    run = run_kernel(k, load_target("npu-mid"), {"t": table, "i": idx.view(np.int32).reshape(3, 7, 2), "b": base})
    assert "DMA_GATHER" in run.plan.summary
    want = table[np.where(idx < 0, idx + size, idx).reshape(-1) + base]
    assert run.output.tobytes() == want.tobytes()
