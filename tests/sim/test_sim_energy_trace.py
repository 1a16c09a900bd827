"""Energy tier (actions x the target's table + static power) and the Perfetto trace."""

from __future__ import annotations

import json

import numpy as np
import pytest
from simkernels import tiled_matmul

from npuc.isa import assemble
from npuc.runtime.sim import perfetto_events, simulate, write_perfetto_trace
from npuc.runtime.sim.trace import queue_track
from npuc.targets import load_target

MID = load_target("npu-mid")


def test_energy_of_a_small_program_by_hand():
    text = """
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=100 signal=vector
    VUN op=relu dtype=int8 n0=100 dst=0x100 src=0 wait=load signal=store
    DMA_STORE esize=1 dram_addr=128 local_addr=0x100 n0=100 wait=vector
    END
    """
    r = simulate(assemble(text), MID)
    a = r.actions
    assert (a.dram_read, a.dram_write) == (128, 128)  # 100 bytes -> two 64-byte bursts each way
    assert (a.spad_read, a.spad_write) == (200, 200)
    assert (a.vector_lane_ops, a.instructions, a.macs) == (100, 4, 0)
    e = MID.energy
    dynamic = 256 * MID.memory("dram").read_pj_per_byte + 200 * (e.spad_read_pj_per_byte + e.spad_write_pj_per_byte)
    dynamic += 100 * e.vector_lane_op_pj + 4 * e.instruction_pj
    static = e.static_power_mw * 1e-3 * r.total_cycles / MID.clock_hz * 1e12
    assert r.energy_breakdown_pj["static"] == pytest.approx(static)
    assert r.energy_pj == pytest.approx(dynamic + static)
    # cycles: load 8 + 80, relu 7 + 4, store 8 + 80
    assert r.total_cycles == (8 + 80) + (7 + 4) + (8 + 80)


def test_matmul_counts_and_utilization():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 16), dtype=np.int8)
    text, image, _ = tiled_matmul(x, w, 16, 16)
    r = simulate(assemble(text), MID, image)
    assert r.macs == r.actions.macs_int8 == 64 * 32 * 16
    assert r.energy_breakdown_pj["mac_int8"] == pytest.approx(64 * 32 * 16 * MID.energy.mac_int8_pj)
    assert r.actions.acc_write == 2 * 64 * 16 * 4 and r.actions.acc_read == 64 * 16 * 4 + 64 * 16 * 4
    assert 0 < r.mac_utilization < 1
    assert r.utilization("array") == pytest.approx(r.unit_busy["array"] / r.total_cycles)
    assert r.unit_busy["array"] == 2 * 64  # busy while inputs stream; fill and drain are latency


def test_perfetto_trace(tmp_path):
    text = """
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=64 signal=compute
    LOAD_WEIGHTS addr=0 k=4 n=4 wait=load
    MATMUL k=4 n=4 in_addr=0 m0=4 out_addr=0 signal=store
    DMA_STORE local=acc esize=4 dram_addr=64 local_addr=0 n0=16 wait=compute
    END
    """
    r = simulate(assemble(text), MID)
    path = tmp_path / "t.json"
    write_perfetto_trace(r, path, debug_map={2: "conv1"})
    doc = json.loads(path.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 5
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {queue_track(ev)[1] for ev in r.trace_events} == names  # one track per queue and unit used
    assert {"load queue: dma", "store queue: dma", "compute queue: array"} <= names
    by_index = {e["args"]["index"]: e for e in slices}
    assert by_index[2]["name"] == "conv1" and by_index[1]["name"] == "LOAD_WEIGHTS"
    assert by_index[2]["tid"] != by_index[0]["tid"] != by_index[3]["tid"]
    us = 1e6 / MID.clock_hz
    ev = r.trace_events[2]
    assert by_index[2]["ts"] == pytest.approx(ev.start * us, abs=1e-3)
    assert by_index[2]["dur"] == pytest.approx((ev.end - ev.start) * us, abs=1e-3)
    assert perfetto_events(r) == perfetto_events(r)  # deterministic
