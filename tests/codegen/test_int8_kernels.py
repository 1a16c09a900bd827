"""int8 kernels on the simulator, bit for bit against the quantized ops' reference semantics.

Each case builds one int8 kernel the way lowering does (constants from ``npuc.quant.arith``:
folded biases, REQUANT records, qadd factors, LUT tables), runs it with random int8 codes on
npu-small, npu-mid and npu-large, and requires the output to equal the quantized graph op's
reference (``get_op(op).evaluate`` on the same codes and types) exactly.  Zero points are
nonzero everywhere, so a padding filled with 0 instead of the zero point, or a bias without the
``-zx * sum(w)`` fold, shows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from npuc.codegen.harness import run_kernel
from npuc.kir import records as stored_records
from npuc.kir.kernel import EpilogueOp, FillAttrs, Kernel, PoolAttrs, QBinaryAttrs, QuantAttrs, ReduceAttrs
from npuc.codegen.kernels.array_conv import WEIGHT_ORDER
from npuc.codegen.kernels.vector_pool import record_divisors
from npuc.kir.tensor import NHWC, DramTensor
from npuc.ir.opdef import get_op
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.ir.ops.quantized import (
    QAvgPool2dAttrs,
    QBinaryAttrs as QBinaryOpAttrs,
    QClampAttrs,
    QConv2dAttrs,
    QLinearAttrs,
    QLutAttrs,
    QMeanAttrs,
    OutAttrs,
    quant_type,
)
from npuc.ir.types import DType as IRType, QuantParams, TensorType
from npuc.isa.enums import DType
from npuc.quant import arith
from npuc.targets import load_target

I8, I32 = DType.int8, DType.int32
TARGETS = [load_target(n) for n in ("npu-small", "npu-mid", "npu-large")]
IDS = [t.name for t in TARGETS]


def codes(rng, shape, lo=-128, hi=127) -> np.ndarray:
    return rng.integers(lo, hi + 1, shape).astype(np.int8)


def reference(op: str, ins: list[np.ndarray], types: list[TensorType], attrs) -> np.ndarray:
    return get_op(op).evaluate([torch.from_numpy(np.ascontiguousarray(x)) for x in ins], types, attrs)[0].numpy()


def records(pairs) -> np.ndarray:
    """Per-tensor REQUANT records [k, 2] (int32 multiplier, shift): a qadd's, a pool's."""
    return np.array([[int(m), int(s)] for m, s in pairs], dtype=np.int32).reshape(-1, 2)


def channel_records(pairs) -> np.ndarray:
    """Per-channel records as a conv, depthwise or gemm kernel takes them (npuc.kir.records)."""
    mults, shifts = zip(*[(int(m), int(s)) for m, s in pairs])
    return stored_records.pack(mults, shifts)


def check(kernel: Kernel, target, values: dict, ref: np.ndarray):
    run = run_kernel(kernel, target, values)
    assert run.output.dtype == np.int8
    mism = int((run.output != ref.reshape(run.output.shape)).sum())
    assert mism == 0, f"{mism} of {ref.size} int8 outputs differ from the reference ({run.plan.summary})"
    return run


# ------------------------------------------------------------------------------- conv2d (array)


def conv_case(target, n, c, h, w, o, k, stride=1, pad=0, dil=1, groups=1, bias=True, per_channel=True,
              x_q=(0.03, 7), out_q=(0.05, -3), clamp=(-128, 127), seed=0):
    rng = np.random.default_rng(seed)
    kh, kw = (k, k) if isinstance(k, int) else k
    x = codes(rng, (n, c, h, w))
    wt = codes(rng, (o, c // groups, kh, kw), -127, 127)
    scales = tuple(float(s) for s in rng.uniform(0.002, 0.02, o)) if per_channel else (0.01,)
    w_type = TensorType(wt.shape, IRType.i8, QuantParams(scales, (0,) * len(scales), 0 if per_channel else None))
    x_type = quant_type(x.shape, *x_q)
    ins, types = [x, wt], [x_type, w_type]
    b = None
    if bias:
        b = rng.integers(-20000, 20000, (o,)).astype(np.int32)
        ins.append(b)
        types.append(TensorType((o,), IRType.i32))
    attrs = QConv2dAttrs((stride, stride), (pad, pad), (dil, dil), groups, out_q[0], out_q[1], *clamp)
    ref = reference("qconv2d", ins, types, attrs)
    fold = arith.folded_bias(wt, b, x_q[1]).astype(np.int32)
    ws = scales if per_channel else scales * o
    mults, shifts = arith.channel_multipliers(x_q[0], ws, out_q[0])
    kind = "depthwise_conv2d" if groups > 1 and groups == c == o else "conv2d"
    w_order = WEIGHT_ORDER if kind == "conv2d" else (2, 3, 1, 0)
    kernel = Kernel(
        "qconv", kind,
        (DramTensor.dense("x", x.shape, I8, order=NHWC), DramTensor.dense("w", wt.shape, I8, order=w_order),
         DramTensor.dense("b", (o,), I32), DramTensor.dense("r", (5 * o,), I8)),
        DramTensor.dense("y", ref.shape, I8, order=NHWC),
        Conv2dAttrs((stride, stride), (pad, pad), (dil, dil), groups), (), I8,
        quant=QuantAttrs(x_q[1], out_q[1], *clamp),
    )
    return check(kernel, target, {"x": x, "w": wt, "b": fold, "r": channel_records(zip(mults, shifts))}, ref)


CONV_CASES = {
    "3x3-stride2-odd": dict(n=1, c=3, h=17, w=15, o=8, k=3, stride=2, pad=1),
    "3x3-relu6-batch2": dict(n=2, c=20, h=9, w=11, o=33, k=3, pad=1, out_q=(0.02, -128), clamp=(-128, 172 - 128)),
    "1x1": dict(n=1, c=16, h=8, w=8, o=16, k=1),
    "1x1-stride2": dict(n=1, c=24, h=9, w=9, o=40, k=1, stride=2),
    "grouped": dict(n=1, c=8, h=10, w=10, o=16, k=3, pad=1, groups=2),
    "5x5-stride2-pad2": dict(n=1, c=6, h=13, w=12, o=10, k=5, stride=2, pad=2),
    "dilated": dict(n=1, c=5, h=11, w=11, o=7, k=3, pad=2, dil=2),
    "per-tensor-no-bias": dict(n=1, c=12, h=7, w=9, o=20, k=3, pad=1, bias=False, per_channel=False),
    "1x7": dict(n=1, c=4, h=9, w=16, o=8, k=(1, 7)),
}


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("case", list(CONV_CASES), ids=list(CONV_CASES))
def test_qconv2d_on_array(target, case):
    conv_case(target, **CONV_CASES[case])


def test_qconv2d_larger_than_scratchpad():
    """Input, weights and output together exceed npu-small's 128 KiB scratchpad."""
    small = TARGETS[0]
    assert 40 * 64 * 64 + 48 * 64 * 64 > small.scratchpad.size_bytes
    conv_case(small, 1, 40, 64, 64, 48, 3, pad=1, seed=3)


