"""Tiling search and tile geometry of the array problems."""

from __future__ import annotations

import dataclasses

import pytest

from npuc.codegen.harness import place
from npuc.kir.kernel import Kernel
from npuc.codegen.kernels.array_conv import WEIGHT_ORDER, conv_problem
from npuc.kir.tensor import NHWC, DramTensor
from npuc.errors import CompileError
from npuc.ir.ops.linalg import Conv2dAttrs, conv_output_size
from npuc.isa.enums import DType
from npuc.schedule import search
from npuc.schedule.problem import ArrayTiling, Axis, blocks, chunks, footprint, step_count, steps
from npuc.targets import load_target

FP16 = DType.fp16
MID = load_target("npu-mid")


def problem(c, hw, o, k, stride=1, pad=0, n=1, groups=1, dil=1):
    oh = conv_output_size(hw, k, stride, pad, dil)
    x = DramTensor.dense("x", (n, c, hw, hw), FP16, order=NHWC)
    w = DramTensor.dense("w", (o, c // groups, k, k), FP16, order=WEIGHT_ORDER)
    y = DramTensor.dense("y", (n, o, oh, oh), FP16, order=NHWC)
    k_ = Kernel("conv", "conv2d", (x, w), y, Conv2dAttrs((stride, stride), (pad, pad), (dil, dil), groups), (), FP16)
    return conv_problem(place(k_)[0])


def test_axis_valid_ranges_cut_the_padding():
    ax = Axis(size=10, kernel=3, stride=1, pad=1, dilation=1, out=10)
    assert ax.span(4) == 6 and ax.valid(0, 4) == (1, 6)  # first local position is padding
    assert ax.valid(8, 2) == (0, 3)  # 4 local positions: input 7, 8, 9, then padding
    s2 = Axis(size=15, kernel=1, stride=2, pad=0, dilation=1, out=8)
    assert s2.sampled and s2.span(8) == 8 and s2.in_step == 2 and s2.valid(0, 8) == (0, 8)
    dil = Axis(size=16, kernel=3, stride=1, pad=2, dilation=2, out=16)
    assert dil.span(16) == 20 and dil.valid(0, 16) == (2, 18)


def test_chunks_merge_window_rows_and_unfold_small_channel_layers():
    p = problem(3, 32, 16, 7, 2, 3)
    dense = ArrayTiling(4, 16, 16, 3)
    unfolded = dataclasses.replace(dense, unfold=True)
    # 7 window rows of 7 x 3 = 21 contiguous elements: two chunks each; unfolded: 147 in a row
    assert [c.k for c in chunks(p, dense, 3, 16)] == [16, 5] * 7
    assert [c.k for c in chunks(p, unfolded, 3, 16)] == [16] * 9 + [3]
    assert sum(c.k for c in chunks(p, unfolded, 3, 16)) == 7 * 7 * 3
    dil = problem(8, 16, 8, 3, 1, 2, dil=2)
    assert len(chunks(dil, ArrayTiling(4, 16, 8, 8), 8, 16)) == 9  # dilated: one run per tap


def test_loop_nest_covers_every_output_once():
    p = problem(40, 13, 24, 3, 1, 1, n=2)
    t = ArrayTiling(5, 6, 16, 16, "n_outer")
    seen = set()
    all_steps = list(steps(p, t))
    assert len(all_steps) == step_count(p, t)
    for s in all_steps:
        if s.last:
            for y in range(s.oy0, s.oy0 + s.th):
                for x in range(s.ox0, s.ox0 + s.tw):
                    for n in range(s.n0, s.n0 + s.tn):
                        key = (s.b, y, x, n)
                        assert key not in seen
                        seen.add(key)
    assert len(seen) == 2 * 13 * 13 * 24
    assert blocks(10, 4) == [(0, 4), (4, 4), (8, 2)]


def test_choice_is_deterministic_and_fits():
    p = problem(64, 56, 64, 3, 1, 1)
    search._MEMO.clear()
    a = search.choose(MID, p)
    search._MEMO.clear()
    b = search.choose(MID, p)
    assert a.tiling == b.tiling and a.estimate == b.estimate
    fp = footprint(p, a.tiling)
    assert fp.spad(a.tiling) <= MID.scratchpad.size_bytes and fp.acc <= MID.accumulator.size_bytes
    assert 1 < a.candidates <= 2 * search.MAX_CANDIDATES


def test_choice_is_shared_by_equal_layers_at_other_addresses():
    p = problem(32, 14, 32, 3, 1, 1)
    moved = dataclasses.replace(p, x_addrs=(4096,), w_addrs=(1 << 20,), out_addrs=(1 << 21,), name="other")
    assert search.choose(MID, p) is search.choose(MID, moved)


def test_reduction_blocks_and_resident_buffers_when_they_pay():
    """512 channels of a 3x3 window at 14x14: the whole reduction does not fit with a useful
    tile, so the choice cuts the reduction and keeps the input tiles resident."""
    c = search.choose(MID, problem(512, 14, 512, 3, 2, 1))
    assert c.tiling.tc < 512 and c.tiling.x_slots >= 512 // c.tiling.tc


def test_no_fit_names_the_smallest_footprint():
    p = problem(8, 6, 16, 3)
    tiny = dataclasses.replace(MID, name="tiny", scratchpad=dataclasses.replace(MID.scratchpad, size_bytes=256))
    with pytest.raises(CompileError) as e:
        search.choose(tiny, p)
    msg = str(e.value)
    assert "kernel 'conv'" in msg and "target 'tiny'" in msg and "has 256 and 65536" in msg
    smallest = int(msg.split("smallest needs ")[1].split(" ")[0])
    assert smallest > 256
