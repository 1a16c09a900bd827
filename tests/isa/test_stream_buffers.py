"""Stream buffers (``weight_decoder.stream_buffers``): DMA_LOAD and DMA_LOAD_DECODE's ``stream``
and ``held`` fields, their bursts, and the simulator's check of every ``held``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from npuc.errors import SimulationError
from npuc.isa.instr import Instr
from npuc.isa.weight_codec import encode
from npuc.runtime.sim import simulate
from npuc.targets import load_target

U55 = load_target("u55-like-256")
FLASH = U55.window_of("flash")
BURST = FLASH.memory.burst_bytes  # 128


def _image(data: np.ndarray) -> np.ndarray:
    img = np.zeros(FLASH.base + 4096, np.uint8)
    img[FLASH.base:FLASH.base + data.size] = data
    return img


def _load(at: int, n: int, local: int, stream: int = 0, held: int = 0) -> Instr:
    return Instr.make("DMA_LOAD", esize=1, dram_addr=FLASH.base + at, local_addr=local, n0=n,
                      stream=stream, held=held)


def _run(prog, image, target=U55):
    return simulate(list(prog) + [Instr.make("END")], target, image)


def _flash_read(r) -> int:
    return r.actions.memory_read[FLASH.index]


def test_a_constant_read_in_pieces_costs_its_bytes_in_whole_bursts_once():
    """Four 80-byte pieces of one constant, one after another: alone each is charged its run in
    whole bursts (one each, 4 in all: docs/isa.md); on one stream buffer, each piece after the
    first fetches only the bursts past the one the last piece ended in: 3 bursts,
    ceil(320 / 128).  Same bytes land."""
    data = np.arange(512, dtype=np.int64).astype(np.uint8)
    alone = [_load(80 * i, 80, 128 * i) for i in range(4)]
    streamed = [_load(80 * i, 80, 128 * i, stream=1, held=1) for i in range(4)]
    a = _run(alone, _image(data))
    b = _run(streamed, _image(data))
    assert _flash_read(a) == 4 * BURST
    assert _flash_read(b) == 3 * BURST
    assert a.spad == b.spad
    spad = np.frombuffer(b.spad, np.uint8)
    for i in range(4):
        np.testing.assert_array_equal(spad[128 * i:128 * i + 80], data[80 * i:80 * (i + 1)])
    assert b.total_cycles < a.total_cycles


def test_a_piece_inside_the_held_burst_fetches_nothing():
    r = _run([_load(0, 40, 0, stream=2, held=1), _load(40, 40, 64, stream=2, held=1)], _image(np.ones(128, np.uint8)))
    assert _flash_read(r) == BURST


def test_buffers_are_kept_apart():
    """Two constants read alternately, each on its own buffer, both continue."""
    prog = []
    for i in range(3):
        prog.append(_load(64 * i, 64, 64 * i, stream=1, held=1))
        prog.append(_load(1024 + 64 * i, 64, 1024 + 64 * i, stream=2, held=1))
    r = _run(prog, _image(np.ones(2048, np.uint8)))
    assert _flash_read(r) == 2 * 2 * BURST  # 192 bytes of each: two bursts each


def test_a_held_mark_the_buffer_cannot_honour_is_refused():
    with pytest.raises(SimulationError, match="stream buffer 1 holds"):
        _run([_load(80, 80, 0, stream=1, held=1)], _image(np.ones(256, np.uint8)))
    with pytest.raises(SimulationError, match="stream buffer 1 holds"):  # its buffer held another burst
        _run([_load(0, 128, 0, stream=1, held=1), _load(300, 10, 256, stream=1, held=1)],
             _image(np.ones(512, np.uint8)))
    with pytest.raises(SimulationError, match="stream buffer 2 holds"):  # another buffer's burst
        _run([_load(0, 80, 0, stream=1), _load(80, 80, 128, stream=2, held=1)], _image(np.ones(256, np.uint8)))


def test_stream_fields_are_checked_against_the_target():
    with pytest.raises(SimulationError, match="does not exist"):
        _run([_load(0, 16, 0, stream=5)], _image(np.ones(16, np.uint8)))
    with pytest.raises(SimulationError, match="needs a stream buffer"):
        _run([_load(0, 16, 0, held=1)], _image(np.ones(16, np.uint8)))
    strided = Instr.make("DMA_LOAD", esize=1, dram_addr=FLASH.base, local_addr=0, n0=8, n1=2, dram_s1=32, stream=1)
    with pytest.raises(SimulationError, match="one contiguous run"):
        _run([strided], _image(np.ones(64, np.uint8)))
    none = dataclasses.replace(U55, weight_decoder=dataclasses.replace(U55.weight_decoder, stream_buffers=0))
    with pytest.raises(SimulationError, match="does not exist"):
        _run([_load(0, 16, 0, stream=1)], _image(np.ones(16, np.uint8)), none)


def test_decoded_loads_continue_a_stream_too():
    """Two weight streams packed one after the other, read by two decoded loads on one buffer:
    the second fetches only past the burst the first ended in."""
    rng = np.random.default_rng(0)
    blocks = [rng.integers(-3, 4, 256).astype(np.int8).view(np.uint8) for _ in range(2)]
    coded = [encode(b) for b in blocks]
    data = np.frombuffer(b"".join(coded), np.uint8)
    at = [0, len(coded[0])]

    def dec(i: int, held: int) -> Instr:
        return Instr.make("DMA_LOAD_DECODE", dram_addr=FLASH.base + at[i], stream_bytes=len(coded[i]),
                          local_addr=256 * i, n0=256, stream=1, held=held)

    r = _run([dec(0, 1), dec(1, 1)], _image(data))
    assert _flash_read(r) == -(-data.size // BURST) * BURST
    spad = np.frombuffer(r.spad, np.uint8)
    np.testing.assert_array_equal(spad[:512], np.concatenate(blocks))