DW_CASES = {
    "3x3-s1": dict(n=1, c=32, h=15, w=13, o=32, k=3, pad=1, groups=32),
    "3x3-s2-batch2-clamp": dict(n=2, c=19, h=9, w=9, o=19, k=3, stride=2, pad=1, groups=19, clamp=(-2, 100)),
    "5x5-s2": dict(n=1, c=8, h=12, w=12, o=8, k=5, stride=2, pad=2, groups=8),
    "3x3-no-bias": dict(n=1, c=24, h=8, w=7, o=24, k=3, pad=1, groups=24, bias=False),
}


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("case", list(DW_CASES), ids=list(DW_CASES))
def test_qconv2d_depthwise(target, case):
    conv_case(target, **DW_CASES[case])


def test_depthwise_larger_than_scratchpad():
    conv_case(TARGETS[0], 1, 96, 56, 56, 96, 3, pad=1, groups=96, seed=5)


# ------------------------------------------------------------------------------ linear, matmul


def linear_case(target, lead, k, n, x_q=(0.02, -9), out_q=(0.07, 5), clamp=(-128, 127), seed=1):
    rng = np.random.default_rng(seed)
    x = codes(rng, lead + (k,))
    wt = codes(rng, (n, k), -127, 127)
    b = rng.integers(-9000, 9000, (n,)).astype(np.int32)
    scales = tuple(float(s) for s in rng.uniform(0.001, 0.01, n))
    w_type = TensorType(wt.shape, IRType.i8, QuantParams(scales, (0,) * n, 0))
    ref = reference("qlinear", [x, wt, b], [quant_type(x.shape, *x_q), w_type, TensorType((n,), IRType.i32)],
                    QLinearAttrs(out_q[0], out_q[1], *clamp))
    m = math.prod(lead)
    mults, shifts = arith.channel_multipliers(x_q[0], scales, out_q[0])
    kernel = Kernel(
        "qlinear", "gemm",
        (DramTensor.dense("x", (m, k), I8), DramTensor.dense("w", (n, k), I8).permute((1, 0)),
         DramTensor.dense("b", (n,), I32), DramTensor.dense("r", (5 * n,), I8)),
        DramTensor.dense("y", (m, n), I8), None, (), I8, quant=QuantAttrs(x_q[1], out_q[1], *clamp),
    )
    values = {"x": x.reshape(m, k), "w": wt.T, "b": arith.folded_bias(wt, b, x_q[1]).astype(np.int32),
              "r": channel_records(zip(mults, shifts))}
    check(kernel, target, values, ref.reshape(m, n))


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("lead,k,n", [((7,), 100, 37), ((64,), 512, 10), ((2, 5), 64, 48), ((1,), 1280, 100)])
def test_qlinear_on_array(target, lead, k, n):
    linear_case(target, lead, k, n)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_qlinear_clamped(target):
    linear_case(target, (9,), 33, 17, clamp=(5, 60))


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_qmatmul_symmetric(target):
    rng = np.random.default_rng(4)
    a, b = codes(rng, (2, 9, 24)), codes(rng, (2, 24, 13))
    aq, bq, oq = (0.05, 0), (0.03, 0), (0.4, -6)
    ref = reference("qmatmul", [a, b], [quant_type(a.shape, *aq), quant_type(b.shape, *bq)], OutAttrs(*oq))
    m, s = arith.quantize_multiplier(aq[0] * bq[0] / oq[0])
    kernel = Kernel(
        "qmm", "gemm",
        (DramTensor.dense("a", a.shape, I8), DramTensor.dense("bm", b.shape, I8), DramTensor.dense("b", (13,), I32),
         DramTensor.dense("r", (65,), I8)),
        DramTensor.dense("y", ref.shape, I8), None, (), I8, quant=QuantAttrs(0, oq[1]),
    )
    check(kernel, target, {"a": a, "bm": b, "b": np.zeros(13, np.int32), "r": channel_records([(m, s)] * 13)}, ref)


