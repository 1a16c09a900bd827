"""LOOP: encoding, expansion, structural checks, and the simulator running the expanded stream."""

import numpy as np
import pytest

from npuc.errors import AsmError, BinaryFormatError, SimulationError
from npuc.isa import assemble, decode_program, encode_program
from npuc.isa.instr import FieldError, Instr, Program
from npuc.isa.loops import expand, group, loop_instr, loop_problem
from npuc.runtime.sim import simulate
from npuc.targets import load_target

MID = load_target("npu-mid")

# relu over 4 tiles of 64 bytes: DRAM and scratchpad addresses advance by 64 per iteration
# (one slot moves the DRAM address of the load and of the store, one their local address)
RELU_LOOP = """
LOOP n=4 body=3 i0=0 d0=2 r0=2 f0=2 s0=64 i1=0 d1=2 r1=2 f1=3 s1=64 i2=1 f2=9 s2=64 i3=1 f3=5 s3=64
DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=64 signal=vector
VUN op=relu dtype=int8 n0=64 dst=0x1000 src=0 wait=load signal=store
DMA_STORE esize=1 dram_addr=0x1000 local_addr=0x1000 n0=64 wait=vector
END
"""


def test_expansion_moves_the_strided_fields_per_iteration():
    p = assemble(RELU_LOOP)
    dyn, origin = expand(list(p))
    assert origin == [1, 2, 3] * 4 + [4]
    assert [i.args.dram_addr for i in dyn if i.op == "DMA_LOAD"] == [0, 64, 128, 192]
    assert [(i.args.src, i.args.dst) for i in dyn if i.op == "VUN"] == [(0, 0x1000), (64, 0x1040), (128, 0x1080), (192, 0x10C0)]
    assert [i.args.dram_addr for i in dyn if i.op == "DMA_STORE"] == [0x1000, 0x1040, 0x1080, 0x10C0]


def test_the_simulator_runs_the_expanded_program():
    data = (np.arange(256) - 128).astype(np.int8)
    image = np.zeros(0x2000, np.uint8)
    image[:256] = data.view(np.uint8)
    p = assemble(RELU_LOOP)
    r = simulate(p, MID, image)
    np.testing.assert_array_equal(np.frombuffer(r.dram, np.int8, 256, 0x1000), np.maximum(data, 0))
    assert r.instructions == 13 and len(p) == 5
    unrolled = Program(tuple(expand(list(p))[0]))
    same = simulate(unrolled, MID, image)
    assert (same.total_cycles, same.actions, same.dram) == (r.total_cycles, r.actions, r.dram)
    assert {e.index for e in r.trace_events} == {1, 2, 3, 4}  # events name the encoded instruction


def test_nested_loops_and_outer_strides_into_an_inner_body():
    text = """
    LOOP n=3 body=2 i0=1 f0=3 s0=0x100
    LOOP n=2 body=1 i0=0 f0=3 s0=0x10
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=16
    END
    """
    dyn, origin = expand(list(assemble(text)))
    assert [i.args.local_addr for i in dyn[:-1]] == [0x0, 0x10, 0x100, 0x110, 0x200, 0x210]
    assert origin == [2] * 6 + [3]


def test_grouped_slots_move_every_other_instruction():
    moves = [(1, 2, 64), (3, 2, 64), (5, 2, 64), (0, 4, 8)]
    (a, b) = group(moves)
    assert a == (0, 1, 1, 4, 8, 0, 0) and b == (1, 2, 3, 2, 64, 0, 0)
    assert len(group([(j, 2, 10 + j) for j in range(16)])) == 16
    assert group([(j, 2, 10 + j) for j in range(17)]) is None  # seventeen different strides: too many
    assert group([(0, 2, 64, 2), (1, 2, 64, 0)]) == ((0, 1, 1, 2, 64, 2, 0), (1, 1, 1, 2, 64, 0, 0))  # periods apart
    assert group([(0, 2, 64, 3, 1), (1, 2, 64, 3, 0)]) == ((0, 1, 1, 2, 64, 3, 1), (1, 1, 1, 2, 64, 3, 0))  # phases apart
    assert group([(0, 2, 64, 3, 3)]) is None  # a phase below its period
    assert group([(0, 2, 64, 0, 1)]) is None  # a phase needs a period


def test_a_slot_with_a_period_alternates_between_buffers():
    text = """
    LOOP n=5 body=1 i0=0 f0=3 p0=2 s0=0x100 i1=0 f1=2 s1=0x40
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=16
    END
    """
    p = assemble(text)
    dyn, _ = expand(list(p))
    assert [(i.args.dram_addr, i.args.local_addr) for i in dyn[:-1]] == [
        (0, 0), (0x40, 0x100), (0x80, 0), (0xC0, 0x100), (0x100, 0)]
    assert decode_program(p.encode()) == list(p)
    with pytest.raises((AsmError, FieldError), match="period 1"):
        assemble("LOOP n=2 body=1 i0=0 f0=3 p0=1 s0=1\nDMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=16\nEND")


