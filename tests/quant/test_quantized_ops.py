"""The quantized graph ops: types, verification, text round trip, and reference semantics
against independent integer computations (NumPy int64 sums, Python-integer requantization) and
against the float route PyTorch's quantized reference takes (dequantize, float op, quantize)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from npuc.errors import VerifyError
from npuc.interp import interpret
from npuc.ir import GraphBuilder
from npuc.ir.ops.quantized import (
    OutAttrs,
    QAvgPool2dAttrs,
    QBinaryAttrs,
    QClampAttrs,
    QConv2dAttrs,
    QLinearAttrs,
    QLutAttrs,
    QMeanAttrs,
    QuantizeAttrs,
    quant_type,
)
from npuc.ir.text import graphs_equal, parse_graph, print_graph
from npuc.ir.types import DType, QuantParams, TensorType
from npuc.quant import arith

GEN = torch.Generator().manual_seed(0)


def codes(*shape: int) -> torch.Tensor:
    return torch.randint(-128, 128, shape, generator=GEN, dtype=torch.int8)


def requant_ref(acc: int, real: float, zp: int, lo: int = -128, hi: int = 127) -> int:
    """Python-integer REQUANT of ``acc`` by the multiplier of ``real`` (half-up high multiply,
    half-away right shift)."""
    m, shift = arith.quantize_multiplier(real)
    left, right = max(-shift, 0), max(shift, 0)
    x = min(max(acc * 2**left, -(2**31)), 2**31 - 1)
    high = math.floor(Fraction(x * m, 2**31) + Fraction(1, 2))
    q = Fraction(high, 2**right)
    y = math.floor(abs(q) + Fraction(1, 2)) * (1 if q >= 0 else -1)
    return min(max(y + zp, lo), hi)


def run1(op: str, operands: list, attrs, consts: frozenset[int] = frozenset()) -> tuple:
    """Build ``op`` over ``operands`` ((tensor, quant) pairs) and interpret it."""
    b = GraphBuilder("t")
    values, inputs = [], []
    for i, (t, q) in enumerate(operands):
        if i in consts:
            values.append(b.constant(f"c{i}", t, quant=q))
        else:
            values.append(b.input(TensorType(tuple(t.shape), DType.from_torch(t.dtype), q), f"x{i}"))
            inputs.append(t)
    out = b.add1(op, values, attrs)
    g = b.build([out])
    return g, interpret(g, *inputs)[0]


def per_tensor(scale: float, zp: int) -> QuantParams:
    return QuantParams((scale,), (zp,), None)


W_SCALES = (0.011, 0.023, 0.007, 0.018)


def conv_case():
    x = codes(1, 3, 6, 5)
    w = torch.randint(-127, 128, (4, 3, 3, 3), generator=GEN, dtype=torch.int8)
    b = torch.randint(-3000, 3000, (4,), generator=GEN, dtype=torch.int32)
    xq, wq = per_tensor(0.05, -9), QuantParams(W_SCALES, (0,) * 4, 0)
    bq = QuantParams(tuple(0.05 * s for s in W_SCALES), (0,) * 4, 0)
    return x, w, b, xq, wq, bq


def test_qconv2d_matches_integer_sums_exactly():
    x, w, b, xq, wq, bq = conv_case()
    attrs = QConv2dAttrs(stride=(2, 1), padding=(1, 1), out_scale=0.09, out_zero_point=4, qmin=4, qmax=120)
    g, got = run1("qconv2d", [(x, xq), (w, wq), (b, bq)], attrs, frozenset({1, 2}))
    assert g.outputs[0].type == quant_type((1, 4, 3, 5), 0.09, 4)
    xc = np.pad(x.numpy().astype(np.int64) + 9, ((0, 0), (0, 0), (1, 1), (1, 1)))  # x - zx, zero borders
    wn = w.numpy().astype(np.int64)
    for o in range(4):
        for i in range(3):
            for j in range(5):
                acc = int((xc[0, :, 2 * i: 2 * i + 3, j: j + 3] * wn[o]).sum()) + int(b[o])
                assert int(got[0, o, i, j]) == requant_ref(acc, 0.05 * W_SCALES[o] / 0.09, 4, 4, 120)


def test_qconv2d_is_within_one_step_of_the_float_route():
    x, w, b, xq, wq, bq = conv_case()
    attrs = QConv2dAttrs(padding=(1, 1), groups=1, out_scale=0.07, out_zero_point=-3)
    _, got = run1("qconv2d", [(x, xq), (w, wq), (b, bq)], attrs, frozenset({1, 2}))
    xf = arith.dequantize_tensor(x, 0.05, -9)
    wf = arith.dequantize_per_channel(w, W_SCALES, (0,) * 4, 0)
    bf = arith.dequantize_per_channel(b, bq.scale, (0,) * 4, 0)
    want = arith.quantize_tensor(F.conv2d(xf, wf, bf, padding=1), 0.07, -3)
    assert (got.int() - want.int()).abs().max() <= 1


def test_qlinear_and_qmatmul_match_integer_sums():
    x = codes(2, 5, 7)
    w = torch.randint(-127, 128, (3, 7), generator=GEN, dtype=torch.int8)
    wq = QuantParams((0.02, 0.03, 0.04), (0, 0, 0), 0)
    _, got = run1("qlinear", [(x, per_tensor(0.1, 5)), (w, wq)], QLinearAttrs(0.2, -1), frozenset({1}))
    acc = (x.numpy().astype(np.int64) - 5) @ w.numpy().astype(np.int64).T
    want = [[[requant_ref(int(acc[n, i, o]), 0.1 * wq.scale[o] / 0.2, -1) for o in range(3)] for i in range(5)] for n in range(2)]
    assert got.tolist() == want

    a, bm = codes(2, 3, 4), codes(4, 6)
    _, got = run1("qmatmul", [(a, per_tensor(0.1, 3)), (bm, per_tensor(0.05, -2))], OutAttrs(0.3, 7))
    acc = (a.numpy().astype(np.int64) - 3) @ (bm.numpy().astype(np.int64) + 2)
    assert got.numpy().astype(np.int64).tolist() == np.vectorize(lambda v: requant_ref(int(v), 0.1 * 0.05 / 0.3, 7))(acc).tolist()


def test_qadd_qmul_broadcast_and_follow_arith():
    a, b = codes(2, 3, 4), codes(3, 1)
    qa, qb = per_tensor(0.1, 2), per_tensor(0.3, -5)
    _, got = run1("qadd", [(a, qa), (b, qb)], QBinaryAttrs(0.25, 1, -20, 127))
    plan = arith.plan_qadd((0.1, 2), (0.3, -5), (0.25, 1), -20, 127)
    assert got.tolist() == arith.run_qadd(a.numpy(), b.numpy(), plan).tolist()
    exact = (0.1 * (a.double() - 2) + 0.3 * (b.double() + 5)) / 0.25 + 1
    assert (got.double() - exact.clamp(-20, 127)).abs().max() <= 1
    _, got = run1("qmul", [(a, qa), (b, qb)], QBinaryAttrs(0.5, 0))
    exact = 0.1 * (a.double() - 2) * 0.3 * (b.double() + 5) / 0.5
    assert (got.double() - exact.clamp(-128, 127)).abs().max() <= 1


@pytest.mark.parametrize("ceil,include,override", [(False, True, None), (True, False, None), (True, True, None), (False, True, 5)])
def test_qavg_pool2d_within_one_step_of_float_route(ceil, include, override):
    x = codes(1, 2, 7, 6)
    attrs = QAvgPool2dAttrs((3, 2), (2, 2), (1, 1), ceil, include, override, 0.04, -6)
    _, got = run1("qavg_pool2d", [(x, per_tensor(0.05, 10))], attrs)
    xf = arith.dequantize_tensor(x, 0.05, 10).double()
    want = F.avg_pool2d(xf, (3, 2), (2, 2), (1, 1), ceil, include, override) / 0.04 - 6
    assert got.shape == want.shape
    assert (got.double() - want.round().clamp(-128, 127)).abs().max() <= 1


def test_qmean_and_qlut_and_qclamp():
    x = codes(2, 3, 4, 4)
    _, got = run1("qmean", [(x, per_tensor(0.05, 10))], QMeanAttrs((2, 3), True, 0.01, 3))
    want = (0.05 * (x.double() - 10)).mean((2, 3), keepdim=True) / 0.01 + 3
    assert got.shape == (2, 3, 1, 1) and (got.double() - want.round().clamp(-128, 127)).abs().max() <= 1
    table = tuple(min(127, max(-128, 100 - j)) for j in range(256))
    _, got = run1("qlut", [(x, per_tensor(0.05, 10))], QLutAttrs(table, 0.1, 0))
    assert got.tolist() == (100 - (x.int() + 128)).clamp(-128, 127).tolist()
    g, got = run1("qclamp", [(x, per_tensor(0.05, 10))], QClampAttrs(10, 40))
    assert got.tolist() == x.clamp(10, 40).tolist() and g.outputs[0].type.quant == per_tensor(0.05, 10)


def test_quantize_dequantize_and_max_pool_keep_codes():
    x = torch.randn(1, 2, 4, 4, generator=GEN)
    b = GraphBuilder("t")
    xi = b.input(TensorType.of(x), "x")
    q = b.add1("quantize", (xi,), QuantizeAttrs(0.02, -3))
    from npuc.ir.ops.pooling import MaxPool2dAttrs

    m = b.add1("max_pool2d", (q,), MaxPool2dAttrs())
    d = b.add1("dequantize", (m,))
    g = b.build([q, d])
    assert m.type.quant == per_tensor(0.02, -3)
    qt, dt = interpret(g, x)
    assert torch.equal(qt, arith.quantize_tensor(x, 0.02, -3))
    assert torch.equal(dt, (F.max_pool2d(qt.float(), 2) + 3) * 0.02)


def test_text_round_trip_of_every_quantized_op():
    x, w, b, xq, wq, bq = conv_case()
    bld = GraphBuilder("q")
    xin = bld.input(TensorType((1, 3, 6, 5), DType.f32), "x")
    q = bld.add1("quantize", (xin,), QuantizeAttrs(0.05, -9))
    wv, bv = bld.constant("w", w, quant=wq), bld.constant("b", b, quant=bq)
    c = bld.add1("qconv2d", (q, wv, bv), QConv2dAttrs(padding=(1, 1), out_scale=0.1, out_zero_point=-128, qmin=-128))
    s = bld.add1("qadd", (c, c), QBinaryAttrs(0.2, -128))
    m = bld.add1("qmul", (s, c), QBinaryAttrs(0.3, 0))
    lut = bld.add1("qlut", (m,), QLutAttrs(arith.lut_table(torch.tanh, (0.3, 0), (1 / 128, 0)), 1 / 128, 0))
    p = bld.add1("qavg_pool2d", (lut,), QAvgPool2dAttrs(out_scale=1 / 128, out_zero_point=0))
    from npuc.ir.ops.shape import PermuteAttrs

    mm = bld.add1("qmatmul", (p, bld.add1("permute", (p,), PermuteAttrs((0, 1, 3, 2)))), OutAttrs(0.01, 0))
    mean = bld.add1("qmean", (mm,), QMeanAttrs((2, 3), False, 0.01, 0))
    lw = bld.constant("lw", torch.ones(2, 4, dtype=torch.int8), quant=QuantParams((0.5, 0.25), (0, 0), 0))
    lin = bld.add1("qlinear", (mean, lw), QLinearAttrs(0.02, 1, -5, 100))
    cl = bld.add1("qclamp", (lin,), QClampAttrs(0, 50))
    out = bld.add1("dequantize", (cl,))
    g = bld.build([out])
    text = print_graph(g)
    assert "quant=([0.05], [-9], None)" in text and "quant=([0.011, 0.023, 0.007, 0.018], [0, 0, 0, 0], 0)" in text
    g2 = parse_graph(text, g.constants)
    assert graphs_equal(g, g2)
    xv = torch.randn(1, 3, 6, 5, generator=GEN)
    assert torch.equal(interpret(g, xv)[0], interpret(g2, xv)[0])


def _build_conv(x_quant, w_quant, b=None, b_quant=None, attrs=None):
    bld = GraphBuilder("bad")
    xi = bld.input(TensorType((1, 3, 6, 5), DType.i8, x_quant), "x")
    wv = bld.constant("w", torch.zeros(4, 3, 3, 3, dtype=torch.int8), quant=w_quant)
    ops = [xi, wv] + ([bld.constant("b", b, quant=b_quant)] if b is not None else [])
    bld.add1("qconv2d", ops, attrs or QConv2dAttrs())


def test_verifier_refuses_malformed_quantized_ops():
    _, _, b, xq, wq, bq = conv_case()
    _build_conv(xq, wq, b, bq)  # well formed
    cases = [
        (None, wq, "per-tensor quantization parameters"),
        (xq, None, "carries no quantization parameters"),
        (xq, QuantParams(W_SCALES, (0, 1, 0, 0), 0), "symmetrically"),
        (xq, QuantParams(W_SCALES[:3], (0,) * 3, 0), "per output channel"),
    ]
    for x_quant, w_quant, words in cases:
        with pytest.raises(VerifyError, match=words):
            _build_conv(x_quant, w_quant)
    with pytest.raises(VerifyError, match="input scale x weight scale"):
        _build_conv(xq, wq, b, QuantParams(W_SCALES, (0,) * 4, 0))
    with pytest.raises(VerifyError, match="clamp range"):
        _build_conv(xq, wq, attrs=QConv2dAttrs(qmin=10, qmax=5))
    with pytest.raises(VerifyError, match="scale"):
        _build_conv(xq, wq, attrs=QConv2dAttrs(out_scale=0.0))
    with pytest.raises(VerifyError, match="256 int8 values"):
        run1("qlut", [(codes(3), per_tensor(0.1, 0))], QLutAttrs((0,) * 255, 0.1, 0))
    with pytest.raises(VerifyError, match="i8"):
        run1("qadd", [(torch.zeros(3), None), (codes(3), per_tensor(0.1, 0))], QBinaryAttrs())
    with pytest.raises(VerifyError, match="OpDef.evaluate"):
        from npuc.ir.opdef import get_op

        get_op("qadd").reference([codes(3), codes(3)], QBinaryAttrs())