# ---------------------------------------------------------------------------- qadd, qmul


def binary_case(target, op, shape, bshape, order=None, a_q=(0.05, 3), b_q=(0.02, -7), out_q=(0.06, 1),
                clamp=(-128, 127), seed=0):
    from npuc.lower.layout import broadcast_to

    rng = np.random.default_rng(seed)
    a, b = codes(rng, shape), codes(rng, bshape)
    ref = reference("q" + op, [a, b], [quant_type(shape, *a_q), quant_type(bshape, *b_q)],
                    QBinaryOpAttrs(out_q[0], out_q[1], *clamp))
    if op == "add":
        p = arith.plan_qadd(a_q, b_q, out_q, *clamp)
        factors = (p.a_factor, p.b_factor)
    else:
        p = arith.plan_qmul(a_q, b_q, out_q, *clamp)
        factors = ()
    b_order = order if bshape == shape else None
    kernel = Kernel(
        "qbin", "qbinary",
        (DramTensor.dense("a", shape, I8, order=order), broadcast_to(DramTensor.dense("b", bshape, I8, order=b_order), shape),
         DramTensor.dense("r", (1, 2), I32)),
        DramTensor.dense("y", shape, I8, order=order), QBinaryAttrs(op), (), I8,
        quant=QuantAttrs(0, p.out_zero_point, p.qmin, p.qmax, (p.a_zero_point, p.b_zero_point), factors),
    )
    check(kernel, target, {"a": a, "b": b, "r": records([(p.multiplier, p.shift)])}, ref)


