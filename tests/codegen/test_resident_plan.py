"""Activations kept in the scratchpad across kernels (``resident=True``: npuc/codegen/resident_plan.py,
npuc/codegen/local_memory.py): against PyTorch eager (fp16) and the integer reference (int8, bit
for bit) with tensors on chip, on npu-mid, u55-like-256 and u65-like-256, unfused and with fused
chains; fewer off-chip bytes than the same model without the plan; the plan printed; the same
bytes twice.  ``art.run`` runs the simulator's race detector on every program, so each run here
also checks that the cross-kernel accesses of the on-chip tensors are ordered."""

from __future__ import annotations

import pytest
import torch

import npuc
from npuc.artifact import compile_graph
from npuc.codegen.local_memory import RESIDENT_BASE
from npuc.codegen.memory_plan import memory_plan_text
from npuc.codegen.resident_plan import split_sizes
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target

FP16_TOL = 2e-2


class Blocks(torch.nn.Module):
    """Two MobileNetV2 inverted residual blocks (the second with its residual add)."""

    def __init__(self) -> None:
        super().__init__()

        def block(c, e, o, s):
            return torch.nn.Sequential(torch.nn.Conv2d(c, e, 1), torch.nn.ReLU6(),
                                       torch.nn.Conv2d(e, e, 3, s, 1, groups=e), torch.nn.ReLU6(),
                                       torch.nn.Conv2d(e, o, 1))
        self.a = block(8, 32, 16, 2)
        self.b = block(16, 48, 16, 1)

    def forward(self, x):
        y = self.a(x)
        return y + self.b(y)


