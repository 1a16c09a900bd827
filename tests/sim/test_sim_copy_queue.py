"""The copy queue (``DMA_COPY``) on a target with several memories (u55-like-256: SRAM on axi0
at 8 B/cycle, flash on axi1 at 1 B/cycle): a copy from the flash into the SRAM moves the bytes,
takes cycles of both ports, runs beside the load queue's transfers without holding them up, is ordered by
the tokens the emitter adds (and is a race without them), and is charged per memory."""

from __future__ import annotations

import numpy as np
import pytest

from npuc.codegen.emitter import Emitter
from npuc.errors import CompileError, SimulationError
from npuc.isa import assemble
from npuc.isa.encoding import decode_program, encode_program
from npuc.isa.enums import Queue
from npuc.runtime.sim import simulate
from npuc.targets import load_target

U55 = load_target("u55-like-256")
SRAM, FLASH = U55.windows
N = 8192  # bytes copied: whole bursts of both memories (32 and 128 B)


def _image() -> np.ndarray:
    img = np.zeros(FLASH.base + N, np.uint8)
    img[FLASH.base:] = np.arange(N) % 251
    return img


def test_a_copy_moves_the_bytes_and_takes_cycles_of_both_ports():
    r = simulate(assemble(f"DMA_COPY src_addr={FLASH.base} dst_addr=4096 nbytes={N}\nEND\n"), U55, _image())
    got = np.frombuffer(r.dram, np.uint8)
    assert np.array_equal(got[4096:4096 + N], np.arange(N) % 251)
    f, s = FLASH.memory, SRAM.memory
    assert r.total_cycles == N // f.bytes_per_cycle + f.latency_cycles + s.latency_cycles
    assert r.port_busy == {"axi0": N // s.bytes_per_cycle, "axi1": N // f.bytes_per_cycle}
    assert r.queue_busy["copy"] == r.total_cycles and r.queue_busy["load"] == 0
    a = r.actions
    assert a.memory_read == (0, N) and a.memory_write == (N, 0)
    assert a.spad_read == a.spad_write == 0  # memory to memory: the scratchpad is not touched
    e = r.energy_breakdown_pj
    assert e["flash"] == pytest.approx(N * f.read_pj_per_byte)
    assert e["sram"] == pytest.approx(N * s.write_pj_per_byte)


def test_a_copy_within_one_memory_counts_both_sides_on_its_port():
    r = simulate(assemble(f"DMA_COPY src_addr=0 dst_addr={N} nbytes={N}\nEND\n"), U55, functional=False)
    assert r.port_busy == {"axi0": 2 * N // 8, "axi1": 0}
    assert r.total_cycles == 2 * N // 8 + 2 * SRAM.memory.latency_cycles


def test_loads_from_the_sram_run_beside_a_copy_from_the_flash():
    """The point of a queue of its own: on the load queue the SRAM loads would retire behind the
    flash transfer; on the copy queue they only share the SRAM port with its write side."""
    loads = "".join(f"DMA_LOAD esize=1 dram_addr={16384 + k * 1024} local_addr={k * 1024} n0=1024\n" for k in range(8))
    r = simulate(assemble(f"DMA_COPY src_addr={FLASH.base} dst_addr=4096 nbytes={N}\n" + loads + "END\n"),
                 U55, functional=False)
    ops, queues, _, starts, ends = r.schedule
    load_end = max(e for op, e in zip(ops, ends) if op == "DMA_LOAD")
    assert load_end == 8 * 1024 // 8 + N // 8 + SRAM.memory.latency_cycles  # they share axi0 with the copy's writes
    assert r.total_cycles == N + FLASH.memory.latency_cycles + SRAM.memory.latency_cycles  # the copy alone sets it
    # the same bytes moved by the load queue from the flash: the SRAM loads wait behind it
    behind = simulate(assemble(f"DMA_LOAD esize=1 dram_addr={FLASH.base} local_addr=16384 n0={N}\n" + loads + "END\n"),
                      U55, functional=False)
    last = max(e for op, e in zip(behind.schedule[0][1:], behind.schedule[4][1:]) if op == "DMA_LOAD")
    assert last >= N


def test_the_emitter_orders_a_copy_and_the_loads_that_read_what_it_wrote():
    em = Emitter(U55)
    em.emit("DMA_COPY", src_addr=FLASH.base, dst_addr=4096, nbytes=N)
    em.emit("DMA_LOAD", dram_addr=4096, local_addr=0, esize=1, n0=N)
    em.emit("DMA_STORE", dram_addr=4096 + N, local_addr=0, esize=1, n0=N)
    em.emit("DMA_COPY", src_addr=FLASH.base, dst_addr=4096 + N, nbytes=N)  # overwrites what the store wrote
    em.emit("DMA_LOAD", dram_addr=4096 + N, local_addr=N, esize=1, n0=N)
    program, _ = em.finish()
    deps = [(ins.op, ins.deps) for ins in program]
    assert Queue.load in deps[0][1].signals and Queue.copy in deps[1][1].waits
    assert Queue.store in deps[3][1].waits  # after the store it overwrites
    assert Queue.copy in deps[4][1].waits
    r = simulate(program, U55, _image())  # the race detector runs
    got = np.frombuffer(r.spad, np.uint8)
    assert np.array_equal(got[:N], np.arange(N) % 251) and np.array_equal(got[N:2 * N], np.arange(N) % 251)
    assert decode_program(encode_program(program.instrs)) == list(program.instrs)


def test_a_load_not_ordered_after_the_copy_is_a_race():
    text = f"DMA_COPY src_addr={FLASH.base} dst_addr=4096 nbytes={N}\nDMA_LOAD esize=1 dram_addr=4096 local_addr=0 n0=64\nEND\n"
    with pytest.raises(SimulationError, match=r"race on DRAM bytes 0x1000\.\..*DMA_COPY.*\(copy queue\) writes"):
        simulate(assemble(text), U55, _image())
    ordered = text.replace(f"nbytes={N}", f"nbytes={N} signal=load").replace("n0=64", "n0=64 wait=copy")
    simulate(assemble(ordered), U55, _image())


def test_bad_copies_are_refused_before_they_run():
    with pytest.raises(SimulationError, match="may not write memory 'flash'"):
        simulate(assemble(f"DMA_COPY src_addr=0 dst_addr={FLASH.base} nbytes=64\nEND\n"), U55, functional=False)
    with pytest.raises(SimulationError, match="runs past its end"):
        simulate(assemble(f"DMA_COPY src_addr={FLASH.base + 4096} dst_addr={SRAM.end - 32} nbytes=64\nEND\n"), U55,
                 functional=False)
    with pytest.raises(Exception, match="the source and destination runs overlap"):
        assemble("DMA_COPY src_addr=0 dst_addr=32 nbytes=64\nEND\n")
    em = Emitter(U55)
    with pytest.raises(CompileError, match="overlap"):
        em.emit("DMA_COPY", src_addr=0, dst_addr=32, nbytes=64)


def test_a_copy_after_the_emitter_has_forgotten_old_accesses_still_orders_after_them():
    """The emitter forgets accesses every queue but the copy queue knows complete (every 512
    instructions); a copy issued later over bytes a forgotten store wrote waits for it anyway."""
    em = Emitter(U55)
    for k in range(600):
        em.emit("DMA_LOAD", dram_addr=64 * k, local_addr=64 * (k % 4), esize=1, n0=64)
        em.emit("DMA_STORE", dram_addr=65536 + 64 * k, local_addr=64 * (k % 4), esize=1, n0=64)
    em.emit("DMA_COPY", src_addr=FLASH.base, dst_addr=65536, nbytes=64)
    program, _ = em.finish()
    copy = program.instrs[-2]
    assert copy.op == "DMA_COPY" and Queue.store in copy.deps.waits
    simulate(program, U55, _image())  # no race


def test_the_copy_kernel_of_a_dense_run_is_dma_copy_and_its_estimate_is_the_simulated_time():
    """A ``copy`` kernel of one dense run each side (a staged weight tensor: flash to SRAM) is
    DMA_COPY in COPY_CHUNK slices, no scratchpad; the cost model's walk of its tile program gives
    the cycles the simulator gives the program."""
    from npuc.codegen.kernel import get_kernel
    from npuc.codegen.kernels.move_copy import COPY_CHUNK
    from npuc.isa.enums import DType
    from npuc.kir.kernel import Kernel
    from npuc.kir.tensor import DramTensor

    n = 5 * COPY_CHUNK + 100
    k = Kernel("w.copy", "copy", (DramTensor("w", (n,), DType.int8, FLASH.base),),
               DramTensor("w.staged", (n,), DType.int8, 8192), dtype=DType.int8)
    impl = get_kernel("copy")
    plan = impl.plan(k, U55)
    assert plan.spad_bytes == 0
    em = Emitter(U55)
    impl.emit(k, plan, em)
    program, _ = em.finish()
    assert {ins.op for ins in program} == {"DMA_COPY", "END"}
    img = np.zeros(FLASH.base + n, np.uint8)
    img[FLASH.base:] = np.arange(n) % 253
    r = simulate(program, U55, img)
    assert np.array_equal(np.frombuffer(r.dram, np.uint8)[8192:8192 + n], np.arange(n) % 253)
    assert plan.est_cycles == r.total_cycles