BINARY_CASES = {
    "add-nhwc": ("add", (1, 24, 14, 14), (1, 24, 14, 14), NHWC, {}),
    "add-channel-broadcast-relu": ("add", (2, 5, 7, 9), (1, 5, 1, 1), NHWC, dict(clamp=(1, 127))),
    "add-rows": ("add", (3, 1000), (1000,), None, dict(a_q=(0.01, -100), b_q=(0.3, 20))),
    "mul-squeeze-excite": ("mul", (1, 24, 14, 14), (1, 24, 1, 1), NHWC, {}),
    "mul-same": ("mul", (3, 1001), (3, 1001), None, dict(out_q=(0.002, -2))),
}


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("case", list(BINARY_CASES), ids=list(BINARY_CASES))
def test_qadd_qmul(target, case):
    op, shape, bshape, order, kw = BINARY_CASES[case]
    binary_case(target, op, shape, bshape, order, **kw)


def test_qadd_larger_than_scratchpad():
    binary_case(TARGETS[0], "add", (1, 64, 56, 56), (1, 64, 56, 56), NHWC, seed=2)


# ----------------------------------------------------------------------------- lut, clamp


LUT_FNS = {
    "sigmoid": (torch.sigmoid, (0.05, 3), (1 / 256, -128)),
    "hardswish": (torch.nn.functional.hardswish, (0.04, -20), (0.03, -10)),
    "tanh": (torch.tanh, (0.02, 0), (1 / 128, 0)),
}


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("fn", list(LUT_FNS))
@pytest.mark.parametrize("shape,order", [((1, 16, 9, 9), NHWC), ((70001,), None)])
def test_qlut(target, fn, shape, order):
    f, in_q, out_q = LUT_FNS[fn]
    x = codes(np.random.default_rng(6), shape)
    table = arith.lut_table(f, in_q, out_q)
    ref = reference("qlut", [x], [quant_type(shape, *in_q)], QLutAttrs(table, *out_q))
    kernel = Kernel("lut", "lut", (DramTensor.dense("x", shape, I8, order=order), DramTensor.dense("t", (256,), I8)),
                    DramTensor.dense("y", shape, I8, order=order), None, (), I8)
    check(kernel, target, {"x": x, "t": np.array(table, np.int8)}, ref)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_qclamp(target):
    shape = (1, 8, 5, 7)
    x = codes(np.random.default_rng(7), shape)
    ref = reference("qclamp", [x], [quant_type(shape, 0.1, -3)], QClampAttrs(-3, 57))
    epi = (EpilogueOp("clamp", params=(("min", -3), ("max", 57))),)
    kernel = Kernel("clamp", "eltwise", (DramTensor.dense("x", shape, I8, order=NHWC),),
                    DramTensor.dense("y", shape, I8, order=NHWC), None, epi, I8)
    check(kernel, target, {"x": x}, ref)


# ---------------------------------------------------------------------------------- pools


def avg_case(target, n, c, h, w, k, s, pad, ceil=False, include=True, override=None, x_q=(0.05, 7),
             out_q=(0.03, -5), seed=0):
    x = codes(np.random.default_rng(seed), (n, c, h, w))
    ref = reference("qavg_pool2d", [x], [quant_type(x.shape, *x_q)],
                    QAvgPool2dAttrs((k, k), (s, s), (pad, pad), ceil, include, override, *out_q))
    attrs = PoolAttrs("avg", (k, k), (s, s), (pad, pad), (1, 1), ceil, include, override)
    divs = record_divisors(attrs, (h, w), ref.shape[2:])
    recs = records(arith.average_multiplier(x_q[0], d, out_q[0]) for d in divs)
    kernel = Kernel("avg", "pool2d", (DramTensor.dense("x", x.shape, I8, order=NHWC), DramTensor.dense("r", recs.shape, I32)),
                    DramTensor.dense("y", ref.shape, I8, order=NHWC), attrs, (), I8, quant=QuantAttrs(x_q[1], out_q[1]))
    check(kernel, target, {"x": x, "r": recs}, ref)


