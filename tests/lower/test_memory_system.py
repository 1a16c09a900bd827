"""The memory plan across a target's memories and what the profile says of it: constants in the
weights memory, inputs, outputs and activations in the fastest memory that holds them by liveness,
spilling to the next; int8 bit-exact with no race on the Ethos-U-like presets; per-memory figures
that sum to the totals; lower bounds no layer beats."""

from __future__ import annotations

import functools

import pytest
import torch
from lowerlib import PRESETS, SmallCnn, seeded

from npuc.artifact import compile_graph
from npuc.codegen.memory_plan import check_no_overlap, greedy_by_size, plan_memory
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.kir.program import ACTIVATION, CONSTANT, INPUT, OUTPUT
from npuc.lower.precision import choose_precision
from npuc.lower.fusion import fuse
from npuc.lower.partition import partition
from npuc.pipeline import run_graph_passes
from npuc.targets import load_target, target_from_toml

X = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))


def shrunk_u65(sram_bytes: int):
    """u65-like-256 with a smaller SRAM, so that some activations spill to DRAM."""
    text = (PRESETS / "u65-like-256.toml").read_text()
    text = text.replace("size_bytes = 393216        # 384 KiB (Dedicated_Sram_384KB)", f"size_bytes = {sram_bytes}")
    text = text.replace('name = "u65-like-256"', 'name = "u65-small-sram"')
    return target_from_toml(text, "test")


@functools.lru_cache(maxsize=1)
def int8_graph():
    model = seeded(SmallCnn())
    calibration = [(torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(s)),) for s in (1, 2)]
    return run_graph_passes(import_quantized(model, (X,), calibration, name="smallcnn"))


def planned(target):
    g = int8_graph()
    return plan_memory(fuse(partition(g, target, choose_precision(target, "int8"))))


def live_peak(model) -> int:
    """The most activation bytes live at once, by the memory plan's lifetimes."""
    from npuc.codegen.memory_plan import align, lifetimes

    life = lifetimes(model)
    live: dict[int, int] = {}
    for b in model.buffers:
        if b.kind == ACTIVATION and b.name in life:
            for step in range(life[b.name][0], life[b.name][1] + 1):
                live[step] = live.get(step, 0) + align(b.nbytes)
    return max(live.values())


def _memory_of(target, placed):
    return target.window_at(placed.offset).memory.name


def test_u55_constants_in_flash_activations_and_io_in_sram():
    t = load_target("u55-like-256")
    p = planned(t)
    check_no_overlap(p)
    kinds = {pl.buffer.kind for pl in p.placed}
    assert {CONSTANT, INPUT, OUTPUT, ACTIVATION} <= kinds
    for pl in p.placed:
        assert _memory_of(t, pl) == pl.memory == ("flash" if pl.buffer.kind == CONSTANT else "sram")
        assert t.window_at(pl.offset, pl.offset + max(pl.buffer.nbytes, 1)) is not None
    use = {u.memory: u for u in p.memories}
    assert use["flash"].constants == use["flash"].used >= len(p.constants)
    assert use["sram"].constants == 0 and use["sram"].io > 0 and use["sram"].activations == p.activation_peak
    assert p.arena_size == t.window_of("flash").base + use["flash"].used


