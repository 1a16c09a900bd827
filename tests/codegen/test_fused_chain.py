"""Fusion across layers (``fused_chain``, npuc/lower/cascade.py): fused chains against PyTorch eager
(fp16) and the integer reference (int8, bit for bit), with stripes that do not divide the heights,
stride 2, padding and residual adds; fewer DRAM bytes than the same layers unfused; the kernel IR
text form of a chain parses back; compiling twice gives the same bytes.  The simulator's race
detector runs on every program (``art.run``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import npuc
from npuc.artifact import compile_graph
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.kir.kernel import qadd_step
from npuc.kir.text import parse_kernel, print_kernel
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target

FP16_TOL = 2e-2  # fp16 storage of every intermediate, fp32 accumulation


class InvertedResidual(torch.nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3 (stride ``stride``), 1x1 project (+ x)."""

    def __init__(self, c: int, e: int, out: int, stride: int) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(c, e, 1)
        self.dw = torch.nn.Conv2d(e, e, 3, stride=stride, padding=1, groups=e)
        self.project = torch.nn.Conv2d(e, out, 1)
        self.residual = stride == 1 and c == out

    def forward(self, x):
        y = self.project(torch.nn.functional.relu6(self.dw(torch.nn.functional.relu6(self.expand(x)))))
        return x + y if self.residual else y


class TwoBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = InvertedResidual(8, 32, 16, 2)
        self.b = InvertedResidual(16, 48, 16, 1)

    def forward(self, x):
        return self.b(self.a(x))


class BasicBlock(torch.nn.Module):
    """ResNet's basic block: 3x3 conv, relu, 3x3 conv, + x, relu."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.c2(torch.relu(self.c1(x))))


class Stem(torch.nn.Module):
    """ResNet's stem and a first conv: 3x3/2 conv, relu, 3x3/2 max pool (padded), 3x3 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        return self.c2(self.pool(torch.relu(self.c1(x))))


class HardswishBlock(torch.nn.Module):
    """MobileNetV3's block without squeeze-excitation: int8 hardswish activations are LUT kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(8, 32, 1)
        self.b = torch.nn.Conv2d(32, 32, 5, stride=2, padding=2, groups=32)
        self.c = torch.nn.Conv2d(32, 8, 1)

    def forward(self, x):
        h = torch.nn.functional.hardswish
        return self.c(h(self.b(h(self.a(x)))))


def small_spad(kib: int):
    """npu-mid with a smaller scratchpad, so that the chains need several stripes."""
    t = load_target("npu-mid")
    return replace(t, scratchpad=replace(t.scratchpad, size_bytes=kib * 1024))


def chains(art):
    return [lk for c in art.compiled.codes for lk in c.segment.kernels if lk.kernel.kind == "fused_chain"]


def stripes(lk) -> int:
    return -(-lk.kernel.output.shape[2] // lk.kernel.attrs.stripe_rows)


@pytest.mark.parametrize("model,shape,kib", [
    (TwoBlocks, (1, 8, 37, 23), 64),
    (lambda: BasicBlock(16), (1, 16, 45, 31), 32),
    (lambda: InvertedResidual(16, 64, 16, 1), (1, 16, 31, 17), 512),
    (Stem, (1, 3, 67, 45), 32),
], ids=["inverted-residual-stride2", "basic-block", "whole-tensors", "conv-maxpool-conv"])
def test_fp16_chains_match_eager_and_move_fewer_bytes(model, shape, kib):
    torch.manual_seed(0)
    m = model().eval()
    x = torch.randn(shape)
    target = small_spad(kib)
    fused = npuc.compile(m, (x,), target=target, fuse_layers=True)
    unfused = npuc.compile(m, (x,), target=target, fuse_layers=False)
    cs = chains(fused)
    assert cs and not chains(unfused)
    if kib < 512:
        assert any(stripes(lk) > 1 for lk in cs)
    (want,) = (m(x),)
    (got,) = fused.run(x)
    err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert err < FP16_TOL
    assert fused.profile(x).dram_bytes < unfused.profile(x).dram_bytes


def _member_kinds(lk) -> set[str]:
    """The kinds of a chain's members, and "qadd" when a member runs a fused residual qadd."""
    members = lk.kernel.attrs.members
    fused = any(qadd_step(e) is not None for mm in members for e in mm.epilogue)
    return {mm.kind for mm in members} | ({"qadd"} if fused else set())


