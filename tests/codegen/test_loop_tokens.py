"""Tokens of a loop nest derived from its settled body (npuc.codegen.loop_tokens) are the tokens
the iterations emitted one by one get, around whatever comes before and after the nest.

Each case emits a small program twice, with the nest handed to ``Emitter.emit_loop`` and with
every iteration emitted instruction by instruction, and requires the same instructions and
tokens; the nest's LOOPs expand to that stream, which simulates without a race.
"""

from __future__ import annotations

import numpy as np

from npuc.codegen.emitter import Emitter
from npuc.codegen.loop_nest import LoopNest, Move
from npuc.codegen.reroll import roll
from npuc.isa.loops import expand
from npuc.kir.tile_program import Step
from npuc.runtime.sim import simulate
from npuc.targets import load_target

MID = load_target("npu-mid")
OUT = 0x40000  # the nest's output in DRAM


def _nest(tiles: int, load_stride: int = 256, store_stride: int = 256, out: int = OUT) -> LoopNest:
    """relu over ``tiles`` 256-byte tiles through two scratchpad buffer pairs."""
    body = (Step("DMA_LOAD", (("esize", 1), ("dram_addr", 0), ("local_addr", 0), ("n0", 256)), 0),
            Step("VUN", (("op", "relu"), ("dtype", "int8"), ("n0", 256), ("dst", 0x800), ("src", 0)), 0),
            Step("DMA_STORE", (("esize", 1), ("dram_addr", out), ("local_addr", 0x800), ("n0", 256)), 0))
    moves = (Move(0, "dram_addr", load_stride), Move(0, "local_addr", 0x1000, 2), Move(1, "dst", 0x1000, 2),
             Move(1, "src", 0x1000, 2), Move(2, "dram_addr", store_stride), Move(2, "local_addr", 0x1000, 2))
    return LoopNest(body, tiles, moves)


def _copy(em, src: int, dst: int, n: int = 256, spad: int = 0x8000) -> None:
    em.emit("DMA_LOAD", esize=1, dram_addr=src, local_addr=spad, n0=n)
    em.emit("DMA_STORE", esize=1, dram_addr=dst, local_addr=spad, n0=n)


def _both(nest: LoopNest, before=(), after=()):
    """(looped emitter, flat emitter), each finished, for ``before`` + the nest + ``after``."""
    ems = []
    for looped in (True, False):
        em = Emitter(MID)
        for f in before:
            f(em)
        if looped:
            em.emit_loop(nest)
        else:
            for k in range(nest.n):
                for op, fields in nest.iteration(k):
                    em.emit(op, **fields)
        for f in after:
            f(em)
        ems.append((em, em.finish()))
    return ems


def _check(nest, before=(), after=(), settles=True):
    (looped, (a, labels)), (flat, (b, _)) = _both(nest, before, after)
    assert a.instrs == b.instrs  # the same instructions, the same tokens
    assert (looped.replicated > 0) == settles
    rolled, _ = roll(a.instrs, labels, looped.loops)
    assert expand(rolled)[0] == list(b.instrs)
    dram = np.arange(0x80000, dtype=np.int64).astype(np.uint8)
    res = simulate(rolled, MID, dram.copy())
    want = simulate(b.instrs, MID, dram.copy())
    assert res.total_cycles == want.total_cycles
    assert bytes(res.dram) == bytes(want.dram)
    return looped


def test_a_long_nest_settles_and_is_appended_from_its_body():
    em = _check(_nest(120))
    assert em.replicated >= 100 * 3  # all but the first few iterations appended without a scan


def test_a_producer_before_the_nest_that_a_late_iteration_reads():
    # the nest's 60th tile is written just before it: the iterations up to it wait on that store
    late = [lambda em: _copy(em, 0x60000, 60 * 256)]
    _check(_nest(100), before=late)


def test_a_consumer_after_the_nest_of_one_middle_iteration():
    # after the nest, a copy reads iteration 37's output and another overwrites iteration 50's input
    after = [lambda em: _copy(em, OUT + 37 * 256, 0x70000), lambda em: _copy(em, 0x70000, 50 * 256, spad=0x9000)]
    _check(_nest(100), after=after)


def test_an_in_place_nest_with_different_strides_is_scanned_to_its_end():
    # it writes where it reads, at another stride: overlaps do not repeat with the iteration
    _check(_nest(60, load_stride=256, store_stride=128, out=0), settles=False)


def test_a_short_nest_is_scanned():
    _check(_nest(6), settles=False)


def test_emission_is_deterministic():
    (a, (pa, _)), _ = _both(_nest(90))
    (b, (pb, _)), _ = _both(_nest(90))
    from npuc.isa.encoding import encode_program
    assert encode_program(pa.instrs) == encode_program(pb.instrs)
