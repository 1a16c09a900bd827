"""The per-channel REQUANT records of an int8 ``conv2d``, ``depthwise_conv2d`` or ``gemm`` kernel, as stored.

A kernel with ``n`` output channels takes them as one int8 constant of ``5 n`` bytes: channel
``c``'s record at byte ``5 c``, its multiplier (int32, little-endian) then its shift (int8).
REQUANT reads (int32 multiplier, int32 shift) records of 8 bytes from the scratchpad
(docs/isa.md), so a kernel loads channels ``[c0, c0 + k)`` with one DMA that reads their ``5 k``
contiguous bytes and writes each record 8 bytes after the last (its shift lands in the low byte
of its second word), and widens the shifts in place with one VCVT int8 -> int32
(:func:`load_instrs`).  Stored so, a channel's requantization constants (with its int32 bias)
take 9 bytes of the constants and of the memory the weights are read from, not 12.

The per-tensor records of other kernels (a qadd's, a pool's) stay (int32, int32) ``[k, 2]``:
there are one or a few of them, loaded as they are.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from npuc.isa.enums import DType

BYTES_PER_CHANNEL = 5  # int32 multiplier + int8 shift
ON_CHIP_BYTES = 8      # REQUANT's (int32 multiplier, int32 shift) record


def pack(mults: Sequence[int], shifts: Sequence[int]) -> np.ndarray:
    """The stored records (int8 ``[5 n]``) of channels with these multipliers and shifts."""
    m = np.asarray(mults, dtype=np.int64)
    s = np.asarray(shifts, dtype=np.int64)
    if m.shape != s.shape or m.ndim != 1:
        raise ValueError(f"one multiplier and one shift per channel, got {m.shape} and {s.shape}")
    if (m < 0).any() or (m >= 1 << 31).any() or (np.abs(s) > 31).any():
        raise ValueError("multipliers must be int32 >= 0 and shifts in [-31, 31]")
    out = np.empty((m.size, BYTES_PER_CHANNEL), np.int8)
    out[:, :4] = m.astype("<i4").view(np.int8).reshape(-1, 4)
    out[:, 4] = s
    return out.reshape(-1)


def unpack(stored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(multipliers, shifts) as int64, from the stored records (int8 ``[5 n]``)."""
    raw = np.ascontiguousarray(stored, dtype=np.int8).reshape(channels(np.size(stored)), BYTES_PER_CHANNEL)
    return np.ascontiguousarray(raw[:, :4]).view("<i4")[:, 0].astype(np.int64), raw[:, 4].astype(np.int64)


def channels(nbytes: int) -> int:
    """Channels of stored records of ``nbytes`` bytes (ValueError unless a whole number)."""
    if nbytes % BYTES_PER_CHANNEL:
        raise ValueError(f"{nbytes} bytes are not whole {BYTES_PER_CHANNEL}-byte channel records")
    return nbytes // BYTES_PER_CHANNEL


def record_addr(base: int, c: int) -> int:
    """Address of channel ``c``'s record in stored records at ``base``."""
    return base + BYTES_PER_CHANNEL * c


def load_instrs(stored: int, k: int, records: int) -> list[tuple[str, dict]]:
    """Load the ``k`` stored records at DRAM address ``stored`` into REQUANT records at
    scratchpad address ``records`` (8 bytes each): one DMA (one contiguous run of DRAM) and a
    VCVT on the vector queue that widens the shifts in place."""
    return [
        ("DMA_LOAD", dict(esize=1, dram_addr=stored, local_addr=records, n0=BYTES_PER_CHANNEL, n1=k,
                          dram_s1=BYTES_PER_CHANNEL, local_s1=ON_CHIP_BYTES)),
        ("VCVT", dict(src_dtype=DType.int8.name, dst_dtype=DType.int32.name, n0=k, n1=1, src=records + 4,
                      src_s0=ON_CHIP_BYTES, dst=records + 4, dst_s0=ON_CHIP_BYTES)),
    ]
