"""The Pareto flag is exact: no flagged point is dominated, every other point is."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from npuc.dse.pareto import dominates, pareto_flags

points = st.lists(st.tuples(*[st.integers(0, 6)] * 3), min_size=0, max_size=40)


@settings(max_examples=300, deadline=None)
@given(points)
def test_flags_are_exact(pts):
    flags = pareto_flags(pts)
    for i, p in enumerate(pts):
        dominated = any(dominates(q, p) for q in pts)
        assert flags[i] is (not dominated)


def test_small_cases():
    assert pareto_flags([]) == []
    assert pareto_flags([(1, 2), (2, 1), (2, 2), (1, 2)]) == [True, True, False, True]
    assert pareto_flags([(3.0,), (1.0,), (1.0,)]) == [False, True, True]
