"""copy and fill kernels on the simulator: values bit-exact, DRAM traffic near the compulsory bytes.

Copies move bits, so outputs must equal the source view exactly.  Tensors are fp16 (copies also run
on npu-small, which has no floating point: they are integer moves)."""

import numpy as np
import pytest

from npuc.codegen.harness import run_kernel
from npuc.codegen.kernel import get_kernel
from npuc.kir.kernel import FillAttrs, Kernel
from npuc.kir.tensor import NHWC, DramTensor
from npuc.isa.enums import DType
from npuc.targets import load_target

MID = load_target("npu-mid")
F16 = DType.fp16


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def _copy(src: DramTensor, out: DramTensor, value: np.ndarray, target=MID):
    k = Kernel("copy0", "copy", (src,), out, dtype=src.dtype)
    return run_kernel(k, target, {src.name: value})


def _lower_bound(run) -> float:
    k = run.kernel
    return (k.inputs[0].nbytes + k.output.nbytes) / MID.dma.bytes_per_cycle


@pytest.mark.parametrize("shape", [(2, 64, 56, 56), (1, 3, 33, 17), (1, 5, 7, 9), (3, 130, 4, 6)])
@pytest.mark.parametrize("to_nhwc", [True, False])
def test_layout_transposes(shape, to_nhwc):
    s_order, o_order = ((0, 1, 2, 3), NHWC) if to_nhwc else (NHWC, (0, 1, 2, 3))
    v = _rand(shape)
    run = _copy(DramTensor.dense("x", shape, F16, order=s_order), DramTensor.dense("y", shape, F16, order=o_order), v)
    np.testing.assert_array_equal(run.output, v)
    if shape == (2, 64, 56, 56):
        assert run.result.total_cycles < 1.15 * _lower_bound(run)


def test_permute_of_a_3d_tensor():
    v = _rand((6, 35, 20))
    src = DramTensor.dense("x", (6, 35, 20), F16).permute((2, 0, 1))
    run = _copy(src, DramTensor.dense("y", (20, 6, 35), F16), np.ascontiguousarray(v.transpose(2, 0, 1)))
    np.testing.assert_array_equal(run.output, v.transpose(2, 0, 1))


def test_slice_with_step_and_concat_part():
    full = _rand((1, 48, 10, 12))
    base = DramTensor.dense("x", (1, 48, 10, 12), F16, order=NHWC)
    src = base.slice(1, 8, 40).slice(3, 1, 12, 2)  # channels 8..40, every other column
    part = full[:, 8:40, :, 1:12:2]
    cat = DramTensor.dense("y", (1, 80, 10, 6), F16, order=NHWC).slice(1, 16, 48)  # a concat slot
    k = Kernel("copy0", "copy", (src,), cat)
    run = run_kernel(k, MID, {"x": part})  # the harness writes the values through the view
    np.testing.assert_array_equal(run.output, part)
    stores = [i for i in run.program if i.op == "DMA_STORE"]
    assert sum(i.args.n0 * i.args.n1 * i.args.n2 for i in stores) == part.size  # nothing else written


def test_expand_broadcasts_from_one_load():
    v = _rand((1, 24, 1, 1))
    src = DramTensor("x", (2, 24, 9, 7), F16, 0, (0, 2, 0, 0))  # a [24] vector expanded over N, H, W
    run = _copy(src, DramTensor.dense("y", (2, 24, 9, 7), F16, order=NHWC), np.broadcast_to(v, (2, 24, 9, 7)))
    np.testing.assert_array_equal(run.output, np.broadcast_to(v, (2, 24, 9, 7)))
    loads = [i for i in run.program if i.op == "DMA_LOAD"]
    assert sum(i.args.n0 * i.args.n1 * i.args.n2 for i in loads) == 24  # each source element read once


