"""conv2d and gemm on the systolic array, simulated and compared with PyTorch.

References are computed in fp32 from the fp16-rounded inputs (what the NPU multiplies exactly,
accumulating in fp32); the NPU's result is rounded to fp16 once per epilogue step, so the
relative L2 error stays near fp16's 2^-11 and a tolerance of 2e-3 catches any wrong element.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from npuc.codegen.emitter import Emitter
from npuc.codegen.harness import epilogue_reference, place, run_kernel
from npuc.codegen.kernel import get_kernel
from npuc.kir.kernel import EpilogueOp, Kernel
from npuc.codegen.kernels.array_conv import WEIGHT_ORDER, conv_problem
from npuc.kir.tensor import NHWC, DramTensor
from npuc.errors import CompileError
from npuc.isa.enums import Dataflow
from npuc.ir.ops.linalg import Conv2dAttrs, conv_output_size
from npuc.isa.enums import DType
from npuc.runtime.sim import simulate
from npuc.schedule.cost import lower_bound
from npuc.targets import load_target

FP16 = DType.fp16
MID = load_target("npu-mid")
LARGE = load_target("npu-large")
# A small fp16 part: 8 KiB of scratchpad, 2 KiB of accumulator, so modest layers need many passes.
TINY = dataclasses.replace(
    MID,
    name="tiny-fp16",
    scratchpad=dataclasses.replace(MID.scratchpad, size_bytes=8192),
    accumulator=dataclasses.replace(MID.accumulator, size_bytes=2048),
)
TOL = 2e-3


def _rel_l2(got: np.ndarray, ref: np.ndarray) -> float:
    ref = np.asarray(ref, np.float32)
    return float(np.linalg.norm(got.astype(np.float32) - ref) / max(np.linalg.norm(ref), 1e-12))


def _rand(rng, shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, np.float32))


# ----------------------------------------------------------------------------- conv2d


def conv_kernel(n, c, h, w, o, kh, kw=None, stride=1, pad=0, dil=1, groups=1, epilogue=(), out=None, name="conv"):
    kw = kh if kw is None else kw
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    oh = conv_output_size(h, kh, sh, ph, dil)
    ow = conv_output_size(w, kw, sw, pw, dil)
    x = DramTensor.dense("x", (n, c, h, w), FP16, order=NHWC)
    wt = DramTensor.dense("w", (o, c // groups, kh, kw), FP16, order=WEIGHT_ORDER)
    y = out if out is not None else DramTensor.dense("y", (n, o, oh, ow), FP16, order=NHWC)
    attrs = Conv2dAttrs((sh, sw), (ph, pw), (dil, dil), groups)
    return Kernel(name, "conv2d", (x, wt), y, attrs, tuple(epilogue), FP16)


def bias_op(k_shape, name="bias") -> EpilogueOp:
    return EpilogueOp("add", operand=DramTensor(name, tuple(k_shape), FP16, 0, (0, 2, 0, 0)))


def run_conv(k: Kernel, target, seed=0, extra=None):
    rng = np.random.default_rng(seed)
    x, w = k.inputs
    fan_in = w.shape[1] * w.shape[2] * w.shape[3]
    vals = {"x": _rand(rng, x.shape), "w": _rand(rng, w.shape, 1 / np.sqrt(fan_in))}
    for e in k.epilogue:
        if e.operand is not None:
            t = e.operand
            shape = tuple(1 if s == 0 else n for n, s in zip(t.shape, t.strides))
            vals[t.name] = _rand(rng, shape)
    r = run_kernel(k, target, vals)
    a: Conv2dAttrs = k.attrs
    ref = F.conv2d(_t(vals["x"]), _t(vals["w"]), None, a.stride, a.padding, a.dilation, a.groups)
    ref = epilogue_reference(ref, k.epilogue, vals)
    return r, ref.numpy()


CONV_CASES = [
    # (n, c, h, w, o, kh, kw, stride, pad, dil, groups)
    pytest.param((1, 3, 17, 13, 10, 3, 3, 1, 1, 1, 1), id="c3-o10-17x13-3x3-pad1"),
    pytest.param((1, 3, 23, 21, 16, 7, 7, 2, 3, 1, 1), id="stem-7x7-s2-pad3"),
    pytest.param((1, 20, 9, 11, 24, 1, 1, 1, 0, 1, 1), id="1x1"),
    pytest.param((1, 24, 15, 15, 18, 1, 1, 2, 0, 1, 1), id="1x1-s2"),
    pytest.param((2, 8, 9, 9, 20, 3, 3, 2, 1, 1, 1), id="batch2-3x3-s2"),
    pytest.param((1, 4, 16, 16, 8, 3, 3, 1, 2, 2, 1), id="dilation2"),
    pytest.param((1, 6, 12, 10, 10, 3, 3, 1, 1, 1, 2), id="groups2"),
    pytest.param((1, 33, 8, 8, 40, 3, 5, (1, 2), (1, 2), 1, 1), id="3x5-mixed-stride-pad-c33"),
    pytest.param((1, 5, 6, 7, 3, 2, 2, 3, 0, 1, 1), id="2x2-s3-o3"),
]


@pytest.mark.parametrize("target", [MID, LARGE], ids=["mid", "large"])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_matches_pytorch(case, target):
    n, c, h, w, o, kh, kw, stride, pad, dil, groups = case
    k = conv_kernel(n, c, h, w, o, kh, kw, stride, pad, dil, groups)
    r, ref = run_conv(k, target)
    assert r.output.shape == ref.shape
    assert _rel_l2(r.output, ref) < TOL


def test_conv_bias_relu_and_residual():
    k0 = conv_kernel(1, 16, 10, 10, 24, 3, pad=1)
    shape = k0.output.shape
    res = DramTensor.dense("res", shape, FP16, order=NHWC)
    epi = (bias_op(shape), EpilogueOp("add", operand=res), EpilogueOp("relu"))
    k = dataclasses.replace(k0, epilogue=epi)
    r, ref = run_conv(k, MID, seed=3)
    assert _rel_l2(r.output, ref) < TOL
    assert (r.output >= 0).all() and (r.output == 0).any()


@pytest.mark.parametrize("target", [MID, LARGE], ids=["mid", "large"])
def test_conv_epilogue_variety(target):
    k0 = conv_kernel(1, 8, 7, 9, 12, 3, pad=1)
    shape = k0.output.shape
    scale = DramTensor("scale", shape, FP16, 0, (0, 2, 0, 0))
    epi = (EpilogueOp("mul", operand=scale), EpilogueOp("sub", scalar=0.25, operand_first=True),
           EpilogueOp("clamp", params=(("min", -1.0), ("max", 2.0))), EpilogueOp("silu"))
    r, ref = run_conv(dataclasses.replace(k0, epilogue=epi), target, seed=5)
    assert _rel_l2(r.output, ref) < 3 * TOL


def test_conv_output_into_a_channel_slice_of_a_concat():
    """The output is channels 8..20 of a 32-channel tensor: the neighbours stay untouched."""
    big = DramTensor.dense("y", (1, 32, 6, 6), FP16, order=NHWC)
    view = big.slice(1, 8, 20)
    k = conv_kernel(1, 5, 6, 6, 12, 3, pad=1, out=view)
    rng = np.random.default_rng(1)
    vals = {"x": _rand(rng, (1, 5, 6, 6)), "w": _rand(rng, (12, 5, 3, 3), 0.2)}
    placed, size = place(k)
    impl = get_kernel("conv2d")
    plan = impl.plan(placed, MID)
    em = Emitter(MID)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    dram = np.zeros(size, np.uint8)
    sentinel = np.full((1, 32, 6, 6), 7.0, np.float16)
    placed.output.write_numpy(dram, np.zeros((1, 12, 6, 6)))
    base = dataclasses.replace(big, addr=placed.output.addr - 8 * 2)
    base.write_numpy(dram, sentinel)
    for t in placed.inputs:
        t.write_numpy(dram, vals[t.name])
    res = simulate(prog, MID, dram)
    out = base.to_numpy(np.frombuffer(res.dram, np.uint8))
    ref = F.conv2d(_t(vals["x"]), _t(vals["w"]), None, 1, 1).numpy()
    assert _rel_l2(out[:, 8:20], ref) < TOL
    assert (out[:, :8] == 7).all() and (out[:, 20:] == 7).all()


def test_conv_larger_than_the_scratchpad_tiles_over_everything():
    """A 24x20x20 input (19 KB) with 40 output channels on an 8 KiB scratchpad / 2 KiB ACC."""
    k = conv_kernel(1, 24, 20, 20, 40, 3, pad=1, epilogue=())
    k = dataclasses.replace(k, epilogue=(bias_op(k.output.shape), EpilogueOp("relu")))
    assert k.inputs[0].nbytes > TINY.scratchpad.size_bytes
    r, ref = run_conv(k, TINY, seed=2)
    assert _rel_l2(r.output, ref) < TOL
    p = r.plan.details
    assert p.th * p.tw < 20 * 20 and p.tn < 40  # really tiled in pixels and channels
    assert r.plan.spad_bytes <= TINY.scratchpad.size_bytes and r.plan.acc_bytes <= TINY.accumulator.size_bytes


def test_conv_reduction_split_when_channels_do_not_fit():
    """256 input channels of a 3x3 window do not fit 8 KiB at once: reduction blocks accumulate."""
    k = conv_kernel(1, 256, 5, 5, 16, 3, pad=1)
    r, ref = run_conv(k, TINY, seed=4)
    assert r.plan.details.tc < 256
    assert _rel_l2(r.output, ref) < TOL


def test_conv_refusals():
    impl = get_kernel("conv2d")
    dw = conv_kernel(1, 8, 6, 6, 8, 3, pad=1, groups=8)
    assert "depthwise" in impl.supports(dw, MID)
    assert "int8" in impl.supports(conv_kernel(1, 8, 6, 6, 8, 3), load_target("npu-small"))
    k = conv_kernel(1, 8, 6, 6, 8, 3)
    nchw = dataclasses.replace(k, inputs=(DramTensor.dense("x", (1, 8, 6, 6), FP16), k.inputs[1]))
    assert "channels-last" in impl.supports(nchw, MID)
    assert impl.supports(k, MID) is None
    assert impl.constant_layout(k, 1) == WEIGHT_ORDER and impl.constant_layout(k, 0) is None


def test_conv_that_fits_no_tiling_is_a_compile_error():
    hopeless = dataclasses.replace(TINY, accumulator=dataclasses.replace(TINY.accumulator, size_bytes=32))
    k = conv_kernel(1, 8, 6, 6, 16, 3, name="layer3.conv2")
    with pytest.raises(CompileError, match=r"layer3\.conv2.*smallest needs \d+ bytes of scratchpad and \d+ bytes of accumulator.*has 8192 and 32"):
        get_kernel("conv2d").plan(k, hopeless)


# ----------------------------------------------------------------------------- gemm


def gemm_kernel(a: DramTensor, b: DramTensor, out_shape, epilogue=(), name="gemm"):
    y = DramTensor.dense("y", tuple(out_shape), FP16)
    return Kernel(name, "gemm", (a, b), y, None, tuple(epilogue), FP16)


def run_gemm(k: Kernel, target, seed=0):
    rng = np.random.default_rng(seed)
    a, b = k.inputs
    vals = {}
    for t in (a, b):
        # values in logical order of the stored base tensor: write through the view
        vals[t.name] = _rand(rng, t.shape, 1 / np.sqrt(a.shape[-1]) if t is b else 1.0)
    for e in k.epilogue:
        if e.operand is not None:
            t = e.operand
            vals[t.name] = _rand(rng, tuple(1 if s == 0 else n for n, s in zip(t.shape, t.strides)))
    r = run_kernel(k, target, vals)
    ref = epilogue_reference(torch.matmul(_t(vals[a.name]), _t(vals[b.name])), k.epilogue, vals)
    return r, ref.numpy()


def _broadcast(t: DramTensor, shape) -> DramTensor:
    """``t`` viewed with leading zero-stride dimensions up to ``shape``."""
    extra = len(shape) - t.rank
    return DramTensor(t.name, tuple(shape), t.dtype, t.addr, (0,) * extra + t.strides)


GEMM_CASES = [
    pytest.param(((5, 37), (37, 23)), id="plain-k37"),
    pytest.param(((1, 64), (64, 40)), id="m1"),
    pytest.param(((300, 20), (20, 9)), id="tall"),
    pytest.param(((2, 3, 17, 24), (2, 3, 24, 18)), id="batched"),
]


@pytest.mark.parametrize("target", [MID, LARGE], ids=["mid", "large"])
@pytest.mark.parametrize("shapes", GEMM_CASES)
def test_gemm_matches_pytorch(shapes, target):
    sa, sb = shapes
    a = DramTensor.dense("a", sa, FP16)
    b = DramTensor.dense("b", sb, FP16)
    k = gemm_kernel(a, b, sa[:-1] + sb[-1:])
    r, ref = run_gemm(k, target)
    assert _rel_l2(r.output, ref) < TOL


def test_gemm_linear_weight_transposed_with_bias_and_gelu():
    """b = w^T of a linear weight stored [N, K]: LOAD_WEIGHTS reads it transposed."""
    a = DramTensor.dense("a", (2, 19, 50), FP16)
    w = DramTensor.dense("w", (33, 50), FP16)
    b = _broadcast(w.permute((1, 0)), (2, 50, 33))
    bias = DramTensor("bias", (2, 19, 33), FP16, 0, (0, 0, 2))
    k = gemm_kernel(a, b, (2, 19, 33), (EpilogueOp("add", operand=bias), EpilogueOp("gelu", params=(("approximate", "tanh"),))))
    rng = np.random.default_rng(7)
    vals = {"a": _rand(rng, (2, 19, 50)), "w": _rand(rng, (33, 50), 0.15), "bias": _rand(rng, (1, 1, 33))}
    r = run_kernel(dataclasses.replace(k, inputs=(a, b)), MID, {"a": vals["a"], "w": np.broadcast_to(vals["w"].T, (2, 50, 33)), "bias": vals["bias"]})
    ref = F.gelu(torch.matmul(_t(vals["a"]), _t(vals["w"]).T) + _t(vals["bias"]), approximate="tanh").numpy()
    assert _rel_l2(r.output, ref) < TOL
    # the weight is shared by both batches: each of its blocks is loaded once, not once per batch
    t = r.plan.details
    w0 = r.kernel.inputs[1].addr
    loads = [i for i in r.program if i.op == "DMA_LOAD" and w0 <= i.args.dram_addr < w0 + 33 * 50 * 2]
    assert len(loads) == -(-50 // t.tc) * -(-33 // t.tn)


def test_gemm_attention_scores_q_at_k_transposed():
    q = DramTensor.dense("q", (3, 21, 16), FP16)
    kt = DramTensor.dense("k", (3, 21, 16), FP16).permute((0, 2, 1))
    k = gemm_kernel(q, kt, (3, 21, 21))
    r, ref = run_gemm(k, MID, seed=8)
    assert _rel_l2(r.output, ref) < TOL


def test_gemm_transposed_a_and_broadcast_a():
    """a is a transposed view (gathered), and broadcast over the batch by a zero stride."""
    at = DramTensor.dense("a", (12, 9), FP16).permute((1, 0))  # [9, 12], K stride = 18 bytes
    a = _broadcast(at, (2, 9, 12))
    b = DramTensor.dense("b", (2, 12, 7), FP16)
    k = gemm_kernel(a, b, (2, 9, 7), (EpilogueOp("sub", operand=DramTensor("s", (2, 9, 7), FP16, 0, (0, 2, 0)), operand_first=True),))
    rng = np.random.default_rng(9)
    av, bv, sv = _rand(rng, (12, 9)), _rand(rng, (2, 12, 7), 0.3), _rand(rng, (1, 9, 1))
    r = run_kernel(k, MID, {"a": np.broadcast_to(av.T, (2, 9, 12)), "b": bv, "s": sv})
    ref = _t(sv) - torch.matmul(_t(av.T), _t(bv))
    assert _rel_l2(r.output, ref.numpy()) < TOL


def test_gemm_larger_than_the_scratchpad():
    a = DramTensor.dense("a", (70, 96), FP16)
    b = DramTensor.dense("b", (96, 72), FP16)
    k = gemm_kernel(a, b, (70, 72))
    r, ref = run_gemm(k, TINY, seed=10)
    assert _rel_l2(r.output, ref) < TOL


def test_gemm_refusals():
    impl = get_kernel("gemm")
    a = DramTensor.dense("a", (4, 8), FP16)
    assert "do not match" in impl.supports(gemm_kernel(a, DramTensor.dense("b", (9, 3), FP16), (4, 3)), MID)
    assert "has no fp16" in impl.supports(gemm_kernel(a, DramTensor.dense("b", (8, 3), FP16), (4, 3)), load_target("npu-small"))


# ----------------------------------------------------------------------------- performance


def _simulate_with(k: Kernel, target, tiling):
    impl = get_kernel(k.kind)
    placed, size = place(k)
    plan = impl.plan(placed, target)
    plan = dataclasses.replace(plan, details=tiling(plan.details))
    em = Emitter(target)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    return simulate(prog, target, np.zeros(size, np.uint8), functional=False).total_cycles


def test_double_buffering_overlaps_loads_with_compute():
    """The same tiling with one buffer per operand instead of the pools the planner chose."""
    k = conv_kernel(1, 64, 28, 28, 64, 1, name="pw")
    k = dataclasses.replace(k, epilogue=(bias_op(k.output.shape), EpilogueOp("relu")))
    double = _simulate_with(k, MID, lambda t: dataclasses.replace(t, x_slots=2, w_slots=max(1, t.w_slots), th=7, band=0, acc_slots=1))
    single = _simulate_with(k, MID, lambda t: dataclasses.replace(t, x_slots=1, w_slots=1, th=7, band=0, acc_slots=1))
    assert double < 0.85 * single


@pytest.mark.parametrize("layer", [
    pytest.param((64, 56, 64, 3, 1, 1), id="resnet50-layer1-3x3"),
    pytest.param((128, 28, 128, 3, 1, 1), id="resnet50-layer2-3x3"),
    pytest.param((1024, 14, 256, 1, 1, 0), id="resnet50-layer3-1x1-1024"),
])
def test_resnet50_layers_near_the_lower_bound(layer):
    """Big resnet50 convolutions (bias + ReLU) on npu-mid within 1.3x of max(MACs/PEs, DRAM/BW)."""
    c, hw, o, kk, stride, pad = layer
    k = conv_kernel(1, c, hw, hw, o, kk, stride=stride, pad=pad)
    k = dataclasses.replace(k, epilogue=(bias_op(k.output.shape), EpilogueOp("relu")))
    placed, size = place(k)
    cycles = _simulate_with(k, MID, lambda t: t)
    bound = lower_bound(MID, conv_problem(placed))
    assert cycles < 1.3 * bound


# ----------------------------------------------------------------------------- output-stationary


def _run_forced(k: Kernel, target, tiling, vals):
    """Emit ``k`` with the planner's tiling changed by ``tiling`` and simulate it functionally."""
    impl = get_kernel(k.kind)
    placed, size = place(k)
    plan = impl.plan(placed, target)
    plan = dataclasses.replace(plan, details=tiling(plan.details))
    em = Emitter(target)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    dram = np.zeros(size, np.uint8)
    for t in placed.tensors():
        if t.name != placed.output.name:
            t.write_numpy(dram, vals[t.name])
    res = simulate(prog, target, dram)
    return placed.output.to_numpy(np.frombuffer(res.dram, np.uint8)), prog


