"""Dead-code elimination: drop the nodes whose results nothing reads."""

from __future__ import annotations

from npuc.ir.graph import Graph
from npuc.ir.rewrite import prune_dead


def dce(g: Graph) -> Graph:
    """``g`` without dead nodes and unused constants (graph ops have no side effects)."""
    return prune_dead(g)