def test_activations_spill_from_a_small_sram_to_dram_by_liveness():
    full = planned(load_target("u65-like-256"))
    assert {pl.memory for pl in full.placed if pl.buffer.kind == ACTIVATION} == {"sram"}
    io = {u.memory: u for u in full.memories}["sram"].io
    t = shrunk_u65(-(-(io + full.activation_peak // 2) // 64) * 64)
    p = planned(t)
    peak = live_peak(p.model)  # its own activations (weights copied ahead among them, if any)
    check_no_overlap(p)
    where = {pl.buffer.name: pl.memory for pl in p.placed if pl.buffer.kind == ACTIVATION}
    assert set(where.values()) == {"sram", "dram"}
    use = {u.memory: u for u in p.memories}
    assert use["sram"].used <= t.memory("sram").size_bytes
    assert 0 < use["dram"].activations and use["sram"].activations + use["dram"].activations >= peak
    assert any(r[0] == "activations.dram" for r in p.regions)


def test_greedy_leaves_out_what_does_not_fit_the_room():
    from npuc.kir.program import Buffer

    bufs = [Buffer(n, s, ACTIVATION) for n, s in (("a", 640), ("b", 640), ("c", 64))]
    life = {"a": (0, 1), "b": (1, 2), "c": (2, 3)}
    offsets, peak, left = greedy_by_size(bufs, life, room=704)
    assert [b.name for b in left] == ["b"] and offsets == {"a": 0, "c": 0} and peak == 640


@pytest.mark.parametrize("target", ["u55-like-256", "u65-like-256", "spill"])
def test_int8_bit_exact_and_race_free_on_the_memory_systems(target):
    t = shrunk_u65(128 * 1024) if target == "spill" else load_target(target)
    g = int8_graph()
    art = compile_graph(g, t, quantize="int8")
    (got,) = art.run(X)  # the simulator checks every pair of instructions for races
    (ref,) = interpret(g, X)
    assert torch.equal(got, ref)
    prof = art.profile(X)
    assert art.to_bytes() == compile_graph(g, t, quantize="int8").to_bytes()
    _check_profile(prof)


def _check_profile(prof):
    t = prof.target
    figures = prof.memory_figures()
    assert [f["memory"] for f in figures] == [m.name for m in t.memories]
    off_chip = [f for f in figures if f["kind"] != "sram"]  # flash and DRAM: Profile.dram_bytes
    assert sum(f["read_bytes"] + f["write_bytes"] for f in off_chip) == prof.dram_bytes
    traffic = prof.memory_traffic()
    assert sum(f["read_bytes"] for f in off_chip) == traffic["dram_read"]
    assert sum(f["write_bytes"] for f in off_chip) == traffic["dram_write"]
    dma_energy = sum(f["energy_pj"] for f in figures)
    other = sum(sum(r.sim.energy_breakdown_pj[k] for k in r.sim.energy_breakdown_pj if k not in [m.name for m in t.memories])
                for r in prof.runs if r.kind != "cpu")
    assert dma_energy + other == pytest.approx(prof.energy_pj, rel=1e-9)
    for layer in prof.layers:
        assert layer.span_cycles >= layer.lower_bound_cycles, layer
    assert prof.lower_bound_cycles <= prof.total_cycles
    comp = dict(prof.compulsory)
    assert comp[t.weight_memory.name] > 0  # the weights, in their memory
    assert sum(comp.values()) >= X.numel()  # the int8 input at least


@pytest.mark.parametrize("target", ["npu-mid", "npu-small"])
def test_single_dram_profile_figures(target):
    t = load_target(target)
    art = compile_graph(int8_graph(), t, quantize="int8")
    prof = art.profile(X)
    _check_profile(prof)
    (f,) = prof.memory_figures()
    assert f["memory"] == "dram" and f["read_bytes"] + f["write_bytes"] == prof.dram_bytes


def test_a_resident_scratchpad_region_keeps_activations_on_chip():
    from npuc.errors import TargetError
    from npuc.targets.resident import with_resident

    mid = load_target("npu-mid")
    t = with_resident(mid, 256 * 1024)
    assert t.scratchpad.size_bytes == mid.scratchpad.size_bytes - 256 * 1024
    assert t.memories[0].name == "resident" and t.activation_memory.name == "dram"
    g = int8_graph()
    base, res = compile_graph(g, mid, quantize="int8"), compile_graph(g, t, quantize="int8")
    (got,) = res.run(X)
    assert torch.equal(got, interpret(g, X)[0])
    pb, pr = base.profile(X), res.profile(X)
    _check_profile(pr)
    figures = {f["memory"]: f for f in pr.memory_figures()}
    assert figures["resident"]["read_bytes"] > 0 and pr.dram_bytes < pb.dram_bytes and pr.energy_pj < pb.energy_pj
    with pytest.raises(TargetError, match="bank rows"):
        with_resident(mid, 1000)
    with pytest.raises(TargetError, match="leaves nothing"):
        with_resident(mid, mid.scratchpad.size_bytes)
