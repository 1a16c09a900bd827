"""A layer's bias and REQUANT records (npuc.kir.records) loaded once for the kernel
(``quant_once``), end to end on u55-like-256, whose weights and constants live in flash."""

from __future__ import annotations

import dataclasses

import torch

from npuc import memo
from npuc.artifact import compile_graph
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.kir import records
from npuc.pipeline import run_graph_passes
from npuc.schedule import search
from npuc.targets import load_target


def _flash_reads(art, x) -> int:
    return {r["memory"]: r for r in art.profile(x).memory_figures()}["flash"]["read_bytes"]


def test_a_layers_records_are_read_once_in_whole_bursts(monkeypatch):
    """A 1x1 int8 conv 64 -> 128 at 14x14, computed in channel blocks: its flash reads are its
    weights once plus its bias (int32) and its 5-byte records once, each in whole 128-byte
    bursts, and the run is bit for bit the integer reference.  Without the search's
    ``quant_once`` variants the same layer reads its bias and records with each channel block:
    the same bytes on u55-like-256, whose stream buffers keep the burst where one block's ends,
    more without them."""
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Conv2d(64, 128, 1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 64, 14, 14)
    g = run_graph_passes(import_quantized(m, (x,), [(torch.randn(x.shape),) for _ in range(2)], name="conv"))
    (want,) = interpret(g, x)
    t = load_target("u55-like-256")
    art = compile_graph(g, t, quantize="int8")
    (got,) = art.run(x)
    assert torch.equal(got, want)
    burst = t.memory("flash").burst_bytes
    whole = lambda n: -(-n // burst) * burst  # noqa: E731
    once = _flash_reads(art, x)
    assert once == 128 * 64 + whole(128 * 4) + whole(128 * records.BYTES_PER_CHANNEL)
    monkeypatch.setattr(search, "_quant_once", lambda *a: [])
    memo.forget_all()  # the tiling choices made with the variants
    try:
        blocks = compile_graph(g, t, quantize="int8")
        assert torch.equal(blocks.run(x)[0], want)
        # block by block, the stream buffers (npuc.codegen.constant_streams) share the bursts at
        # the blocks' seams: the same bytes as loading them once
        assert _flash_reads(blocks, x) == once
        plain = dataclasses.replace(t, weight_decoder=dataclasses.replace(t.weight_decoder, stream_buffers=0))
        unstreamed = compile_graph(g, plain, quantize="int8")
        assert torch.equal(unstreamed.run(x)[0], want)
        assert _flash_reads(unstreamed, x) > once
    finally:
        monkeypatch.undo()
        memo.forget_all()  # nor those made without them, for the tests after this one
