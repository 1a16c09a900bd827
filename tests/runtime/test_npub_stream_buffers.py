"""Loads on stream buffers in the .npub container: a binary whose loads use them is format 4.6,
one without keeps its version, and a file that uses them under an older version is refused."""

from __future__ import annotations

import dataclasses

import pytest

from npuc.errors import BinaryFormatError
from npuc.isa import assemble as assemble_program
from npuc.isa.encoding import STREAM_LOADS, stream_features
from npuc.runtime.npub import STREAM_BUFFER_VERSION, assemble, load_npub, split_container
from npuc.runtime.npub_example import relu_npub

STREAMED = """
DMA_LOAD esize=1 dram_addr=0x40 local_addr=0x0 n0=16 stream=1
DMA_LOAD esize=1 dram_addr=0x50 local_addr=0x10 n0=16 stream=1 held=1
DMA_LOAD esize=1 dram_addr=0x60 local_addr=0x20 n0=16 stream=1 held=1
END
"""


def _npub(text: str):
    return dataclasses.replace(relu_npub(), code_segments=(assemble_program(text).encode(),), debug_map=None)


def test_a_binary_with_stream_loads_is_format_4_6_and_round_trips():
    n = _npub(STREAMED)
    data = n.to_bytes()
    assert split_container(data).version == STREAM_BUFFER_VERSION == (4, 6)
    assert STREAM_LOADS in stream_features(n.code_segments[0])[1]
    back = load_npub(data)
    assert back.code_segments == n.code_segments and back.to_bytes() == data


def test_loads_without_stream_fields_keep_the_version():
    plain = _npub(STREAMED.replace(" stream=1 held=1", "").replace(" stream=1", ""))
    assert STREAM_LOADS not in stream_features(plain.code_segments[0])[1]
    assert split_container(plain.to_bytes()).version < STREAM_BUFFER_VERSION


@pytest.mark.parametrize("minor", [2, 5])
def test_stream_loads_under_an_older_minor_version_are_refused(minor):
    c = split_container(_npub(STREAMED).to_bytes())
    older = assemble(dataclasses.replace(c, version=(4, minor)))
    with pytest.raises(BinaryFormatError, match="stream buffers, which exist from format 4.6"):
        load_npub(older)