@pytest.mark.parametrize("target", [MID, LARGE], ids=["mid", "large"])
def test_output_stationary_conv_1x1(target):
    """1x1 stride-2 conv forced output-stationary, the reduction cut in blocks of 16 (acc)."""
    k = conv_kernel(1, 40, 11, 11, 24, 1, stride=2)
    k = dataclasses.replace(k, epilogue=(bias_op(k.output.shape), EpilogueOp("relu")))
    rng = np.random.default_rng(11)
    vals = {"x": _rand(rng, (1, 40, 11, 11)), "w": _rand(rng, (24, 40, 1, 1), 0.15), "bias": _rand(rng, (1, 24, 1, 1))}
    out, prog = _run_forced(k, target, lambda t: dataclasses.replace(t, dataflow=Dataflow.output_stationary, tc=16, th=6, tw=6), vals)
    assert any(i.op == "MATMUL_OS" for i in prog) and not any(i.op == "MATMUL" for i in prog)
    ref = epilogue_reference(F.conv2d(_t(vals["x"]), _t(vals["w"]), None, 2), k.epilogue, vals)
    assert _rel_l2(out, ref.numpy()) < TOL


def test_output_stationary_gemm_with_partial_blocks():
    a = DramTensor.dense("a", (2, 20, 37), FP16)
    b = DramTensor.dense("b", (37, 23), FP16)
    k = gemm_kernel(a, _broadcast(b, (2, 37, 23)), (2, 20, 23))
    rng = np.random.default_rng(12)
    vals = {"a": _rand(rng, (2, 20, 37)), "b": np.broadcast_to(_rand(rng, (37, 23), 0.2), (2, 37, 23))}
    out, prog = _run_forced(k, MID, lambda t: dataclasses.replace(t, dataflow=Dataflow.output_stationary, tc=16, tn=23, tw=20), vals)
    assert sum(i.op == "MATMUL_OS" for i in prog) == 2 * 3 * 2 * 2  # batches x k-blocks x m-blocks x n-blocks
    ref = torch.matmul(_t(vals["a"]), _t(vals["b"]))
    assert _rel_l2(out, ref.numpy()) < TOL


