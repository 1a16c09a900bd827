"""The tiling search's second pool of candidates: reduction blocks of part bursts and tiles that fit
only single buffered, ranked and walked beside the main sweep, so that a layer whose weights
stream from a slow memory is not cut into output tiles that each re-read them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from npuc.codegen.kernels.array_conv import WEIGHT_ORDER, conv_problem
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.isa.enums import DType
from npuc.kir.kernel import Kernel, QuantAttrs
from npuc.kir.tensor import NHWC, DramTensor
from npuc.schedule import search
from npuc.schedule.cost import estimate
from npuc.schedule.problem import ArrayTiling, footprint
from npuc.targets import load_target, target_from_toml

PRESETS = Path(__file__).resolve().parents[2] / "npuc" / "targets" / "presets"


def u55_with_scratchpad(size: int):
    """u55-like-256 (weights in flash at 1 B/cycle, activations in SRAM) with another scratchpad."""
    text = (PRESETS / "u55-like-256.toml").read_text()
    text = text.replace("size_bytes = 32768         # 32 KiB", f"size_bytes = {size}")
    return target_from_toml(text.replace('name = "u55-like-256"', 'name = "u55-small-spad"'), "test")


def int8_conv(target, c: int, hw: int, o: int):
    """A 3x3 pad 1 int8 conv, its input and output in the activations' memory, its weights, bias
    and REQUANT records in the weights' memory."""
    x = DramTensor.dense("x", (1, c, hw, hw), DType.int8, order=NHWC)
    w = DramTensor.dense("w", (o, c, 3, 3), DType.int8, order=WEIGHT_ORDER)
    y = DramTensor.dense("y", (1, o, hw, hw), DType.int8, order=NHWC)
    ins = (x, w, DramTensor.dense("b", (o,), DType.int32), DramTensor.dense("r", (5 * o,), DType.int8))
    k = Kernel("conv", "conv2d", ins, y, Conv2dAttrs((1, 1), (1, 1)), (), DType.int8, quant=QuantAttrs(3, -5, -128, 127))
    act, wmem = target.memories_holding("activations")[0], target.weight_memory
    top = {m.name: target.window_of(m.name).base for m in (act, wmem)}
    addrs = {}
    for t in k.tensors():
        mem = act.name if t.name in ("x", "y") else wmem.name
        addrs[t.name] = top[mem]
        top[mem] += -(-t.span // 64) * 64
    moved = dataclasses.replace(k, inputs=tuple(t.at(addrs[t.name]) for t in k.inputs), output=k.output.at(addrs["y"]))
    return conv_problem(moved)


def test_weights_from_flash_are_read_once_when_double_buffered_tiles_do_not_fit():
    # 14x14x256: one output tile of 16 channels is all the accumulator holds twice over; at
    # 28 KiB of scratchpad its 32-channel reduction blocks do not fit double buffered
    target = u55_with_scratchpad(28 * 1024)
    p = int8_conv(target, 256, 14, 256)
    choice = search.choose(target, p)
    t = choice.tiling
    assert footprint(p, t).spad(t) <= target.scratchpad.size_bytes
    assert t.th * t.tw >= p.y.out * p.x.out  # one output tile per channel block: every weight block read once
    # better than the best the main sweep alone offers, which cuts the pixels in two tiles
    two_tiles = ArrayTiling(7, 14, 16, 32, "n_outer", acc_slots=2)
    assert footprint(p, two_tiles).spad(two_tiles) <= target.scratchpad.size_bytes
    assert choice.estimate.cycles < estimate(target, p, two_tiles).cycles


def test_single_buffer_variants_only_for_tilings_that_do_not_fit_double_buffered():
    target = load_target("u55-like-256")
    p = int8_conv(target, 256, 14, 256)
    fits = ArrayTiling(14, 14, 16, 32, acc_slots=1)
    assert footprint(p, fits).spad(fits) <= target.scratchpad.size_bytes
    assert search.single_buffer_variants(target, p, fits, footprint(p, fits)) == []
    small = u55_with_scratchpad(28 * 1024)
    out = search.single_buffer_variants(small, p, fits, footprint(p, fits))
    assert out and all(min(v.x_slots, v.w_slots) == 1 for v in out)
    assert all(footprint(p, v).spad(v) <= small.scratchpad.size_bytes for v in out)


def test_the_second_pool_never_makes_a_choice_worse_than_the_main_sweep():
    # the main sweep's best is walked as before: the choice can only gain
    target = load_target("u55-like-256")
    for c, hw in ((64, 56), (128, 28), (256, 14)):
        p = int8_conv(target, c, hw, c)
        known = search.prices(target, p)
        main = list(search._with_shorter(target, p, known.sweep(search.candidates, target, p), known))
        ranked = search._ranked(target, p, main, known, set(), [None])
        best_main = min(known.estimate(target, p, t).cycles for t in search._to_walk(ranked, search.WALKED).values())
        assert search.choose(target, p).estimate.cycles <= best_main * (1 + search.CYCLE_SLACK)
