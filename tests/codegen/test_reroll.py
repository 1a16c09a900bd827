"""Rerolling: the LOOPs written for a compiled program expand to the emitter's stream exactly."""

import dataclasses

import pytest
import torch
from torch import nn

from npuc.codegen.emitter import Emitter
from npuc.codegen.reroll import reroll
from npuc.isa.loops import expand
from npuc.targets import load_target

from npuc.artifact import compile_graph
from npuc.pipeline import import_model


def _unrolled_and_rolled(model, x, preset):
    """Each NPU segment's program as the emitter wrote it, and rolled (its loop nests as LOOPs,
    the rest rerolled)."""
    import npuc.codegen.driver as driver

    seen = []
    real = driver.roll

    def spy(instrs, labels, loops, *known):
        out = real(instrs, labels, loops, *known)
        seen.append((list(instrs), list(labels), out))
        return out

    driver.roll = spy
    try:
        g = import_model(model, (x,))
        art = compile_graph(g, load_target(preset))
    finally:
        driver.roll = real
    return art, seen


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(16, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 32, 1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y)) + y
        return self.fc(y.mean((2, 3)))


@pytest.mark.parametrize("preset", ["npu-mid"])
def test_rerolled_programs_expand_to_the_emitted_stream(preset):
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(1, 16, 24, 24)
    art, seen = _unrolled_and_rolled(model, x, preset)
    assert seen
    for instrs, labels, (rolled, rolled_labels) in seen:
        dyn, origin = expand(rolled)
        assert dyn == instrs
        assert [rolled_labels[o] for o in origin] == labels  # a loop never spans two layers
        assert len(rolled) < len(instrs)
    with torch.no_grad():
        want = model(x)
    (got,) = art.run(x)
    assert torch.allclose(got, want, rtol=2e-2, atol=2e-2)


def test_a_stream_without_repetition_is_left_alone():
    em = Emitter(load_target("npu-mid"))
    em.emit("VFILL", dtype="int8", n0=16, dst=0, value=1)
    em.emit("VFILL", dtype="int8", n0=32, dst=64, value=2)
    prog, labels = em.finish()
    rolled, _ = reroll(prog.instrs, labels)
    assert rolled == list(prog.instrs)


def test_a_repetition_that_changes_a_new_field_ends_the_run():
    """A field that comes back to its first value (a double-buffered address) must not hide a
    field that changes for the first time in the same repetition (a narrower last block): the
    run ends before it, whatever the count of fields that moved."""
    em = Emitter(load_target("npu-mid"))
    for dst, n0 in ((0, 16), (64, 16), (0, 8)):
        em.emit("VFILL", dtype="int8", n0=n0, dst=dst, dst_s1=64, value=1)
    prog, labels = em.finish()
    rolled, _ = reroll(prog.instrs, labels)
    assert expand(rolled)[0] == list(prog.instrs)


def test_a_loop_that_strays_from_the_emitted_stream_is_refused():
    from npuc.codegen.reroll import check_expansion
    from npuc.errors import CompileError

    em = Emitter(load_target("npu-mid"))
    for dst in (0, 64, 128):
        em.emit("VFILL", dtype="int8", n0=16, dst=dst, dst_s1=64, value=1)
    prog, labels = em.finish()
    rolled, rolled_labels = reroll(prog.instrs, labels)
    assert rolled[0].op == "LOOP"
    wrong = list(prog.instrs)
    wrong[2] = dataclasses.replace(wrong[2], args=wrong[2].args._replace(n0=8))
    with pytest.raises(CompileError, match="do not expand to the emitted instructions"):
        check_expansion(rolled, wrong, rolled_labels)


def _vfills(spec):
    """A program of VFILLs from (dst, n0, dst_s1, value) tuples (no tokens: no conflicts matter
    here; the value, a float field, tells the steps of a body apart)."""
    from npuc.isa.instr import Instr

    instrs = [Instr.make("VFILL", dtype="int8", n0=n0, dst=dst, dst_s1=s1, value=v) for dst, n0, s1, v in spec]
    return instrs + [Instr.make("END")], ["layer"] * len(spec) + [""]


@pytest.mark.parametrize("seed", range(6))
def test_the_block_comparison_and_the_candidate_bound_find_what_the_plain_search_finds(seed, monkeypatch):
    """The repetitions compared in blocks (``_matching``) or as arrays (``_FlatValues.delta``)
    and the candidates left out by their signatures' bound (``_may_save``) give the program the
    repetition-by-repetition search gives:
    long strided runs, double-buffered rotations entered at every phase, a field that moves for
    the first time, runs broken part way."""
    import random

    import npuc.codegen.reroll as rr

    rnd = random.Random(seed)
    spec = []
    for _ in range(8):
        reps, body, period = rnd.randint(2, 200), rnd.choice([1, 2, 3, 9]), rnd.choice([0, 2, 3])
        base, phase = rnd.randrange(0, 1 << 14, 64), rnd.randrange(max(period, 1))
        for k in range(reps):
            for j in range(body):
                place = ((k + phase) % period) if period else k
                n0 = 8 if k == reps - 1 and rnd.random() < 0.3 else 16 + j
                spec.append((base + 64 * place + 4096 * j, n0, 64 * (k + 1) if j == 2 else 64, j + 1))
        spec += [(rnd.randrange(0, 1 << 14, 64), 4, 0, 1) for _ in range(rnd.randint(0, 3))]
    instrs, labels = _vfills(spec)
    fast = reroll(instrs, labels)
    monkeypatch.setattr(rr, "FAST_FROM", 1 << 30)
    monkeypatch.setattr(rr, "ARRAY_FROM", 1 << 30)
    monkeypatch.setattr(rr, "_may_save", lambda *a: True)
    assert reroll(instrs, labels) == fast
    assert expand(fast[0])[0] == instrs


def test_a_nest_whose_body_rerolls_beyond_the_outer_slots_keeps_a_flat_body():
    """The 56x56x64 3x3 conv on npu-mid (fp16): each of its 52 steady row bands is 294
    instructions whose own reduction runs reroll in a way the band loop's stride slots cannot
    carry; one LOOP over a flat body takes the layer to a few hundred instructions, where rolling
    the bands as plain instructions left 3,432 (reroll.FLAT_BODY_GAIN).  The rolled program still
    expands to the emitted stream."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1)).eval()
    art, seen = _unrolled_and_rolled(model, torch.randn(1, 64, 56, 56), "npu-mid")
    ((instrs, _, (rolled, _)),) = seen
    assert expand(rolled)[0] == instrs
    assert len(rolled) < 800, (len(instrs), len(rolled))  # 3,401 without the flat body
