"""Functional simulation of hand-written programs: results equal numpy references (bit-exact for
integers, within fp16 tolerance for floats)."""

from __future__ import annotations

import numpy as np
import pytest
from simkernels import get, put, tiled_matmul

from npuc.isa import assemble
from npuc.isa.numerics import requantize
from npuc.runtime.sim import simulate
from npuc.targets import load_target

MID = load_target("npu-mid")
SMALL = load_target("npu-small")


def rand_i8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


@pytest.mark.parametrize("target", [MID, SMALL], ids=lambda t: t.name)
def test_tiled_int8_matmul_not_multiple_of_array(target):
    rng = np.random.default_rng(1)
    x, w = rand_i8(rng, (37, 45)), rand_i8(rng, (45, 29))
    text, image, y_addr = tiled_matmul(x, w, target.array.rows, target.array.cols)
    r = simulate(assemble(text), target, image)
    y = get(r.dram, y_addr, np.int32, (37, 29))
    np.testing.assert_array_equal(y, x.astype(np.int64) @ w.astype(np.int64))
    assert r.macs == 37 * 45 * 29


def test_fp16_matmul_with_k_tiles():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 40)).astype(np.float16)
    w = rng.standard_normal((40, 10)).astype(np.float16)
    text, image, y_addr = tiled_matmul(x, w, MID.array.rows, MID.array.cols, dtype="fp16")
    r = simulate(assemble(text), MID, image)
    y = get(r.dram, y_addr, np.float32, (20, 10))
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.astype(np.float64), rtol=1e-5, atol=1e-4)
    assert r.actions.macs_fp16 == 20 * 40 * 10 and r.actions.macs_int8 == 0


def conv_program(h, w, c, oc, kh, kw, stride):
    """NHWC int8 conv (no padding) as one MATMUL per kernel tap, accumulating over taps on a
    bias preloaded into ACC, then a per-channel REQUANT to int8."""
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    X, W, B, Q, OUT = 0x0, 0x1000, 0x2000, 0x2100, 0x3000
    xs, ws, qs, outs = 0x0, 0x1000, 0x2000, 0x3000
    lines = [
        f"DMA_LOAD esize=1 dram_addr={X} local_addr={xs} n0={h * w * c}",
        f"DMA_LOAD esize=1 dram_addr={W} local_addr={ws} n0={kh * kw * c * oc}",
        f"DMA_LOAD esize=4 dram_addr={Q} local_addr={qs} n0={2 * oc}",
        # the bias row repeated for every output pixel (DRAM row stride 0)
        f"DMA_LOAD local=acc esize=4 dram_addr={B} local_addr=0 n0={oc} n1={oh * ow} dram_s1=0 signal=compute",
    ]
    for t in range(kh * kw):
        dy, dx = divmod(t, kw)
        wait = " wait=load" if t == 0 else ""
        lines.append(f"LOAD_WEIGHTS addr={ws + t * c * oc} k={c} n={oc}{wait}")
        lines.append(
            f"MATMUL acc=1 k={c} n={oc} in_addr={xs + (dy * w + dx) * c} m0={ow} m1={oh} "
            f"in_s0={stride * c} in_s1={stride * w * c} out_addr=0"
        )
    lines[-1] += " signal=vector"
    lines.append(
        f"REQUANT n0={oc} n1={oh * ow} src_space=acc src=0 src_s0=4 dst={outs} per_channel=1 qparams={qs} zp=-5 qmin=-5 wait=compute signal=store"
    )
    lines.append(f"DMA_STORE esize=1 dram_addr={OUT} local_addr={outs} n0={oh * ow * oc} wait=vector")
    lines.append("END")
    return "\n".join(lines), (X, W, B, Q, OUT), (oh, ow)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_as_matmuls_with_bias_and_per_channel_requant(stride):
    rng = np.random.default_rng(3)
    h, w, c, oc, k = 9, 8, 8, 12, 3
    x = rand_i8(rng, (h, w, c))
    wt = rand_i8(rng, (k, k, c, oc))
    bias = rng.integers(-5000, 5000, oc, dtype=np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, oc).astype(np.int32)
    shift = rng.integers(7, 12, oc).astype(np.int32)
    text, (X, W, B, Q, OUT), (oh, ow) = conv_program(h, w, c, oc, k, k, stride)
    image = np.zeros(0x4000, np.uint8)
    put(image, X, x)
    put(image, W, wt)
    put(image, B, bias)
    put(image, Q, np.stack([mult, shift], axis=1))
    r = simulate(assemble(text), MID, image)

    acc = np.zeros((oh, ow, oc), np.int64) + bias
    for dy in range(k):
        for dx in range(k):
            patch = x[dy : dy + stride * (oh - 1) + 1 : stride, dx : dx + stride * (ow - 1) + 1 : stride]
            acc += patch.astype(np.int64) @ wt[dy, dx].astype(np.int64)
    want = requantize(acc.reshape(-1, oc), mult[None, :], shift[None, :], -5, -5, 127)
    np.testing.assert_array_equal(get(r.dram, OUT, np.int8, (oh * ow, oc)), want)
    assert r.macs == oh * ow * oc * c * k * k