class Residual(torch.nn.Module):
    """A ResNet basic block after a stem conv: the block input is read twice (conv and add)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, 2, 1)
        self.c1 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        return torch.relu(s + self.c2(torch.relu(self.c1(s))))


def on_chip(art) -> dict[str, int]:
    """Buffer -> scratchpad address of the tensors the plan keeps on chip."""
    return {p.buffer.name: p.offset - RESIDENT_BASE for p in art.compiled.plan.placed if p.memory == "scratchpad"}


@pytest.mark.parametrize("model,shape,target", [
    (Blocks, (1, 8, 33, 27), "npu-mid"),
    (Residual, (1, 3, 40, 36), "npu-mid"),
], ids=["blocks-mid", "residual-mid"])
def test_fp16_resident_matches_eager_and_moves_fewer_bytes(model, shape, target):
    torch.manual_seed(0)
    m = model().eval()
    x = torch.randn(shape)
    on = npuc.compile(m, (x,), target=target, resident=True, fuse_layers=False)
    off = npuc.compile(m, (x,), target=target, resident=False, fuse_layers=False)
    kept = on_chip(on)
    assert kept and not on_chip(off)
    size = load_target(target).scratchpad.size_bytes
    r = on.compiled.plan.resident_bytes
    assert r in split_sizes(load_target(target)) and all(size - r <= a < size for a in kept.values())
    want = m(x)
    (got,) = on.run(x)
    assert (got - want).abs().max().item() / max(1.0, want.abs().max().item()) < FP16_TOL
    assert on.profile(x).dram_bytes < off.profile(x).dram_bytes


@pytest.mark.parametrize("target", ["npu-mid", "u55-like-256", "u65-like-256"])
def test_int8_resident_is_bit_exact(target):
    torch.manual_seed(1)
    m = Blocks().eval()
    shape = (1, 8, 29, 23) if target == "npu-mid" else (1, 8, 17, 13)  # 32 KiB scratchpads: smaller tensors
    x = torch.randn(shape)
    calib = [(torch.randn(shape),) for _ in range(2)]
    g = run_graph_passes(import_quantized(m, (x,), calib, name="blocks"))
    (want,) = interpret(g, x)
    on = compile_graph(g, target, quantize="int8", resident=True, fuse_layers=False)
    (got,) = on.run(x)
    assert torch.equal(got, want)
    off = compile_graph(g, target, quantize="int8", resident=False, fuse_layers=False)
    assert on_chip(on)
    pon, poff = on.profile(x), off.profile(x)
    assert pon.dram_bytes <= poff.dram_bytes and pon.energy_pj < poff.energy_pj


def test_resident_with_fused_chains_matches_and_is_deterministic():
    torch.manual_seed(2)
    m = Residual().eval()
    x = torch.randn(1, 3, 40, 36)
    a = npuc.compile(m, (x,), target="npu-mid", resident=True, fuse_layers=True)
    b = npuc.compile(m, (x,), target="npu-mid", resident=True, fuse_layers=True)
    assert a.to_bytes() == b.to_bytes()
    want = m(x)
    (got,) = a.run(x)
    assert (got - want).abs().max().item() / max(1.0, want.abs().max().item()) < FP16_TOL


def test_plan_prints_where_each_tensor_lives_and_when():
    torch.manual_seed(3)
    m = Blocks().eval()
    x = torch.randn(1, 8, 33, 27)
    art = npuc.compile(m, (x,), target="npu-mid", resident=True)
    text = memory_plan_text(art.compiled.plan)
    assert "on chip:" in text and "of the scratchpad keep" in text
    lines = {ln.split()[6]: ln for ln in text.splitlines() if ln.lstrip().startswith("spad 0x")}
    assert set(lines) == set(on_chip(art))
    for name, addr in on_chip(art).items():
        assert f"spad 0x{addr:06x}" in lines[name] and " steps " in lines[name] and "saves" in lines[name]


def test_inspect_shows_the_tensors_kept_on_chip(tmp_path):
    from click.testing import CliRunner

    from npuc.cli import main

    torch.manual_seed(4)
    m = Residual().eval()
    x = torch.randn(1, 3, 40, 36)
    art = npuc.compile(m, (x,), target="npu-mid", resident=True)
    path = tmp_path / "r.npub"
    art.save(path)
    out = CliRunner().invoke(main, ["inspect", str(path)])
    assert out.exit_code == 0, out.output
    assert "kept in the scratchpad across kernels" in out.output
    for name, addr in on_chip(art).items():
        assert any(name in ln and f"scratchpad 0x{addr:06x}" in ln for ln in out.output.splitlines())
    (got,) = npuc.load(path, target="npu-mid").run(x)  # the binary is for the target, not a variant of it
    assert torch.equal(got, art.run(x)[0])


def test_prefetch_bases_keep_consecutive_kernels_apart():
    from npuc.codegen.prefetch import scratchpad_bases

    sizes, limits = [1000, 3000, 500, 4000, 100, 8100], [8192, 8192, 8192, 6000, 8192, 8192]
    bases = scratchpad_bases(sizes, limits)
    assert bases == [0, 1024, 0, 512, 0, 0]  # below the previous kernel, else above it, else (8100 B) from 0
    spans = [(b, b + -(-n // 64) * 64) for b, n in zip(bases, sizes)]
    assert all(hi <= lim for (_, hi), lim in zip(spans, limits))
    assert all(not (a0 < b1 and b0 < a1) for (a0, a1), (b0, b1) in zip(spans[:-1], spans[1:-1]))


def test_shifted_emitter_moves_scratchpad_regions_only():
    from npuc.codegen.emitter import Emitter
    from npuc.codegen.prefetch import ShiftedEmitter

    t = load_target("npu-mid")
    em = Emitter(t)
    sh = ShiftedEmitter(em, t, 4096, t.scratchpad.size_bytes)
    sh.emit("DMA_LOAD", local="spad", esize=2, dram_addr=0x100, local_addr=0x40, n0=8)
    sh.emit("DMA_LOAD", local="acc", esize=4, dram_addr=0x200, local_addr=0x40, n0=8)
    sh.emit("VUN", op="copy", dtype="fp16", n0=8, dst=0x80, src=0x40)
    prog, _ = em.finish()
    a, b, c = prog.instrs[:3]
    assert a.args.local_addr == 0x40 + 4096 and a.args.dram_addr == 0x100
    assert b.args.local_addr == 0x40  # the accumulator does not move
    assert c.args.dst == 0x80 + 4096 and c.args.src == 0x40 + 4096


# Fused as well as resident, the same network is checked by tests/e2e/test_zoo_se.py's int8 test.
@pytest.mark.zoo
def test_zoo_mobilenet_v3_small_int8_resident_is_bit_exact():
    from npuc.zoo import ZOO, load_model

    name = "torchvision:mobilenet_v3_small"
    model, inputs = load_model(name)
    g = run_graph_passes(import_quantized(model, inputs, [ZOO[name].make_inputs(s) for s in (1, 2)], name=name))
    want = interpret(g, *inputs)
    art = compile_graph(g, "npu-mid", quantize="int8", resident=True, fuse_layers=False)
    assert on_chip(art)
    outs, prof = art.run_profiled(*inputs)
    assert all(torch.equal(a, b) for a, b in zip(outs, want))
    beaten = [la.name for la in prof.layers if la.span_cycles < la.lower_bound_cycles]
    assert not beaten, f"layers beat their lower bound: {beaten[:5]}"


class TwoConvs(torch.nn.Module):
    """A 3x3 conv to 384 channels on u55-like-256 whose fastest tilings leave no room to load its
    REQUANT records (1,920 B) once (npuc.schedule.search, ``quant_once``): they are read per
    channel block, each a 128-byte flash burst or more; staged in the SRAM (32-byte bursts) they
    cost less.  (Its weights the tiling search reads once.)"""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(32, 384, 3, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_flash_weights_read_again_are_staged_in_sram_on_u55():
    torch.manual_seed(5)
    m = TwoConvs().eval()
    shape = (1, 16, 16, 16)
    x = torch.randn(shape)
    g = run_graph_passes(import_quantized(m, (x,), [(torch.randn(shape),) for _ in range(2)], name="convs"))
    (want,) = interpret(g, x)
    on = compile_graph(g, "u55-like-256", quantize="int8", resident=True, fuse_layers=False)
    off = compile_graph(g, "u55-like-256", quantize="int8", resident=False, fuse_layers=False)
    staged = on.compiled.plan.staged
    assert staged and all(reader == "b" for reader, _ in staged.values())
    assert any(lk.kernel.kind == "copy" and lk.name == "b.weights" for c in on.compiled.codes for lk in c.segment.kernels)
    assert "staged:" in memory_plan_text(on.compiled.plan)
    (got,) = on.run(x)
    assert torch.equal(got, want)
    flash = {}
    for art in (on, off):
        f = {r["memory"]: r for r in art.profile(x).memory_figures()}
        flash[art is on] = f["flash"]["read_bytes"]
    weights = sum(b.nbytes for b in off.compiled.plan.model.buffers if b.kind == "constant")
    # the plain compile now keeps these weights whole in the scratchpad (read once); the on-chip
    # plan, which shrinks the scratchpad, must not read them more often than that
    assert flash[True] <= flash[False] and flash[True] <= 1.1 * weights


def test_weight_loads_are_counted_as_streams_on_a_target_with_a_weight_decoder():
    """The planner's byte count of a k-major weight block (16-channel runs, 64 B apart) on
    u55-like-256: as the one contiguous run the weight decoder's streams make of it, not a
    128-byte flash burst for every 16-byte run; activations keep their strided runs."""
    from npuc.codegen.resident_plan import _Counter

    t = load_target("u55-like-256")
    load = dict(esize=1, dram_addr=0, local_addr=0, n0=16, n1=64, n2=9, dram_s0=1, dram_s1=64, dram_s2=4096,
                local_s1=16, local_s2=1024)
    raw = _Counter(t, [(0, 36864, "w")], {"w": 128})
    streamed = _Counter(t, [(0, 36864, "w")], {"w": 128}, frozenset({"w"}))
    raw.emit("DMA_LOAD", **load)
    streamed.emit("DMA_LOAD", **load)
    assert streamed.loads["w"] == 16 * 64 * 9  # 9216 B: 72 whole bursts
    assert raw.loads["w"] == 64 * 9 * 128  # a burst per run
