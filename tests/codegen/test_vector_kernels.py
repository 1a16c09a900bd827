"""Vector-unit kernels on the simulator against PyTorch in fp32.

Inputs are fp16; the reference computes in fp32 on the same fp16 values.  Tolerances (relative
L2 of the whole output): 2e-3 for elementwise chains, pooling averages, softmax, layernorm and
reductions (one or a few fp16 roundings), 3e-3 for depthwise convolutions (2 kh kw - 1 fp16
roundings per output); max pooling, max/min reductions are exact.  Some cases also check that
the simulated cycles stay within a stated factor of the kernel's lower bound (DRAM bytes over
bandwidth against lane-operations over lanes).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as Fn

from npuc.codegen.harness import epilogue_reference, run_kernel
from npuc.codegen.kernel import get_kernel
from npuc.kir.kernel import EpilogueOp, Kernel, LayerNormAttrs, PoolAttrs, ReduceAttrs, SoftmaxAttrs
from npuc.kir.tensor import NHWC, DramTensor
from npuc.errors import CompileError
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.isa.enums import DType
from npuc.targets import load_target

MID = load_target("npu-mid")
SMALL = load_target("npu-small")
LARGE = load_target("npu-large")
F16 = DType.fp16


def _rand(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float16)


def _t(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float32))


def _rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b), 1e-12))


def _lower_bound(target, dram_bytes, lane_ops):
    return max(dram_bytes / target.dma.bytes_per_cycle, lane_ops / target.vector.lanes)


# ----------------------------------------------------------------------------------- eltwise


@pytest.mark.parametrize("shape,order", [((1, 3, 5, 7), NHWC), ((2, 17, 9, 13), NHWC), ((3, 1000), None), ((7,), None)])
def test_eltwise_bias_silu_residual(shape, order):
    n = len(shape)
    bias_strides = tuple(2 if d == (1 if n == 4 else n - 1) else 0 for d in range(n))
    bias = DramTensor("b", shape, F16, 0, bias_strides)
    res = DramTensor.dense("r", shape, F16, order=order)
    x = DramTensor.dense("x", shape, F16, order=order)
    out = DramTensor.dense("y", shape, F16, order=order)
    cdim = 1 if n == 4 else n - 1
    bshape = tuple(shape[d] if d == cdim else 1 for d in range(n))
    vals = {"x": _rand(shape), "b": np.broadcast_to(_rand(bshape, 1), shape), "r": _rand(shape, 2)}
    epi = (EpilogueOp("add", operand=bias), EpilogueOp("silu"), EpilogueOp("add", operand=res))
    run = run_kernel(Kernel("e", "eltwise", (x,), out, epilogue=epi), MID, vals)
    ref = epilogue_reference(_t(vals["x"]), epi, vals).numpy()
    assert _rel(run.output, ref) < 2e-3


def test_eltwise_with_a_broadcast_input_and_permuted_operand():
    shape = (2, 6, 5, 4)
    x = DramTensor("x", shape, F16, 0, (0, 2, 0, 0))  # the input itself is a per-channel vector
    other = DramTensor.dense("o", (2, 5, 4, 6), F16).permute((0, 3, 1, 2))  # NHWC data viewed as NCHW
    out = DramTensor.dense("y", shape, F16)  # NCHW output: the operand is read transposed
    xv = np.broadcast_to(_rand((1, 6, 1, 1)), shape)
    ov = _rand(shape, 3)
    epi = (EpilogueOp("mul", operand=other), EpilogueOp("sub", scalar=0.25, operand_first=True))
    run = run_kernel(Kernel("e", "eltwise", (x,), out, epilogue=epi), MID, {"x": xv, "o": ov})
    ref = epilogue_reference(_t(xv), epi, {"o": ov}).numpy()
    assert _rel(run.output, ref) < 2e-3


def test_eltwise_larger_than_the_scratchpad_runs_at_dma_speed():
    shape = (1, 64, 96, 96)  # 1.1 MiB per tensor, npu-mid has 512 KiB of scratchpad
    x = DramTensor.dense("x", shape, F16, order=NHWC)
    out = DramTensor.dense("y", shape, F16, order=NHWC)
    xv = _rand(shape)
    run = run_kernel(Kernel("e", "eltwise", (x,), out, epilogue=(EpilogueOp("relu"),)), MID, {"x": xv})
    np.testing.assert_array_equal(run.output, np.maximum(xv, 0))
    assert run.result.total_cycles < 1.1 * _lower_bound(MID, 2 * x.nbytes, x.numel)


def test_eltwise_refuses_a_target_without_fp16():
    x = DramTensor.dense("x", (4, 4), F16)
    k = Kernel("e", "eltwise", (x,), DramTensor.dense("y", (4, 4), F16), epilogue=(EpilogueOp("relu"),))
    assert "no fp16 vector arithmetic" in get_kernel("eltwise").supports(k, SMALL)


# ----------------------------------------------------------------------------------- depthwise


def _depthwise(n, c, h, w, k, s, p, d=1, target=MID):
    xv, wv, bv = _rand((n, c, h, w)), _rand((c, 1, k, k), 1, 1.0 / k), _rand((c,), 2)
    ref = torch.relu(Fn.conv2d(_t(xv), _t(wv), _t(bv), s, p, d, c)).numpy()
    oh, ow = ref.shape[2:]
    impl = get_kernel("depthwise_conv2d")
    x = DramTensor.dense("x", (n, c, h, w), F16, order=NHWC)
    out = DramTensor.dense("y", (n, c, oh, ow), F16, order=NHWC)
    bias = DramTensor("b", (n, c, oh, ow), F16, 0, (0, 2, 0, 0))
    probe = Kernel("dw", "depthwise_conv2d", (x, DramTensor.dense("w", (c, 1, k, k), F16)), out)
    wt = DramTensor.dense("w", (c, 1, k, k), F16, order=impl.constant_layout(probe, 1))
    kern = Kernel("dw", "depthwise_conv2d", (x, wt), out, attrs=Conv2dAttrs((s, s), (p, p), (d, d), c),
                  epilogue=(EpilogueOp("add", operand=bias), EpilogueOp("relu")))
    run = run_kernel(kern, target, {"x": xv, "w": wv, "b": np.broadcast_to(bv[None, :, None, None], out.shape)})
    return run, ref


@pytest.mark.parametrize("n,c,h,w,k,s,p", [
    (1, 16, 14, 14, 3, 1, 1), (2, 13, 9, 11, 3, 2, 1), (1, 24, 15, 17, 5, 1, 2), (1, 20, 16, 13, 5, 2, 2),
    (1, 8, 7, 7, 3, 1, 0), (1, 40, 6, 6, 3, 2, 0),
])
def test_depthwise(n, c, h, w, k, s, p):
    run, ref = _depthwise(n, c, h, w, k, s, p)
    assert _rel(run.output, ref) < 3e-3


def test_depthwise_dilated_and_on_the_large_target():
    run, ref = _depthwise(1, 12, 12, 12, 3, 1, 2, d=2, target=LARGE)
    assert _rel(run.output, ref) < 3e-3


def test_depthwise_mobilenet_layer_is_near_its_bound():
    run, ref = _depthwise(1, 32, 56, 56, 3, 1, 1)
    assert _rel(run.output, ref) < 3e-3
    lane = ref.size * (2 * 9 - 1 + 2)  # 9 multiplies, 8 adds, bias add, relu
    assert run.result.total_cycles < 1.2 * _lower_bound(MID, 2 * ref.size * 2, lane)


# ----------------------------------------------------------------------------------- pool2d


def _pool(shape, kind, k, s, p, ceil=False, cip=True, div=None):
    xv = _rand(shape)
    if kind == "max":
        ref = Fn.max_pool2d(_t(xv), k, s, p, ceil_mode=ceil).numpy()
    else:
        ref = Fn.avg_pool2d(_t(xv), k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div).numpy()
    x = DramTensor.dense("x", shape, F16, order=NHWC)
    out = DramTensor.dense("y", ref.shape, F16, order=NHWC)
    attrs = PoolAttrs(kind, (k, k), (s, s), (p, p), (1, 1), ceil, cip, div)
    return run_kernel(Kernel("p", "pool2d", (x,), out, attrs=attrs), MID, {"x": xv}), ref


@pytest.mark.parametrize("shape,k,s,p,ceil", [
    ((1, 16, 17, 17), 3, 2, 1, False), ((2, 5, 9, 11), 3, 2, 1, True), ((1, 7, 10, 10), 2, 2, 0, False),
    ((1, 3, 8, 9), 3, 3, 0, True),
])
def test_max_pool(shape, k, s, p, ceil):
    run, ref = _pool(shape, "max", k, s, p, ceil)
    np.testing.assert_array_equal(run.output.astype(np.float32), ref)


@pytest.mark.parametrize("shape,k,s,p,ceil,cip,div", [
    ((2, 5, 9, 11), 3, 2, 1, True, True, None), ((2, 5, 9, 11), 3, 2, 1, True, False, None),
    ((1, 6, 10, 10), 2, 2, 0, False, True, None), ((1, 7, 13, 13), 5, 3, 2, False, False, None),
    ((1, 7, 13, 13), 3, 1, 1, False, True, 5),
])
def test_avg_pool(shape, k, s, p, ceil, cip, div):
    run, ref = _pool(shape, "avg", k, s, p, ceil, cip, div)
    assert _rel(run.output, ref) < 2e-3


@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape", [(2, 300, 7, 7), (1, 64, 20, 20)])  # 20 x 20: beyond VPOOL's 15 x 15
def test_global_pool(kind, shape):
    run, ref = _pool(shape, kind, shape[2], 1, 0)
    assert _rel(run.output, ref) < 2e-3


def test_resnet_stem_max_pool_is_near_its_bound():
    run, ref = _pool((1, 64, 112, 112), "max", 3, 2, 1)
    np.testing.assert_array_equal(run.output.astype(np.float32), ref)
    bound = _lower_bound(MID, 2 * (64 * 112 * 112 + ref.size), ref.size * 9)
    assert run.result.total_cycles < 1.25 * bound


def test_pool_refuses_nchw_and_dilation():
    impl = get_kernel("pool2d")
    x = DramTensor.dense("x", (1, 4, 8, 8), F16)
    k = Kernel("p", "pool2d", (x,), DramTensor.dense("y", (1, 4, 4, 4), F16), attrs=PoolAttrs("max", (2, 2), (2, 2)))
    assert "channels-last" in impl.supports(k, MID)
    x = DramTensor.dense("x", (1, 4, 8, 8), F16, order=NHWC)
    k = Kernel("p", "pool2d", (x,), DramTensor.dense("y", (1, 4, 3, 3), F16, order=NHWC),
               attrs=PoolAttrs("max", (2, 2), (2, 2), dilation=(2, 2)))
    assert "dilation" in impl.supports(k, MID)


# ----------------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("shape,dim,order", [
    ((4, 6, 50, 50), 3, None), ((3, 17, 33), 1, None), ((2, 10, 5, 7), 1, NHWC), ((2, 10, 5, 7), 2, NHWC), ((1000,), 0, None),
])
def test_softmax(shape, dim, order):
    xv = _rand(shape, scale=3.0)
    x = DramTensor.dense("x", shape, F16, order=order)
    out = DramTensor.dense("y", shape, F16, order=order)
    run = run_kernel(Kernel("s", "softmax", (x,), out, attrs=SoftmaxAttrs(dim)), MID, {"x": xv})
    assert _rel(run.output, torch.softmax(_t(xv), dim).numpy()) < 2e-3


def test_softmax_is_safe_for_large_logits():
    xv = np.array([[60000.0, 59990.0, -60000.0, 0.0]], np.float16)
    x, out = DramTensor.dense("x", (1, 4), F16), DramTensor.dense("y", (1, 4), F16)
    run = run_kernel(Kernel("s", "softmax", (x,), out, attrs=SoftmaxAttrs(1)), MID, {"x": xv})
    assert np.all(np.isfinite(run.output))
    assert _rel(run.output, torch.softmax(_t(xv), 1).numpy()) < 2e-3


def test_softmax_row_too_long_for_the_scratchpad_is_a_compile_error():
    x = DramTensor.dense("x", (2, 30000), F16)
    k = Kernel("s", "softmax", (x,), DramTensor.dense("y", (2, 30000), F16), attrs=SoftmaxAttrs(1))
    with pytest.raises(CompileError, match="softmax row"):
        get_kernel("softmax").plan(k, SMALL)


# ----------------------------------------------------------------------------------- layernorm


@pytest.mark.parametrize("shape,nr,affine,offset", [
    ((2, 50, 768), 1, True, 0.0), ((3, 5, 7, 9), 2, True, 0.0), ((4, 33), 1, False, 100.0), ((6, 40), 1, True, 0.0),
])
def test_layernorm(shape, nr, affine, offset):
    xv = (_rand(shape, scale=3.0).astype(np.float32) + offset).astype(np.float16)
    ns = shape[len(shape) - nr:]
    wv, bv = _rand(ns, 1), _rand(ns, 2)
    ref = Fn.layer_norm(_t(xv), ns, _t(wv) if affine else None, _t(bv) if affine else None, 1e-5).numpy()
    x, out = DramTensor.dense("x", shape, F16), DramTensor.dense("y", shape, F16)
    ins = (x, DramTensor.dense("w", ns, F16), DramTensor.dense("b", ns, F16)) if affine else (x,)
    run = run_kernel(Kernel("ln", "layernorm", ins, out, attrs=LayerNormAttrs(nr, 1e-5)), MID, {"x": xv, "w": wv, "b": bv})
    assert _rel(run.output, ref) < 2e-3


def test_layernorm_of_large_activations_does_not_overflow():
    xv = _rand((3, 64), scale=400.0)  # squares exceed the fp16 range
    x, out = DramTensor.dense("x", (3, 64), F16), DramTensor.dense("y", (3, 64), F16)
    run = run_kernel(Kernel("ln", "layernorm", (x,), out, attrs=LayerNormAttrs(1, 1e-5)), MID, {"x": xv})
    assert _rel(run.output, Fn.layer_norm(_t(xv), (64,)).numpy()) < 2e-3


# ----------------------------------------------------------------------------------- reduce


@pytest.mark.parametrize("shape,op,dims,keep,order", [
    ((2, 64, 14, 14), "mean", (2, 3), True, NHWC), ((2, 64, 14, 14), "mean", (2, 3), False, NHWC),
    ((3, 5, 7, 9), "sum", (1, 3), False, None), ((3, 5, 7, 9), "max", (0, 2), True, None),
    ((3, 5, 7, 9), "min", (3,), False, None), ((1, 32, 48, 48), "sum", (0, 1, 2, 3), False, None),
    ((6, 70000), "mean", (1,), True, None), ((4, 10, 3), "sum", (1,), False, None),
])
def test_reduce(shape, op, dims, keep, order):
    xv = _rand(shape)
    if op in ("sum", "mean"):
        ref = getattr(torch, op)(_t(xv), dim=dims, keepdim=keep).numpy()
    else:
        ref = getattr(torch, "amax" if op == "max" else "amin")(_t(xv), dim=dims, keepdim=keep).numpy()
    x = DramTensor.dense("x", shape, F16, order=order)
    out = DramTensor.dense("y", ref.shape, F16)
    run = run_kernel(Kernel("r", "reduce", (x,), out, attrs=ReduceAttrs(op, dims, keep)), MID, {"x": xv})
    if op in ("max", "min"):
        np.testing.assert_array_equal(run.output.astype(np.float32), ref)
    else:
        assert _rel(run.output, ref) < 2e-3


def test_reduce_refuses_a_wrong_output_shape():
    x = DramTensor.dense("x", (3, 4), F16)
    k = Kernel("r", "reduce", (x,), DramTensor.dense("y", (4,), F16), attrs=ReduceAttrs("sum", (1,), False))
    assert "should be [3]" in get_kernel("reduce").supports(k, MID)