def test_requant_per_tensor_and_per_channel_extremes():
    x = np.array([[0, 1, -1, 2**31 - 1], [-(2**31), 1000, -1000, 123456]], np.int32)
    q = np.array([[1 << 30, 1], [(1 << 31) - 1, -3], [1 << 30, 31], [1 << 29, 0]], np.int32)
    image = np.zeros(256, np.uint8)
    put(image, 0, x)
    put(image, 64, q)
    text = """
    DMA_LOAD esize=4 dram_addr=0 local_addr=0 n0=8
    DMA_LOAD esize=4 dram_addr=64 local_addr=0x100 n0=8 signal=vector
    REQUANT n0=4 n1=2 src=0 src_s0=4 dst=0x200 per_channel=1 qparams=0x100 wait=load
    REQUANT n0=4 n1=2 src=0 src_s0=4 dst=0x208 per_channel=0 qparams=0x100 zp=3 signal=store
    DMA_STORE esize=1 dram_addr=128 local_addr=0x200 n0=16 wait=vector
    END
    """
    r = simulate(assemble(text), MID, image)
    per_ch = requantize(x, q[None, :, 0], q[None, :, 1], 0, -128, 127)
    per_t = requantize(x, q[0, 0], q[0, 1], 3, -128, 127)
    np.testing.assert_array_equal(get(r.dram, 128, np.int8, (2, 4)), per_ch)
    np.testing.assert_array_equal(get(r.dram, 136, np.int8, (2, 4)), per_t)


def test_pooling_windows():
    rng = np.random.default_rng(4)
    x = rand_i8(rng, (8, 8, 16))
    image = np.zeros(8192, np.uint8)
    put(image, 0, x)
    text = """
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024 signal=vector
    VPOOL op=max dtype=int8 out_dtype=int8 c=16 ow=4 oh=4 kh=2 kw=2 sy=2 sx=2 src=0 src_sy=128 dst=0x1000 wait=load
    VPOOL op=sum dtype=int8 out_dtype=int32 c=16 ow=6 oh=6 kh=3 kw=3 sy=1 sx=1 src=0 src_sy=128 dst=0x2000 signal=store
    DMA_STORE esize=1 dram_addr=1024 local_addr=0x1000 n0=256 wait=vector
    DMA_STORE esize=4 dram_addr=2048 local_addr=0x2000 n0=576
    END
    """
    r = simulate(assemble(text), MID, image)
    want_max = x.reshape(4, 2, 4, 2, 16).max(axis=(1, 3))
    np.testing.assert_array_equal(get(r.dram, 1024, np.int8, (4, 4, 16)), want_max)
    xi = x.astype(np.int64)
    want_sum = sum(xi[dy : dy + 6, dx : dx + 6] for dy in range(3) for dx in range(3))
    np.testing.assert_array_equal(get(r.dram, 2048, np.int32, (6, 6, 16)), want_sum)


def test_lut_and_elementwise_broadcast():
    rng = np.random.default_rng(5)
    x = rand_i8(rng, (4, 32))
    table = rng.integers(-128, 128, 256, dtype=np.int8)
    ch = rand_i8(rng, (32,))
    image = np.zeros(1024, np.uint8)
    put(image, 0, x)
    put(image, 128, table)
    put(image, 384, ch)
    text = """
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=416 signal=vector
    LUT n0=32 n1=4 dst=0x200 src=0 table=128 wait=load
    VBIN op=add dtype=int8 n0=32 n1=4 dst=0x300 a=0x200 b=384 b_s1=0
    VBIN op=mul dtype=int8 n0=32 n1=4 dst=0x400 a=0 b=0 b_s0=0 b_s1=32 signal=store
    DMA_STORE esize=1 dram_addr=512 local_addr=0x300 n0=128 wait=vector
    DMA_STORE esize=1 dram_addr=640 local_addr=0x400 n0=128
    END
    """
    r = simulate(assemble(text), MID, image)
    looked = table[x.astype(np.int16) + 128]
    np.testing.assert_array_equal(get(r.dram, 512, np.int8, (4, 32)), np.clip(looked.astype(int) + ch, -128, 127))
    np.testing.assert_array_equal(get(r.dram, 640, np.int8, (4, 32)), np.clip(x.astype(int) * x[:, :1], -128, 127))


