"""QADD and QMUL, the requantizing int8 add and multiply: bit for bit the integer references
(``arith.run_qadd``, ``run_qmul``) and the instruction sequences they replace (VCVT, VUN, VBIN,
REQUANT), saturation included; broadcasting, in place, timing and energy from the definition,
and their checks."""

from __future__ import annotations

import numpy as np
import pytest
from simkernels import get, put

from npuc.errors import SimulationError
from npuc.isa import assemble
from npuc.isa.defs.vector import QADD_LANE_OPS
from npuc.quant import arith
from npuc.runtime.sim import simulate
from npuc.schedule.cost import instr_time
from npuc.targets import load_target

MID = load_target("npu-mid")
A, B, REC, OUT, OUT2 = 0, 0x400, 0x800, 0xC00, 0x1000


def _image(a: np.ndarray, b: np.ndarray, mult: int, shift: int) -> np.ndarray:
    image = np.zeros(0x1400, np.uint8)
    put(image, A, a)
    put(image, B, b)
    put(image, REC, np.array([mult, shift], np.int32))
    return image


def _qadd_program(rows: int, cols: int, p: arith.AddPlan, b_s0: int | None = None, in_place: bool = False) -> str:
    n = rows * cols
    b_s0 = 1 if b_s0 is None else b_s0
    dst = 0 if in_place else 0x200
    return f"""
    DMA_LOAD esize=1 dram_addr={A} local_addr=0 n0={n}
    DMA_LOAD esize=1 dram_addr={B} local_addr=0x100 n0={n}
    DMA_LOAD esize=4 dram_addr={REC} local_addr=0x300 n0=2 signal=vector
    QADD n0={cols} n1={rows} dst={dst} a=0 b=0x100 b_s0={b_s0} b_s1={cols * b_s0} za={p.a_zero_point} fa={p.a_factor} \
zb={p.b_zero_point} fb={p.b_factor} qparams=0x300 zp={p.out_zero_point} qmin={p.qmin} qmax={p.qmax} wait=load signal=store
    DMA_STORE esize=1 dram_addr={OUT} local_addr={dst} n0={n} wait=vector
    END
    """


def _sequence_program(rows: int, cols: int, p: arith.AddPlan) -> str:
    """The same add as VCVT, VUN adds -z, VUN muls f on each operand, VBIN add, REQUANT."""
    n = rows * cols
    steps = [f"DMA_LOAD esize=1 dram_addr={A} local_addr=0 n0={n}",
             f"DMA_LOAD esize=1 dram_addr={B} local_addr=0x100 n0={n}",
             f"DMA_LOAD esize=4 dram_addr={REC} local_addr=0x300 n0=2 signal=vector"]
    for src, wide, z, f in ((0, 0x2000, p.a_zero_point, p.a_factor), (0x100, 0x3000, p.b_zero_point, p.b_factor)):
        wait = " wait=load" if src == 0 else ""
        steps.append(f"VCVT src_dtype=int8 dst_dtype=int32 n0={n} src={src} dst={wide}{wait}")
        steps.append(f"VUN op=adds dtype=int32 n0={n} src={wide} dst={wide} imm0={float(-z)}")
        steps.append(f"VUN op=muls dtype=int32 n0={n} src={wide} dst={wide} imm0={float(f)}")
    steps.append(f"VBIN op=add dtype=int32 n0={n} dst=0x2000 a=0x2000 b=0x3000")
    steps.append(f"REQUANT n0={n} src=0x2000 dst=0x200 qparams=0x300 zp={p.out_zero_point} qmin={p.qmin} "
                 f"qmax={p.qmax} signal=store")
    steps.append(f"DMA_STORE esize=1 dram_addr={OUT2} local_addr=0x200 n0={n} wait=vector")
    return "\n".join([*steps, "END"])


def _plan(rng, wide_factors: bool) -> arith.AddPlan:
    sa, sb, so = (float(rng.uniform(0.005, 0.2)) for _ in range(3))
    za, zb, zo = (int(rng.integers(-128, 128)) for _ in range(3))
    p = arith.plan_qadd((sa, za), (sb, zb), (so, zo))
    if wide_factors:  # factors near 2^24: the products saturate int32, both paths alike
        p = arith.AddPlan(za, zb, (1 << 24) - 1, int(rng.integers(1 << 23, 1 << 24)), p.multiplier, p.shift, zo)
    return p


@pytest.mark.parametrize("seed,wide_factors", [(0, False), (1, False), (2, True)])
def test_qadd_equals_the_reference_and_the_instruction_sequence(seed, wide_factors):
    rng = np.random.default_rng(seed)
    rows, cols = 5, 24
    a = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    b = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    a[0, :4], b[0, :4] = [-128, 127, -128, 127], [-128, 127, 127, -128]
    p = _plan(rng, wide_factors)
    image = _image(a, b, p.multiplier, p.shift)
    got = get(simulate(assemble(_qadd_program(rows, cols, p)), MID, image).dram, OUT, np.int8, (rows, cols))
    seq = get(simulate(assemble(_sequence_program(rows, cols, p)), MID, image).dram, OUT2, np.int8, (rows, cols))
    np.testing.assert_array_equal(got, arith.run_qadd(a, b, p))
    np.testing.assert_array_equal(got, seq)


