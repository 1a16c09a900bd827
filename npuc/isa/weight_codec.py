"""npuc's lossless weight codec: what a DMA_LOAD_DECODE stream holds and how it decodes.

int8 weights of a trained layer are bell-shaped around a value near zero: most of them need far
fewer than 8 bits once the block's centre is taken off, a few need all 8.  The codec cuts the
decoded bytes into blocks of ``BLOCK`` bytes (the last one shorter) and codes each block in the
cheapest of three forms (its first byte, the block header, says which):

* ``0x00..0x07`` -- **Rice**: the header is the Rice parameter ``k``; a byte ``centre`` follows,
  then one code per byte of the block, bits packed most significant first, the block padded with
  zero bits to a whole byte.  Each byte ``w`` is coded as ``v = zigzag(int8(w - centre))``
  (``0, -1, 1, -2, ...`` -> ``0, 1, 2, 3, ...``, the difference wrapping in 8 bits), then
  ``q = v >> k``: when ``q < ESCAPE`` the code is ``q`` one bits, a zero bit and the ``k`` low
  bits of ``v``; otherwise ``ESCAPE`` one bits and the 8 bits of ``v`` (no zero bit), so that no
  byte costs more than ``ESCAPE + 8`` bits.
* ``0xFE`` -- **constant**: one byte follows, repeated for the whole block (all-zero padding,
  pruned channels).
* ``0xFF`` -- **raw**: the block's bytes follow as they are (incompressible noise).

The encoder picks, per block, the centre (the median of its signed bytes), the ``k`` that gives
the fewest bits, and the form that gives the fewest bytes, so that no block grows by more than its
header byte.  Whether a whole stream is worth decoding is the compiler's call
(:func:`worth_compressing`).  Decoding reproduces the bytes exactly; a stream that does not
decode to exactly the expected length, or has bytes left over, is refused with
:class:`WeightStreamError`.

The facts it builds on (Golomb-Rice codes are near optimal for geometric/Laplacian magnitudes;
a per-block escape bounds the worst case; weight decoders in NPU DMA paths) are from the
literature; the format is npuc's own.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

BLOCK = 128        # decoded bytes per block (the last block of a stream may be shorter)
ESCAPE = 8         # unary prefix at which a code escapes to 8 literal bits
MAX_K = 7
RAW, CONSTANT = 0xFF, 0xFE


class WeightStreamError(ValueError):
    """A weight stream that does not decode (callers turn it into an NpucError subclass)."""


# ------------------------------------------------------------------------------------ encoding


def _zigzag(d: np.ndarray) -> np.ndarray:
    """int8 -> uint8: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ..."""
    d = d.astype(np.int16)
    return ((d << 1) ^ (d >> 7)).astype(np.uint8)


def _unzigzag(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.int16)
    return ((v >> 1) ^ -(v & 1)).astype(np.int8)


def _code_bits(v: np.ndarray, k: int) -> np.ndarray:
    """Bits of each value's code with parameter ``k``."""
    q = v.astype(np.int32) >> k
    return np.where(q < ESCAPE, q + 1 + k, ESCAPE + 8)


