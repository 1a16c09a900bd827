"""LOOP flag exceptions in the .npub container: a binary that uses them is format 4.5, a LOOP
with phases but no exception is not, and a file that uses them under an older version is refused."""

from __future__ import annotations

import dataclasses

import pytest

from npuc.errors import BinaryFormatError
from npuc.isa import assemble as assemble_program
from npuc.isa.encoding import LOOP_EXCEPTIONS, stream_features
from npuc.isa.loops import exception_value
from npuc.runtime.npub import LOOP_EXCEPTION_VERSION, LOOP_PHASE_VERSION, assemble, load_npub, split_container
from npuc.runtime.npub_example import relu_npub

# three copies of 16 bytes; the first load signals nothing (an exception gives it no flags)
EXCEPTED = f"""
LOOP n=3 body=2 i0=0 f0=3 s0=0x10 i1=1 f1=3 s1=0x10 x0={exception_value(0, 1, 0)}
DMA_LOAD esize=1 dram_addr=0x40 local_addr=0x10 n0=16 signal=store
DMA_STORE esize=1 dram_addr=0x80 local_addr=0x10 n0=16 wait=load
END
"""


def _npub(text: str):
    return dataclasses.replace(relu_npub(), code_segments=(assemble_program(text).encode(),), debug_map=None)


def test_a_binary_with_flag_exceptions_is_format_4_5_and_round_trips():
    n = _npub(EXCEPTED)
    data = n.to_bytes()
    assert split_container(data).version == LOOP_EXCEPTION_VERSION == (4, 5)
    assert LOOP_EXCEPTIONS in stream_features(n.code_segments[0])[1]
    back = load_npub(data)
    assert back.code_segments == n.code_segments and back.to_bytes() == data


def test_phases_alone_are_not_exceptions_and_exceptions_are_not_phases():
    phased = assemble_program(EXCEPTED.replace(f" x0={exception_value(0, 1, 0)}", "").replace(
        "s1=0x10", "s1=0x10 p0=3 ph0=1 p1=3 ph1=1")).encode()
    assert stream_features(phased)[0] and LOOP_EXCEPTIONS not in stream_features(phased)[1]
    excepted = assemble_program(EXCEPTED).encode()
    assert not stream_features(excepted)[0]


@pytest.mark.parametrize("minor", [2, 3, 4])
def test_exceptions_under_an_older_minor_version_are_refused(minor):
    c = split_container(_npub(EXCEPTED).to_bytes())
    older = assemble(dataclasses.replace(c, version=(4, minor)))
    with pytest.raises(BinaryFormatError, match="LOOP flag exceptions, which exist from format 4.5"):
        load_npub(older)
    assert LOOP_PHASE_VERSION < LOOP_EXCEPTION_VERSION