def _simulated_cycles(placed, size, target) -> tuple[str, int]:
    impl = get_kernel("conv2d")
    plan = impl.plan(placed, target)
    em = Emitter(target)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    return plan.details.dataflow, simulate(prog, target, np.zeros(size, np.uint8), functional=False).total_cycles


def test_dataflow_follows_the_target_and_the_cost_model():
    """A small-spatial 1x1 layer may run either way: the choice is the faster one on the
    simulator (within the cost model's error); a target with one dataflow only gets that one."""
    k = conv_kernel(1, 512, 7, 7, 256, 1)
    placed, size = place(k)
    ws_only = dataclasses.replace(MID, name="ws-only", array=dataclasses.replace(MID.array, dataflows=(Dataflow.weight_stationary,)))
    os_only = dataclasses.replace(MID, name="os-only", array=dataclasses.replace(MID.array, dataflows=(Dataflow.output_stationary,)))
    chosen, cycles = _simulated_cycles(placed, size, MID)
    ws = _simulated_cycles(placed, size, ws_only)
    os_ = _simulated_cycles(placed, size, os_only)
    assert (ws[0], os_[0]) == (Dataflow.weight_stationary, Dataflow.output_stationary)
    assert cycles <= 1.03 * min(ws[1], os_[1]), (chosen, cycles, ws, os_)
    big = conv_kernel(1, 64, 56, 56, 64, 3, pad=1)
    assert get_kernel("conv2d").plan(place(big)[0], MID).details.dataflow is Dataflow.weight_stationary
