"""Illegal programs stop with a SimulationError that names the instruction index and its text."""

from __future__ import annotations

import numpy as np
import pytest

from npuc.errors import SimulationError
from npuc.isa import Instr, assemble
from npuc.runtime.sim import simulate
from npuc.targets import load_target

MID = load_target("npu-mid")
SMALL = load_target("npu-small")


@pytest.mark.parametrize(
    "text,match",
    [
        ("NOP\nDMA_LOAD esize=1 dram_addr=0 local_addr=0x7ffff n0=2\nEND", r"instruction 1 `DMA_LOAD .*local_addr=0x7ffff.*`: operand 'local' in SPAD: bytes 0x7ffff..0x80000 run past the end of the 524288-byte memory"),
        ("DMA_LOAD esize=4 dram_addr=2 local_addr=0 n0=1\nEND", r"instruction 0 .*operand 'dram' in DRAM: address 0x2 is not aligned to its 4-byte elements"),
        ("VBIN op=add dtype=int32 n0=4 dst=0 a=0 b=0 a_s0=2\nEND", r"operand 'a' in SPAD: stride 2 is not a multiple of its 4-byte elements"),
        ("VFILL dtype=int8 n0=4 n1=2 dst=0 dst_s1=2 value=0\nEND", r"write some element twice"),
        ("VUN op=copy dtype=int32 n0=20000 dst_space=acc dst=0 src=0\nEND", r"ACC: bytes 0x0..0x1387f run past the end of the 65536-byte memory"),
        ("LOAD_WEIGHTS addr=0 k=17 n=16\nEND", r"instruction 0 .*k = 17 exceeds the 16 rows of target 'npu-mid''s array"),
        ("MATMUL_OS m=17 k=4 n=4 in_addr=0 w_addr=0x100 out_addr=0\nEND", r"m = 17 exceeds the 16 rows"),
        ("MATMUL k=4 n=4 in_addr=0 m0=3 out_addr=0\nEND", r"instruction 0 `MATMUL .*`: MATMUL with no stationary weights loaded"),
        ("LOAD_WEIGHTS addr=0 k=4 n=4\nMATMUL k=4 n=8 in_addr=0 m0=3 out_addr=0\nEND", r"instruction 1 .*expects 4 x 8 int8 weights, but the array holds 4 x 4 int8"),
        ("LOAD_WEIGHTS addr=0 k=4 n=4\nMATMUL_OS m=2 k=4 n=4 in_addr=0 w_addr=0 out_addr=0\nMATMUL k=4 n=4 in_addr=0 m0=3 out_addr=0\nEND", r"instruction 2 .*no stationary weights"),
        ("VFILL dtype=int32 n0=2 dst=0 value=-1\nREQUANT n0=1 dst=0x10 src=0x100 qparams=0\nEND", r"instruction 1 .*REQUANT parameters of channel 0 are invalid: multiplier -1"),
    ],
)
def test_illegal_programs(text, match):
    with pytest.raises(SimulationError, match=match):
        simulate(assemble(text), MID)


@pytest.mark.parametrize(
    "text,match",
    [
        ("VUN op=exp dtype=fp16 n0=4 dst=0 src=0\nEND", r"target 'npu-small' has no floating-point support"),
        ("LOAD_WEIGHTS dtype=fp16 addr=0 k=4 n=4\nEND", r"target 'npu-small' has no fp16 MACs"),
        ("MATMUL_OS m=2 k=4 n=4 in_addr=0 w_addr=0x100 out_addr=0\nEND", r"target 'npu-small' has no output_stationary dataflow"),
        ("LOAD_WEIGHTS addr=0 k=9 n=8\nEND", r"k = 9 exceeds the 8 rows"),
    ],
)
def test_target_constraints(text, match):
    with pytest.raises(SimulationError, match=match):
        simulate(assemble(text), SMALL, functional=False)


def test_deadlock_is_detected_and_named():
    text = """
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=16 wait=vector
    VUN op=relu dtype=int8 n0=16 dst=0x100 src=0 wait=load signal=load
    END
    """
    with pytest.raises(SimulationError) as info:
        simulate(assemble(text), MID)
    msg = str(info.value)
    assert "deadlock" in msg
    assert "the load queue stalls at instruction 0 `DMA_LOAD" in msg and "vector->load" in msg
    assert "the vector queue stalls at instruction 1 `VUN" in msg and "load->vector" in msg


