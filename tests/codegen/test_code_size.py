"""Compact code: LOOP slots with periods for double-buffered addresses, the variable-length
encoding of a compiled program, and the code size and stage times a compile reports."""

import time

import torch
from torch import nn

import npuc
from npuc.codegen.emitter import Emitter
from npuc.codegen.reroll import reroll
from npuc.isa import decode_program, encode_program
from npuc.isa.loops import expand, slots
from npuc.targets import load_target

MID = load_target("npu-mid")


def _double_buffered_relu(tiles: int, buffers: int = 2, first: int = 0) -> Emitter:
    """relu over ``tiles`` tiles of 256 bytes through ``buffers`` scratchpad buffers in turn,
    starting at buffer ``first``."""
    em = Emitter(MID)
    with em.source("relu"):
        for t in range(tiles):
            buf = ((t + first) % buffers) * 0x1000
            em.emit("DMA_LOAD", esize=1, dram_addr=t * 256, local_addr=buf, n0=256)
            em.emit("VUN", op="relu", dtype="int8", n0=256, dst=buf + 0x800, src=buf)
            em.emit("DMA_STORE", esize=1, dram_addr=0x10000 + t * 256, local_addr=buf + 0x800, n0=256)
    return em


def test_a_double_buffered_stream_rolls_into_one_loop_with_period_two_slots():
    program, labels = _double_buffered_relu(64).finish()
    rolled, rolled_labels = reroll(program.instrs, labels)
    assert expand(rolled)[0] == list(program.instrs)  # the very stream the emitter wrote
    loops = [i for i in rolled if i.op == "LOOP"]
    assert loops and len(rolled) <= 16 < len(program)  # 193 instructions, a handful encoded
    periods = {p for i in loops for *_, p, _ in slots(i)}
    assert 2 in periods  # the buffer addresses alternate: (k mod 2) x stride
    assert set(rolled_labels) == {"relu", ""}  # END is unlabelled


def test_a_rotation_that_starts_in_its_middle_rolls_with_a_phase():
    # three buffers in turn, the first tile in the second (or third) one: the pipeline's first
    # tiles (no waits yet), its steady state and its last tiles are three LOOPs of one tile each,
    # whose buffer slots have period 3 and the phase of their first tile; no tile is peeled
    for first in (1, 2):
        program, labels = _double_buffered_relu(30, buffers=3, first=first).finish()
        rolled, _ = reroll(program.instrs, labels)
        assert expand(rolled)[0] == list(program.instrs)
        loops = [i for i in rolled if i.op == "LOOP"]
        assert len(rolled) == 3 * 4 + 1 and [i.args.n for i in loops] == [3, 24, 3]
        for loop in loops:
            assert {(p, h) for *_, p, h in slots(loop) if p} == {(3, first)}
        assert decode_program(encode_program(rolled)) == rolled


def test_tiles_that_repeat_at_two_levels_roll_into_nested_loops():
    # 6 output blocks of 8 reduction steps: the steps repeat inside a block (those between the
    # first and last, which carry the tokens), the blocks repeat; no loop nest is given
    em = Emitter(MID)
    with em.source("mm"):
        for b in range(6):
            em.emit("DMA_LOAD", esize=1, dram_addr=0x4000 + b * 0x400, local_addr=0x2000, n0=512)
            for k in range(8):
                em.emit("VBIN", op="add", dtype="int8", n0=64, dst=0x1000 + b * 64, a=0x1000 + b * 64,
                        b=0x2000 + k * 64)
            em.emit("DMA_STORE", esize=1, dram_addr=0x8000 + b * 64, local_addr=0x1000 + b * 64, n0=64)
    program, labels = em.finish()
    rolled, _ = reroll(program.instrs, labels)
    assert expand(rolled)[0] == list(program.instrs)
    outer = max((i for i in rolled if i.op == "LOOP"), key=lambda i: i.args.body)
    start = rolled.index(outer)
    assert outer.args.n >= 4 and any(i.op == "LOOP" for i in rolled[start + 1:start + 1 + outer.args.body])
    assert len(rolled) <= 24 < len(program) // 2


def test_the_encoding_of_a_rolled_program_is_small_and_round_trips():
    program, labels = _double_buffered_relu(64).finish()
    rolled, _ = reroll(program.instrs, labels)
    code = encode_program(rolled)
    assert decode_program(code) == rolled
    assert len(code) < 10 * len(rolled) < 32 * len(program) // 10  # a tenth of fixed 32-byte words, and less
    # a field is written only when it changes: the second of two equal loads is its header and mask
    one = encode_program([program.instrs[0], program.instrs[-1]])
    two = encode_program([program.instrs[0], program.instrs[0], program.instrs[-1]])
    assert len(two) - len(one) <= 3


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(8, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        return torch.relu(self.c2(torch.relu(self.c1(x))))


def test_compile_report_gives_code_bytes_and_every_stage_time():
    torch.manual_seed(0)
    model, x = SmallCnn().eval(), torch.randn(1, 8, 16, 16)
    start = time.perf_counter()
    art = npuc.compile(model, (x,), target="npu-mid")
    wall = time.perf_counter() - start
    r = art.report
    assert r.code_bytes == sum(len(c) for c in art.npub.code_segments) > 0
    assert r.to_dict()["code_bytes"] == r.code_bytes
    names = [n for n, _ in r.stage_seconds]
    assert names[:2] == ["export", "import"] and names[-2:] == ["codegen", "package"]
    assert names.count("canonicalize") == 2
    by_stage = r.seconds_by_stage()
    assert by_stage["canonicalize"] == sum(s for n, s in r.stage_seconds if n == "canonicalize")
    assert r.to_dict()["stage_seconds"] == by_stage and list(by_stage) == list(dict.fromkeys(names))
    assert 0 < sum(by_stage.values()) <= wall  # the stages are inside the compile, none counted twice
    again = npuc.compile(model, (x,), target="npu-mid")
    assert again.to_bytes() == art.to_bytes()  # deterministic bytes
    (y,) = art.run(x)
    torch.testing.assert_close(y, model(x), atol=5e-2, rtol=5e-2)
