"""The weight plan of the array kernels (``npuc.schedule.transfers.weight_plan``).

A block missing from the weight buffers replaces the one read again latest, and its load is
issued as soon as the buffer it replaces is no longer read, spread a plane a step over the
steps before its use.  Checked: replaying the plan, every step finds its block in its buffer and
every plane of it is loaded once, before the step; no buffer is overwritten while a step before
its next load still reads it; the plan never loads more blocks than least-recently-used
replacement; int8 stays bit-exact and race-free with spread loads; on ``u55-like-256`` (weights
from flash at a byte a cycle) the 56x56x64 3x3 layer's next channel blocks arrive during the
compute of the one before, so the layer runs within 4% of its MAC bound.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest

from npuc.codegen.harness import place, run_kernel
from npuc.codegen.kernels.array_conv import conv_problem
from npuc.schedule.cost import lower_bound
from npuc.schedule.problem import ArrayTiling, steps
from npuc.schedule.transfers import by_planes, weight_loads, weight_plan
from npuc.targets import load_target

from tests.schedule.test_transfers import FP16, I8, MID, conv, forcing, run_int8

U55 = load_target("u55-like-256")

# (conv args, tiling): several channel and reduction blocks, either loop order, spare buffers or none
CASES = {
    "n_outer-spare": ((1, 32, 12, 10, 48, 3, 1, 1), ArrayTiling(2, 10, 16, 16, "n_outer", w_slots=3)),
    "n_outer-two-spare": ((1, 32, 12, 10, 48, 3, 1, 1), ArrayTiling(3, 10, 16, 16, "n_outer", w_slots=4)),
    "n_outer-no-spare": ((1, 32, 12, 10, 48, 3, 1, 1), ArrayTiling(2, 10, 16, 16, "n_outer", w_slots=2)),
    "m_outer": ((1, 32, 8, 8, 48, 3, 1, 1), ArrayTiling(2, 8, 16, 16, "m_outer", w_slots=3)),
    "m_outer-resident": ((1, 32, 8, 8, 48, 1, 1, 0), ArrayTiling(4, 8, 16, 16, "m_outer", w_slots=6)),
    "batch2": ((2, 16, 6, 6, 32, 3, 1, 1), ArrayTiling(3, 6, 16, 16, "n_outer", w_slots=3)),
}


def _replay(p, t, seq, plan):
    """Apply the plan's loads in program order; per step, check its buffer holds every plane of
    its block.  Returns the number of blocks loaded."""
    content: dict[int, tuple] = {}  # buffer -> (block, planes loaded)
    blocks = 0
    for i, s in enumerate(seq):
        for load in plan.loads[i]:
            assert load.step >= i, "a load is issued after the step that needs it"
            b = plan.slot[load.step]
            key = seq[load.step].w_key(p, t)
            n = len(by_planes(weight_loads(p, t, seq[load.step])))
            lo, hi = load.planes if load.planes is not None else (0, n)
            if lo == 0:
                # the buffer's old block must not be read again before this block's step
                old = content.get(b)
                if old is not None:
                    assert all(seq[j].w_key(p, t) != old[0] or plan.slot[j] != b for j in range(i, load.step)), \
                        f"step {i} overwrites buffer {b} still read before step {load.step}"
                content[b] = (key, set())
                blocks += 1
            assert content[b][0] == key
            assert not content[b][1] & set(range(lo, hi)), "a plane loaded twice"
            content[b][1].update(range(lo, hi))
        key = s.w_key(p, t)
        held = content.get(plan.slot[i])
        n = len(by_planes(weight_loads(p, t, s)))
        assert held is not None and held[0] == key and held[1] == set(range(n)), f"step {i} misses its weights"
    return blocks


def _lru_blocks(p, t, seq) -> int:
    held: OrderedDict = OrderedDict()
    loads = 0
    for s in seq:
        k = s.w_key(p, t)
        if k in held:
            held.move_to_end(k)
            continue
        loads += 1
        if len(held) == t.w_slots:
            held.popitem(last=False)
        held[k] = True
    return loads


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_every_step_finds_its_weights_and_no_more_blocks_than_lru(case):
    args, t = CASES[case]
    p = conv_problem(place(conv(FP16, *args))[0])
    seq = list(steps(p, t))
    plan = weight_plan(p, t, seq)
    assert len(plan.slot) == len(plan.loads) == len(seq)
    assert all(0 <= b < t.w_slots for b in plan.slot)
    assert _replay(p, t, seq, plan) <= _lru_blocks(p, t, seq)


def test_a_spare_buffer_takes_the_next_block_ahead_in_planes():
    """With a buffer to spare, the next channel block's first block is loaded a plane a step
    over the steps before it (each piece after a step's input loads, that is, before the next
    step's: the last one at the start of the block's own step); with none, whole, once the step
    before has read the block it replaces."""
    args, t = CASES["n_outer-spare"]
    p = conv_problem(place(conv(FP16, *args))[0])
    seq = list(steps(p, t))
    plan = weight_plan(p, t, seq)
    first_of_block1 = next(i for i, s in enumerate(seq) if s.n0 == 16)
    at = [(i, x.early) for i, loads in enumerate(plan.loads) for x in loads if x.step == first_of_block1]
    assert len(at) > 1 and all(early for _, early in at) and max(at)[0] == first_of_block1
    assert [i for i, _ in at] == list(range(at[0][0], first_of_block1 + 1))  # a piece a step
    bare = dataclasses.replace(t, w_slots=2)
    seq2 = list(steps(p, bare))
    plan2 = weight_plan(p, bare, seq2)
    first2 = next(i for i, s in enumerate(seq2) if s.n0 == 16)
    loads2 = [(i, x.planes) for i, loads in enumerate(plan2.loads) for x in loads if x.step == first2]
    assert len(loads2) == 1 and loads2[0][1] is None and first2 - 1 <= loads2[0][0] <= first2


@pytest.mark.parametrize("case", ["n_outer-spare", "n_outer-two-spare", "m_outer"])
def test_int8_with_early_weight_loads_is_bit_exact(case, monkeypatch):
    args, t = CASES[case]
    forcing(monkeypatch, lambda _: t)
    run_int8(conv(I8, *args), MID)


def test_conv56_on_flash_weights_keeps_the_array_busy():
    """u55-like-256: 36 KiB of weights from flash at a byte a cycle; each later channel block's
    weights arrive while the block before computes, so the layer is within 4% of its MAC bound
    (467,116 cycles against 451,584; 480,796, 6.5% above, when each block was loaded only one
    step ahead of its use)."""
    k = conv(I8, 1, 64, 56, 56, 64, 3, 1, 1)
    vals = {x.name: np.zeros(x.shape, x.dtype.np) for x in k.tensors() if x.name != k.output.name}
    r = run_kernel(k, U55, vals, functional=False)
    bound = lower_bound(U55, conv_problem(r.kernel))
    assert r.result.total_cycles <= 1.04 * bound, (r.result.total_cycles, bound, r.plan.summary)