@pytest.mark.parametrize("model,shape,member,kib", [
    (TwoBlocks, (1, 8, 37, 23), "qadd", 48),  # the residual qadd (fused into its conv) inside the chain
    (Stem, (1, 3, 67, 45), "pool2d", 16),  # a padded max pool inside the chain
    (HardswishBlock, (1, 8, 41, 27), "lut", 24),  # LUT activations inside the chain
], ids=["inverted-residual", "conv-maxpool-conv", "hardswish-lut"])
def test_int8_chain_is_bit_exact_with_uneven_stripes(model, shape, member, kib):
    torch.manual_seed(1)
    m = model().eval()
    x = torch.randn(shape)
    calib = [(torch.randn(shape),) for _ in range(2)]
    g = run_graph_passes(import_quantized(m, (x,), calib, name="chain"))
    (want,) = interpret(g, x)
    target = small_spad(kib)
    fused = compile_graph(g, target, quantize="int8", fuse_layers=True)
    cs = chains(fused)
    assert cs and any(stripes(lk) > 1 for lk in cs)
    assert any(member in _member_kinds(lk) for lk in cs)
    (got,) = fused.run(x)
    assert torch.equal(got, want)
    unfused = compile_graph(g, target, quantize="int8", fuse_layers=False)
    assert fused.profile(x).dram_bytes < unfused.profile(x).dram_bytes


def test_chain_text_round_trips_and_compiles_deterministically():
    torch.manual_seed(2)
    m = InvertedResidual(8, 32, 8, 1).eval()
    x = torch.randn(1, 8, 19, 11)
    a = npuc.compile(m, (x,), target=small_spad(64), fuse_layers=True)
    b = npuc.compile(m, (x,), target=small_spad(64), fuse_layers=True)
    assert a.to_bytes() == b.to_bytes()
    (lk,) = chains(a)
    assert parse_kernel(print_kernel(lk)) == lk
    assert "kernel" in print_kernel(lk).split("{", 1)[1]  # members nest in the text form


def test_cycles_not_worse_keeps_only_chains_that_are_not_slower():
    """With ``cycles_not_worse`` every chain the cascade keeps is, by its checked estimate (its
    tile program walked), no slower than its members run one by one, and still saves energy."""
    from npuc.codegen.memory_plan import relocate_kernel
    from npuc.lower.cascade import cascade, fused_estimate, pricing_offsets, unfused_cost
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import backend_stages, import_model

    torch.manual_seed(3)
    m = TwoBlocks().eval()
    x = torch.randn(1, 8, 37, 23)
    target = small_spad(64)
    stages = {s.name: s for s in backend_stages(target, choose_precision(target, None), "two")}
    lowered = import_model(m, (x,), name="two")
    for name in ("io_edges", "partition", "fuse"):
        lowered = stages[name].run(lowered)
    sizes = {b.name: b for b in lowered.buffers}
    kept = {False: 0, True: 0}
    for strict in (False, True):
        for seg in cascade(lowered, cycles_not_worse=strict).segments:
            for lk in getattr(seg, "kernels", ()):
                if lk.kernel.kind != "fused_chain":
                    continue
                kept[strict] += 1
                members = lk.kernel.attrs.members
                offs = pricing_offsets(members, target, sizes)
                fused = fused_estimate(relocate_kernel(lk.kernel, offs), target)
                alone = [unfused_cost(relocate_kernel(k, offs), target) for k in members]
                assert fused.energy_pj < sum(a.energy_pj for a in alone)
                if strict:
                    assert fused.cycles <= sum(a.cycles for a in alone)
    assert kept[False] > 0  # the energy objective alone fuses this model


