"""Weights copied ahead from u55-like-256's flash into its SRAM (npuc.codegen.weight_staging,
plan_prefetch): the memory plan issues the copies kernels ahead of their readers, the weight
compression keeps the copied weights compressed (the copy moves the streams, the reader decodes
them from the SRAM), and the int8 outputs stay bit for bit the integer reference's, without a
race (the simulator checks every run)."""

from __future__ import annotations

import functools

import torch

from npuc.artifact import compile_graph
from npuc.codegen.memory_plan import memory_plan_text
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target


class Head(torch.nn.Module):
    """A conv, a 1x1 conv and a 256 -> 1000 classifier: the classifier reads 256 KB of weights
    once, at the flash's byte a cycle, while the convs before it leave the flash idle."""

    def __init__(self) -> None:
        super().__init__()
        self.c = torch.nn.Conv2d(16, 64, 3, padding=1)
        self.d = torch.nn.Conv2d(64, 256, 1)
        self.fc = torch.nn.Linear(256, 1000)

    def forward(self, x):
        y = torch.relu(self.d(torch.relu(self.c(x))))
        return self.fc(y.mean((2, 3)))


X = torch.randn(1, 16, 32, 32, generator=torch.Generator().manual_seed(1))


@functools.lru_cache(maxsize=1)
def graph():
    torch.manual_seed(0)
    m = Head().eval()
    with torch.no_grad():  # weights that quantize mostly near zero, as trained ones do: the codec has something to save
        for w in (m.fc.weight, m.d.weight):
            w.mul_(0.1)
            w[:, 0] = 0.5
    calibration = [(torch.randn(X.shape, generator=torch.Generator().manual_seed(s)),) for s in (2, 3)]
    return run_graph_passes(import_quantized(m, (X,), calibration, name="head"))


@functools.lru_cache(maxsize=1)
def compiled():
    return compile_graph(graph(), "u55-like-256", quantize="int8")


def test_the_classifier_weights_are_copied_ahead_into_the_sram():
    art = compiled()
    plan = art.compiled.plan
    fc = [f for f in plan.prefetched if f.name == "fc"]
    assert fc and "@fc.weight^T" in fc[0].consts and fc[0].at < fc[0].reader  # issued kernels ahead
    assert "prefetched: @fc.weight^T" in memory_plan_text(plan)
    where = {pl.buffer.name: pl.memory for pl in plan.placed}
    assert where["@fc.weight^T"] == "flash" and where["@fc.weight^T.staged"] == "sram"
    (got,) = art.run(X)
    (want,) = interpret(graph(), X)
    assert torch.equal(got, want)


def test_copied_weights_stay_compressed():
    """The copy reads the constant's streams only (its stored bytes, in whole bursts), and the
    classifier decodes them from the SRAM."""
    art = compiled()
    plan = art.compiled.plan
    fc = next(pl for pl in plan.placed if pl.buffer.name == "@fc.weight^T")
    staged = next(pl for pl in plan.placed if pl.buffer.name == "@fc.weight^T.staged")
    record = {c.offset: c for c in art.compiled.weight_compression.constants}
    assert fc.offset in record and record[fc.offset].stored_bytes < fc.buffer.nbytes // 2
    burst = load_target("u55-like-256").memory("flash").burst_bytes
    copies = [i.args for code in art.compiled.codes for i in code.program.instrs if i.op == "DMA_COPY"
              and fc.offset <= i.args.src_addr < fc.offset + fc.buffer.nbytes]
    assert copies and all(a.dst_addr - staged.offset == a.src_addr - fc.offset for a in copies)
    profile = art.profile(X)
    layer = next(la for la in profile.layers if la.name == "fc.weights")
    assert layer.dram_bytes <= record[fc.offset].stored_bytes + burst
    decoded = [i.args for code in art.compiled.codes for i in code.program.instrs if i.op == "DMA_LOAD_DECODE"
               and staged.offset <= i.args.dram_addr < staged.offset + staged.buffer.nbytes]
    assert decoded
    # the reader's bound counts the copy's stored bytes, as it reads them (a bound no layer beats)
    beaten = [la.name for la in profile.layers if la.span_cycles < la.lower_bound_cycles]
    assert not beaten, beaten
    # every weight byte the network reads from the flash once, compressed where the codec saved
    flash = {r["memory"]: r for r in profile.memory_figures()}["flash"]["read_bytes"]
    stored = {c.offset: c.stored_bytes for c in art.compiled.weight_compression.constants}
    constants = [pl for pl in plan.placed if pl.buffer.kind == "constant" and pl.buffer.nbytes]
    compulsory = sum(stored.get(pl.offset, pl.buffer.nbytes) for pl in constants)
    assert flash <= compulsory + burst * len(constants)


def test_prefetching_is_deterministic_and_faster():
    art = compiled()
    again = compile_graph(graph(), "u55-like-256", quantize="int8")
    assert art.to_bytes() == again.to_bytes()
    from npuc.codegen import memory_plan

    def without(m, resident=False):
        return memory_plan._plan_staged(m, resident)

    saved = memory_plan.plan_memory
    memory_plan.plan_memory = without
    try:
        plain = compile_graph(graph(), "u55-like-256", quantize="int8")
    finally:
        memory_plan.plan_memory = saved
    assert not plain.compiled.plan.prefetched
    fast, slow = art.profile(X), plain.profile(X)
    assert fast.total_cycles < 0.8 * slow.total_cycles
    assert fast.dram_bytes <= slow.dram_bytes


def test_a_copy_whose_reader_may_start_before_it_ends_is_left_raw(monkeypatch):
    """Copied first slice first, the classifier's first load orders after the first slice only:
    repacking the copied bytes could then move bytes it reads into a later slice, so weight
    compression leaves that constant raw (and the outputs stay exact)."""
    from npuc.codegen.kernels import move_copy

    monkeypatch.setattr(move_copy, "copied_constant", lambda name: None)  # every copy in address order
    art = compile_graph(graph(), "u55-like-256", quantize="int8")
    plan = art.compiled.plan
    assert any(f.name == "fc" for f in plan.prefetched)
    fc = next(pl for pl in plan.placed if pl.buffer.name == "@fc.weight^T")
    assert fc.offset not in {c.offset for c in art.compiled.weight_compression.constants}
    (got,) = art.run(X)
    (want,) = interpret(graph(), X)
    assert torch.equal(got, want)
