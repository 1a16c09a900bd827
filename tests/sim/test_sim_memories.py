"""The simulator on a target with several memories (u55-like-256: SRAM on axi0 at 8 B/cycle,
flash on axi1 at 1 B/cycle): each DMA is timed, placed on a port and charged energy by the memory
its address falls in; the per-memory counts sum to the totals."""

from __future__ import annotations

import numpy as np
import pytest

from npuc.errors import SimulationError
from npuc.isa import assemble
from npuc.runtime.sim import simulate
from npuc.targets import load_target

U55 = load_target("u55-like-256")
SRAM, FLASH = U55.windows
N = 8192  # bytes per load: whole bursts of both memories (32 and 128 B)


def load(addr: int, local: int = 0, extra: str = "") -> str:
    return f"DMA_LOAD esize=1 dram_addr={addr} local_addr={local} n0={N}{extra}\n"


def test_a_flash_load_is_slower_than_an_sram_load_by_the_ratio_of_bandwidths():
    sram = simulate(assemble(load(SRAM.base) + "END"), U55, functional=False)
    flash = simulate(assemble(load(FLASH.base) + "END"), U55, functional=False)
    s, f = SRAM.memory, FLASH.memory
    assert sram.total_cycles == N // s.bytes_per_cycle + s.latency_cycles
    assert flash.total_cycles == N // f.bytes_per_cycle + f.latency_cycles
    busy = (flash.total_cycles - f.latency_cycles) / (sram.total_cycles - s.latency_cycles)
    assert busy == s.bytes_per_cycle / f.bytes_per_cycle == 8
    assert flash.port_busy == {"axi0": 0, "axi1": N} and sram.port_busy == {"axi0": N // 8, "axi1": 0}


def test_memories_behind_different_ports_stream_in_parallel_and_one_port_is_shared():
    both = simulate(assemble(load(FLASH.base) + load(SRAM.base, 16384) + "END"), U55, functional=False)
    assert both.total_cycles == N + FLASH.memory.latency_cycles  # the SRAM load hides under the flash one
    two_sram = simulate(assemble(load(SRAM.base) + load(SRAM.base + N, 16384) + "END"), U55, functional=False)
    assert two_sram.total_cycles == 2 * N // 8 + SRAM.memory.latency_cycles  # one port, one after the other


def test_energy_and_bytes_per_memory_sum_to_the_totals():
    text = load(FLASH.base) + load(SRAM.base, 16384, " signal=store") + (
        f"DMA_STORE esize=1 dram_addr={SRAM.base + 4096} local_addr=0 n0=100 wait=load\nEND\n")
    r = simulate(assemble(text), U55, np.zeros(FLASH.base + N, np.uint8))
    a = r.actions
    assert a.memory_read == (N, N) and a.memory_write == (128, 0)  # 100 B -> four 32-byte SRAM bursts
    assert (a.dram_read, a.dram_write) == (sum(a.memory_read), sum(a.memory_write))
    e = r.energy_breakdown_pj
    assert e["flash"] == pytest.approx(N * FLASH.memory.read_pj_per_byte)
    assert e["sram"] == pytest.approx(N * SRAM.memory.read_pj_per_byte + 128 * SRAM.memory.write_pj_per_byte)
    assert "dram" not in e


def test_transfers_outside_the_map_or_into_flash_are_refused():
    with pytest.raises(SimulationError, match="instruction 0 .*runs past its end"):
        simulate(assemble(load(SRAM.end - 64) + "END"), U55, functional=False)
    with pytest.raises(SimulationError, match="may not write memory 'flash'"):
        simulate(assemble(f"DMA_STORE esize=1 dram_addr={FLASH.base} local_addr=0 n0=16\nEND\n"), U55, functional=False)
