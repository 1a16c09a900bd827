"""int8 end to end: a trained digits CNN keeps its accuracy, hand-built quantized graphs are
bit-exact on every preset, float islands go to the CPU with the quantizer's reason, and the
CLI compiles with calibration data.

The digits CNN (scikit-learn's 8x8 ``load_digits``) is trained in float here (a few seconds,
seeded), quantized with calibration batches of training images, compiled to int8 and run on the
simulator over the whole held-out set in one batch: its accuracy stays within 1 percentage point
of the float model's, and its outputs equal npuc's integer reference interpreter bit for bit.
"""

from __future__ import annotations

import functools
import textwrap

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import npuc
from npuc.artifact import compile_graph
from npuc.interp import interpret
from npuc.ir.graph import GraphBuilder
from npuc.ir.opdef import NoAttrs
from npuc.ir.ops.norm import SoftmaxAttrs
from npuc.ir.ops.pooling import MaxPool2dAttrs
from npuc.ir.ops.quantized import (
    QAvgPool2dAttrs,
    QBinaryAttrs,
    QClampAttrs,
    QConv2dAttrs,
    QLinearAttrs,
    QLutAttrs,
    QMeanAttrs,
    QuantizeAttrs,
)
from npuc.ir.ops.shape import ReshapeAttrs
from npuc.ir.types import DType, QuantParams, TensorType
from npuc.quant import arith

PRESETS = ("npu-small", "npu-mid", "npu-large")

# ------------------------------------------------------------------------------ digits CNN


class DigitsNet(torch.nn.Module):
    """A small CNN for 1x8x8 digit images: two convolutions, average pooling, a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(32 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(self.pool(x), 1))


@functools.lru_cache(maxsize=1)
def digits():
    """(trained model, train images, test images, test labels), deterministic."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0 - 0.5
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    n_test = 400
    x_train, y_train, x_test, y_test = x[n_test:], y[n_test:], x[:n_test], y[:n_test]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: one thread is fastest, and the same on any machine
    try:
        torch.manual_seed(0)
        model = DigitsNet()
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(25):
            for i in range(0, len(x_train), 64):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x_train[i:i + 64]), y_train[i:i + 64])
                loss.backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval(), x_train, x_test, y_test


def test_digits_cnn_int8_accuracy_within_one_point_of_float():
    model, x_train, x_test, y_test = digits()
    with torch.no_grad():
        float_acc = float((model(x_test).argmax(1) == y_test).float().mean())
    assert float_acc > 0.9  # the float model learned something worth keeping
    calibration = [(x_train[i:i + len(x_test)],) for i in range(0, 3 * len(x_test), len(x_test))]
    art = npuc.compile(model, (x_test,), target="npu-mid", quantize="int8", calibration=calibration)
    assert art.cpu_segments == 0, art.report.explain()
    out = art.run(x_test)[0]
    int8_acc = float((out.argmax(1) == y_test).float().mean())
    print(f"\ndigits CNN: float accuracy {100 * float_acc:.2f}%, int8 on the simulator {100 * int8_acc:.2f}%")
    assert abs(int8_acc - float_acc) <= 0.01
    # and bit for bit what the integer reference computes
    from npuc.frontend.quantized import import_quantized
    from npuc.pipeline import run_graph_passes

    g = run_graph_passes(import_quantized(model, (x_test,), calibration, target=art.target))
    assert torch.equal(out, interpret(g, x_test)[0])


# ------------------------------------------------------------------- hand-built quantized graphs


def _weight(b: GraphBuilder, name: str, shape, rng, per_channel: bool = True):
    w = torch.from_numpy(rng.integers(-127, 128, shape).astype(np.int8))
    n = shape[0] if per_channel else 1
    scales = tuple(float(s) for s in rng.uniform(0.002, 0.02, n))
    return b.constant(name, w, quant=QuantParams(scales, (0,) * n, 0 if per_channel else None)), scales


