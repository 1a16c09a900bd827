"""Per-channel REQUANT records stored in 5 bytes (npuc.kir.records): the stored form, and the
load that turns it into REQUANT's (int32 multiplier, int32 shift) records on the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from npuc.codegen.emitter import Emitter
from npuc.kir import records
from npuc.quant import arith
from npuc.runtime.sim import simulate
from npuc.targets import load_target


def test_pack_and_unpack_round_trip_with_negative_shifts():
    mults, shifts = [1 << 30, (1 << 31) - 1, 0, 1234567890], [-31, 31, 0, -1]
    stored = records.pack(mults, shifts)
    assert stored.dtype == np.int8 and stored.shape == (20,)
    assert stored[4] == -31 and stored[5:9].view("<i4")[0] == (1 << 31) - 1  # channel c at 5c
    m, s = records.unpack(stored)
    assert m.tolist() == mults and s.tolist() == shifts
    assert records.channels(20) == 4 and records.record_addr(100, 3) == 115


@pytest.mark.parametrize("mults,shifts", [([-1], [0]), ([1 << 31], [0]), ([5], [32]), ([1, 2], [0])])
def test_pack_refuses_what_requant_would_refuse(mults, shifts):
    with pytest.raises(ValueError):
        records.pack(mults, shifts)


def test_channels_refuses_a_partial_record():
    with pytest.raises(ValueError, match="whole 5-byte"):
        records.channels(12)


@pytest.mark.parametrize("target", ["npu-mid", "u55-like-256"])
def test_the_load_writes_requant_records_sign_extended(target):
    # multipliers from arith with effective scales above and below 1 (negative and positive
    # shifts), loaded from DRAM at an odd address: the scratchpad then holds the (int32, int32)
    # records REQUANT reads, every shift sign-extended, and the rest of the scratchpad untouched
    t = load_target(target)
    scales = (0.004, 0.03, 2.5, 40.0, 0.0005, 7.0, 1.0)
    mults, shifts = arith.channel_multipliers(0.05, scales, 0.02)
    assert min(shifts) < 0 < max(shifts)
    stored = records.pack(mults, shifts)
    base = 4096 + 3
    dram = np.zeros(8192, np.uint8)
    dram[base:base + stored.size] = stored.view(np.uint8)
    em = Emitter(t)
    at = 256
    for op, f in records.load_instrs(base, len(mults), at):
        em.emit(op, **f)
    prog, _ = em.finish()
    spad = np.frombuffer(simulate(prog, t, dram.tobytes()).spad, np.uint8)
    got = spad[at:at + 8 * len(mults)].view("<i4").reshape(-1, 2)
    assert got[:, 0].tolist() == [int(m) for m in mults]
    assert got[:, 1].tolist() == [int(s) for s in shifts]
    assert not spad[:at].any() and not spad[at + 8 * len(mults):].any()
