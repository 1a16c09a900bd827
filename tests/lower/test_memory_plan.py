"""DRAM memory planning: reuse, no overlap of live buffers, regions, and models that do not fit."""

from __future__ import annotations

import pytest
import torch

import npuc
from npuc.codegen.memory_plan import greedy_by_size, lifetimes, plan_memory
from npuc.errors import CompileError
from npuc.kir.program import ACTIVATION, CONSTANT, Buffer

from lowerlib import SmallCnn, edited_target, lower, seeded


@pytest.fixture(scope="module")
def resnet18_plan():
    from npuc.zoo import load_model

    model, inputs = load_model("torchvision:resnet18")
    return plan_memory(lower(model, inputs))


def test_activations_reuse_memory_below_the_naive_sum(resnet18_plan):
    p = resnet18_plan
    assert 0 < p.activation_peak < p.activation_naive / 2


def test_no_two_live_buffers_share_a_byte_exhaustively(resnet18_plan):
    p = resnet18_plan
    acts = [x for x in p.placed if x.buffer.kind == ACTIVATION]
    assert len(acts) > 20
    for i, a in enumerate(acts):
        for b in acts[i + 1:]:
            live_together = a.first <= b.last and b.first <= a.last
            disjoint = a.offset + a.buffer.nbytes <= b.offset or b.offset + b.buffer.nbytes <= a.offset
            assert disjoint or not live_together, (a.buffer.name, b.buffer.name)
    others = [x for x in p.placed if x.buffer.kind != ACTIVATION]
    for i, a in enumerate(others):  # constants and IO never share
        for b in others[i + 1:]:
            assert a.offset + a.buffer.nbytes <= b.offset or b.offset + b.buffer.nbytes <= a.offset


def test_every_kernel_tensor_lies_in_the_arena_and_constants_come_first(resnet18_plan):
    p = resnet18_plan
    for lk in p.model.kernels():
        for t in lk.kernel.tensors():
            assert 0 <= t.addr and t.addr + t.span <= p.arena_size
    consts = [x for x in p.placed if x.buffer.kind == CONSTANT]
    assert max(x.offset + x.buffer.nbytes for x in consts) <= len(p.constants)
    assert p.regions[0][:3] == ("constants", "CONSTANTS", 0)
    assert all(x.offset % 64 == 0 for x in p.placed)


def test_lifetimes_follow_kernel_order():
    m = lower(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),))
    life = lifetimes(m)
    names = [k.kernel.output.name for k in m.kernels()]
    for step, name in enumerate(names):
        assert life[name][0] == step  # written first by its producer


def test_greedy_placement_shares_disjoint_lifetimes_only():
    bufs = [Buffer("a", 100, ACTIVATION), Buffer("b", 100, ACTIVATION), Buffer("c", 64, ACTIVATION)]
    offsets, peak, _ = greedy_by_size(bufs, {"a": (0, 1), "b": (2, 3), "c": (1, 2)})
    assert offsets["a"] == offsets["b"] == 0  # a and b never live together
    assert offsets["c"] >= 128 and peak == offsets["c"] + 64


def test_a_model_that_does_not_fit_dram_names_the_sizes():
    tiny = edited_target(**{"memory.dram__size_bytes": 8192}, name="tiny-dram")
    with pytest.raises(CompileError, match=r"needs [\d,]+ bytes of DRAM .* target 'tiny-dram' has 8,192"):
        npuc.compile(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),), target=tiny)


def test_a_layer_that_cannot_fit_the_scratchpad_names_the_layer_and_source():
    tiny = edited_target(scratchpad__size_bytes=256, name="tiny-spad")
    with pytest.raises(CompileError, match=r"layer \S+ \(conv2d\+relu\) \(from .*lowerlib.py:\d+\).*256"):
        npuc.compile(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),), target=tiny)
