"""The vector and data-movement kernels' cost model against the simulator's timing tier.

Every kernel kind that is not an array kernel is planned on several shapes and every preset
(fp16 on the presets with fp16 arithmetic, int8 on all), emitted from its tile program and
simulated (timing only).  Each case must be within 10% of the simulated cycles and the median
error within 3% (``-s`` prints the table).  The plan's footprint and the emitted program are read
off the same tile program, which the last tests check.
"""

from __future__ import annotations

import functools
import statistics

import numpy as np
import pytest

from npuc.codegen.emitter import Emitter
from npuc.codegen.harness import place
from npuc.codegen.kernel import get_kernel, kernel_kinds
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.ir.ops.resample import GridSampleAttrs
from npuc.isa.enums import DType
from npuc.kir.kernel import (
    GatherRowsAttrs,
    CompareAttrs,
    EpilogueOp,
    FillAttrs,
    Kernel,
    LayerNormAttrs,
    PoolAttrs,
    QBinaryAttrs,
    QuantAttrs,
    ReduceAttrs,
    SoftmaxAttrs,
)
from npuc.kir.tensor import NHWC, DramTensor
from npuc.kir.tile_program import TileProgram
from npuc.runtime.sim import simulate
from npuc.targets import load_target

F16, I8, I32 = DType.fp16, DType.int8, DType.int32
TARGETS = [load_target(n) for n in ("npu-small", "npu-mid", "npu-large")]
ARRAY_KINDS = {"conv2d", "gemm"}


def _t(name, shape, dt, order=None):
    return DramTensor.dense(name, shape, dt, order=order)


def _nhwc(name, shape, dt):
    return _t(name, shape, dt, NHWC if len(shape) == 4 else None)


def eltwise(shape, dt=F16):
    x, y = _nhwc("x", shape, dt), _nhwc("y", shape, dt)
    if dt is I8:
        return Kernel("clamp", "eltwise", (x,), y, None, (EpilogueOp("clamp", params=(("min", -3), ("max", 57))),), I8)
    bias = DramTensor("b", shape, dt, 0, tuple(2 if d == 1 else 0 for d in range(len(shape))))
    epi = (EpilogueOp("add", operand=bias), EpilogueOp("silu"), EpilogueOp("add", operand=_nhwc("r", shape, dt)))
    return Kernel("elt", "eltwise", (x,), y, None, epi, dt)


def softmax(shape, dim):
    return Kernel("sm", "softmax", (_t("x", shape, F16),), _t("y", shape, F16), SoftmaxAttrs(dim), (), F16)


def layernorm(shape, affine=True):
    L = shape[-1]
    ins = (_t("x", shape, F16),) + ((_t("w", (L,), F16), _t("b", (L,), F16)) if affine else ())
    return Kernel("ln", "layernorm", ins, _t("y", shape, F16), LayerNormAttrs(1, 1e-5), (), F16)


def reduce(shape, dims, op="sum", dt=F16):
    out = tuple(1 if d in dims else n for d, n in enumerate(shape))
    x = _nhwc("x", shape, dt)
    ins = (x,) if dt is F16 else (x, _t("r", (1, 2), I32))
    q = QuantAttrs(-9, 3) if dt is I8 else None
    return Kernel("red", "reduce", ins, _nhwc("y", out, dt), ReduceAttrs(op, dims, True), (), dt, quant=q)


def pool(n, c, hw, kind, k, s, pad, dt=F16, global_=False):
    oh = 1 if global_ else (hw + 2 * pad - k) // s + 1
    attrs = PoolAttrs(kind, (k, k), (s, s), (pad, pad))
    ins = (_nhwc("x", (n, c, hw, hw), dt),)
    q = None
    if dt is I8 and kind == "avg":
        rows = 1 if global_ else k * k
        ins += (_t("r", (rows, 2), I32),)
        q = QuantAttrs(7, -5)
    return Kernel("pool", "pool2d", ins, _nhwc("y", (n, c, oh, oh), dt), attrs, (), dt, quant=q)