@pytest.mark.parametrize("target,size", [("npu-mid", (1, 16, 7, 5)), ("npu-large", (1, 64, 28, 28))])
def test_nearest_upsample_x2(target, size):
    n, c, h, w = size
    v = _rand((n, c, h, w))
    # the upsampled output [N, C, 2H, 2W] seen as [N, C, H, 2, W, 2]; the source expanded over the 2s
    src_nhwc = DramTensor.dense("x", (n, c, h, w), F16, order=NHWC)
    sN, sC, sH, sW = src_nhwc.strides
    src = DramTensor("x", (n, c, h, 2, w, 2), F16, 0, (sN, sC, sH, 0, sW, 0))
    out_full = DramTensor.dense("y", (n, c, 2 * h, 2 * w), F16, order=NHWC)
    oN, oC, oH, oW = out_full.strides
    out = DramTensor("y", (n, c, h, 2, w, 2), F16, 0, (oN, oC, 2 * oH, oH, 2 * oW, oW))
    k = Kernel("up", "copy", (src,), out)
    vals = np.broadcast_to(v[:, :, :, None, :, None], (n, c, h, 2, w, 2))
    run = run_kernel(k, load_target(target), {"x": vals})
    expect = v.repeat(2, axis=2).repeat(2, axis=3)
    got = out_full.at(run.kernel.output.addr).to_numpy(np.frombuffer(run.result.dram, np.uint8))
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(run.output.reshape(n, c, 2 * h, 2 * w), expect)
    loads = [i for i in run.program if i.op == "DMA_LOAD"]
    assert sum(i.args.n0 * i.args.n1 * i.args.n2 for i in loads) == v.size


def test_copy_larger_than_the_scratchpad():
    shape = (1, 96, 64, 64)  # 768 KiB of fp16, npu-mid has 512 KiB
    v = _rand(shape)
    run = _copy(DramTensor.dense("x", shape, F16), DramTensor.dense("y", shape, F16, order=NHWC), v)
    np.testing.assert_array_equal(run.output, v)
    assert run.result.total_cycles < 1.1 * _lower_bound(run)


def test_dense_copy_is_dma_only_and_at_bandwidth():
    shape = (4, 32, 40, 40)
    v = _rand(shape)
    run = _copy(DramTensor.dense("x", shape, F16), DramTensor.dense("y", shape, F16), v)
    np.testing.assert_array_equal(run.output, v)
    assert not [i for i in run.program if i.op == "VUN"]
    assert run.result.total_cycles < 1.1 * _lower_bound(run)


def test_copy_runs_on_a_target_without_fp16():
    small = load_target("npu-small")
    v = _rand((1, 8, 6, 5))
    run = _copy(DramTensor.dense("x", v.shape, F16), DramTensor.dense("y", v.shape, F16, order=NHWC), v, small)
    np.testing.assert_array_equal(run.output, v)


def test_copy_refuses_different_shapes():
    k = Kernel("c", "copy", (DramTensor.dense("x", (2, 3), F16),), DramTensor.dense("y", (3, 2), F16))
    assert "equal logical shapes" in get_kernel("copy").supports(k, MID)


@pytest.mark.parametrize("value", [0.0, -65504.0, 1.5, float("-inf")])
def test_fill_a_strided_view(value):
    full = DramTensor.dense("y", (2, 10, 13, 9), F16, order=NHWC)
    border = full.slice(2, 0, 2)  # two top rows of every image: a padding border
    k = Kernel("f", "fill", (), border, attrs=FillAttrs(value))
    run = run_kernel(k, MID, {})
    assert np.all(run.output == np.float16(value))
    stores = [i for i in run.program if i.op == "DMA_STORE"]
    assert sum(i.args.n0 * i.args.n1 * i.args.n2 for i in stores) == border.numel  # nothing else written


def test_fill_larger_than_the_buffer_uses_one_vfill():
    out = DramTensor.dense("y", (1, 64, 128, 128), F16, order=NHWC)
    run = run_kernel(Kernel("f", "fill", (), out, attrs=FillAttrs(0.25)), MID, {})
    assert np.all(run.output == np.float16(0.25))
    assert [i.op for i in run.program].count("VFILL") == 1
    assert run.result.total_cycles < 1.1 * out.nbytes / MID.dma.bytes_per_cycle + 200
