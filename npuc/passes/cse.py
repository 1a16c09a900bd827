"""Common-subexpression elimination.

Two nodes are the same computation when they have the same op, the same operands and equal
attributes; two constants are the same when their tensors are bit-identical (same dtype, shape and
bytes), whatever their names.  The first occurrence in program order is kept, so the result is
deterministic.
"""

from __future__ import annotations

from typing import Any, Hashable

import torch

from npuc.ir.graph import Graph, Node, Value
from npuc.ir.rewrite import Rewriter, rewrite


def cse(g: Graph) -> Graph:
    """``g`` with repeated computations and duplicate constants merged into their first occurrence."""
    seen: dict[Hashable, tuple[Value, ...]] = {}
    consts: dict[Hashable, list[tuple[torch.Tensor, tuple[Value, ...]]]] = {}

    def visit(node: Node, rw: Rewriter) -> tuple[Value, ...] | None:
        if node.op == "const":
            return _same_constant(node, rw, consts)
        key = (node.op, tuple(id(v) for v in node.inputs), _attrs_key(node.attrs))
        if key in seen:
            return seen[key]
        seen[key] = node.outputs
        return None

    return rewrite(g, visit)


def _attrs_key(attrs: Any) -> Hashable:
    # Attribute dataclasses are frozen; compare them by type and value.
    return (type(attrs).__name__, attrs)


def _same_constant(node: Node, rw: Rewriter, consts: dict) -> tuple[Value, ...] | None:
    t = rw.source.constants[node.attrs.name]
    flat = t.reshape(-1)
    head = bytes(flat[:16].view(torch.uint8).tolist()) if flat.numel() else b""
    key = (t.dtype, tuple(t.shape), head, node.attrs.type.quant)  # equal data, other scales: not the same
    bucket = consts.setdefault(key, [])
    for other, outs in bucket:
        if _bit_equal(t, other):
            return outs
    bucket.append((t, node.outputs))
    return None


def _bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