def test_qadd_broadcast_operand_in_place_and_clamp():
    rng = np.random.default_rng(5)
    rows, cols = 3, 16
    a = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    b = rng.integers(-128, 128, (1, cols), dtype=np.int8)  # one row, broadcast over the rows
    p = arith.plan_qadd((0.05, 3), (0.08, -7), (0.1, -20), qmin=-20, qmax=127)  # a fused ReLU's clamp
    image = _image(a, np.repeat(b, rows, axis=0), p.multiplier, p.shift)
    text = _qadd_program(rows, cols, p, in_place=True).replace(f"b_s1={cols}", "b_s1=0")
    got = get(simulate(assemble(text), MID, image).dram, OUT, np.int8, (rows, cols))
    np.testing.assert_array_equal(got, arith.run_qadd(a, np.broadcast_to(b, (rows, cols)), p))
    assert got.min() >= -20


def test_qadd_timing_and_energy_come_from_its_lane_ops():
    p = arith.plan_qadd((0.05, 0), (0.05, 0), (0.1, 0))
    rows, cols = 8, 64
    r = simulate(assemble(_qadd_program(rows, cols, p)), MID, _image(np.zeros((rows, cols), np.int8),
                                                                     np.zeros((rows, cols), np.int8), 1 << 30, 1))
    assert r.actions.vector_lane_ops == QADD_LANE_OPS * rows * cols
    busy, _ = instr_time(MID, "QADD", dict(n0=cols, n1=rows, fa=1, fb=1))
    assert busy == -(-QADD_LANE_OPS * rows * cols // MID.vector.lanes)  # lane-bound: 3 bytes an element
    assert r.energy_breakdown_pj["vector"] == pytest.approx(QADD_LANE_OPS * rows * cols * MID.energy.vector_lane_op_pj)


def test_qadd_refuses_an_invalid_record():
    p = arith.plan_qadd((0.05, 0), (0.05, 0), (0.1, 0))
    image = _image(np.zeros((1, 16), np.int8), np.zeros((1, 16), np.int8), -1, 0)
    with pytest.raises(SimulationError, match="QADD parameters of channel 0 are invalid: multiplier -1"):
        simulate(assemble(_qadd_program(1, 16, p)), MID, image)


def test_qadd_refuses_an_operand_in_the_accumulator():
    with pytest.raises(Exception, match="operand 'a' is in ACC"):
        assemble("QADD n0=4 dst=0 a_space=acc a=0 b=0x100 fa=1 fb=1 qparams=0x200\nEND")


def test_qmul_equals_the_reference_and_the_instruction_sequence():
    rng = np.random.default_rng(7)
    rows, cols = 4, 32
    a = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    b = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    a[0, :3], b[0, :3] = [-128, 127, -128], [-128, 127, 127]
    p = arith.plan_qmul((0.04, 11), (0.02, -9), (0.05, 4))
    image = _image(a, b, p.multiplier, p.shift)
    n = rows * cols
    head = [f"DMA_LOAD esize=1 dram_addr={A} local_addr=0 n0={n}", f"DMA_LOAD esize=1 dram_addr={B} local_addr=0x100 n0={n}",
            f"DMA_LOAD esize=4 dram_addr={REC} local_addr=0x300 n0=2 signal=vector"]
    clamp = f"zp={p.out_zero_point} qmin={p.qmin} qmax={p.qmax}"
    qmul = head + [f"QMUL n0={n} dst=0x200 a=0 b=0x100 za={p.a_zero_point} zb={p.b_zero_point} qparams=0x300 {clamp} "
                   "wait=load signal=store"]
    seq = head + [f"VCVT src_dtype=int8 dst_dtype=int32 n0={n} src=0 dst=0x2000 wait=load",
                  f"VUN op=adds dtype=int32 n0={n} src=0x2000 dst=0x2000 imm0={float(-p.a_zero_point)}",
                  f"VCVT src_dtype=int8 dst_dtype=int32 n0={n} src=0x100 dst=0x3000",
                  f"VUN op=adds dtype=int32 n0={n} src=0x3000 dst=0x3000 imm0={float(-p.b_zero_point)}",
                  f"VBIN op=mul dtype=int32 n0={n} dst=0x2000 a=0x2000 b=0x3000",
                  f"REQUANT n0={n} src=0x2000 dst=0x200 qparams=0x300 {clamp} signal=store"]
    tail = [f"DMA_STORE esize=1 dram_addr={OUT} local_addr=0x200 n0={n} wait=vector", "END"]
    got = get(simulate(assemble("\n".join(qmul + tail)), MID, image).dram, OUT, np.int8, (rows, cols))
    want = get(simulate(assemble("\n".join(seq + tail)), MID, image).dram, OUT, np.int8, (rows, cols))
    np.testing.assert_array_equal(got, arith.run_qmul(a, b, p))
    np.testing.assert_array_equal(got, want)