def test_int8_chain_keeps_its_intermediates_in_sram_where_the_scratchpad_is_small():
    """On u65-like-256 (32 KiB of scratchpad beside 384 KiB of SRAM, DRAM behind) an inverted
    residual block's expanded tensor does not fit the SRAM whole: run one layer at a time it goes
    to DRAM and back.  Fused with its stripes in an SRAM block of its own (``sram_bytes``), only
    the block's input, constants and output move off chip; bit for bit the integer reference's."""
    from npuc.schedule.cascade_cost import STRIPES

    torch.manual_seed(4)
    m = InvertedResidual(16, 96, 24, 2).eval()
    shape = (1, 16, 72, 60)  # the expanded tensor: 96 x 72 x 60 = 414,720 B
    x = torch.randn(shape)
    calib = [(torch.randn(shape),) for _ in range(2)]
    g = run_graph_passes(import_quantized(m, (x,), calib, name="sram-chain"))
    (want,) = interpret(g, x)
    target = load_target("u65-like-256")
    fused = compile_graph(g, target, quantize="int8", fuse_layers=True)
    (lk,) = chains(fused)
    assert lk.kernel.attrs.sram_bytes and stripes(lk) > 1
    block = lk.kernel.inputs[-1].name
    assert block.endswith(STRIPES)
    placed = {p.buffer.name: p.memory for p in fused.compiled.plan.placed}
    assert placed[block] == "sram"
    (got,) = fused.run(x)
    assert torch.equal(got, want)
    unfused = compile_graph(g, target, quantize="int8", fuse_layers=False)
    assert 4 * fused.profile(x).dram_bytes < unfused.profile(x).dram_bytes
    assert fused.to_bytes() == compile_graph(g, target, quantize="int8", fuse_layers=True).to_bytes()


def u65_block(name: str):
    """An int8 inverted residual block 16 -> 96 -> 3x3/2 -> 24 at 72x60 (its expanded tensor
    does not fit u65-like-256's SRAM whole), an input and the integer reference's output."""
    torch.manual_seed(4)
    m = InvertedResidual(16, 96, 24, 2).eval()
    shape = (1, 16, 72, 60)
    x = torch.randn(shape)
    calib = [(torch.randn(shape),) for _ in range(2)]
    g = run_graph_passes(import_quantized(m, (x,), calib, name=name))
    (want,) = interpret(g, x)
    return g, x, want


def test_every_other_band_at_the_top_runs_a_member_under_the_one_before(monkeypatch):
    """A chain's members plan in one part of the scratchpad and the accumulator; a member's band
    loading into the buffers the band before it used waits until that band has read its last
    tile.  On u65-like-256 the block's bands fill the members' part but not the accumulator, so
    every other band at the top (``PLACEMENTS``) lets the next band's loads and first tiles run
    under the last work of the one before: the plan takes it, the result is the integer
    reference's bit for bit, and the same chain with every band at the bottom is slower in the
    simulator while moving the same bytes.  The chain stages its input (``read_in_place`` off),
    so that the members' part is as small as where the placement was measured."""
    from npuc.codegen.kernels import fused_chain
    from npuc.lower import cascade

    monkeypatch.setattr(cascade, "read_in_place", lambda *args: False)
    g, x, want = u65_block("top-bands")
    target = load_target("u65-like-256")

    def compiled():
        art = compile_graph(g, target, quantize="int8", fuse_layers=True)
        (plan,) = [p for c in art.compiled.codes for p in c.plans if isinstance(p.details, fused_chain.ChainPlan)]
        return art, plan

    top, plan = compiled()
    assert plan.details.alternate and "at the top" in plan.summary
    assert plan.acc_bytes == target.accumulator.size_bytes
    (got,) = top.run(x)
    assert torch.equal(got, want)
    monkeypatch.setattr(fused_chain, "PLACEMENTS", (False,))
    bottom, bottom_plan = compiled()
    assert not bottom_plan.details.alternate
    (got,) = bottom.run(x)
    assert torch.equal(got, want)
    (lk,) = chains(top)
    (lk_bottom,) = chains(bottom)
    assert lk.kernel.attrs == lk_bottom.kernel.attrs  # the same chain, placed two ways
    p_top, p_bottom = top.profile(x), bottom.profile(x)
    assert p_top.dram_bytes == p_bottom.dram_bytes
    assert p_top.total_cycles < 0.97 * p_bottom.total_cycles  # 206,958 against 217,160 when written


