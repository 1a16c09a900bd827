"""Kernels that hand their repeating tiles to the emitter as loop nests give the very program
they gave one instruction at a time, and it simulates to the same bytes and cycles.

For each kernel (array convolutions fp16 and int8, depthwise on the vector unit and on the
array, an elementwise chain, a pool, a copy) the program is emitted twice: by an emitter that
takes loop nests (``Emitter.emit_loop``) and by one that gets every step one by one
(``nests=False``: the emission before loop nests).  The two instruction streams must be equal,
instruction for instruction and token for token; the loop-emitted one, written with its nests as
LOOPs (``reroll.roll``), must expand to it, be shorter (an array convolution: a third or
less), and simulate to the same output
bytes and the same cycles as the flat one.
"""

from __future__ import annotations

import numpy as np
import pytest

from npuc.codegen.emitter import Emitter
from npuc.codegen.harness import place
from npuc.codegen.kernel import get_kernel
from npuc.codegen.kernels.array_conv import WEIGHT_ORDER
from npuc.codegen.reroll import roll
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.isa.enums import DType
from npuc.isa.loops import expand
from npuc.kir import records
from npuc.kir.kernel import EpilogueOp, Kernel, PoolAttrs, QuantAttrs
from npuc.kir.tensor import NHWC, DramTensor
from npuc.quant import arith
from npuc.runtime.sim import simulate
from npuc.targets import load_target

F16, I8, I32 = DType.fp16, DType.int8, DType.int32
MID = load_target("npu-mid")
TAP_MAJOR = (2, 3, 1, 0)


def _conv(c, h, o, k, s=1, p=0, dt=F16, epilogue=()):
    oh = (h + 2 * p - k) // s + 1
    x = DramTensor.dense("x", (1, c, h, h), dt, order=NHWC)
    w = DramTensor.dense("w", (o, c, k, k), dt, order=WEIGHT_ORDER)
    y = DramTensor.dense("y", (1, o, oh, oh), dt, order=NHWC)
    attrs = Conv2dAttrs((s, s), (p, p), (1, 1), 1)
    if dt is I8:
        ins = (x, w, DramTensor.dense("b", (o,), I32), DramTensor.dense("r", (5 * o,), I8))
        return Kernel("qconv", "conv2d", ins, y, attrs, (), I8, quant=QuantAttrs(5, -3, -3, 127))
    return Kernel("conv", "conv2d", (x, w), y, attrs, tuple(epilogue), F16)


def _depthwise(c, h, k, s, p, dt=F16):
    oh = (h + 2 * p - k) // s + 1
    x = DramTensor.dense("x", (1, c, h, h), dt, order=NHWC)
    w = DramTensor.dense("w", (c, 1, k, k), dt, order=TAP_MAJOR)
    y = DramTensor.dense("y", (1, c, oh, oh), dt, order=NHWC)
    attrs = Conv2dAttrs((s, s), (p, p), (1, 1), c)
    if dt is I8:
        ins = (x, w, DramTensor.dense("b", (c,), I32), DramTensor.dense("r", (5 * c,), I8))
        return Kernel("qdw", "depthwise_conv2d", ins, y, attrs, (), I8, quant=QuantAttrs(7, -3, -3, 127))
    bias = DramTensor("bias", y.shape, F16, 0, (0, 2, 0, 0))
    epi = (EpilogueOp("add", operand=bias), EpilogueOp("clamp", params=(("min", 0.0), ("max", 6.0))))
    return Kernel("dw", "depthwise_conv2d", (x, w), y, attrs, epi, F16)


