"""Per-node summary of a graph: op, output shape, parameters and multiply-accumulates.

``graph_summary(g)`` returns one :class:`LayerRow` per compute node (``const`` nodes are not rows;
their elements count as the parameters of the nodes that read them) and the :class:`Totals`.
MACs are exact for ``conv2d``, ``linear`` and ``matmul`` and zero for every other op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npuc.ir.graph import Graph, Node


@dataclass(frozen=True)
class LayerRow:
    """One compute node: its op, result name and shape, constant elements read, MACs and source."""

    name: str
    op: str
    shape: str
    params: int
    macs: int
    source: str | None


@dataclass(frozen=True)
class Totals:
    """Whole-graph figures: compute nodes, constant elements (each counted once), MACs, op counts."""

    nodes: int
    params: int
    macs: int
    op_counts: dict[str, int] = field(default_factory=dict)


def node_macs(n: Node) -> int:
    """Multiply-accumulates of one node (exact for conv2d, linear and matmul; 0 otherwise)."""
    out = n.outputs[0].type
    if n.op == "conv2d":
        w = n.inputs[1].type.shape
        return out.numel * w[1] * w[2] * w[3]
    if n.op in ("linear", "matmul"):
        return out.numel * n.inputs[0].type.shape[-1]
    return 0


def graph_summary(g: Graph) -> tuple[list[LayerRow], Totals]:
    """The rows of ``g``'s compute nodes, in program order, and the totals."""
    const_elems = {n.outputs[0]: n.outputs[0].type.numel for n in g.nodes if n.op == "const"}
    rows: list[LayerRow] = []
    counts: dict[str, int] = {}
    for n in g.nodes:
        if n.op == "const":
            continue
        shape = ", ".join("x".join(str(d) for d in v.type.shape) or "scalar" for v in n.outputs)
        params = sum(const_elems.get(v, 0) for v in n.inputs)
        rows.append(LayerRow(n.outputs[0].name, n.op, shape, params, node_macs(n), n.loc))
        counts[n.op] = counts.get(n.op, 0) + 1
    totals = Totals(
        nodes=len(rows),
        params=sum(t.numel() for t in g.constants.values()),
        macs=sum(r.macs for r in rows),
        op_counts=dict(sorted(counts.items())),
    )
    return rows, totals