def test_a_chain_reads_an_input_in_sram_where_it_lies_when_that_is_faster(monkeypatch):
    """On u65-like-256 the block's input fits the 384 KiB SRAM.  Staged, a stripe of it takes
    scratchpad the members' bands would use; read where it lies, each member's read of it is a
    transfer from the SRAM again.  The cascade prices both (``read_in_place``; reading in place
    must win with the input off chip too, ``spilled``) and keeps the faster: the chain reads its input in place, its plan says so, its output is the integer
    reference's bit for bit, it moves no more off-chip bytes, and it runs faster in the
    simulator than the same block made to stage its input.  Its kernel text round-trips with the
    choice in it."""
    from npuc.lower import cascade
    from npuc.schedule.cascade_cost import staged_inputs

    g, x, want = u65_block("in-place")
    target = load_target("u65-like-256")
    in_place = compile_graph(g, target, quantize="int8", fuse_layers="not-slower")
    (lk,) = chains(in_place)
    a = lk.kernel.attrs
    assert staged_inputs(a.members, a.intermediates) and not a.staged
    (plan,) = [p for c in in_place.compiled.codes for p in c.plans if p.summary.startswith(f"{len(a.members)} layers")]
    assert "inputs read where they lie" in plan.summary
    placed = {p.buffer.name: p.memory for p in in_place.compiled.plan.placed}
    assert placed[lk.kernel.inputs[0].name] == "sram"
    (got,) = in_place.run(x)
    assert torch.equal(got, want)
    assert parse_kernel(print_kernel(lk.kernel)) == lk.kernel
    ins = staged_inputs(a.members, a.intermediates)  # it also won priced with its input off chip
    moved = cascade.spilled(target, a.members, a.intermediates, {t.name: 0 for t in ins})
    assert {target.window_at(moved[t.name] + t.addr).memory.kind for t in ins} == {"dram"}

    monkeypatch.setattr(cascade, "read_in_place", lambda *args: False)
    staged = compile_graph(g, target, quantize="int8", fuse_layers="not-slower")
    (lk_staged,) = chains(staged)
    assert lk_staged.kernel.attrs.staged
    (got,) = staged.run(x)
    assert torch.equal(got, want)
    p_in, p_staged = in_place.profile(x), staged.profile(x)
    assert p_in.dram_bytes <= p_staged.dram_bytes
    assert p_in.total_cycles < 0.95 * p_staged.total_cycles  # 184,805 against 199,759 when written


def test_pricing_puts_a_tensor_in_the_fastest_memory_with_room_for_it():
    """The cascade prices a run with its tensors where the memory plan will likely put them: on
    u65-like-256 an activation that fits the 384 KiB SRAM beside the run's others there, a larger
    one in DRAM, constants in DRAM; a fused block past the SRAM's tensors.  On npu-mid (one
    DRAM) activations from its start and constants 16 MiB above."""
    from npuc.kir.kernel import Kernel
    from npuc.kir.program import ACTIVATION, CONSTANT, Buffer
    from npuc.kir.tensor import DramTensor
    from npuc.isa.enums import DType
    from npuc.lower.cascade import pricing_offsets
    from npuc.schedule.cascade_cost import STRIPES

    def t(name, n):
        return DramTensor(name, (n,), DType.int8)

    k = Kernel("k", "eltwise", (t("small", 100_000), t("big", 500_000), t("w", 4096)), t("out", 20_000),
               None, (), DType.int8)
    sizes = {b.name: b for b in (Buffer("small", 100_000, ACTIVATION), Buffer("big", 500_000, ACTIVATION),
                                 Buffer("w", 4096, CONSTANT), Buffer("out", 20_000, ACTIVATION))}
    u65 = load_target("u65-like-256")
    offs = pricing_offsets((k,), u65, sizes)
    where = {name: u65.window_at(a).memory.name for name, a in offs.items()}
    assert where == {"small": "sram", "big": "dram", "w": "dram", "out": "sram", STRIPES: "sram"}
    assert offs[STRIPES] >= offs["out"] + 20_000 > offs["small"] + 100_000  # past the SRAM's tensors
    mid = load_target("npu-mid")
    offs = pricing_offsets((k,), mid, sizes)
    assert (offs["small"], offs["big"], offs["w"]) == (0, 100_032, 1 << 24) and offs["out"] == 600_064
    assert STRIPES not in offs
