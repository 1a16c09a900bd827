"""The shared epilogue emitter: every epilogue op, broadcast operand loading, tile mapping helpers.

Each chain runs through the ``eltwise`` kernel (out = epilogue(x)) and directly through the
helpers on a hand-built program, and is compared with ``epilogue_reference`` in fp32 on the
fp16-rounded inputs.  Tolerance: relative L2 <= 2e-3 (fp16 rounding after each step; the chains
here have at most three steps) unless stated.
"""

import numpy as np
import pytest
import torch

from npuc.codegen.emitter import Emitter
from npuc.codegen.epilogue import (
    Tile,
    alloc_epilogue,
    channels_last_block,
    emit_acc_to_tile,
    emit_epilogue,
    epilogue_blocks,
    epilogue_spad_bytes,
    epilogue_supports,
    load_pieces,
    row_major_block,
    rows_block,
    store_pieces,
)
from npuc.codegen.harness import epilogue_reference, run_kernel
from npuc.codegen.kernel import SramArena
from npuc.kir.kernel import EpilogueOp, Kernel
from npuc.kir.tensor import NHWC, DramTensor
from npuc.isa.enums import DType
from npuc.runtime.sim import simulate
from npuc.targets import load_target

MID = load_target("npu-mid")
F16 = DType.fp16
SHAPE = (2, 24, 5, 7)


def _rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b), 1e-12))


def _run(epi, values, x_shape=SHAPE, order=NHWC, tol=2e-3, positive=False):
    x = DramTensor.dense("x", x_shape, F16, order=order)
    out = DramTensor.dense("y", x_shape, F16, order=order)
    rng = np.random.default_rng(1)
    xv = rng.standard_normal(x_shape).astype(np.float16)
    if positive:
        xv = (np.abs(xv) + 0.5).astype(np.float16)
    run = run_kernel(Kernel("e", "eltwise", (x,), out, epilogue=epi), MID, {"x": xv, **values})
    ref = epilogue_reference(torch.from_numpy(xv.astype(np.float32)), epi, values).numpy()
    assert _rel(run.output, ref) <= tol, (epi, _rel(run.output, ref))
    return run


UNARY = [
    EpilogueOp("relu"), EpilogueOp("sigmoid"), EpilogueOp("tanh"), EpilogueOp("silu"),
    EpilogueOp("gelu"), EpilogueOp("gelu", params=(("approximate", "tanh"),)), EpilogueOp("hardswish"),
    EpilogueOp("hardsigmoid"), EpilogueOp("exp"), EpilogueOp("neg"), EpilogueOp("abs"),
    EpilogueOp("clamp", params=(("min", -0.5), ("max", 0.75))), EpilogueOp("clamp", params=(("min", 0.0), ("max", None))),
]


@pytest.mark.parametrize("op", UNARY, ids=str)
def test_unary_ops(op):
    _run((op,), {})


@pytest.mark.parametrize("op", ["sqrt", "rsqrt", "reciprocal"])
def test_unary_ops_on_positive_inputs(op):
    _run((EpilogueOp(op),), {}, positive=True)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
@pytest.mark.parametrize("first", [False, True])
def test_binary_ops_with_a_scalar(op, first):
    _run((EpilogueOp(op, scalar=1.75, operand_first=first),), {})


def _operand(kind, rng):
    """A broadcast operand of the output's logical shape and its values."""
    n, c, h, w = SHAPE
    if kind == "full":
        t = DramTensor.dense("o", SHAPE, F16, order=NHWC)
        v = rng.standard_normal(SHAPE)
    elif kind == "channel":
        t = DramTensor("o", SHAPE, F16, 0, (0, 2, 0, 0))
        v = np.broadcast_to(rng.standard_normal((1, c, 1, 1)), SHAPE)
    elif kind == "pixel":  # one value per pixel, broadcast over channels
        t = DramTensor("o", SHAPE, F16, 0, (h * w * 2, 0, w * 2, 2))
        v = np.broadcast_to(rng.standard_normal((n, 1, h, w)), SHAPE)
    else:  # a 0-d scalar tensor
        t = DramTensor("o", SHAPE, F16, 0, (0, 0, 0, 0))
        v = np.broadcast_to(rng.standard_normal((1, 1, 1, 1)), SHAPE)
    return t, (np.sign(v) * (np.abs(v) + 0.5)).astype(np.float16)  # away from 0 for div


