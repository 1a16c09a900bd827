"""The emitter's automatic dependency tokens: correct results, real overlap, no deadlock."""

import numpy as np
import pytest

from npuc.codegen.emitter import Emitter
from npuc.errors import CompileError
from npuc.isa.enums import Queue
from npuc.runtime.sim import simulate
from npuc.targets import load_target

TARGET = load_target("npu-mid")
M, K, N = 64, 64, 32
XA, WA, OA = 0, 8192, 16384


def _tiled_matmul(nbuf: int):
    em = Emitter(TARGET)
    step = 0
    for nt in range(N // 16):
        for kt in range(K // 16):
            b = step % nbuf
            step += 1
            xs, ws = b * 4096, 16384 + b * 256
            with em.source(f"tile{nt}.{kt}"):
                em.emit("DMA_LOAD", esize=1, dram_addr=XA + kt * 16, local_addr=xs, n0=16, n1=M, dram_s1=K)
                em.emit("DMA_LOAD", esize=1, dram_addr=WA + kt * 16 * N + nt * 16, local_addr=ws, n0=16, n1=16, dram_s1=N)
                em.emit("LOAD_WEIGHTS", dtype="int8", addr=ws, k=16, n=16)
                em.emit("MATMUL", dtype="int8", acc=kt > 0, k=16, n=16, in_addr=xs, m0=M, out_addr=nt * M * 64)
        em.emit("DMA_STORE", local="acc", esize=4, dram_addr=OA + nt * 64, local_addr=nt * M * 64, n0=16, n1=M, dram_s1=N * 4)
    return em.finish()


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, (M, K), dtype=np.int8)
    w = rng.integers(-100, 100, (K, N), dtype=np.int8)
    dram = np.zeros(1 << 16, np.uint8)
    dram[XA:XA + M * K] = x.view(np.uint8).ravel()
    dram[WA:WA + K * N] = w.view(np.uint8).ravel()
    return x, w, dram


@pytest.mark.parametrize("nbuf", [1, 2, 3])
def test_tokens_make_tiled_matmul_exact(operands, nbuf):
    x, w, dram = operands
    prog, labels = _tiled_matmul(nbuf)
    r = simulate(prog, TARGET, dram)
    out = np.frombuffer(r.dram, dtype=np.int32, count=M * N, offset=OA).reshape(M, N)
    np.testing.assert_array_equal(out, x.astype(np.int32) @ w.astype(np.int32))
    assert all(v == 0 for v in r.leftover_tokens.values())
    assert len(labels) == len(prog) and labels[0] == "tile0.0"


def test_double_buffering_overlaps(operands):
    _, _, dram = operands
    single = simulate(_tiled_matmul(1)[0], TARGET, dram, functional=False).total_cycles
    double = simulate(_tiled_matmul(2)[0], TARGET, dram, functional=False).total_cycles
    assert double < 0.8 * single


def test_store_then_load_is_ordered_by_a_direct_token():
    em = Emitter(TARGET)
    em.emit("DMA_LOAD", esize=1, dram_addr=0, local_addr=0, n0=64)
    em.emit("VUN", op="relu", dtype="int8", n0=64, dst=256, src=0)
    em.emit("DMA_STORE", esize=1, dram_addr=1024, local_addr=256, n0=64)
    em.emit("DMA_LOAD", esize=1, dram_addr=1024, local_addr=512, n0=64)  # reads what the store wrote
    prog, _ = em.finish()
    ops = [i.op for i in prog]
    assert ops == ["DMA_LOAD", "VUN", "DMA_STORE", "DMA_LOAD", "END"]  # no relay instruction
    assert Queue.load in prog[2].deps.signals and Queue.store in prog[3].deps.waits
    dram = np.zeros(2048, np.uint8)
    dram[:64] = (np.arange(64) - 32).astype(np.int8).view(np.uint8)
    r = simulate(prog, TARGET, dram)
    spad = np.frombuffer(r.spad, np.int8)
    np.testing.assert_array_equal(spad[512:576], np.maximum(np.arange(64) - 32, 0))


def test_illegal_instruction_is_a_compile_error():
    em = Emitter(TARGET)
    with pytest.raises(CompileError, match="LOAD_WEIGHTS"):
        em.emit("LOAD_WEIGHTS", dtype="int8", addr=0, k=TARGET.array.rows + 1, n=4)


def test_vector_work_overlaps_array_work():
    """An epilogue on the vector queue runs beside the next tile's matmul (accumulators
    alternate), and tokens keep the result exact."""
    rng = np.random.default_rng(1)
    x = rng.integers(-100, 100, (M, 16), dtype=np.int8)
    w = rng.integers(-100, 100, (16, 16), dtype=np.int8)
    dram = np.zeros(1 << 16, np.uint8)
    dram[:M * 16] = x.view(np.uint8).ravel()
    dram[4096:4096 + 256] = w.view(np.uint8).ravel()
    em = Emitter(TARGET)
    em.emit("DMA_LOAD", esize=1, dram_addr=0, local_addr=0, n0=16 * M)
    em.emit("DMA_LOAD", esize=1, dram_addr=4096, local_addr=8192, n0=256)
    tiles = 8
    for t in range(tiles):
        acc = (t % 2) * M * 64
        em.emit("LOAD_WEIGHTS", dtype="int8", addr=8192, k=16, n=16)
        em.emit("MATMUL", dtype="int8", acc=False, k=16, n=16, in_addr=0, m0=M, out_addr=acc)
        em.emit("VUN", op="relu", dtype="int32", n0=16, n1=M, src_space="acc", src=acc, dst_space="acc", dst=acc)
        # only the last row leaves the chip, so that the array and the vector unit set the pace
        em.emit("DMA_STORE", local="acc", esize=4, dram_addr=16384 + t * 64, local_addr=acc + (M - 1) * 64, n0=16)
    prog, _ = em.finish()
    r = simulate(prog, TARGET, dram)
    want = np.maximum(x.astype(np.int32) @ w.astype(np.int32), 0)[M - 1]
    for t in range(tiles):
        np.testing.assert_array_equal(np.frombuffer(r.dram, np.int32, 16, 16384 + t * 64), want)
    spans = {u: [(e.start, e.end) for e in r.trace_events if e.unit == u] for u in ("array", "vector")}
    overlap = sum(max(0, min(a1, v1) - max(a0, v0)) for a0, a1 in spans["array"] for v0, v1 in spans["vector"])
    assert overlap > 0.5 * r.unit_busy["vector"], (overlap, r.unit_busy)
