"""Constant folding: evaluate the nodes whose operands are all constants.

A node whose operands are all ``const`` nodes is replaced by one constant computed with the op's
reference semantics (the same code the interpreter runs, so folding never changes a result).
A fold that would *grow* the constant data past :data:`SIZE_CAP_BYTES` (a small tensor broadcast to
a large one, say) is skipped and logged: the node stays, cheap to compute at run time.
"""

from __future__ import annotations

import logging

import torch

from npuc.ir.graph import Graph, Node, Value
from npuc.ir.opdef import get_op
from npuc.ir.rewrite import Rewriter, rewrite

SIZE_CAP_BYTES = 1 << 20

log = logging.getLogger("npuc.passes.fold_constants")


def fold_constants(g: Graph) -> Graph:
    """``g`` with every all-constant node (within the size cap) replaced by its value."""
    return rewrite(g, _fold)


def _fold(node: Node, rw: Rewriter) -> tuple[Value, ...] | None:
    if node.op == "const" or not node.inputs:
        return None
    operands = [rw.const(v) for v in node.inputs]
    if any(t is None for t in operands):
        return None
    out_bytes = sum(v.type.nbytes for v in node.outputs)
    in_bytes = sum(t.numel() * t.element_size() for t in operands)
    if out_bytes > max(SIZE_CAP_BYTES, in_bytes):
        log.info("not folding %s of %s: its %d-byte result would exceed the %d-byte cap",
                 node.op, node.loc or "the graph", out_bytes, SIZE_CAP_BYTES)
        return None
    with torch.no_grad():
        results = get_op(node.op).evaluate(operands, [v.type for v in node.inputs], node.attrs)
    base = _folded_name(node, rw)
    return tuple(
        rw.constant(base if len(results) == 1 else f"{base}.{i}", t, quant=v.type.quant)
        for i, (v, t) in enumerate(zip(node.outputs, results))
    )


def _folded_name(node: Node, rw: Rewriter) -> str:
    """Name a folded constant after the one large constant it came from, else after its value."""
    sources = [rw.producer(v).attrs.name for v in node.inputs if rw.const(v).numel() > 1]
    if len(sources) == 1:
        return f"{sources[0]}.{node.op}"
    return f"folded.{node.outputs[0].name}"
