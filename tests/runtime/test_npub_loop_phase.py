"""LOOP phases in the .npub container: a binary that uses them is format 4.3, one that does not
keeps its version and bytes, and a file that uses them under an older version is refused."""

from __future__ import annotations

import dataclasses

import pytest

from npuc.errors import BinaryFormatError
from npuc.isa import assemble as assemble_program
from npuc.isa.encoding import uses_loop_phases
from npuc.runtime.npub import FORMAT_VERSION, LOOP_PHASE_VERSION, assemble, load_npub, split_container
from npuc.runtime.npub_example import RELU_PROGRAM, relu_npub

PHASED = """
LOOP n=3 body=2 i0=0 f0=3 p0=3 ph0=1 s0=0x10 i1=1 f1=3 p1=3 ph1=1 s1=0x10
DMA_LOAD esize=1 dram_addr=0x40 local_addr=0x10 n0=16 signal=store
DMA_STORE esize=1 dram_addr=0x80 local_addr=0x10 n0=16 wait=load
END
"""


def _phased_npub():
    return dataclasses.replace(relu_npub(), code_segments=(assemble_program(PHASED).encode(),), debug_map=None)


def test_a_binary_with_loop_phases_is_format_4_3_and_round_trips():
    n = _phased_npub()
    data = n.to_bytes()
    assert split_container(data).version == LOOP_PHASE_VERSION == (4, 3)
    back = load_npub(data)
    assert back.code_segments == n.code_segments and back.to_bytes() == data


def test_a_binary_without_phases_keeps_its_version():
    data = relu_npub().to_bytes()
    assert split_container(data).version == FORMAT_VERSION
    assert not uses_loop_phases(relu_npub().code_segments[0])
    # a LOOP without a phase is no 4.3 feature either
    rolled = assemble_program(PHASED.replace(" ph0=1", "").replace(" ph1=1", "")).encode()
    assert not uses_loop_phases(rolled) and uses_loop_phases(assemble_program(PHASED).encode())
    assert not uses_loop_phases(assemble_program(RELU_PROGRAM).encode())


@pytest.mark.parametrize("minor", [0, 1, 2])
def test_phases_under_an_older_minor_version_are_refused(minor):
    c = split_container(_phased_npub().to_bytes())
    older = assemble(dataclasses.replace(c, version=(4, minor)))
    with pytest.raises(BinaryFormatError, match="LOOP slots with a phase, which exist from format 4.3"):
        load_npub(older)