def test_waiting_on_a_finished_queue_is_a_deadlock():
    text = "DMA_STORE esize=1 dram_addr=0 local_addr=0 n0=4 wait=compute\nEND\n"
    with pytest.raises(SimulationError, match=r"store queue stalls at instruction 0 .*compute->store, which never arrives"):
        simulate(assemble(text), MID, functional=False)


def test_dram_limits():
    with pytest.raises(SimulationError, match=r"exceeds target 'npu-small''s 268435456-byte system address map"):
        simulate(assemble("END"), SMALL, dram_size=(1 << 28) + 1)
    with pytest.raises(SimulationError, match=r"operand 'dram' in DRAM: bytes 0x0..0x3f run past the end of the 32-byte memory"):
        simulate(assemble("DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=64\nEND"), MID, np.zeros(32, np.uint8))


def test_incomplete_program():
    nop = assemble("NOP\nEND")[0]
    with pytest.raises(SimulationError, match="does not end with END"):
        simulate([nop], MID)
    assert isinstance(nop, Instr)


@pytest.mark.parametrize(
    "text,match",
    [
        (
            "DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024\nVUN op=relu dtype=int8 n0=1024 dst=0x1000 src=0\nEND",
            r"race on SPAD bytes 0x0..0x3ff: instruction 1 `VUN .*` \(vector queue\) reads them while instruction 0 `DMA_LOAD .*` \(load queue\) writes them",
        ),
        (
            "VFILL dtype=int8 n0=512 dst=0 value=1 signal=store\nDMA_STORE esize=1 dram_addr=0 local_addr=0 n0=512 wait=vector\n"
            "VFILL dtype=int8 n0=16 dst=0x100 value=2\nEND",
            r"race on SPAD bytes 0x100..0x10f: instruction 2 `VFILL .*` \(vector queue\) writes them while instruction 1 `DMA_STORE",
        ),
    ],
)
def test_races_are_reported(text, match):
    with pytest.raises(SimulationError, match=match):
        simulate(assemble(text), MID, dram_size=1024)
    simulate(assemble(text), MID, dram_size=1024, check_races=False)  # runs when asked not to check


def test_disjoint_overlap_is_not_a_race():
    text = (
        "MATMUL_OS m=16 k=8 n=16 in_addr=0 w_addr=0x100 out_addr=0\n"
        "MATMUL_OS m=16 k=8 n=16 in_addr=0 w_addr=0x100 out_addr=0x400\n"
        "DMA_LOAD esize=1 dram_addr=0 local_addr=0x800 n0=256 n1=2 local_s1=512\n"  # interleaved with...
        "VFILL dtype=int8 n0=256 n1=2 dst=0x900 dst_s1=512 value=3\nEND"  # ...these rows: no shared byte
    )
    r = simulate(assemble(text), MID, dram_size=1024)
    assert r.total_cycles > 0


def test_output_stationary_interlock():
    """A MATMUL_OS accumulating into the tile the previous one still drains waits for the drain;
    one writing another tile overlaps it."""
    same = "MATMUL_OS m=16 k=8 n=16 in_addr=0 w_addr=0x100 out_addr=0\nMATMUL_OS acc=1 m=16 k=8 n=16 in_addr=0 w_addr=0x100 out_addr=0\nEND"
    other = "MATMUL_OS m=16 k=8 n=16 in_addr=0 w_addr=0x100 out_addr=0\nMATMUL_OS acc=1 m=16 k=8 n=16 in_addr=0 w_addr=0x100 out_addr=0x400\nEND"
    t_same = simulate(assemble(same), MID, dram_size=1024)
    t_other = simulate(assemble(other), MID, dram_size=1024)
    assert t_other.total_cycles < t_same.total_cycles
    first, second = t_same.trace_events[0], t_same.trace_events[1]
    assert second.start >= first.end


def test_race_inside_a_loop_names_the_encoded_instruction():
    text = (
        "NOP\nLOOP n=2 body=2\n"
        "DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024\nVUN op=relu dtype=int8 n0=1024 dst=0x1000 src=0\nEND"
    )
    with pytest.raises(SimulationError) as e:
        simulate(assemble(text), MID, dram_size=1024)
    msg = str(e.value)
    assert "instruction 3 `VUN" in msg and "(step 2 of the stream its LOOPs expand to)" in msg, msg
    assert "instruction 2 `DMA_LOAD" in msg and "(step 1 of the stream" in msg, msg
