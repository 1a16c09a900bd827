"""Timing tier: the per-instruction formulas, token-driven overlap, and double buffering.

Every figure here is a deterministic cycle count of the simulator, derived by hand from the
formulas in docs/isa.md for the npu-mid target (16 x 16 array, 128 B/cycle scratchpad, 16 lanes,
16 B/cycle DMA with 80 cycles of latency and 64-byte bursts).
"""

from __future__ import annotations

import pytest
from simkernels import double_buffered_stream

from npuc.isa import assemble
from npuc.runtime.sim import simulate
from npuc.targets import load_target

MID = load_target("npu-mid")
R = MID.array.rows


def cycles(text: str, target=MID, **kw) -> int:
    return simulate(assemble(text), target, functional=False, **kw).total_cycles


def test_target_figures_used_below():
    assert (R, MID.spad_bytes_per_cycle, MID.vector.lanes) == (16, 128, 16)
    assert (MID.dma.bytes_per_cycle, MID.dma.latency_cycles, MID.dma.burst_bytes) == (16, 80, 64)


@pytest.mark.parametrize("m,k,n", [(100, 16, 16), (100, 5, 7), (1, 16, 16), (300, 16, 3)])
def test_weight_stationary_tile(m, k, n):
    text = f"LOAD_WEIGHTS addr=0 k={k} n={n}\nMATMUL k={k} n={n} in_addr=0x1000 m0={m} out_addr=0\nEND"
    assert cycles(text) == k + (m + R + n - 2)


def test_weight_loads_overlap_and_matmuls_pipeline_unless_separated():
    mm = "MATMUL k=16 n=16 in_addr=0x1000 m0=100 out_addr=0"
    lw = "LOAD_WEIGHTS addr=0 k=16 n=16"
    overlapped = cycles("\n".join([lw, mm, lw, mm, "END"]))
    serial = cycles("\n".join([lw, mm, "NOP", lw, mm, "END"]))
    mm_cycles = 100 + R + 16 - 2
    # the second MATMUL streams its inputs while the first drains: one fill and drain in all
    assert overlapped == 16 + 2 * 100 + R + 16 - 2
    assert serial == 16 + mm_cycles + 1 + 16 + mm_cycles
    r = simulate(assemble("\n".join([lw, mm, lw, mm, "END"])), MID, functional=False)
    ev = r.trace_events
    assert ev[2].start == ev[1].start  # the second LOAD_WEIGHTS starts with the first MATMUL


def test_output_stationary_tile():
    assert cycles("MATMUL_OS m=16 k=64 n=16 in_addr=0 w_addr=0x1000 out_addr=0\nEND") == 64 + 16 + 16 - 2 + R
    assert cycles("MATMUL_OS m=3 k=1000 n=5 in_addr=0 w_addr=0x1000 out_addr=0\nEND") == 1000 + 3 + 5 - 2 + R
    # the drain of one output tile overlaps the next tile's compute; a NOP in between prevents it
    os2 = "MATMUL_OS m=16 k=64 n=16 in_addr=0 w_addr=0x1000 out_addr=0\nMATMUL_OS m=16 k=64 n=16 in_addr=0 w_addr=0x1000 out_addr=0x400\n"
    assert cycles(os2 + "END") == 2 * (64 + 16 + 16 - 2) + R
    assert cycles(os2.replace("\nMATMUL_OS", "\nNOP\nMATMUL_OS", 1) + "END") == 2 * (64 + 16 + 16 - 2 + R) + 1


def test_dma_bursts_latency_and_pipelining():
    assert cycles("DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1000\nEND") == 1024 // 16 + 80
    # element-wise gather (DRAM stride != element size): every byte is its own 64-byte burst
    assert cycles("DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=10 n1=10 dram_s0=100 dram_s1=1\nEND") == 100 * 64 // 16 + 80
    # rows of 128 bytes 256 bytes apart: two bursts per row
    assert cycles("DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=128 n1=8 dram_s1=256\nEND") == 8 * 128 // 16 + 80
    # back-to-back transfers overlap their latency; a load and a store share the port
    two = "DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024\nDMA_LOAD esize=1 dram_addr=1024 local_addr=1024 n0=1024\nEND"
    assert cycles(two) == 64 + 64 + 80
    both = "DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024\nDMA_STORE esize=1 dram_addr=1024 local_addr=1024 n0=1024\nEND"
    assert cycles(both) == 64 + 64 + 80


