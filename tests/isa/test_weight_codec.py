"""The weight codec: lossless on every input, compact on bell-shaped int8 weights, raw on noise,
and a malformed stream refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from npuc.isa.weight_codec import BLOCK, CONSTANT, RAW, WeightStreamError, decode, encode, stream_problem, worth_compressing


def roundtrip(data: bytes) -> bytes:
    s = encode(data)
    assert decode(s, len(data)) == data
    return s


def int8(x: np.ndarray) -> bytes:
    return np.clip(np.round(x), -127, 127).astype(np.int8).tobytes()


@given(st.binary(max_size=3 * BLOCK + 5))
@settings(max_examples=150, deadline=None)
def test_any_bytes_roundtrip_and_never_grow_more_than_a_header_per_block(data):
    s = roundtrip(data)
    assert len(s) <= len(data) + -(-len(data) // BLOCK)


def entropy_bits(data: bytes) -> float:
    p = np.bincount(np.frombuffer(data, np.uint8), minlength=256) / len(data)
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


@pytest.mark.parametrize("scale", [2, 4, 8, 20])
def test_laplacian_weights_compress_near_their_entropy(scale):
    data = int8(np.random.default_rng(1).laplace(0, scale, 20000))
    ratio = len(roundtrip(data)) / len(data)
    assert ratio < entropy_bits(data) / 8 + 0.05


def test_trained_weights_compress_near_their_entropy():
    # weights of a small network after a few hundred steps of training, quantized per channel
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, weight_decay=1e-3)
    x = torch.randn(512, 64)
    y = (x[:, :10] * torch.arange(1, 11)).argmax(1)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    w = net[0].weight.detach().numpy()
    q = w / np.abs(w).max(axis=1, keepdims=True) * 127
    data = int8(q)
    assert len(roundtrip(data)) / len(data) < entropy_bits(data) / 8 + 0.05


def test_all_zeros_is_two_bytes_a_block():
    data = bytes(10 * BLOCK + 3)
    s = roundtrip(data)
    assert len(s) == 2 * 11 and s[0] == CONSTANT


def test_incompressible_noise_falls_back_to_raw():
    data = np.random.default_rng(2).integers(0, 256, 50 * BLOCK, dtype=np.uint8).tobytes()
    s = roundtrip(data)
    assert len(s) == len(data) + 50 and s[0] == RAW
    assert not worth_compressing(len(data), len(s), 128)


def test_extremes_and_wrapping_differences():
    # values far from the block's centre wrap in 8 bits and escape
    data = bytes([0x80, 0x7F] * BLOCK + [0, 0xFF, 0x80])
    roundtrip(data)
    roundtrip(bytes([0x7F] * (BLOCK - 1) + [0x80]))


def test_empty_stream():
    assert encode(b"") == b"" and decode(b"", 0) == b""


@pytest.mark.parametrize("stream, length, words", [
    (b"", 4, "ends after 0 of 4"),
    (bytes([RAW, 1, 2]), 4, "runs past"),
    (bytes([CONSTANT]), 4, "no value byte"),
    (bytes([0x09, 0]), 4, "block header 0x09"),
    (bytes([3, 0]), 4, "ends inside a code"),
    (bytes([CONSTANT, 7, 0]), 4, "1 bytes left"),
    (bytes([7, 0, 0xC0, 0x00]), 1, "more than a byte holds"),
])
def test_malformed_streams_are_refused_with_the_reason(stream, length, words):
    with pytest.raises(WeightStreamError, match=words):
        decode(stream, length)
    assert words in stream_problem(stream, length)


def test_truncated_real_stream_is_refused():
    data = int8(np.random.default_rng(3).laplace(0, 6, 4 * BLOCK))
    s = encode(data)
    for cut in (1, len(s) // 2, len(s) - 1):
        assert stream_problem(s[:cut], len(data)) is not None