@pytest.mark.parametrize("kind", ["full", "channel", "pixel", "scalar"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
@pytest.mark.parametrize("first", [False, True])
def test_binary_ops_with_broadcast_operands(kind, op, first):
    t, v = _operand(kind, np.random.default_rng(2))
    positive = op == "div" and first
    run = _run((EpilogueOp(op, operand=t, operand_first=first),), {"o": v}, positive=positive, tol=3e-3)
    loads = [i for i in run.program if i.op == "DMA_LOAD" and i.args.dram_addr >= run.kernel.epilogue[0].operand.addr]
    loaded = sum(i.args.n0 * i.args.n1 * i.args.n2 for i in loads)
    expect = {"full": v.size, "channel": SHAPE[1], "pixel": v.size // SHAPE[1], "scalar": 1}[kind]
    assert loaded == expect  # a broadcast operand is read once, not once per use


def test_a_long_chain_with_operands_and_scalars():
    rng = np.random.default_rng(3)
    bias, bv = _operand("channel", rng)
    res = DramTensor.dense("r", SHAPE, F16, order=NHWC)
    rv = rng.standard_normal(SHAPE).astype(np.float16)
    epi = (EpilogueOp("add", operand=bias), EpilogueOp("relu"), EpilogueOp("add", operand=res),
           EpilogueOp("mul", scalar=0.5), EpilogueOp("clamp", params=(("min", -1.0), ("max", 1.0))))
    _run(epi, {"o": bv, "r": rv}, tol=3e-3)


def test_budget_counts_a_bias_as_one_row():
    bias = DramTensor("b", SHAPE, F16, 0, (0, 2, 0, 0))
    res = DramTensor.dense("r", SHAPE, F16, order=NHWC)
    epi = (EpilogueOp("add", operand=bias), EpilogueOp("relu"), EpilogueOp("add", operand=res))
    assert epilogue_spad_bytes(epi, 100, 24, F16, col_dim=1) == 64 + 4800
    assert epilogue_spad_bytes(epi, 100, 24, F16) == 4800 + 4800  # without the mapping: full tiles
    assert epilogue_spad_bytes((EpilogueOp("relu"),), 100, 24, F16) == 0


def test_supports_names_the_reason():
    small = load_target("npu-small")
    assert "no fp16" in epilogue_supports((EpilogueOp("relu"),), F16, small)
    assert "not an elementwise op" in epilogue_supports((EpilogueOp("conv"),), F16, MID)
    assert "exactly one" in epilogue_supports((EpilogueOp("add"),), F16, MID)
    assert epilogue_supports((EpilogueOp("relu"),), F16, MID) is None


def test_blocks_split_where_the_layout_is_not_linear():
    t = DramTensor.dense("t", (2, 8, 4, 5), F16, order=NHWC)
    whole = channels_last_block(t, 0, 40, 0, 8)
    assert len(whole) == 1 and whole[0].view.shape == (40, 8)  # pixels of both images are linear
    part = channels_last_block(t, 3, 19, 2, 4)
    assert sum(p.rows for p in part) == 19 and [p.row for p in part] == sorted(p.row for p in part)
    sliced = t.slice(3, 0, 4)  # width 4 of 5: pixel rows are not linear across image rows
    pieces = channels_last_block(sliced, 2, 9, 0, 8)
    assert sum(p.rows for p in pieces) == 9 and len(pieces) > 1
    g = DramTensor.dense("g", (3, 6, 10), F16)
    blk = row_major_block(g, 4, 10, 2, 5)
    assert sum(p.rows for p in blk) == 10 and blk[0].view.shape[-1] == 5


def test_helpers_on_a_hand_built_program_with_an_accumulator_tile():
    """What an array kernel does: fp32 results in ACC -> fp16 tile -> bias + relu -> DRAM pieces."""
    rows, cols = 35, 24  # one image of 5 x 7 pixels, 24 channels
    out = DramTensor.dense("y", (1, cols, 5, 7), F16, 0, order=NHWC)
    bias = DramTensor("b", (1, cols, 5, 7), F16, out.span + 64, (0, 2, 0, 0))
    acc_src = DramTensor.dense("a", (rows, cols), DType.fp32, bias.addr + 128)
    rng = np.random.default_rng(4)
    av = rng.standard_normal((rows, cols)).astype(np.float32)
    bv = rng.standard_normal(cols).astype(np.float16)
    dram = np.zeros(acc_src.addr + acc_src.nbytes, np.uint8)
    acc_src.write_numpy(dram, av)
    DramTensor.dense("b", (cols,), F16, bias.addr).write_numpy(dram, bv)
    em = Emitter(MID)
    spad = SramArena("scratchpad", MID.scratchpad.size_bytes)
    epi = (EpilogueOp("add", operand=bias), EpilogueOp("relu"))
    acc_tile = Tile(0, rows, cols, DType.fp32, space="acc")
    em.emit("DMA_LOAD", local="acc", esize=4, dram_addr=acc_src.addr, local_addr=0, n0=rows * cols)
    tile = Tile(spad.alloc(rows * cols * 2, "tile"), rows, cols, F16)
    bufs = alloc_epilogue(spad, epi, rows, cols, F16, col_dim=1)
    emit_acc_to_tile(em, acc_tile, tile)
    emit_epilogue(em, epi, tile, bufs, epilogue_blocks(epi, lambda t: channels_last_block(t, 0, rows, 0, cols)))
    store_pieces(em, tile, channels_last_block(out, 0, rows, 0, cols))
    prog, _ = em.finish()
    r = simulate(prog, MID, dram)
    got = out.to_numpy(np.frombuffer(r.dram, np.uint8)).transpose(0, 2, 3, 1).reshape(rows, cols)
    ref = np.maximum(av.astype(np.float16).astype(np.float32) + bv.astype(np.float32), 0)
    assert _rel(got, ref) < 2e-3


def test_tile_round_trip_through_pieces_of_a_strided_view():
    """load_pieces / store_pieces follow any strides (a W-slice: pixels not linear)."""
    base = DramTensor.dense("x", (1, 6, 4, 9), F16, 0, order=NHWC)
    view = base.slice(3, 2, 8)  # width 6 of 9
    out = DramTensor.dense("y", (1, 6, 4, 6), F16, base.span + 64, order=NHWC)
    rng = np.random.default_rng(5)
    v = rng.standard_normal(base.shape).astype(np.float16)
    dram = np.zeros(out.addr + out.span, np.uint8)
    base.write_numpy(dram, v)
    em = Emitter(MID)
    tile = Tile(0, 24, 6, F16)
    load_pieces(em, rows_block(view, (0, 2, 3), 1, 0, 24, 0, 6), tile)
    store_pieces(em, tile, channels_last_block(out, 0, 24, 0, 6))
    prog, _ = em.finish()
    r = simulate(prog, MID, dram)
    np.testing.assert_array_equal(out.to_numpy(np.frombuffer(r.dram, np.uint8)), v[:, :, :, 2:8])
