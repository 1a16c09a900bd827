"""Assembly text: defaults, comments, dependency flags, and errors that name the line."""

from __future__ import annotations

import pytest

from npuc.isa.enums import Queue

from npuc.errors import AsmError
from npuc.isa import Deps, DType, Space, assemble, disassemble


def test_defaults_comments_and_deps():
    p = assemble(
        """
        # a comment line
        DMA_LOAD esize=4 local=acc dram_addr=0x40 local_addr=0 n0=8 n1=3 signal=compute ; trailing comment
        matmul k=4 n=8 in_addr=0 m0=2 m1=3 out_addr=0x100 wait=load signal=store,load
        END
        """
    )
    load, mm, end = p
    assert load.args.local is Space.acc and load.args.dram_s0 == 4 and load.args.dram_s1 == 32
    assert load.args.dram_s2 == 96 and load.args.local_s1 == 32 and load.args.n2 == 1
    assert load.deps == Deps(signals={Queue.compute})
    assert mm.args.dtype is DType.int8 and mm.args.acc == 0
    assert (mm.args.in_s0, mm.args.in_s1, mm.args.out_s0, mm.args.out_s1) == (4, 8, 32, 64)
    assert mm.deps == Deps(waits={Queue.load}, signals={Queue.load, Queue.store})
    text = disassemble(p)
    assert "wait=load signal=load,store" in text
    assert assemble(text) == p


@pytest.mark.parametrize(
    "text,match",
    [
        ("FOO x=1\nEND", r"line 1: unknown instruction 'FOO'"),
        ("NOP\nVBIN op=add dtype=int8 n0=4 dst=0 a=0\nEND", r"line 2: VBIN needs field 'b'"),
        ("NOP\n\nNOP bogus=1\nEND", r"line 3: NOP has no field 'bogus'"),
        ("VFILL dtype=int8 n0=0 dst=0 value=1\nEND", r"line 1: VFILL field 'n0' must be in \[1, 65535\], got 0"),
        ("VFILL dtype=int9 n0=1 dst=0 value=1\nEND", r"line 1: field 'dtype' of VFILL: bad value 'int9'"),
        ("VFILL dtype=int8 n0=2 n0=1 dst=0 value=1\nEND", r"line 1: field 'n0' given twice"),
        ("VFILL dtype=int8 n0=x dst=0 value=1\nEND", r"line 1: field 'n0' of VFILL: bad value 'x'"),
        ("VFILL dtype=int8 n0 dst=0 value=1\nEND", r"line 1: expected field=value, got 'n0'"),
        ("DMA_LOAD esize=3 dram_addr=0 local_addr=0 n0=1\nEND", r"line 1: DMA_LOAD field 'esize' must be 1, 2 or 4"),
        ("DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1 local=acc\nEND", r"line 1: DMA_LOAD: transfers to or from ACC move 32-bit words"),
        ("DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1 wait=load\nEND", r"line 1: DMA_LOAD runs on the load queue: an instruction of the load queue cannot wait on or signal its own queue"),
        ("NOP wait=dram\nEND", r"line 1: 'dram' is not a queue"),
        ("DMA_LOAD esize=1 dram_addr=0x100000000 local_addr=0 n0=1\nEND", r"'dram_addr' must be in \[0, 4294967295\]"),
        ("VUN op=exp dtype=int8 n0=1 dst=0 src=0\nEND", r"line 1: VUN: op exp needs a floating-point dtype"),
        ("VUN op=clamp dtype=fp16 n0=1 dst=0 src=0 imm0=2 imm1=1\nEND", r"clamp needs imm0 <= imm1"),
        ("VBIN op=add dtype=int8 n0=4 dst=0 a=0 b=0 a_space=acc\nEND", r"operand 'a' is in ACC, which holds 32-bit words"),
        ("LOAD_WEIGHTS dtype=int32 addr=0 k=1 n=1\nEND", r"the array multiplies int8 or fp16, not int32"),
        ("REQUANT n0=4 dst=0 src=0 qparams=0 qmin=10 qmax=-10\nEND", r"qmin \(10\) must not exceed qmax \(-10\)"),
        ("VREDUCE op=sum dtype=fp16 out_dtype=int32 n0=4 dst=0 src=0\nEND", r"a reduction keeps integer or float"),
        ("NOP\nNOP\n", r"line 2: the program does not end with END"),
        ("END\nNOP\n", r"line 2: END at instruction 0 is not the last instruction"),
        ("# nothing\n", r"the program is empty"),
    ],
)
def test_errors_name_the_line(text, match):
    with pytest.raises(AsmError, match=match):
        assemble(text)


def test_float_immediates_round_trip_exactly():
    p = assemble("VUN op=muls dtype=fp32 n0=1 dst=0 src=0 imm0=0.1 imm1=-inf\nEND\n")
    assert disassemble(p).splitlines()[0].endswith("imm0=0.1 imm1=-inf")
    assert assemble(disassemble(p)) == p


def test_make_builds_the_same_instruction_as_text():
    from npuc.isa import Instr, UnOp

    made = Instr.make("VUN", deps=Deps(waits={Queue.load}), op="relu", dtype="int8", n0=64, dst=0, src=0x100)
    (parsed, _) = assemble("VUN op=relu dtype=int8 n0=64 dst=0 src=0x100 wait=load\nEND")
    assert made == parsed and made.args.op is UnOp.relu
