"""Loop nests whose first and last iterations differ in their flags roll into one LOOP with flag
exceptions (npuc.codegen.loop_edges), and the LOOP expands to the very stream emitted."""

import pytest

from npuc.codegen.emitter import Emitter
from npuc.codegen.loop_nest import LoopNest, Move
from npuc.codegen.reroll import check_expansion, roll
from npuc.isa import decode_program, encode_program
from npuc.isa.loops import exceptions, expand
from npuc.kir.tile_program import Step
from npuc.targets import load_target

MID = load_target("npu-mid")


OPS = ("relu", "neg", "abs", "relu", "clamp", "neg")


def _relu_nest(n: int, ops=OPS) -> Emitter:
    """A few unary operations in turn over ``n`` tiles of 256 bytes through one scratchpad
    buffer, handed over as a nest: the first load waits for nothing, the last operation and
    the last store signal nothing."""
    em = Emitter(MID)
    body = (Step("DMA_LOAD", (("esize", 1), ("dram_addr", 0), ("local_addr", 0), ("n0", 256)), 0),
            Step("VUN", (("op", ops[0]), ("dtype", "int8"), ("n0", 256), ("dst", 0x800), ("src", 0)), 0),
            *(Step("VUN", (("op", op), ("dtype", "int8"), ("n0", 256), ("dst", 0x800), ("src", 0x800)), 0)
              for op in ops[1:]),
            Step("DMA_STORE", (("esize", 1), ("dram_addr", 0x10000), ("local_addr", 0x800), ("n0", 256)), 0))
    last = len(body) - 1
    with em.source("relu"):
        em.emit_loop(LoopNest(body, n, (Move(0, "dram_addr", 256), Move(last, "dram_addr", 256))))
    return em


@pytest.mark.parametrize("n", [2, 3, 6, 40])
def test_a_nest_with_a_fill_and_a_drain_is_one_loop(n):
    em = _relu_nest(n)
    b = len(OPS) + 2
    program, labels = em.finish()
    first, last = program.instrs[:b], program.instrs[b * (n - 1):b * n]
    assert n == 2 or [i.deps for i in first] != [i.deps for i in program.instrs[b:2 * b]]  # the edges differ
    rolled, _ = roll(program.instrs, labels, em.loops, em.loop_moves)
    check_expansion(rolled, program.instrs, labels)
    assert expand(rolled)[0] == list(program.instrs)
    assert [i.op for i in rolled] == ["LOOP", "DMA_LOAD"] + ["VUN"] * len(OPS) + ["DMA_STORE", "END"]
    loop = rolled[0]
    assert loop.args.n == n
    its = {k for k, _, _ in exceptions(loop)}
    assert its == ({0, n - 1} if n > 2 else its) and its
    # the body carries the middle iterations' flags (for n = 2: the last one's)
    assert [i.deps for i in rolled[1:1 + b]] == [i.deps for i in program.instrs[b * (n - 2 if n > 2 else 1):][:b]]
    assert decode_program(encode_program(rolled)) == rolled
    assert [i.deps for i in expand(rolled)[0][:b]] == [i.deps for i in first]
    assert [i.deps for i in expand(rolled)[0][b * (n - 1):b * n]] == [i.deps for i in last]


def test_without_exceptions_the_edges_stay_beside_the_loop():
    # what the same nest takes when the edges are written out: more instructions and bytes
    from npuc.codegen import reroll

    em = _relu_nest(6)
    program, labels = em.finish()
    with_edges, _ = roll(program.instrs, labels, em.loops, em.loop_moves)
    saved = reroll.edge_run
    try:
        reroll.edge_run = lambda *a: None
        without, _ = roll(program.instrs, labels, em.loops, em.loop_moves)
    finally:
        reroll.edge_run = saved
    assert expand(without)[0] == list(program.instrs)
    assert len(with_edges) < len(without)
    assert len(encode_program(with_edges)) < len(encode_program(without))


def test_a_short_body_keeps_its_edges_beside_the_loop():
    # three instructions: the exceptions would cost more bytes than the iterations they save
    em = _relu_nest(6, ops=("relu",))
    program, labels = em.finish()
    rolled, _ = roll(program.instrs, labels, em.loops, em.loop_moves)
    assert expand(rolled)[0] == list(program.instrs)
    assert not any(exceptions(i) for i in rolled if i.op == "LOOP")


def test_a_nest_whose_flags_repeat_every_few_iterations_rolls_with_a_longer_body():
    # every fourth iteration's load also waits for the store (as when one buffer's reuse asks
    # for a token every few tiles): one LOOP over bodies of four iterations
    import dataclasses

    from npuc.isa.enums import Queue
    from npuc.isa.instr import Deps

    em = _relu_nest(41)
    program, labels = em.finish()
    b = len(OPS) + 2
    instrs = list(program.instrs)
    for v in range(1, 41, 4):
        load = instrs[v * b]
        instrs[v * b] = dataclasses.replace(load, deps=Deps(load.deps.waits | {Queue.store}, load.deps.signals))
    rolled, _ = roll(instrs, labels, em.loops, em.loop_moves)
    check_expansion(rolled, instrs, labels)
    from npuc.isa.loops import dynamic_count

    at = max((k for k, i in enumerate(rolled) if i.op == "LOOP"), key=lambda k: rolled[k].args.n)
    loop = rolled[at]
    assert loop.args.n >= 8 and dynamic_count(rolled[at + 1:at + 1 + loop.args.body]) == 4 * b
    assert len(rolled) < 8 * b