def test_vector_timing():
    assert cycles("VUN op=relu dtype=int8 n0=4096 dst=0 src=0x1000\nEND") == 4096 // 16 + 4
    assert cycles("VUN op=exp dtype=fp16 n0=1024 dst=0 src=0x1000\nEND") == 1024 * 4 // 16 + 4
    # bandwidth-bound: int32 copy in ACC, 8 bytes per element at 128 B/cycle vs 1 lane-op
    assert cycles("VUN op=copy dtype=int32 n0=4096 dst_space=acc dst=0 src=0x0\nEND") == 4096 * 8 // 128 + 4


def test_tokens_order_queues():
    free = "DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024\nVUN op=relu dtype=int8 n0=1024 dst=0x1000 src=0\nEND"
    tied = "DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024 signal=vector\nVUN op=relu dtype=int8 n0=1024 dst=0x1000 src=0 wait=load\nEND"
    assert cycles(free, check_races=False) == 64 + 80  # the relu runs beside the load (racing it)
    assert cycles(tied) == 64 + 80 + 64 + 4


def stream_figures(body: str, tiles: int, tile_bytes: int, out_bytes: int, double: bool):
    text = double_buffered_stream(tiles, tile_bytes, body, double=double, out_bytes=out_bytes)
    r = simulate(assemble(text), MID, functional=False)
    return r.total_cycles, r.queue_busy["compute"] + r.queue_busy["vector"], r.unit_busy["dma"], r


def check_double_buffering(body, tiles, tile_bytes, out_bytes, bound: str):
    total, compute, dma, _ = stream_figures(body, tiles, tile_bytes, out_bytes, double=True)
    slow, compute1, dma1, _ = stream_figures(body, tiles, tile_bytes, out_bytes, double=False)
    assert (compute, dma) == (compute1, dma1)  # same work either way
    assert (dma > 1.5 * compute) if bound == "dma" else (compute > 1.5 * dma)
    longest = max(compute, dma)
    assert longest <= total <= 1.05 * longest, (total, compute, dma)
    assert slow >= 0.95 * (compute + dma), (slow, compute, dma)  # serialised: about the sum
    assert slow > 1.3 * total


def test_double_buffering_dma_bound_kernel():
    body = "VUN op=relu dtype=int8 n0=4096 dst={OUT} src={IN}"
    check_double_buffering(body, tiles=32, tile_bytes=4096, out_bytes=4096, bound="dma")


def test_double_buffering_compute_bound_kernel():
    # A 64 x 16 by 16 x 64 int8 linear layer per tile: four weight tiles, then per-channel requant.
    tile_bytes, out_bytes = 64 * 16, 64 * 64
    w0 = 2 * (tile_bytes + out_bytes)
    q = w0 + 4 * 256
    lines = []
    for j in range(4):
        lines.append(f"LOAD_WEIGHTS addr={w0 + 256 * j} k=16 n=16")
        lines.append(f"MATMUL k=16 n=16 in_addr={{IN}} m0=64 out_addr={64 * j} out_s0=256")
    lines.append(f"REQUANT n0=64 n1=64 src_space=acc src=0 src_s0=4 src_s1=256 dst={{OUT}} per_channel=1 qparams={q}")
    check_double_buffering("\n".join(lines), tiles=16, tile_bytes=tile_bytes, out_bytes=out_bytes, bound="compute")


def test_stream_is_functionally_correct_and_leaves_expected_tokens():
    import numpy as np

    tiles, tb = 6, 256
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, tiles * tb, dtype=np.int8)
    image = np.zeros(2 * tiles * tb, np.uint8)
    image[: tiles * tb] = data.view(np.uint8)
    text = double_buffered_stream(tiles, tb, "VUN op=relu dtype=int8 n0=256 dst={OUT} src={IN}")
    r = simulate(assemble(text), MID, image)
    out = np.frombuffer(r.dram[tiles * tb :], np.int8)
    np.testing.assert_array_equal(out, np.maximum(data, 0))
    # the vector queue frees its buffers once more than the load/store queues wait: 2 per channel
    left = {k: v for k, v in r.leftover_tokens.items() if v}
    assert left == {"vector->load": 2, "store->vector": 2}
