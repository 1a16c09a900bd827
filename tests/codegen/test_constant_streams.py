"""npuc.codegen.constant_streams: the stream buffer and ``held`` mark of every contiguous load of
a constant, checked by the simulator's own rule on loads in any order."""

from __future__ import annotations

import random

import numpy as np
import pytest

from npuc.codegen.constant_streams import _assign
from npuc.isa.instr import Instr
from npuc.runtime.sim import simulate
from npuc.targets import load_target

U55 = load_target("u55-like-256")
FLASH = U55.window_of("flash")


def _loads(seed: int, constants: int) -> tuple[list[Instr], list[int]]:
    """Loads that read ``constants`` constants (1 KiB apart, at odd offsets) piece after piece,
    the constants interleaved at random, some pieces read again."""
    rng = random.Random(seed)
    starts = [FLASH.base + 1024 * c + 8 * c for c in range(constants)]
    at = {c: 0 for c in range(constants)}
    prog, local = [], 0
    for _ in range(60):
        c = rng.randrange(constants)
        n = rng.choice((16, 40, 64, 80, 130))
        if at[c] + n > 1000 or rng.random() < 0.1:
            at[c] = 0  # the constant read again from its start (the next band)
        prog.append(Instr.make("DMA_LOAD", esize=1, dram_addr=starts[c] + at[c], local_addr=local, n0=n))
        at[c] += n
        local = (local + 256) % 16384
    return prog, starts


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("constants", [1, 3, 6])
def test_marks_pass_the_simulators_check_and_never_fetch_more(seed, constants):
    prog, starts = _loads(seed, constants)
    base, end = FLASH.base, FLASH.base + 1024 * constants + 8 * constants
    marked = _assign(prog, base, end, starts, U55.weight_decoder.stream_buffers, U55)
    assert [(i.op, i.args._replace(stream=0, held=0)) for i in marked] == [(i.op, i.args) for i in prog]
    image = np.zeros(end, np.uint8)
    image[base:end] = np.arange(end - base, dtype=np.int64).astype(np.uint8)
    plain = simulate(prog + [Instr.make("END")], U55, image, check_races=False)
    streamed = simulate(marked + [Instr.make("END")], U55, image, check_races=False)  # every held mark checked
    assert streamed.spad == plain.spad
    flash = FLASH.index
    assert streamed.actions.memory_read[flash] <= plain.actions.memory_read[flash]
    if constants <= U55.weight_decoder.stream_buffers:
        # no constant loses its buffer: a piece that starts where the last piece of its constant
        # ended is held, whatever was read between them
        ended: dict[int, int] = {}
        for i in marked:
            c = max(k for k, s in enumerate(starts) if s <= i.args.dram_addr)
            if ended.get(c) == i.args.dram_addr:
                assert i.args.held
            ended[c] = i.args.dram_addr + i.args.n0


def test_one_constant_read_in_order_costs_its_bursts_once():
    starts = [FLASH.base]
    prog = [Instr.make("DMA_LOAD", esize=1, dram_addr=FLASH.base + 80 * k, local_addr=128 * k, n0=80) for k in range(8)]
    marked = _assign(prog, FLASH.base, FLASH.base + 640, starts, 4, U55)
    assert all(i.args.stream == 1 and i.args.held for i in marked)
    r = simulate(marked + [Instr.make("END")], U55, np.zeros(FLASH.base + 640, np.uint8))
    assert r.actions.memory_read[FLASH.index] == 640  # 5 bursts of 128, not 8 x 128