def depthwise(c, hw, k, s, dt=F16, act=True):
    oh = (hw + 2 * (k // 2) - k) // s + 1
    x = _nhwc("x", (1, c, hw, hw), dt)
    w = _t("w", (c, 1, k, k), dt, (2, 3, 1, 0))
    ins = (x, w)
    epi: tuple = ()
    q = None
    if dt is I8:
        ins += (_t("b", (c,), I32), _t("r", (5 * c,), I8))
        q = QuantAttrs(7, -3, -128 if not act else -3, 127)
    else:
        bias = DramTensor("bias", (1, c, oh, oh), dt, 0, (0, 2, 0, 0))
        epi = (EpilogueOp("add", operand=bias),) + ((EpilogueOp("clamp", params=(("min", 0.0), ("max", 6.0))),) if act else ())
    return Kernel("dw", "depthwise_conv2d", ins, _nhwc("y", (1, c, oh, oh), dt),
                  Conv2dAttrs((s, s), (k // 2, k // 2), (1, 1), c), epi, dt, quant=q)


def qbinary(op, shape, bshape):
    from npuc.lower.layout import broadcast_to

    order = NHWC if len(shape) == 4 else None
    b = broadcast_to(_t("b", bshape, I8, order if bshape == shape else None), shape)
    factors = (3000, 5000) if op == "add" else ()
    return Kernel("qbin", "qbinary", (_t("a", shape, I8, order), b, _t("r", (1, 2), I32)), _t("y", shape, I8, order),
                  QBinaryAttrs(op), (), I8, quant=QuantAttrs(0, 1, -128, 127, (3, -7), factors))


def lut(shape):
    return Kernel("lut", "lut", (_nhwc("x", shape, I8), _t("t", (256,), I8)), _nhwc("y", shape, I8), None, (), I8)


def copy_permute(shape, perm, dt=F16):
    src = _t("x", shape, dt).permute(perm)
    return Kernel("perm", "copy", (src,), _t("y", src.shape, dt), dtype=dt)


def copy_layout(shape, dt=F16):
    return Kernel("nchw2nhwc", "copy", (_t("x", shape, dt),), _t("y", shape, dt, NHWC), dtype=dt)


def fill(shape, dt=F16):
    return Kernel("fill", "fill", (), _nhwc("y", shape, dt), attrs=FillAttrs(0.0), dtype=dt)


def _seen_as(name, bshape, shape, dt=F16):
    """A tensor of ``bshape`` broadcast to ``shape`` (channels-last where it is a full 4-D tensor)."""
    from npuc.lower.layout import broadcast_to

    order = NHWC if len(shape) == 4 and bshape == shape else None
    return broadcast_to(_t(name, bshape, dt, order), shape)


def compare(op, shape, bshape):
    a, b = _nhwc("a", shape, F16), _seen_as("b", bshape, shape)
    return Kernel("cmp", "compare", (a, b), _nhwc("y", shape, F16), CompareAttrs(op), (), F16)


def select(shape, mshape, bshape):
    m, a, b = _seen_as("m", mshape, shape), _nhwc("a", shape, F16), _seen_as("b", bshape, shape)
    return Kernel("sel", "select", (m, a, b), _nhwc("y", shape, F16), None, (), F16)


def grid_sample(n, c, hw, out_hw, mode, padding, align=False):
    x = _nhwc("x", (n, c, hw, hw), F16)
    grid = _t("g", (n, out_hw, out_hw, 2), F16)
    return Kernel("gs", "grid_sample", (x, grid), _nhwc("y", (n, c, out_hw, out_hw), F16),
                  GridSampleAttrs(mode, padding, align), (), F16)


def gather(table, idx_shape, words, dt=F16, base=False, size=None, scale=1, wrap=False):
    rows = int(np.prod(idx_shape))
    ins = (_t("t", table, dt), _t("i", idx_shape + (words,), I32)) + ((_t("b", (rows,), I32),) if base else ())
    return Kernel("ga", "gather", ins, _t("y", (rows, table[1]), dt), GatherRowsAttrs(size or table[0], scale, wrap), (), dt)


FP16_CASES = {
    "eltwise-56x56x32": eltwise((1, 32, 56, 56)),
    "eltwise-14x14x96": eltwise((1, 96, 14, 14)),
    "eltwise-rows-1000": eltwise((4, 1000)),
    "softmax-last-197x197": softmax((2, 197, 197), 2),
    "softmax-channels": softmax((8, 1000), 1),
    "layernorm-197x768": layernorm((197, 768)),
    "layernorm-plain-64x256": layernorm((64, 256), affine=False),
    "reduce-sum-hw": reduce((1, 64, 28, 28), (2, 3)),
    "reduce-max-rows": reduce((32, 512), (1,), "max"),
    "maxpool-3x3s2-112": pool(1, 64, 112, "max", 3, 2, 1),
    "avgpool-2x2-28": pool(1, 32, 28, "avg", 2, 2, 0),
    "global-avg-7x7x1280": pool(1, 1280, 7, "avg", 7, 1, 0, global_=True),
    "depthwise-3x3-112x32": depthwise(32, 112, 3, 1),
    "depthwise-3x3s2-56x144": depthwise(144, 56, 3, 2),
    "depthwise-3x3-14x576": depthwise(576, 14, 3, 1, act=False),
    "depthwise-5x5-28x40": depthwise(40, 28, 5, 1),
    "copy-permute-12x197x64": copy_permute((12, 197, 64), (1, 0, 2)),
    "copy-nchw-to-nhwc": copy_layout((1, 24, 56, 56)),
    "fill-1x32x58x58": fill((1, 32, 58, 58)),
    "compare-gt-28x28x64": compare("gt", (1, 64, 28, 28), (1, 64, 28, 28)),
    "compare-ge-threshold-8x1000": compare("ge", (8, 1000), (1,)),
    "compare-eq-channel-14x14x96": compare("eq", (1, 96, 14, 14), (1, 96, 1, 1)),
    "select-28x28x64": select((1, 64, 28, 28), (1, 64, 28, 28), (1, 64, 28, 28)),
    "select-masked-fill-12x197x197": select((12, 197, 197), (1, 197, 197), (1,)),
    "select-row-mask-64x512": select((64, 512), (64, 1), (64, 512)),
    "grid-sample-bilinear-zeros-14x14x32": grid_sample(1, 32, 14, 14, "bilinear", "zeros"),
    "grid-sample-bilinear-border-align-2x16x16x8": grid_sample(2, 8, 16, 16, "bilinear", "border", True),
    "grid-sample-nearest-zeros-28x28x16": grid_sample(1, 16, 28, 20, "nearest", "zeros"),
    "gather-embedding-100x64-int64": gather((100, 64), (3, 16), 2),
    "gather-rows-3x11x2-int32": gather((33, 2), (3, 13), 1, base=True, size=11),
    "gather-elements-210-wrap": gather((210, 1), (2, 3, 5, 3), 2, base=True, size=7, wrap=True),
    "gather-rows-4000x16-int64": gather((4000, 16), (1000,), 2),
    "gather-dram-70001x8-int64": gather((70001, 8), (100,), 2),
    "gather-dram-70001x64-int32": gather((70001, 64), (2, 9), 1),
}

INT8_CASES = {
    "eltwise-clamp-28x28x64": eltwise((1, 64, 28, 28), I8),
    "qmean-hw-7x7x512": reduce((1, 512, 7, 7), (2, 3), "mean", I8),
    "maxpool-3x3s2-56-int8": pool(1, 64, 56, "max", 3, 2, 1, I8),
    "avgpool-3x3-14-int8": pool(1, 32, 14, "avg", 3, 1, 1, I8),
    "global-avg-int8": pool(1, 512, 7, "avg", 7, 1, 0, I8, global_=True),
    "depthwise-3x3-56x96-int8": depthwise(96, 56, 3, 1, I8),
    "depthwise-3x3s2-28x192-int8": depthwise(192, 28, 3, 2, I8),
    "qadd-28x28x64": qbinary("add", (1, 64, 28, 28), (1, 64, 28, 28)),
    "qadd-channel-broadcast": qbinary("add", (1, 96, 14, 14), (1, 96, 1, 1)),
    "qmul-channel-broadcast": qbinary("mul", (1, 96, 14, 14), (1, 96, 1, 1)),
    "lut-28x28x32": lut((1, 32, 28, 28)),
    "copy-permute-int8": copy_permute((8, 49, 96), (2, 0, 1), I8),
    "fill-int8": fill((1, 64, 30, 30), I8),
    "gather-embedding-int8": gather((500, 96), (128,), 2, I8),
    "gather-dram-int8": gather((70001, 16), (64,), 2, I8),
}

CASES = [(name, k, t) for t in TARGETS if t.has_fp16 for name, k in FP16_CASES.items()]
CASES += [(name, k, t) for t in TARGETS for name, k in INT8_CASES.items()]
# depthwise layers have two schedules (vector unit, array): the one not chosen is costed too
CASES += [(f"{name}-vector-unit", k, t) for name, k, t in CASES if k.kind == "depthwise_conv2d"]
IDS = [f"{t.name}-{name}" for name, _, t in CASES]


def simulate_plan(kernel: Kernel, target, vector_unit: bool = False):
    impl = get_kernel(kernel.kind)
    reason = impl.supports(kernel, target)
    assert reason is None, reason
    placed, size = place(kernel)
    plan = impl.alternatives(placed, target)[0] if vector_unit else impl.plan(placed, target)
    em = Emitter(target)
    impl.emit(placed, plan, em)
    prog, _ = em.finish()
    return plan, prog, simulate(prog, target, np.zeros(size, np.uint8), functional=False).total_cycles


@functools.lru_cache(maxsize=None)
def measured(i: int) -> tuple[int, int]:
    """(simulated, estimated) cycles of case i."""
    name, kernel, target = CASES[i]
    plan, _, sim = simulate_plan(kernel, target, name.endswith("-vector-unit"))
    return sim, plan.est_cycles


def _error(i: int) -> float:
    sim, est = measured(i)
    return (est - sim) / sim


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_case_within_ten_percent(i):
    sim, est = measured(i)
    print(f"{IDS[i]:48s} simulated {sim:9d} model {est:9d} error {_error(i):+.1%}")
    assert abs(_error(i)) <= 0.10


def test_median_error_within_three_percent():
    errors = [abs(_error(i)) for i in range(len(CASES))]
    assert statistics.median(errors) <= 0.03, f"median error {statistics.median(errors):.1%}"


# fused_chain and pooled_chain are not vector or move kernels: their members are (and array
# kernels); their own tile programs (every step of their stripes) are checked against the
# simulator in test_chain_cost.py and test_pooled_chain.py.
COMPOSITE_KINDS = {"fused_chain", "pooled_chain"}


def test_every_vector_and_move_kind_is_covered():
    covered = {k.kind for _, k, _ in CASES}
    assert set(kernel_kinds()) - ARRAY_KINDS - COMPOSITE_KINDS <= covered


@pytest.mark.parametrize("vector_unit", [False, True], ids=["array", "vector-unit"])
def test_plan_and_emission_read_one_tile_program(vector_unit):
    kernel = depthwise(32, 28, 3, 1)
    plan, prog, _ = simulate_plan(kernel, TARGETS[1], vector_unit)
    tp = plan.details
    assert isinstance(tp, TileProgram)
    assert plan.spad_bytes == max(b.end for b in tp.buffers if b.mem == "spad")
    assert plan.acc_bytes == max((b.end for b in tp.buffers if b.mem == "acc"), default=0)
    real = [i for i in prog.instrs if i.op not in ("END", "NOP")]
    assert [i.op for i in real] == [s.op for s in tp.steps]


def test_tile_program_text_is_a_loop_nest():
    plan, _, _ = simulate_plan(eltwise((1, 32, 56, 56)), TARGETS[1])
    text = plan.details.text()
    assert "buffer 'tile 0'" in text
    assert "iterations 0.." in text and "DMA_LOAD" in text and "VUN" in text and "DMA_STORE" in text
    assert "local_addr=tile " in text and "dram_addr=x" in text


def test_codegen_printout_shows_the_tile_programs():
    import npuc
    from npuc.codegen.driver import code_text
    from tests.report.analysislib import tiny_model

    model, inputs = tiny_model()  # unfused: a fused chain prints its own plan, not its members'
    text = code_text(npuc.compile(model, inputs, target="npu-mid", name="tinynet", fuse_layers=False).compiled.codes)
    assert "tile program 'block.dw" in text or "(depthwise_conv2d)" in text
    assert "buffer 'input 0' spad[" in text
    assert "before the loop:" in text and "iteration" in text