def test_fp16_softmax_and_layernorm_are_expressible():
    rng = np.random.default_rng(6)
    rows, n = 6, 40
    x = (rng.standard_normal((rows, n)) * 3).astype(np.float16)
    image = np.zeros(4096, np.uint8)
    put(image, 0, x)
    # softmax: row max, subtract (per-row broadcast), exp, row sum in fp32, reciprocal, to fp16, multiply.
    # layernorm: mean, subtract, square, mean, + eps, rsqrt, multiply.
    text = f"""
    DMA_LOAD esize=2 dram_addr=0 local_addr=0 n0={rows * n} signal=vector
    VREDUCE op=max dtype=fp16 out_dtype=fp16 n0={n} n1={rows} dst=0x400 src=0 wait=load
    VBIN op=sub dtype=fp16 n0={n} n1={rows} dst=0x800 a=0 b=0x400 b_s0=0 b_s1=2
    VUN op=exp dtype=fp16 n0={n} n1={rows} dst=0x800 src=0x800
    VREDUCE op=sum dtype=fp16 out_dtype=fp32 n0={n} n1={rows} dst=0x420 src=0x800
    VUN op=reciprocal dtype=fp32 n0={rows} dst=0x420 src=0x420
    VCVT src_dtype=fp32 dst_dtype=fp16 n0={rows} dst=0x440 src=0x420
    VBIN op=mul dtype=fp16 n0={n} n1={rows} dst=0x800 a=0x800 b=0x440 b_s0=0 b_s1=2
    VREDUCE op=sum dtype=fp16 out_dtype=fp32 n0={n} n1={rows} dst=0x460 src=0
    VUN op=muls dtype=fp32 n0={rows} dst=0x460 src=0x460 imm0={1 / n}
    VCVT src_dtype=fp32 dst_dtype=fp16 n0={rows} dst=0x480 src=0x460
    VBIN op=sub dtype=fp16 n0={n} n1={rows} dst=0xc00 a=0 b=0x480 b_s0=0 b_s1=2
    VBIN op=mul dtype=fp16 n0={n} n1={rows} dst=0x1000 a=0xc00 b=0xc00
    VREDUCE op=sum dtype=fp16 out_dtype=fp32 n0={n} n1={rows} dst=0x4a0 src=0x1000
    VUN op=muls dtype=fp32 n0={rows} dst=0x4a0 src=0x4a0 imm0={1 / n}
    VUN op=adds dtype=fp32 n0={rows} dst=0x4a0 src=0x4a0 imm0=1e-5
    VUN op=rsqrt dtype=fp32 n0={rows} dst=0x4a0 src=0x4a0
    VCVT src_dtype=fp32 dst_dtype=fp16 n0={rows} dst=0x4c0 src=0x4a0
    VBIN op=mul dtype=fp16 n0={n} n1={rows} dst=0xc00 a=0xc00 b=0x4c0 b_s0=0 b_s1=2 signal=store
    DMA_STORE esize=2 dram_addr=1024 local_addr=0x800 n0={rows * n} wait=vector
    DMA_STORE esize=2 dram_addr=2048 local_addr=0xc00 n0={rows * n}
    END
    """
    r = simulate(assemble(text), MID, image)
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    np.testing.assert_allclose(get(r.dram, 1024, np.float16, (rows, n)), e / e.sum(axis=1, keepdims=True), rtol=5e-3, atol=1e-3)
    ln = (xf - xf.mean(axis=1, keepdims=True)) / np.sqrt(xf.var(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(get(r.dram, 2048, np.float16, (rows, n)), ln, rtol=1e-2, atol=1e-2)


def test_output_stationary_matmul_and_strided_dma_transpose():
    rng = np.random.default_rng(7)
    x, wt = rand_i8(rng, (12, 50)), rand_i8(rng, (9, 50))  # W stored transposed (N x K) in DRAM
    image = np.zeros(4096, np.uint8)
    put(image, 0, x)
    put(image, 1024, wt)
    # Gather W^T into a K x N tile: DMA rows over k (DRAM stride 1), elements over n (DRAM stride 50).
    text = """
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=600
    DMA_LOAD esize=1 dram_addr=1024 local_addr=0x400 n0=9 n1=50 dram_s0=50 dram_s1=1 signal=compute
    MATMUL_OS m=12 k=50 n=9 in_addr=0 w_addr=0x400 out_addr=0 wait=load signal=store
    DMA_STORE local=acc esize=4 dram_addr=2048 local_addr=0 n0=108 wait=compute
    END
    """
    r = simulate(assemble(text), MID, image)
    np.testing.assert_array_equal(get(r.dram, 2048, np.int32, (12, 9)), x.astype(np.int64) @ wt.T.astype(np.int64))


def test_conversions_and_fill():
    text = """
    VFILL dtype=int32 n0=4 dst=0 value=-7
    VFILL dtype=fp16 n0=4 dst=0x10 value=-inf
    VCVT src_dtype=int32 dst_dtype=int8 n0=4 dst=0x20 src=0
    VCVT src_dtype=int32 dst_dtype=fp16 n0=4 dst=0x30 src=0
    VUN op=muls dtype=int32 n0=4 dst=0x40 src=0 imm0=1e9 signal=store
    DMA_STORE esize=1 dram_addr=0 local_addr=0 n0=96 wait=vector
    END
    """
    r = simulate(assemble(text), MID)
    assert get(r.dram, 0, np.int32, (4,)).tolist() == [-7] * 4
    assert np.isneginf(get(r.dram, 0x10, np.float16, (4,))).all()
    assert get(r.dram, 0x20, np.int8, (4,)).tolist() == [-7] * 4
    assert get(r.dram, 0x30, np.float16, (4,)).tolist() == [-7.0] * 4
    assert get(r.dram, 0x40, np.int32, (4,)).tolist() == [-(2**31)] * 4  # saturated


def test_timing_only_matches_functional_timing():
    rng = np.random.default_rng(8)
    x, w = rand_i8(rng, (30, 40)), rand_i8(rng, (40, 20))
    text, image, _ = tiled_matmul(x, w, 16, 16)
    p = assemble(text)
    a, b = simulate(p, MID, image), simulate(p, MID, image, functional=False)
    assert a.total_cycles == b.total_cycles and a.trace_events == b.trace_events
    assert a.energy_pj == b.energy_pj and b.dram is None


def test_depthwise_conv_by_vector_mac():
    """3x3 depthwise conv, int8 NHWC, one VBIN mac per output row and tap into int32."""
    rng = np.random.default_rng(9)
    h, w, c, k = 6, 7, 16, 3
    oh, ow = h - k + 1, w - k + 1
    x, wt = rand_i8(rng, (h, w, c)), rand_i8(rng, (k, k, c))
    image = np.zeros(2048, np.uint8)
    put(image, 0, x)
    put(image, 1024, wt)
    acc = 0x1000
    lines = [f"DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0={h * w * c}", f"DMA_LOAD esize=1 dram_addr=1024 local_addr=0x800 n0={k * k * c} signal=vector"]
    lines.append(f"VFILL dtype=int32 n0={c} n1={oh * ow} dst={acc} value=0 wait=load")
    for oy in range(oh):
        for dy in range(k):
            for dx in range(k):
                a = ((oy + dy) * w + dx) * c
                lines.append(
                    f"VBIN op=mac dtype=int8 n0={c} n1={ow} dst={acc + oy * ow * c * 4} a={a} a_s1={c} b={0x800 + (dy * k + dx) * c} b_s1=0"
                )
    lines[-1] += " signal=store"
    lines += [f"DMA_STORE esize=4 dram_addr=0 local_addr={acc} n0={oh * ow * c} wait=vector", "END"]
    r = simulate(assemble("\n".join(lines)), MID, image)
    want = sum(x[dy : dy + oh, dx : dx + ow].astype(np.int64) * wt[dy, dx] for dy in range(k) for dx in range(k))
    np.testing.assert_array_equal(get(r.dram, 0, np.int32, (oh, ow, c)), want)


def test_int32_accumulators_wrap():
    big = np.full((2, 4), 2**31 - 10, np.int32)
    x = np.full((2, 4), 127, np.int8)
    w = np.eye(4, dtype=np.int8)
    image = np.zeros(128, np.uint8)
    put(image, 0, big)
    put(image, 32, x)
    put(image, 40, w)
    text = """
    DMA_LOAD local=acc esize=4 dram_addr=0 local_addr=0 n0=8
    DMA_LOAD esize=1 dram_addr=32 local_addr=0 n0=24 signal=compute
    LOAD_WEIGHTS addr=8 k=4 n=4 wait=load
    MATMUL acc=1 k=4 n=4 in_addr=0 m0=2 out_addr=0 signal=store
    DMA_STORE local=acc esize=4 dram_addr=64 local_addr=0 n0=8 wait=compute
    END
    """
    r = simulate(assemble(text), MID, image)
    assert get(r.dram, 64, np.int32, (2, 4)).tolist() == [[-(2**31) + 117] * 4] * 2  # 2^31 - 10 + 127 wraps
