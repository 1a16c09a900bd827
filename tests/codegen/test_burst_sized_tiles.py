"""Tilings sized for the bursts of the memory the tensors live in (issue 9).

On a 32 KiB scratchpad a row of a wide channels-last tensor does not fit a tile: cutting its
channels makes every pixel's run shorter than a burst (16 int8 channels of a 32-byte SRAM burst
move 2x their bytes, of a 128-byte DRAM burst 8x), cutting its columns only reads the windows'
overlap twice.  The pool kernel costs both and keeps the cheaper; the result stays exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npuc.codegen.harness import run_kernel
from npuc.codegen.kernels.vector_pool import record_divisors
from npuc.ir.opdef import get_op
from npuc.ir.ops.quantized import QAvgPool2dAttrs, quant_type
from npuc.isa.enums import DType
from npuc.kir.kernel import Kernel, PoolAttrs, QuantAttrs
from npuc.kir.tensor import NHWC, DramTensor
from npuc.quant import arith
from npuc.targets import load_target

I8, I32 = DType.int8, DType.int32
U55 = load_target("u55-like-256")
U65 = load_target("u65-like-256")


def _codes(shape, seed=0):
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


def _max_pool(shape, k=3, s=2, pad=1, ceil=False):
    x = _codes(shape)
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x).float(), k, s, pad, 1, ceil).to(torch.int8).numpy()
    kernel = Kernel("max", "pool2d", (DramTensor.dense("x", x.shape, I8, order=NHWC),),
                    DramTensor.dense("y", ref.shape, I8, order=NHWC), PoolAttrs("max", (k, k), (s, s), (pad, pad), (1, 1), ceil),
                    (), I8)
    return kernel, {"x": x}, ref


@pytest.mark.parametrize("target", [U55, U65], ids=["u55", "u65"])
@pytest.mark.parametrize("shape,ceil", [((1, 64, 60, 60), False), ((1, 64, 61, 63), True)])
def test_int8_max_pool_cuts_columns_not_channels_and_is_exact(target, shape, ceil):
    kernel, values, ref = _max_pool(shape, ceil=ceil)
    run = run_kernel(kernel, target, values)
    assert "columns" in run.plan.summary and "x 64 channels" in run.plan.summary, run.plan.summary
    np.testing.assert_array_equal(run.output, ref)
    # whole 64-byte runs: the input read once plus the windows' overlap, not a burst per 16 channels
    assert run.result.dram_bytes_read < 1.25 * values["x"].nbytes


def test_resnet_stem_max_pool_reads_about_its_input_on_u55_like():
    kernel, values, ref = _max_pool((1, 64, 112, 112))
    run = run_kernel(kernel, U55, values)
    np.testing.assert_array_equal(run.output, ref)
    assert run.result.dram_bytes_read < 1.25 * values["x"].nbytes


@pytest.mark.parametrize("include,ceil", [(False, True), (True, False)])
def test_int8_avg_pool_in_column_tiles_is_exact(include, ceil):
    x_q, out_q = (0.05, 7), (0.03, -5)
    x = _codes((1, 64, 59, 61), seed=3)
    k, s, pad = 3, 2, 1
    ref = get_op("qavg_pool2d").evaluate([torch.from_numpy(x)], [quant_type(x.shape, *x_q)],
                                         QAvgPool2dAttrs((k, k), (s, s), (pad, pad), ceil, include, None, *out_q))[0].numpy()
    attrs = PoolAttrs("avg", (k, k), (s, s), (pad, pad), (1, 1), ceil, include, None)
    divs = record_divisors(attrs, x.shape[2:], ref.shape[2:])
    recs = np.array([list(arith.average_multiplier(x_q[0], d, out_q[0])) for d in divs], dtype=np.int32).reshape(-1, 2)
    kernel = Kernel("avg", "pool2d", (DramTensor.dense("x", x.shape, I8, order=NHWC), DramTensor.dense("r", recs.shape, I32)),
                    DramTensor.dense("y", ref.shape, I8, order=NHWC), attrs, (), I8, quant=QuantAttrs(x_q[1], out_q[1]))
    run = run_kernel(kernel, U55, {"x": x, "r": recs})
    assert "columns" in run.plan.summary, run.plan.summary
    np.testing.assert_array_equal(run.output, ref.reshape(run.output.shape))


@pytest.mark.parametrize("target,c,hw,stride", [(U55, 32, 40, 1), (U65, 32, 40, 1), (U65, 96, 41, 2)],
                         ids=["u55-32-s1", "u65-32-s1", "u65-96-s2"])
def test_int8_depthwise_in_column_tiles_is_exact_and_reads_less(target, c, hw, stride):
    """A tile of every column holds one output row beside its three input rows here; column
    tiles of more rows read each input row about once."""
    from tests.codegen.test_int8_kernels import conv_case

    run = conv_case(target, 1, c, hw, hw, c, 3, stride=stride, pad=1, groups=c, seed=2)  # bit-exact
    assert "columns" in run.plan.summary, run.plan.summary
    assert run.result.dram_bytes_read < 1.5 * c * hw * hw