@pytest.mark.parametrize(
    "text,match",
    [
        ("LOOP n=2 body=2\nNOP\nEND", "runs past the last instruction before END"),
        ("LOOP n=2 body=1 i0=0 f0=0 s0=1\nVUN op=relu dtype=int8 n0=4 dst=0 src=0\nEND", "field 'op' of VUN is not an integer field"),
        ("LOOP n=2 body=1 i0=0 f0=3 s0=1 signal=load\nNOP\nEND", "LOOP at instruction 0 has dependency flags"),
        ("LOOP n=2 body=2\nLOOP n=2 body=2\nNOP\nNOP\nEND", "runs past the body of the LOOP around it"),
        ("LOOP n=2 body=1 i0=3 f0=1 s0=1\nNOP\nEND", "stride slot 0 reaches body instruction 3, but the body has 1"),
    ],
)
def test_malformed_loops_are_refused(text, match):
    with pytest.raises((AsmError, FieldError), match=match):
        assemble(text)


def test_a_stride_that_leaves_the_field_range_is_a_simulation_error():
    p = assemble("LOOP n=3 body=1 i0=0 f0=4 s0=-8\nDMA_LOAD esize=1 dram_addr=0 local_addr=8 n0=4\nEND")
    with pytest.raises(SimulationError, match=r"field 'n0' must be in \[1, 65535\], got -4"):
        simulate(p, MID, dram_size=64)


def test_encoding_round_trip_and_decoder_checks():
    p = assemble(RELU_LOOP)
    assert decode_program(p.encode()) == list(p) and loop_problem(list(p)) is None
    data = Program((loop_instr(2, 1, ()), *assemble("END"))).encode()  # a body that is END
    with pytest.raises(BinaryFormatError, match="runs past the last instruction before END"):
        decode_program(data)


def test_a_program_that_expands_past_the_simulators_limit_is_refused_before_it_expands():
    from npuc.isa.loops import MAX_DYNAMIC, dynamic_count

    text = "LOOP n=65535 body=2\nLOOP n=65535 body=1\nNOP\nEND"
    p = assemble(text)
    assert dynamic_count(list(p)) == 65535 * 65535 + 1 > MAX_DYNAMIC
    with pytest.raises(SimulationError, match=r"expand to 4,294,836,226 instructions, more than the simulator's"):
        simulate(p, MID, dram_size=64)


def test_a_phase_starts_a_rotation_in_its_middle():
    # a triple-buffered load that starts the loop at the second buffer (phase 1) and one at the
    # third (phase 2): iteration 0 is the body as written, whatever the phase
    text = """
    LOOP n=7 body=2 i0=0 f0=3 p0=3 s0=0x100 ph0=1 i1=1 f1=3 p1=3 s1=0x100 ph1=2
    DMA_LOAD esize=1 dram_addr=0 local_addr=0x100 n0=16
    DMA_LOAD esize=1 dram_addr=0 local_addr=0x200 n0=16
    END
    """
    p = assemble(text)
    dyn, origin = expand(list(p))
    assert [i.args.local_addr for i in dyn[:-1:2]] == [0x100, 0x200, 0x0, 0x100, 0x200, 0x0, 0x100]
    assert [i.args.local_addr for i in dyn[1:-1:2]] == [0x200, 0x0, 0x100, 0x200, 0x0, 0x100, 0x200]
    assert origin[:4] == [1, 2, 1, 2]
    assert decode_program(p.encode()) == list(p)
    # the text form names the phase, and reads back to the same instruction
    assert "ph0=1" in str(p[0]) and assemble(f"{p[0]}\n{p[1]}\n{p[2]}\nEND")[0] == p[0]


@pytest.mark.parametrize("slot,match", [
    ("i0=0 f0=3 p0=3 s0=0x100 ph0=3", "phase 3 but period 3"),
    ("i0=0 f0=3 s0=0x100 ph0=1", "phase 1 but no period"),
    ("ph0=1", "unused .* or a phase"),
])
def test_a_phase_must_fit_its_period(slot, match):
    with pytest.raises((AsmError, FieldError), match=match):
        assemble(f"LOOP n=2 body=1 {slot}\nDMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=16\nEND")


PINNED_LOOP_BYTES = "03008e71b400200086000200000410000000"  # its bytes before the phases existed