AVG_CASES = {
    "2x2": (1, 16, 8, 8, 2, 2, 0, {}),
    "3x3-pad-exclude": (2, 10, 9, 11, 3, 2, 1, dict(include=False)),
    "3x3-ceil": (1, 10, 9, 11, 3, 2, 1, dict(ceil=True)),
    "divisor-override": (1, 10, 9, 11, 3, 1, 1, dict(override=5)),
    "global-7x7": (1, 64, 7, 7, 7, 7, 0, {}),
    "global-28x28": (1, 40, 28, 28, 28, 28, 0, dict(x_q=(0.1, -128))),
}


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("case", list(AVG_CASES), ids=list(AVG_CASES))
def test_qavg_pool2d(target, case):
    *args, kw = AVG_CASES[case]
    avg_case(target, *args, **kw)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("k,s,pad,ceil", [(3, 2, 1, False), (3, 2, 1, True), (2, 2, 0, False), (7, 7, 0, False)])
def test_max_pool_int8(target, k, s, pad, ceil):
    x = codes(np.random.default_rng(8), (1, 16, 9, 9) if k != 7 else (1, 64, 7, 7))
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x).float(), k, s, pad, 1, ceil).to(torch.int8).numpy()
    attrs = PoolAttrs("max", (k, k), (s, s), (pad, pad), (1, 1), ceil)
    kernel = Kernel("max", "pool2d", (DramTensor.dense("x", x.shape, I8, order=NHWC),),
                    DramTensor.dense("y", ref.shape, I8, order=NHWC), attrs, (), I8)
    check(kernel, target, {"x": x}, ref)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("shape,dims,order", [((1, 64, 7, 7), (2, 3), NHWC), ((2, 16, 128), (2,), None),
                                              ((3, 100, 9), (1,), None), ((5000,), (0,), None)])
def test_qmean(target, shape, dims, order):
    x_q, out_q = (0.04, -9), (0.01, 3)
    x = codes(np.random.default_rng(9), shape)
    ref = reference("qmean", [x], [quant_type(shape, *x_q)], QMeanAttrs(dims, True, *out_q))
    count = math.prod(shape[d] for d in dims)
    kernel = Kernel("mean", "reduce", (DramTensor.dense("x", shape, I8, order=order), DramTensor.dense("r", (1, 2), I32)),
                    DramTensor.dense("y", ref.shape, I8), ReduceAttrs("mean", dims, True), (), I8,
                    quant=QuantAttrs(x_q[1], out_q[1]))
    check(kernel, target, {"x": x, "r": records([arith.average_multiplier(x_q[0], count, out_q[0])])}, ref)


# ------------------------------------------------------------------------- data movement


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_int8_copy_and_fill(target):
    """A pad by the zero point: fill the output with zp, copy the input into its interior (NHWC),
    and a permute NCHW -> NHWC: int8 copies are bit copies."""
    rng = np.random.default_rng(10)
    x = codes(rng, (1, 5, 6, 7))
    zp = -37
    out = DramTensor.dense("y", (1, 5, 8, 11), I8, order=NHWC)
    fill = Kernel("fill", "fill", (), out, FillAttrs(float(zp)), (), I8)
    filled = run_kernel(fill, target, {}).output
    assert (filled == zp).all()
    inner = out.slice(2, 1, 7).slice(3, 2, 9)
    copy = Kernel("copy", "copy", (DramTensor.dense("x", x.shape, I8),), inner, None, (), I8)
    got = run_kernel(copy, target, {"x": x}).output
    assert np.array_equal(got, x)


def test_int8_kernels_refuse_malformed_constants():
    from npuc.codegen.kernel import get_kernel

    k = Kernel("qconv", "conv2d",
               (DramTensor.dense("x", (1, 4, 5, 5), I8, order=NHWC), DramTensor.dense("w", (8, 4, 3, 3), I8, order=WEIGHT_ORDER),
                DramTensor.dense("b", (4,), I32), DramTensor.dense("r", (8, 2), I32)),
               DramTensor.dense("y", (1, 8, 3, 3), I8, order=NHWC), Conv2dAttrs(), (), I8, quant=QuantAttrs(0, 0))
    assert "bias" in get_kernel("conv2d").supports(k, TARGETS[1])
    no_quant = Kernel("lut", "qbinary", k.inputs[:1] * 2 + (k.inputs[3],), k.inputs[0], QBinaryAttrs("add"), (), I8)
    assert "QuantAttrs" in get_kernel("qbinary").supports(no_quant, TARGETS[1])