def _codes(v: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code, length in bits) of each value of ``v`` with the parameter ``k`` of its row."""
    v = v.astype(np.int64)
    q = v >> k
    escape = q >= ESCAPE
    tail_bits = np.where(escape, 8, k)
    tail = np.where(escape, v, v & ((1 << k) - 1))
    prefix = np.where(escape, (1 << ESCAPE) - 1, ((1 << np.minimum(q, ESCAPE)) - 1) << 1)
    return (prefix << tail_bits) | tail, np.where(escape, ESCAPE, q + 1) + tail_bits


def _pack(code: np.ndarray, length: np.ndarray) -> bytes:
    """Codes (each ``length`` bits, most significant first) back to back, as bytes."""
    width = int(length.max(initial=0))  # ESCAPE + 8, or a block's last code with its padding
    left = (code << (width - length)).astype(np.int64)           # each code left-aligned in 16 bits
    bits = ((left[:, None] >> np.arange(width - 1, -1, -1)) & 1).astype(np.uint8)
    return np.packbits(bits[np.arange(width)[None, :] < length[:, None]]).tobytes()


def _encode_blocks(blocks: np.ndarray) -> list[bytes]:
    """The coded form of each row of ``blocks`` (uint8, one block a row, all of one length)."""
    signed = blocks.view(np.int8).astype(np.int16)
    centre = np.median(signed, axis=1).astype(np.int16)  # truncated toward zero: any centre decodes
    v = _zigzag((signed - centre[:, None]).astype(np.int8))
    costs = np.stack([_code_bits(v, k).sum(axis=1) for k in range(MAX_K + 1)], axis=1)
    k = np.argmin(costs, axis=1)
    rice_bytes = 2 + -(-costs[np.arange(len(k)), k] // 8)
    constant = np.all(blocks == blocks[:, :1], axis=1)
    rice = ~constant & (rice_bytes < 1 + blocks.shape[1])
    code, length = _codes(v[rice], k[rice][:, None])
    pad = (-length.sum(axis=1)) % 8           # every Rice block ends on a byte: its last code padded
    length[:, -1] += pad
    code[:, -1] <<= pad
    packed = _pack(code.ravel(), length.ravel())
    ends = np.cumsum(length.sum(axis=1) // 8).tolist()
    out, r = [], 0
    for i in range(len(blocks)):
        if constant[i]:
            out.append(bytes((CONSTANT, int(blocks[i, 0]))))
        elif rice[i]:
            out.append(bytes((int(k[i]), int(centre[i]) & 0xFF)) + packed[(ends[r - 1] if r else 0):ends[r]])
            r += 1
        else:
            out.append(bytes((RAW,)) + blocks[i].tobytes())
    return out


def encode_blocks(data: bytes | np.ndarray) -> list[bytes]:
    """The coded blocks of ``data``, one per ``BLOCK`` bytes (the last may cover fewer): each
    block is self-contained, so the blocks from any block on are the stream of the bytes from
    there (a load may decode a block-aligned part of a stream)."""
    raw = np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).ravel()
    full = raw.size // BLOCK * BLOCK
    parts = _encode_blocks(raw[:full].reshape(-1, BLOCK)) if full else []
    if full < raw.size:
        parts += _encode_blocks(raw[full:].reshape(1, -1))
    return parts


def encode(data: bytes | np.ndarray) -> bytes:
    """The stream of ``data`` (bytes, any values): decode(encode(x), len(x)) == x."""
    return b"".join(encode_blocks(data))


def worth_compressing(raw_bytes: int, stream_bytes: int, burst_bytes: int) -> bool:
    """Whether a stream saves at least one burst of the memory it is read from."""
    burst = max(burst_bytes, 1)
    return -(-stream_bytes // burst) < -(-raw_bytes // burst)


# ------------------------------------------------------------------------------------ decoding


@lru_cache(maxsize=None)
def _table(k: int) -> tuple[list[int], list[int]]:
    """(value, code length) of the code that starts each 16-bit window, for parameter ``k``."""
    w = np.arange(1 << 16, dtype=np.int64)
    ones = np.zeros_like(w)
    run = np.ones_like(w, dtype=bool)
    for b in range(ESCAPE):
        run &= (w >> (15 - b)) & 1 == 1
        ones += run
    escape = ones >= ESCAPE
    length = np.where(escape, ESCAPE + 8, ones + 1 + k)
    low = (w >> (16 - length)) & ((1 << k) - 1)
    value = np.where(escape, w & 0xFF, (ones << k) | low)
    return value.tolist(), length.tolist()


def _windows(stream: bytes) -> list[int]:
    """The 16 bits of ``stream`` that start at each of its bit positions (zeros past its end)."""
    bits = np.concatenate([np.unpackbits(np.frombuffer(stream, np.uint8)), np.zeros(16, np.uint8)])
    packed = np.packbits(bits)  # whole bytes: the window at bit p is bytes p//8 .. p//8 + 2, shifted
    b = packed.astype(np.int64)
    three = (b[:-2] << 16) | (b[1:-1] << 8) | b[2:]
    return ((three[:, None] >> (8 - np.arange(8))) & 0xFFFF).ravel()[: len(stream) * 8].tolist()


def _rice_block(windows: list[int], start: int, end: int, count: int, k: int, where: str) -> tuple[list[int], int]:
    """``count`` zigzagged values of a Rice block whose codes start at bit ``start`` of a stream of
    ``end`` bits; (values, the bit after them)."""
    value, length = _table(k)
    out = [0] * count
    pos = start
    for i in range(count):
        if pos >= end:
            raise WeightStreamError(f"{where}: the stream ends inside a code")
        w = windows[pos]
        out[i] = value[w]
        pos += length[w]
    if pos > end:
        raise WeightStreamError(f"{where}: the stream ends inside a code")
    if max(out) > 255:
        raise WeightStreamError(f"{where}: a code decodes to {max(out)}, more than a byte holds")
    return out, pos


def decode(stream: bytes, length: int) -> bytes:
    """The ``length`` bytes that ``stream`` codes; WeightStreamError when it is malformed."""
    return _decode(bytes(stream), int(length))


@lru_cache(maxsize=4096)
def _decode(stream: bytes, length: int) -> bytes:
    out = bytearray()
    at = 0
    windows = None
    while len(out) < length:
        count = min(BLOCK, length - len(out))
        where = f"block {len(out) // BLOCK} (stream byte {at})"
        if at >= len(stream):
            raise WeightStreamError(f"{where}: the stream ends after {len(out)} of {length} bytes")
        header = stream[at]
        if header == RAW:
            if at + 1 + count > len(stream):
                raise WeightStreamError(f"{where}: a raw block of {count} bytes runs past the stream's end")
            out += stream[at + 1:at + 1 + count]
            at += 1 + count
        elif header == CONSTANT:
            if at + 2 > len(stream):
                raise WeightStreamError(f"{where}: a constant block has no value byte")
            out += bytes((stream[at + 1],)) * count
            at += 2
        elif header <= MAX_K:
            if at + 2 > len(stream):
                raise WeightStreamError(f"{where}: a Rice block has no centre byte")
            centre = stream[at + 1]
            if windows is None:
                windows = _windows(stream)
            v, pos = _rice_block(windows, (at + 2) * 8, len(stream) * 8, count, header, where)
            signed = (_unzigzag(np.array(v, np.uint8)).astype(np.int16) + (centre ^ 0x80) - 0x80).astype(np.int8)
            out += signed.view(np.uint8).tobytes()
            at = -(-pos // 8)
        else:
            raise WeightStreamError(f"{where}: block header 0x{header:02x} is none of Rice k 0..{MAX_K}, "
                                    f"constant 0x{CONSTANT:02x} or raw 0x{RAW:02x}")
    if at != len(stream):
        raise WeightStreamError(f"the stream has {len(stream) - at} bytes left after its {length} decoded bytes")
    return bytes(out)


def stream_problem(stream: bytes, length: int) -> str | None:
    """Why ``stream`` does not decode to ``length`` bytes, or None."""
    try:
        decode(stream, length)
    except WeightStreamError as e:
        return str(e)
    return None