def test_a_loop_without_phases_keeps_its_bytes():
    # the phases are listed after every slot: a LOOP that uses none writes no mask bit for them
    from npuc.isa.encoding import encode_instr

    ins = assemble("LOOP n=5 body=1 i0=0 f0=3 p0=2 s0=0x100 i1=0 f1=2 s1=0x40\nDMA_LOAD esize=1 dram_addr=0 "
                   "local_addr=0 n0=16\nEND")[0]
    assert encode_instr(ins).hex() == PINNED_LOOP_BYTES
    phased = Instr(ins.op, ins.args._replace(ph0=1), ins.deps)
    assert len(encode_instr(phased)) > len(encode_instr(ins))


def test_the_simulator_runs_a_phased_rotation():
    # three tiles through a triple-buffered scratchpad, starting at its last buffer (phase 2)
    rolled = assemble("""
    LOOP n=3 body=2 i0=0 f0=2 s0=64 i1=0 f1=3 p1=3 ph1=2 s1=0x100 i2=1 f2=3 p2=3 ph2=2 s2=0x100 i3=1 f3=2 s3=64
    DMA_LOAD esize=1 dram_addr=0 local_addr=0x200 n0=64 signal=store
    DMA_STORE esize=1 dram_addr=0x1000 local_addr=0x200 n0=64 wait=load
    END
    """)
    dyn, _ = expand(list(rolled))
    assert [i.args.local_addr for i in dyn[:-1]] == [0x200, 0x200, 0x0, 0x0, 0x100, 0x100]
    data = (np.arange(192) - 96).astype(np.int8)
    image = np.zeros(0x2000, np.uint8)
    image[:192] = data.view(np.uint8)
    r = simulate(rolled, MID, image)
    np.testing.assert_array_equal(np.frombuffer(r.dram, np.int8, 192, 0x1000), data)
    plain = simulate(Program(tuple(dyn)), MID, image)
    assert (plain.total_cycles, plain.actions, plain.dram) == (r.total_cycles, r.actions, r.dram)


def _excepted_loop(*excs):
    from npuc.isa.instr import Deps
    from npuc.isa.enums import Queue

    load = Instr.make("DMA_LOAD", esize=1, dram_addr=0, local_addr=0, n0=64, deps=Deps(signals={Queue.vector}))
    vun = Instr.make("VUN", op="relu", dtype="int8", n0=64, dst=0x1000, src=0, deps=Deps(waits={Queue.load}))
    return [loop_instr(4, 2, [(0, 1, 1, 2, 64, 0, 0)], excs), load, vun, Instr.make("END")]


def test_a_flag_exception_changes_one_instruction_in_one_iteration():
    from npuc.isa.enums import Queue
    from npuc.isa.instr import Deps
    from npuc.isa.loops import exceptions

    none = Deps().to_bits(Queue.load)
    prog = _excepted_loop((0, 0, none), (3, 1, Deps().to_bits(Queue.vector)))
    assert exceptions(prog[0]) == ((0, 0, none), (3, 1, 0))
    dyn, origin = expand(prog)
    assert origin == [1, 2] * 4 + [3]
    assert [i.args.dram_addr for i in dyn if i.op == "DMA_LOAD"] == [0, 64, 128, 192]
    assert [bool(i.deps) for i in dyn[:-1]] == [False, True, True, True, True, True, True, False]
    assert decode_program(encode_program(prog)) == prog  # fields after the phases: the encoding is generic
    # a LOOP without exceptions encodes as before they existed: its mask stops at its last slot
    plain = _excepted_loop()
    assert len(encode_program(plain[:1])) < len(encode_program(prog[:1]))


@pytest.mark.parametrize("excs, match", [
    (((4, 0, 0),), "iteration 4, but the LOOP runs 4"),
    (((0, 2, 0),), "body instruction 2, but the body has 2"),
])
def test_flag_exceptions_outside_the_loop_are_refused(excs, match):
    with pytest.raises(FieldError, match=match):
        _excepted_loop(*excs)


def test_flag_exceptions_must_be_listed_in_order():
    from npuc.isa.loops import exception_value

    loop = _excepted_loop()[0]
    args = loop.args._replace(x0=exception_value(1, 0, 0), x1=exception_value(0, 0, 0))
    assert "increasing order" in loop.defn.validate(args)
    args = loop.args._replace(x1=exception_value(0, 0, 0))
    assert "after an unused one" in loop.defn.validate(args)


def test_a_flag_exception_on_a_loop_is_refused():
    from npuc.isa.loops import exception_value

    inner = loop_instr(2, 1, [])
    load = Instr.make("DMA_LOAD", esize=1, dram_addr=0, local_addr=0, n0=64)
    outer = loop_instr(2, 2, [])
    outer = Instr("LOOP", outer.args._replace(x0=exception_value(1, 0, 0)))
    assert "a LOOP has no flags" in loop_problem([outer, inner, load, Instr.make("END")])
