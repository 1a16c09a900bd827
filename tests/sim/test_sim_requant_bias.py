"""REQUANT with the per-channel bias on its pre-adder (``add_bias``): bit for bit the two steps it
replaces (VBIN add of int32 in the accumulator, then REQUANT), saturation included; its lane-ops
(no more than REQUANT without a bias) and the bias bytes it reads."""

from __future__ import annotations

import numpy as np
import pytest
from simkernels import get, put

from npuc.isa import assemble
from npuc.isa.numerics import requantize, saturate_int32
from npuc.runtime.sim import simulate
from npuc.schedule.cost import instr_time
from npuc.targets import load_target

MID = load_target("npu-mid")
SUMS, BIAS, REC, OUT, OUT2 = 0, 0x1000, 0x1400, 0x1800, 0x1C00
ROWS, COLS = 6, 32


def _image(sums: np.ndarray, bias: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    image = np.zeros(0x2000, np.uint8)
    put(image, SUMS, sums)
    put(image, BIAS, bias)
    put(image, REC, np.stack([mult, shift], axis=1).astype(np.int32))
    return image


_LOADS = f"""
    DMA_LOAD local=acc esize=4 dram_addr={SUMS} local_addr=0 n0={ROWS * COLS}
    DMA_LOAD esize=4 dram_addr={BIAS} local_addr=0x100 n0={COLS}
    DMA_LOAD esize=4 dram_addr={REC} local_addr=0x200 n0={2 * COLS} signal=vector
"""


def _folded(zp: int, qmin: int, qmax: int) -> str:
    return _LOADS + f"""
    REQUANT n0={COLS} n1={ROWS} src_space=acc src=0 dst=0x400 per_channel=1 qparams=0x200 zp={zp} qmin={qmin} \
qmax={qmax} add_bias=1 bias=0x100 wait=load signal=store
    DMA_STORE esize=1 dram_addr={OUT} local_addr=0x400 n0={ROWS * COLS} wait=vector
    END
    """


def _two_steps(zp: int, qmin: int, qmax: int) -> str:
    return _LOADS + f"""
    VBIN op=add dtype=int32 n0={COLS} n1={ROWS} dst_space=acc dst=0 a_space=acc a=0 b=0x100 b_s1=0 wait=load
    REQUANT n0={COLS} n1={ROWS} src_space=acc src=0 dst=0x400 per_channel=1 qparams=0x200 zp={zp} qmin={qmin} \
qmax={qmax} signal=store
    DMA_STORE esize=1 dram_addr={OUT2} local_addr=0x400 n0={ROWS * COLS} wait=vector
    END
    """


@pytest.mark.parametrize("seed", [0, 1])
def test_requant_with_bias_equals_the_add_then_requant_and_the_reference(seed):
    rng = np.random.default_rng(seed)
    sums = rng.integers(-(1 << 20), 1 << 20, (ROWS, COLS)).astype(np.int32)
    bias = rng.integers(-(1 << 16), 1 << 16, COLS).astype(np.int32)
    sums[0, :2], bias[:2] = [(1 << 31) - 10, -(1 << 31) + 10], [1 << 20, -(1 << 20)]  # the sum saturates
    mult = rng.integers(1 << 29, 1 << 31, COLS).astype(np.int64)
    shift = rng.integers(-2, 12, COLS)
    zp, qmin, qmax = int(rng.integers(-20, 20)), -128, 127
    image = _image(sums, bias, mult, shift)
    got = get(simulate(assemble(_folded(zp, qmin, qmax)), MID, image).dram, OUT, np.int8, (ROWS, COLS))
    two = get(simulate(assemble(_two_steps(zp, qmin, qmax)), MID, image).dram, OUT2, np.int8, (ROWS, COLS))
    want = requantize(saturate_int32(sums.astype(np.int64) + bias[None, :]), mult[None, :], shift[None, :], zp, qmin, qmax)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, two)
    assert got[0, 0] == qmax and got[0, 1] == qmin


def test_the_bias_costs_no_lane_ops_and_saves_the_pass_over_the_sums():
    fields = dict(n0=COLS, n1=ROWS, src_space="acc", per_channel=True)
    plain, _ = instr_time(MID, "REQUANT", fields)
    folded, _ = instr_time(MID, "REQUANT", dict(fields, add_bias=True, bias=0x100))
    add, _ = instr_time(MID, "VBIN", dict(op="add", dtype="int32", n0=COLS, n1=ROWS, dst_space="acc", a_space="acc", b_s1=0))
    assert folded == plain == -(-2 * ROWS * COLS // MID.vector.lanes)
    image = _image(np.zeros((ROWS, COLS), np.int32), np.zeros(COLS, np.int32), np.full(COLS, 1 << 30), np.zeros(COLS))
    one = simulate(assemble(_folded(0, -128, 127)), MID, image, functional=False)
    two = simulate(assemble(_two_steps(0, -128, 127)), MID, image, functional=False)
    assert one.actions.vector_lane_ops == 2 * ROWS * COLS
    assert two.actions.vector_lane_ops == 3 * ROWS * COLS
    assert two.total_cycles - one.total_cycles >= add  # the add's pass is gone from the vector queue
    assert one.actions.acc_read == two.actions.acc_read - ROWS * COLS * 4  # the sums are read once, not twice