def every_op_graph(seed: int = 0):
    """Every quantized op the NPU runs, chained: conv (bias, relu), depthwise stride 2, max pool,
    residual qadd, LUT, qmul, average pool with padding, mean, linear, clamp."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("qnet")
    x = b.input(TensorType((1, 3, 16, 16), DType.f32), "x")
    q = b.add1("quantize", [x], QuantizeAttrs(0.03, -4))
    w1, s1 = _weight(b, "w1", (8, 3, 3, 3), rng)
    bias = torch.from_numpy(rng.integers(-2000, 2000, (8,)).astype(np.int32))
    b1 = b.constant("b1", bias, quant=QuantParams(tuple(0.03 * s for s in s1), (0,) * 8, 0))
    c1 = b.add1("qconv2d", [q, w1, b1], QConv2dAttrs((1, 1), (1, 1), (1, 1), 1, 0.05, -128, -128, 127))
    wd, _ = _weight(b, "wd", (8, 1, 3, 3), rng)
    c2 = b.add1("qconv2d", [c1, wd], QConv2dAttrs((2, 2), (1, 1), (1, 1), 8, 0.04, 3))
    p = b.add1("max_pool2d", [c1], MaxPool2dAttrs((2, 2), (2, 2)))
    a = b.add1("qadd", [c2, p], QBinaryAttrs(0.06, 2))
    lut = arith.lut_table(torch.sigmoid, (0.06, 2), (1 / 256, -128))
    s = b.add1("qlut", [a], QLutAttrs(lut, 1 / 256, -128))
    m = b.add1("qmul", [s, a], QBinaryAttrs(0.05, 0))
    av = b.add1("qavg_pool2d", [m], QAvgPool2dAttrs((3, 3), (2, 2), (1, 1), False, False, None, 0.04, 1))
    mn = b.add1("qmean", [av], QMeanAttrs((2, 3), True, 0.03, -1))
    r = b.add1("reshape", [mn], ReshapeAttrs((1, 8)))
    wl, _ = _weight(b, "wl", (10, 8), rng)
    fc = b.add1("qlinear", [r, wl], QLinearAttrs(0.1, 0))
    cl = b.add1("qclamp", [fc], QClampAttrs(-10, 100))
    return b.build([b.add1("dequantize", [cl], NoAttrs())])


@pytest.mark.parametrize("preset", PRESETS)
def test_every_quantized_op_bit_exact_on_the_npu(preset):
    g = every_op_graph()
    art = compile_graph(g, preset, quantize="int8")
    assert art.cpu_segments == 0, art.report.explain()
    assert art.report.fused_ops >= 1  # the qclamp joined the qlinear's epilogue
    io_in, io_out = art.npub.io_signature.inputs[0].type, art.npub.io_signature.outputs[0].type
    assert (io_in.dtype, io_out.dtype) == (DType.i8, DType.i8)
    assert io_in.quant.scale == (0.03,) and io_in.quant.zero_point == (-4,)
    for seed in range(3):
        x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed)) * 2
        assert torch.equal(art.run(x)[0], interpret(g, x)[0])


def test_float_island_runs_on_the_cpu_with_the_quantizers_reason():
    rng = np.random.default_rng(1)
    b = GraphBuilder("island")
    x = b.input(TensorType((2, 16), DType.f32), "x")
    q = b.add1("quantize", [x], QuantizeAttrs(0.05, 3))
    w, _ = _weight(b, "w", (12, 16), rng)
    h = b.add1("qlinear", [q, w], QLinearAttrs(0.2, -7))
    f = b.add1("dequantize", [h], NoAttrs())
    sm = b.add1("softmax", [f], SoftmaxAttrs(1))
    q2 = b.add1("quantize", [sm], QuantizeAttrs(1 / 256, -128))
    w2, _ = _weight(b, "w2", (5, 12), rng)
    y = b.add1("qlinear", [q2, w2], QLinearAttrs(0.05, 0))
    g = b.build([b.add1("dequantize", [y], NoAttrs())])
    art = compile_graph(g, "npu-small", quantize="int8")
    reasons = {o.op: o.reason for o in art.report.cpu_ops}
    assert set(reasons) == {"dequantize", "softmax", "quantize"}
    assert all("kept in float by the quantizer" in r for r in reasons.values())
    assert [s[1] for s in art.report.segments] == ["npu", "cpu", "npu"]
    x_in = torch.randn(2, 16, generator=torch.Generator().manual_seed(3))
    assert torch.equal(art.run(x_in)[0], interpret(g, x_in)[0])


def test_asymmetric_qmatmul_falls_back_with_a_reason():
    b = GraphBuilder("mm")
    x = b.input(TensorType((4, 8), DType.f32), "x")
    y = b.input(TensorType((8, 3), DType.f32), "y")
    qa = b.add1("quantize", [x], QuantizeAttrs(0.05, 3))
    qb = b.add1("quantize", [y], QuantizeAttrs(0.05, 0))
    from npuc.ir.ops.quantized import OutAttrs

    mm = b.add1("qmatmul", [qa, qb], OutAttrs(0.1, 0))
    g = b.build([b.add1("dequantize", [mm], NoAttrs())])
    art = compile_graph(g, "npu-mid", quantize="int8")
    (op,) = [o for o in art.report.cpu_ops if o.op == "qmatmul"]
    assert "zero points 3 and 0" in op.reason
    xs = (torch.randn(4, 8), torch.randn(8, 3))
    assert torch.equal(art.run(*xs)[0], interpret(g, *xs)[0])


def test_int8_profile_counts_int8_macs():
    art = compile_graph(every_op_graph(), "npu-mid", quantize="int8")
    prof = art.profile(torch.zeros(1, 3, 16, 16))
    conv = [layer for layer in prof.layers if layer.kind == "conv2d"]
    assert conv and conv[0].macs == 8 * 16 * 16 * 3 * 9
    runs = [r.sim for r in prof.runs if r.sim is not None]
    assert sum(s.actions.macs_int8 for s in runs) > 0 and sum(s.actions.macs_fp16 for s in runs) == 0


# ------------------------------------------------------------------------------------ CLI


def test_cli_compile_quantized_with_calibration_data(tmp_path):
    from npuc.cli import main

    src = tmp_path / "tiny.py"
    src.write_text(textwrap.dedent("""
        import torch

        def build():
            torch.manual_seed(0)
            m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
            return m.eval(), (torch.randn(1, 3, 12, 12),)
    """))
    cal = tmp_path / "cal.npz"
    np.savez(cal, np.random.default_rng(0).standard_normal((3, 1, 3, 12, 12)).astype(np.float32))
    out = tmp_path / "tiny.npub"
    runner = CliRunner()
    res = runner.invoke(main, ["compile", f"{src}:build", "--target", "npu-small", "--quantize", "int8",
                               "--calibration-data", str(cal), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "0 CPU segments" in res.output.replace("1 NPU and 0 CPU", "0 CPU")
    art = npuc.load(out)
    assert art.npub.io_signature.inputs[0].type.dtype == DType.i8
    bad = runner.invoke(main, ["compile", f"{src}:build", "--calibration", "2", "-o", str(out)])
    assert bad.exit_code != 0 and "--quantize" in bad.output
