"""Depthwise convolutions on either unit: both schedules correct, the cheaper one chosen.

``DepthwiseKernel.alternatives`` gives the vector unit's schedule and the array's (its depthwise
mode, MATMUL_DW, at a few channel-block widths).  Each is run on the simulator: fp16 against PyTorch in fp32 (relative L2 below
3e-3), int8 bit for bit against the quantized op's reference.  ``plan`` must pick, of those within
2% of the fewest estimated cycles and 10% of the fewest off-chip bytes among them, the one whose
code (emitted, rolled into LOOPs, encoded) takes the fewest bytes, and the estimate must be what
the simulator measures (within 10%).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as Fn

from npuc.codegen.emitter import Emitter
from npuc.codegen.harness import place
from npuc.codegen.kernel import get_kernel
from npuc.codegen.kernels.depthwise_on_array import ArrayDepthwisePlan
from npuc.codegen.kernels.vector_depthwise import CYCLE_SLACK, OFFCHIP_SLACK, offchip_bytes
from npuc.codegen.program_size import encoded_bytes
from npuc.ir.opdef import get_op
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.ir.ops.quantized import QConv2dAttrs, quant_type
from npuc.ir.types import DType as IRType, QuantParams, TensorType
from npuc.isa.enums import DType
from npuc.kir import records
from npuc.kir.kernel import EpilogueOp, Kernel, QuantAttrs
from npuc.kir.tensor import NHWC, DramTensor
from npuc.quant import arith
from npuc.runtime.sim import simulate
from npuc.targets import load_target

F16, I8, I32 = DType.fp16, DType.int8, DType.int32
MID, LARGE, SMALL = (load_target(n) for n in ("npu-mid", "npu-large", "npu-small"))
IMPL = get_kernel("depthwise_conv2d")
TAP_MAJOR = (2, 3, 1, 0)


def run_alternatives(kernel: Kernel, target, values: dict) -> list[tuple[object, np.ndarray, int]]:
    """(plan, output, simulated cycles) of every schedule of ``kernel``."""
    placed, size = place(kernel)
    out = []
    for plan in IMPL.alternatives(placed, target):
        dram = np.zeros(size, np.uint8)
        for t in placed.tensors():
            if t.name != placed.output.name:
                t.write_numpy(dram, values[t.name])
        em = Emitter(target)
        IMPL.emit(placed, plan, em)
        prog, _ = em.finish()
        res = simulate(prog, target, dram)
        out.append((plan, placed.output.to_numpy(np.frombuffer(res.dram, np.uint8)), res.total_cycles))
    return out


def _rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float16)


def fp16_case(n, c, h, k, s, p, d=1, act="relu6"):
    xv, wv, bv = _rand((n, c, h, h), 0), _rand((c, 1, k, k), 1, 1.0 / k), _rand((c,), 2)
    ref = Fn.conv2d(torch.from_numpy(xv).float(), torch.from_numpy(wv).float(), torch.from_numpy(bv).float(), s, p, d, c)
    ref = torch.clamp(ref, 0, 6).numpy() if act == "relu6" else ref.numpy()
    oh = ref.shape[2]
    out = DramTensor.dense("y", (n, c, oh, oh), F16, order=NHWC)
    bias = DramTensor("b", out.shape, F16, 0, (0, 2, 0, 0))
    epi = (EpilogueOp("add", operand=bias),) + ((EpilogueOp("clamp", params=(("min", 0.0), ("max", 6.0))),)
                                                if act == "relu6" else ())
    kern = Kernel("dw", "depthwise_conv2d",
                  (DramTensor.dense("x", xv.shape, F16, order=NHWC), DramTensor.dense("w", wv.shape, F16, order=TAP_MAJOR)),
                  out, Conv2dAttrs((s, s), (p, p), (d, d), c), epi, F16)
    return kern, {"x": xv, "w": wv, "b": np.broadcast_to(bv[None, :, None, None], out.shape)}, ref


def int8_case(n, c, h, k, s, p, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (n, c, h, h)).astype(np.int8)
    wt = rng.integers(-127, 128, (c, 1, k, k)).astype(np.int8)
    b = rng.integers(-20000, 20000, (c,)).astype(np.int32)
    scales = tuple(float(v) for v in rng.uniform(0.002, 0.02, c))
    x_q, out_q, clamp = (0.03, 7), (0.05, -3), (-3, 127)
    types = [quant_type(x.shape, *x_q), TensorType(wt.shape, IRType.i8, QuantParams(scales, (0,) * c, 0)),
             TensorType((c,), IRType.i32)]
    attrs = QConv2dAttrs((s, s), (p, p), (1, 1), c, out_q[0], out_q[1], *clamp)
    ref = get_op("qconv2d").evaluate([torch.from_numpy(v) for v in (x, wt, b)], types, attrs)[0].numpy()
    fold = arith.folded_bias(wt, b, x_q[1]).astype(np.int32)
    mults, shifts = arith.channel_multipliers(x_q[0], scales, out_q[0])
    recs = records.pack(mults, shifts)
    kern = Kernel("qdw", "depthwise_conv2d",
                  (DramTensor.dense("x", x.shape, I8, order=NHWC), DramTensor.dense("w", wt.shape, I8, order=TAP_MAJOR),
                   DramTensor.dense("b", (c,), I32), DramTensor.dense("r", (5 * c,), DType.int8)),
                  DramTensor.dense("y", ref.shape, I8, order=NHWC), Conv2dAttrs((s, s), (p, p), (1, 1), c), (), I8,
                  quant=QuantAttrs(x_q[1], out_q[1], *clamp))
    return kern, {"x": x, "w": wt, "b": fold, "r": recs}, ref


def _rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b), 1e-12))


def _check_choice(kernel, target, runs):
    chosen = IMPL.plan(place(kernel)[0], target)
    fastest = min(p.est_cycles for p, _, _ in runs)
    near = [p for p, _, _ in runs if p.est_cycles <= fastest * (1 + CYCLE_SLACK)]
    fewest = min(offchip_bytes(p.details) for p in near)
    lean = [p for p in near if offchip_bytes(p.details) <= fewest * (1 + OFFCHIP_SLACK)]
    assert chosen.est_cycles <= fastest * (1 + CYCLE_SLACK)
    assert offchip_bytes(chosen.details) <= fewest * (1 + OFFCHIP_SLACK)
    assert encoded_bytes(chosen.details, target) == min(encoded_bytes(p.details, target) for p in lean)
    for plan, _, cycles in runs:
        assert abs(plan.est_cycles - cycles) <= 0.10 * cycles, plan.summary


FP16_CASES = {
    "3x3-mobilenet-first": ((1, 32, 28, 3, 1, 1), MID),
    "3x3-stride2-odd-channels": ((2, 13, 9, 3, 2, 1), MID),
    "5x5-pad2": ((1, 24, 15, 5, 1, 2), LARGE),
    "dilated-no-act": ((1, 40, 12, 3, 1, 2, 2, None), LARGE),
    "many-channels": ((1, 576, 7, 3, 1, 1), MID),
}


@pytest.mark.parametrize("case", list(FP16_CASES))
def test_fp16_both_units_match_pytorch(case):
    args, target = FP16_CASES[case]
    kernel, values, ref = fp16_case(*args)
    runs = run_alternatives(kernel, target, values)
    assert len(runs) >= 2 and all(isinstance(p.details.choice, ArrayDepthwisePlan) for p, _, _ in runs[1:])
    for plan, out, _ in runs:
        assert _rel(out, ref) < 3e-3, plan.summary
    _check_choice(kernel, target, runs)


INT8_CASES = {
    "3x3": ((1, 24, 10, 3, 1, 1), SMALL),
    "3x3-stride2-partial-block": ((2, 20, 9, 3, 2, 1), MID),
    "5x5-channel-blocks": ((1, 100, 8, 5, 1, 2), LARGE),
}


@pytest.mark.parametrize("case", list(INT8_CASES))
def test_int8_both_units_are_bit_exact(case):
    args, target = INT8_CASES[case]
    kernel, values, ref = int8_case(*args)
    runs = run_alternatives(kernel, target, values)
    assert len(runs) >= 2
    for plan, out, _ in runs:
        assert int((out != ref.reshape(out.shape)).sum()) == 0, plan.summary
    _check_choice(kernel, target, runs)


def test_the_array_is_chosen_for_a_mobilenet_layer():
    kernel, _, _ = fp16_case(1, 32, 56, 3, 1, 1)
    plan = IMPL.plan(place(kernel)[0], MID)
    assert isinstance(plan.details.choice, ArrayDepthwisePlan) and "on the array" in plan.summary


def test_no_array_alternative_without_array_fp16():
    kernel, _, _ = int8_case(1, 8, 6, 3, 1, 1)
    assert len(IMPL.alternatives(place(kernel)[0], SMALL)) >= 2  # int8 MACs on npu-small
    fp16 = fp16_case(1, 8, 6, 3, 1, 1)[0]
    no_fp16_array = [t for t in (SMALL,) if "fp16" not in t.array.dtypes]
    for t in no_fp16_array:
        assert IMPL.supports(fp16, t) is not None  # no fp16 anywhere on such a part


def test_of_nearly_fastest_schedules_the_one_with_less_code_wins():
    # MobileNetV2's int8 144-channel 56x56 layer: the schedule that moves the fewest off-chip
    # bytes (9 rows x 14 columns x 64 channels) is as fast as a 4-row one to a percent, and its
    # few, uneven tiles roll poorly; the choice takes the one whose code is smaller
    kernel = place(int8_case(1, 144, 56, 3, 1, 1)[0])[0]
    plans = IMPL.alternatives(kernel, MID)
    fastest = min(p.est_cycles for p in plans)
    near = [p for p in plans if p.est_cycles <= fastest * (1 + CYCLE_SLACK)]
    leanest = min(near, key=lambda p: offchip_bytes(p.details))
    chosen = IMPL.plan(kernel, MID)
    assert chosen.est_cycles <= fastest * (1 + CYCLE_SLACK)
    assert offchip_bytes(chosen.details) <= offchip_bytes(leanest.details) * (1 + OFFCHIP_SLACK)
    assert 2 * encoded_bytes(chosen.details, MID) <= encoded_bytes(leanest.details, MID), chosen.summary
