"""Exact Pareto fronts (every objective minimized)."""

from __future__ import annotations

from typing import Sequence


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is no worse than ``b`` in every objective and better in at least one."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def pareto_flags(points: Sequence[Sequence[float]]) -> list[bool]:
    """For each point, whether no other point dominates it (equal points are all on the front).

    Points are sorted lexicographically first, so a point can only be dominated by one before it;
    the front found so far is the only set to compare with (exact, O(n * front)).
    """
    order = sorted(range(len(points)), key=lambda i: tuple(points[i]))
    front: list[int] = []
    flags = [False] * len(points)
    for i in order:
        p = points[i]
        if not any(dominates(points[j], p) for j in front):
            flags[i] = True
            front.append(i)
    return flags