def _values(k: Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in k.tensors():
        if t.name == k.output.name or t.name in out:
            continue
        shape = tuple(1 if st == 0 else n for n, st in zip(t.shape, t.strides))
        if t.dtype is F16:
            out[t.name] = (rng.standard_normal(shape) * 0.5).astype(np.float16)
        elif t.name == "r":  # REQUANT records (npuc.kir.records): real multipliers and shifts
            n = records.channels(shape[0])
            mults, shifts = arith.channel_multipliers(0.03, tuple(rng.uniform(0.002, 0.02, n)), 0.05)
            out[t.name] = records.pack(mults, shifts)
        elif t.dtype is I8:
            out[t.name] = rng.integers(-128, 128, shape).astype(np.int8)
        else:
            out[t.name] = rng.integers(-20000, 20000, shape).astype(np.int32)
    return out


def _eltwise():
    x = DramTensor.dense("x", (1, 64, 40, 40), F16, order=NHWC)
    y = DramTensor.dense("y", (1, 64, 40, 40), F16, order=NHWC)
    o = DramTensor.dense("o", (1, 64, 40, 40), F16, order=NHWC)
    return Kernel("e", "eltwise", (x,), y, epilogue=(EpilogueOp("silu"), EpilogueOp("add", operand=o)))


def _pool():
    x = DramTensor.dense("x", (1, 64, 56, 56), F16, order=NHWC)
    y = DramTensor.dense("y", (1, 64, 28, 28), F16, order=NHWC)
    return Kernel("p", "pool2d", (x,), y, attrs=PoolAttrs("max", (3, 3), (2, 2), (1, 1)))


def _copy():
    x = DramTensor.dense("x", (1, 96, 28, 28), F16)  # NCHW in, channels-last out: a layout change
    y = DramTensor.dense("y", (1, 96, 28, 28), F16, order=NHWC)
    return Kernel("c", "copy", (x,), y)


CASES = {
    "conv3x3-fp16": lambda: _conv(32, 28, 64, 3, 1, 1, epilogue=(EpilogueOp("relu"),)),
    "conv1x1-fp16": lambda: _conv(96, 14, 576, 1),
    "conv3x3-int8": lambda: _conv(32, 28, 64, 3, 1, 1, dt=I8),
    "conv1x1-s2-int8": lambda: _conv(64, 28, 128, 1, 2, dt=I8),
    "depthwise-fp16": lambda: _depthwise(144, 28, 3, 1, 1),
    "depthwise-int8": lambda: _depthwise(192, 28, 3, 1, 1, dt=I8),
    "eltwise": _eltwise,
    "pool": _pool,
    "copy": _copy,
}

# kernels with enough tiles that loop nests pay (a few tiles go to the rerolling search instead)
# kernels whose nests run long enough for the emitter's state to settle (npuc.codegen.loop_tokens)
SETTLED = {"conv3x3-int8"}
# Depthwise fp16 on the array is not among them: its tile i+2's fetch sits between tile i's
# products and epilogue (the order the DMA port serves them), so each iteration meets two buffer
# rotations part way (the input sets and the accumulator tiles), which the nest finder rolls only
# in units of several forms; the rerolling of its flat stream writes fewer instructions
# (141 against 159 for the 2-row tiling when the nest is forced).
LOOPED = {"conv3x3-fp16", "conv1x1-fp16", "conv3x3-int8", "depthwise-int8"}


def _both(kernel: Kernel, plan, target):
    """(flat program, loop-emitted program, its LOOPs written) for one plan of ``kernel``."""
    impl = get_kernel(kernel.kind)
    programs = []
    for nests in (False, True):
        em = Emitter(target, nests=nests)
        with em.source(kernel.name):
            impl.emit(kernel, plan, em)
        prog, labels = em.finish()
        programs.append((prog, labels, em.loops, em.replicated, em.loop_moves))
    (flat, _, flat_loops, _, _), (looped, labels, loops, replicated, moves) = programs
    assert not flat_loops
    rolled, _ = roll(looped.instrs, labels, loops, moves)
    # the emitter's moves only spare the comparison of every iteration's fields: the same LOOPs
    assert (rolled, _) == roll(looped.instrs, labels, loops)
    return flat, looped, rolled, loops, replicated


def _run(instrs, target, kernel, values, size):
    dram = np.zeros(size, np.uint8)
    for t in kernel.tensors():
        if t.name != kernel.output.name:
            t.write_numpy(dram, values[t.name])
    res = simulate(instrs, target, dram)
    return kernel.output.to_numpy(np.frombuffer(res.dram, np.uint8)), res.total_cycles


@pytest.mark.parametrize("case", list(CASES))
def test_loop_emission_matches_the_flat_program(case):
    kernel, size = place(CASES[case]())
    values = _values(kernel)
    impl = get_kernel(kernel.kind)
    plans = impl.alternatives(kernel, MID) if hasattr(impl, "alternatives") else [impl.plan(kernel, MID)]
    used, settled, total = [], 0, 0
    for plan in plans:
        flat, looped, rolled, loops, replicated = _both(kernel, plan, MID)
        used.append(bool(loops))
        settled += replicated
        total += len(flat)
        assert looped.instrs == flat.instrs  # the same instructions, the same tokens
        assert expand(rolled)[0] == list(flat.instrs)
        assert len(rolled) < len(flat)
        if kernel.kind == "conv2d" and case in LOOPED:  # a layer's output tiles: one LOOP, its reduction chunks nested
            assert len(rolled) * 3 < len(flat)
        want, want_cycles = _run(flat.instrs, MID, kernel, values, size)
        got, got_cycles = _run(rolled, MID, kernel, values, size)
        assert got_cycles == want_cycles
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    if case in LOOPED:
        assert any(used)  # the kernel did hand loop nests to the emitter
    if case in SETTLED:  # most of the nest's iterations were appended from its settled body, not scanned
        assert settled * 2 > total


def _relu_nest(tiles: int, stride: int = 256):
    """relu over ``tiles`` tiles through two scratchpad buffers: load, relu, store per tile."""
    from npuc.codegen.loop_nest import LoopNest, Move
    from npuc.kir.tile_program import Step

    body = (Step("DMA_LOAD", (("esize", 1), ("dram_addr", 0), ("local_addr", 0), ("n0", 256)), 0),
            Step("VUN", (("op", "relu"), ("dtype", "int8"), ("n0", 256), ("dst", 0x800), ("src", 0)), 0),
            Step("DMA_STORE", (("esize", 1), ("dram_addr", 0x10000), ("local_addr", 0x800), ("n0", 256)), 0))
    moves = (Move(0, "dram_addr", stride), Move(0, "local_addr", 0x1000, 2), Move(1, "dst", 0x1000, 2),
             Move(1, "src", 0x1000, 2), Move(2, "dram_addr", stride), Move(2, "local_addr", 0x1000, 2))
    return LoopNest(body, tiles, moves)


def test_emit_loop_gives_the_stream_of_its_iterations_emitted_one_by_one():
    nest = _relu_nest(40)
    looped = Emitter(MID)
    looped.emit_loop(nest)
    flat = Emitter(MID)
    for k in range(nest.n):
        for op, fields in nest.iteration(k):
            flat.emit(op, **fields)
    (a, la), (b, _) = looped.finish(), flat.finish()
    assert a.instrs == b.instrs and looped.loops == [(0, 3, 40)]
    rolled, _ = roll(a.instrs, la, looped.loops)
    assert expand(rolled)[0] == list(b.instrs) and len(rolled) * 8 < len(b)  # the first and last tiles peeled


def test_a_rewritten_instruction_inside_a_nest_is_compared_field_by_field():
    """Weight compression rewrites loads in place after emission: ``roll`` is told which, and
    the iterations holding one are compared field by field (the nest's LOOP ends before it)."""
    import dataclasses

    nest = _relu_nest(40)
    em = Emitter(MID)
    em.emit_loop(nest)
    prog, labels = em.finish()
    instrs = list(prog.instrs)
    at = 20 * 3  # the load of iteration 20
    instrs[at] = dataclasses.replace(instrs[at], args=instrs[at].args._replace(dram_addr=0x8000))
    rolled, _ = roll(instrs, labels, em.loops, em.loop_moves, (at,))
    assert (rolled, _) == roll(instrs, labels, em.loops)
    assert expand(rolled)[0] == instrs


def test_loops_that_do_not_stand_for_the_emitted_stream_are_refused():
    """``check_loops`` (run on every program) refuses LOOPs whose iterations carry other flags
    than the emitted ones, or whose first, rotating or last iterations differ in a field."""
    import dataclasses

    from npuc.codegen.reroll import check_loops
    from npuc.errors import CompileError
    from npuc.isa.instr import Deps
    from npuc.isa.enums import Queue

    nest = _relu_nest(40)
    em = Emitter(MID)
    em.emit_loop(nest)
    prog, labels = em.finish()
    rolled, rolled_labels = roll(prog.instrs, labels, em.loops, em.loop_moves)
    check_loops(rolled, prog.instrs, rolled_labels)
    middle = 20 * 3 + 1  # the relu of iteration 20
    flags = list(prog.instrs)
    flags[middle] = dataclasses.replace(flags[middle], deps=Deps(signals=frozenset({Queue.compute})))
    loop = next(i for i, ins in enumerate(rolled) if ins.op == "LOOP")  # the store of the LOOP's last iteration
    last = loop + 3 * (rolled[loop].args.n - 1) + 2  # (the instructions before the LOOP stand for one each)
    assert all(ins.op != "LOOP" for ins in rolled[:loop])
    fields = list(prog.instrs)
    fields[last] = dataclasses.replace(fields[last], args=fields[last].args._replace(n0=128))
    for wrong in (flags, fields, list(prog.instrs)[:-4] + list(prog.instrs)[-1:]):
        with pytest.raises(CompileError, match="do not stand for the emitted instructions"):
            check_loops(rolled, wrong, rolled_labels)


def test_emit_loop_refuses_a_stride_that_leaves_the_field_range():
    from npuc.errors import CompileError

    with pytest.raises(CompileError, match="DMA_LOAD"):
        Emitter(MID).emit_loop(_relu_nest(40, stride=1 << 40))


def _rotating_steps(blocks: int, slots: int = 4, per_block: int = 3):
    """The steps of ``blocks`` output-channel blocks of two tiles each (n_outer): the first tile
    loads the block's ``per_block`` weight blocks into a pool of ``slots`` buffers taken in turn,
    both multiply out of them.  A block's buffers are ``(per_block * b + i) mod slots``: a unit
    of one channel block meets the rotation part way."""
    from npuc.kir.tile_program import Step

    out = []
    for b in range(blocks):
        bufs = [((b * per_block + i) % slots) * 0x400 for i in range(per_block)]
        for t in range(2):
            tile = 2 * b + t
            if t == 0:
                out += [Step("DMA_LOAD", (("esize", 1), ("dram_addr", 0x10000 + (b * per_block + i) * 0x400),
                                          ("local_addr", buf), ("n0", 0x400)), tile) for i, buf in enumerate(bufs)]
            out += [Step("VBIN", (("op", "add"), ("dtype", "int8"), ("n0", 0x400), ("dst", 0x2000 + t * 0x400),
                                  ("a", 0x2000 + t * 0x400), ("b", buf)), tile) for buf in bufs]
            out.append(Step("DMA_STORE", (("esize", 1), ("dram_addr", 0x40000 + tile * 0x400),
                                          ("local_addr", 0x2000 + t * 0x400), ("n0", 0x400)), tile))
    return out


def test_a_rotation_entered_part_way_is_one_nest_with_phases():
    # 3 weight blocks per channel block over 4 buffers: block b's buffers are (3b + i) mod 4, so
    # every channel block starts the rotation at another place (moves with a phase)
    from npuc.codegen.loop_nest import LoopNest, emit_steps, loop_pieces

    steps = _rotating_steps(12)
    pieces = loop_pieces(steps, phases=True)
    nests = [p for p in pieces if isinstance(p, LoopNest)]
    assert len(nests) == 1 and nests[0].n >= 10 and len(nests[0].body) == 11  # a channel block: two tiles
    assert {(m.period, m.phase) for m in nests[0].moves if m.period} == {(4, 1), (4, 2), (4, 3)}
    again = []
    for p in pieces:
        if isinstance(p, LoopNest):
            again += [(op, f) for k in range(p.n) for op, f in p.iteration(k)]
        else:
            again += [(s.op, s.kwargs()) for s in p]
    assert again == [(s.op, s.kwargs()) for s in steps]  # the nest gives back every step
    programs = []
    for nests_on in (False, True):
        em = Emitter(MID, nests=nests_on)
        with em.source("rot"):
            emit_steps(steps, em, phases=True)
        programs.append((em.finish(), em.loops))
    ((flat, _), _), ((looped, labels), loops) = programs
    assert looped.instrs == flat.instrs and loops  # the emitter took the nest, with the flat tokens
    rolled, _ = roll(looped.instrs, labels, loops)
    assert expand(rolled)[0] == list(flat.instrs) and len(rolled) < len(flat)


def _pinned_plan(kernel: Kernel, **tiling):
    """The searched plan of an array convolution with its tiling's fields replaced by ``tiling``."""
    from dataclasses import replace

    from npuc.codegen.kernels.array_conv import conv_problem
    from npuc.kir.plan import Plan
    from npuc.schedule.cost import estimate

    t = replace(get_kernel(kernel.kind).plan(kernel, MID).details, **tiling)
    e = estimate(MID, conv_problem(kernel), t)
    return Plan(str(t), e.spad_bytes, e.acc_bytes, e.cycles, t)


def test_a_weight_pool_rotation_rolls_the_channel_blocks_of_an_n_outer_conv():
    # 320 -> 1280 channels at 7x7, int8, with a tiling that keeps the weight blocks of a channel
    # block in four buffers (n_outer, three reduction blocks of 128 channels; pinned: the search
    # now streams this layer's weights in blocks of 64): the channel blocks reach the emitter as
    # one loop nest whose buffer moves have phases, and the program is the flat one, token for
    # token.  The weight plan loads each next channel block's first block ahead, at the start of
    # its tile's first step (npuc.schedule.transfers.weight_plan), so the nest covers the four
    # channel blocks after the first, the last one (nothing to load ahead) included
    from npuc.codegen import loop_nest

    kernel, size = place(_conv(320, 7, 1280, 1, dt=I8))
    plan = _pinned_plan(kernel, order="n_outer", tc=128, x_slots=3, w_slots=4, wide_weights=False)
    assert "c128" in plan.summary and "w-bufs 4" in plan.summary
    nests = []
    real = loop_nest.loop_pieces

    def spy(steps, phases=False):
        got = real(steps, phases)
        nests.extend(p for p in got if isinstance(p, loop_nest.LoopNest))
        return got

    loop_nest.loop_pieces = spy
    try:
        flat, looped, rolled, loops, _ = _both(kernel, plan, MID)
    finally:
        loop_nest.loop_pieces = real
    assert any(m.phase for p in nests for m in p.moves)
    assert any(p.n == 4 for p in nests), [p.n for p in nests]
    assert looped.instrs == flat.instrs
    assert expand(rolled)[0] == list(flat.instrs) and len(rolled) * 10 < len(flat)


@pytest.mark.parametrize("c,hw,o", [(320, 7, 1280), (256, 14, 1024)])
def test_streamed_int8_weights_roll_per_channel_block(c, hw, o):
    # int8 1x1 expansions whose small weights would fit resident: the search streams them, one
    # channel block's reduction blocks in one buffer each (npuc.schedule.search.streamed_variant),
    # so the buffers' rotation repeats with every channel block and the program rolls to a
    # tenth of the flat one, and it runs as estimated
    kernel, size = place(_conv(c, hw, o, 1, dt=I8))
    plan = get_kernel(kernel.kind).plan(kernel, MID)
    t = plan.details
    reduction_blocks = -(-c // t.tc)
    assert t.order == "n_outer" and t.w_slots == reduction_blocks and not t.wide_weights
    flat, looped, rolled, loops, _ = _both(kernel, plan, MID)
    assert expand(rolled)[0] == list(flat.instrs) and len(rolled) * 10 < len(flat)
    cycles = simulate(flat.instrs, MID, dram_size=size, functional=False).total_cycles
    assert abs(plan.est_cycles - cycles) <= 0.03 * cycles
