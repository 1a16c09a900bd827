"""The tiling search's memo: prices shared across tilings, scratchpad sizes and equal layers give
exactly the choices and estimates a search without them gives."""

from __future__ import annotations

import dataclasses

import pytest

from npuc.codegen.kernels.fused_chain import with_scratchpad
from npuc.schedule import cost, search
from npuc.schedule.cost import estimate, quick_estimate
from npuc.targets import load_target

from tests.schedule.test_array_search import problem

MID = load_target("npu-mid")

PROBLEMS = {
    "3x3 56x56x64": lambda: problem(64, 56, 64, 3, 1, 1),
    "7x7/2 stem": lambda: problem(3, 64, 32, 7, 2, 3),
    "1x1 14x14 96->160": lambda: problem(96, 14, 160, 1),
    "3x3/2 28x28 40->72, batch 2": lambda: problem(40, 28, 72, 3, 2, 1, n=2),
}


def _fresh(target, p):
    search.clear_memo()
    return search._choose(target, p, search.WALKED)


def _tilings(target, p, limit=40):
    """A spread of fitting tilings of ``p`` with their buffers, as the search ranks them."""
    out = []
    for t in search.candidates(target, p)[::7][:limit]:
        out.append(search._with_buffers(target, p, t))
    out += [v for t in out[:10] for v in search.tail_variants(target, p, t) + search.head_variants(target, p, t)]
    return out


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_shared_tile_class_costs_change_no_estimate(name):
    """Every tiling priced with the problem's shared memo (after many others) is priced as alone."""
    p = PROBLEMS[name]()
    tilings = _tilings(MID, p)
    shared: dict = {}
    with_memo = [(quick_estimate(MID, p, t, shared), estimate(MID, p, t, shared)) for t in tilings]
    assert shared  # the tile classes were shared
    alone = [(quick_estimate(MID, p, t), estimate(MID, p, t)) for t in tilings]
    assert with_memo == alone


def test_u65_costs_are_shared_exactly():
    """Another memory system (u65-like-256: 128-byte bursts, a weight decoder): the same."""
    u65 = load_target("u65-like-256")
    p = problem(64, 28, 64, 3, 1, 1)
    tilings = _tilings(u65, p, 40)
    shared: dict = {}
    assert [estimate(u65, p, t, shared) for t in tilings] == [estimate(u65, p, t) for t in tilings]


@pytest.mark.parametrize("name", ["3x3/2 28x28 40->72, batch 2", "7x7/2 stem"])
def test_choices_at_several_scratchpad_sizes_do_not_depend_on_order(name):
    """The network-level memory plan plans a layer at several splits of the scratchpad: the memo
    of prices (shared by every size) gives each size the choice a fresh search gives it."""
    p = PROBLEMS[name]()
    size = MID.scratchpad.size_bytes
    targets = [MID] + [with_scratchpad(MID, size - size * k // 8) for k in (2, 5)]
    fresh = []
    for t in targets:
        try:
            fresh.append(_fresh(t, p))
        except Exception as e:  # noqa: BLE001 (a size too small refuses the same way both times)
            fresh.append(type(e))
    search.clear_memo()
    memo = []
    for t in reversed(targets):  # smallest first, then growing: prices computed for another size
        try:
            memo.append(search.choose(t, p))
        except Exception as e:  # noqa: BLE001
            memo.append(type(e))
    memo.reverse()
    for a, b in zip(fresh, memo):
        if isinstance(a, type):
            assert a is b
        else:
            assert (a.tiling, a.estimate, a.candidates) == (b.tiling, b.estimate, b.candidates)
    assert len(search._PRICES) == 1  # one problem, one target: one set of prices for every size


def test_prices_are_kept_apart_by_the_memory_a_tensor_lies_in():
    """Equal layers whose tensors lie in different memories (u55-like-256: SRAM and DRAM) are
    priced apart: a transfer's time depends on the memory."""
    u55 = load_target("u55-like-256")
    p = problem(32, 14, 32, 3, 1, 1)
    windows = u55.windows
    assert len(windows) > 1
    placed = [dataclasses.replace(p, x_addrs=(w.base,), out_addrs=(w.base + (1 << 16),)) for w in windows[:2]]
    search.clear_memo()
    a, b = (search.prices(u55, q) for q in placed)
    assert a is not b
    assert search.prices(u55, dataclasses.replace(placed[0], x_addrs=(windows[0].base + 4096,))) is a


def test_clear_memo_forgets_choices_prices_and_instruction_times():
    search.choose(MID, PROBLEMS["1x1 14x14 96->160"]())
    assert search._MEMO and search._PRICES and cost._table.cache_info().currsize
    search.clear_memo()
    assert not search._MEMO and not search._PRICES and cost._table.cache_info().currsize == 0
