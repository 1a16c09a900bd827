"""Canonicalization: local simplifications that put the graph in one normal form.

Each rule is a small function ``(node, rw) -> replacement | None`` listed in :data:`RULES` by op:

- identities disappear: a reshape/expand to the same shape, an identity permute, a cast to the
  same dtype, a full slice, a one-operand concat, an all-zero pad, a clamp with no finite bound,
  ``x * 1``, ``x / 1``, ``x + 0``, ``x - 0`` (when the constant does not broadcast ``x`` larger);
- chains collapse: ``reshape(reshape(x))`` is one reshape, ``permute(permute(x))`` one permute;
- ``matmul(x, W)`` with a constant 2-D ``W`` (or the transpose of one, as ATen's ``addmm`` and
  ``mm`` arrive) becomes ``linear(x, Wt)``, and ``linear(x, W) + b`` with a constant ``[N]`` bias
  becomes ``linear(x, W, b)``: the NPU's fully connected layer.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from npuc.ir.graph import Graph, Node, Value
from npuc.ir.rewrite import Rewriter, rewrite

Rule = Callable[[Node, Rewriter], "Value | None"]


def canonicalize(g: Graph) -> Graph:
    """``g`` in canonical form (see the module docstring for the rules)."""
    return rewrite(g, _visit)


def _visit(node: Node, rw: Rewriter) -> Value | None:
    rules = RULES.get(node.op)
    if rules is None:
        return None
    for r in rules:
        out = r(node, rw)
        if out is not None:
            return out
    return None


def _same_type(node: Node, v: Value) -> Value | None:
    """``v`` if it can stand for the node's result (same shape, dtype and quantization), else None."""
    out = node.outputs[0].type
    return v if (v.type.shape, v.type.dtype, v.type.quant) == (out.shape, out.dtype, out.quant) else None


# ------------------------------------------------------------------------------ data movement


def _reshape(node: Node, rw: Rewriter) -> Value | None:
    x = node.inputs[0]
    p = rw.producer(x)
    if p is not None and p.op == "reshape":
        x = p.inputs[0]
    if x.type.shape == node.attrs.shape:
        return x
    if x is not node.inputs[0]:
        return rw.add("reshape", (x,), node.attrs)
    return None


def _permute(node: Node, rw: Rewriter) -> Value | None:
    x, perm = node.inputs[0], node.attrs.perm
    p = rw.producer(x)
    if p is not None and p.op == "permute":
        x, perm = p.inputs[0], tuple(p.attrs.perm[i] for i in perm)
    if perm == tuple(range(len(perm))):
        return x
    if x is not node.inputs[0]:
        return rw.add("permute", (x,), perm=perm)
    return None


def _identity_if_same(node: Node, rw: Rewriter) -> Value | None:
    return _same_type(node, node.inputs[0])


def _slice(node: Node, rw: Rewriter) -> Value | None:
    a = node.attrs
    if (a.start, a.end, a.step) == (0, node.inputs[0].type.shape[a.dim], 1):
        return node.inputs[0]
    return None


def _pad(node: Node, rw: Rewriter) -> Value | None:
    return node.inputs[0] if not any(node.attrs.pads) else None


def _concat(node: Node, rw: Rewriter) -> Value | None:
    return node.inputs[0] if len(node.inputs) == 1 else None


def _clamp(node: Node, rw: Rewriter) -> Value | None:
    lo, hi = node.attrs.min, node.attrs.max
    if (lo is None or lo == -math.inf) and (hi is None or hi == math.inf):
        return node.inputs[0]
    return None


# ------------------------------------------------------------------------------ arithmetic identities


def _all_equal(t: torch.Tensor | None, value: float) -> bool:
    return t is not None and t.numel() > 0 and bool((t == value).all())


def _neutral(value: float, both_sides: bool) -> Rule:
    """``x op c`` (and ``c op x`` if ``both_sides``) is ``x`` when ``c`` is all ``value``."""

    def rule(node: Node, rw: Rewriter) -> Value | None:
        x, y = node.inputs
        if _all_equal(rw.const(y), value):
            return _same_type(node, x)
        if both_sides and _all_equal(rw.const(x), value):
            return _same_type(node, y)
        return None

    return rule


# ------------------------------------------------------------------------------ linear layers


def _weight_kn(w: Value, rw: Rewriter) -> tuple[Value | None, torch.Tensor | None]:
    """For a [K, N] matmul operand: an existing [N, K] const value, or the [N, K] tensor to make."""
    if w.type.rank != 2:
        return None, None
    p = rw.producer(w)
    if p is not None and p.op == "permute" and p.attrs.perm == (1, 0) and rw.const(p.inputs[0]) is not None:
        return p.inputs[0], None
    t = rw.const(w)
    if t is not None:
        return None, t.t().contiguous()
    return None, None


def _matmul_to_linear(node: Node, rw: Rewriter) -> Value | None:
    x, w = node.inputs
    if x.type.rank < 2 or w.type.rank != 2 or not x.type.dtype.is_float:
        return None
    existing, tensor = _weight_kn(w, rw)
    if existing is None and tensor is None:
        return None
    if existing is None:
        name = rw.producer(w).attrs.name
        existing = rw.constant(f"{name}.t", tensor)
    return rw.add("linear", (x, existing))


def _linear_bias(node: Node, rw: Rewriter) -> Value | None:
    """``linear(x, W) + b`` -> ``linear(x, W, b)`` for a constant bias over the last dim."""
    for lin_v, b_v in (node.inputs, tuple(reversed(node.inputs))):
        p = rw.producer(lin_v)
        if p is None or p.op != "linear" or len(p.inputs) != 2 or rw.num_users(lin_v) != 1:
            continue
        b = rw.const(b_v)
        n = lin_v.type.shape[-1]
        if b is None or b.numel() != n or b.dim() > lin_v.type.rank or b.shape[-1:] != (n,):
            continue
        if _same_type(node, lin_v) is None:
            continue
        bias = b_v if b.dim() == 1 else rw.constant(f"{rw.producer(b_v).attrs.name}.flat", b.reshape(n))
        return rw.add("linear", (p.inputs[0], p.inputs[1], bias), loc=p.loc)
    return None


RULES: dict[str, tuple[Rule, ...]] = {
    "reshape": (_reshape,),
    "permute": (_permute,),
    "cast": (_identity_if_same,),
    "expand": (_identity_if_same,),
    "slice": (_slice,),
    "pad": (_pad,),
    "concat": (_concat,),
    "clamp": (_clamp,),
    "mul": (_neutral(1.0, both_sides=True),),
    "div": (_neutral(1.0, both_sides=False),),
    "add": (_neutral(0.0, both_sides=True), _linear_bias),
    "sub": (_neutral(0.0, both_sides=False),),
    "matmul": (_matmul_to_linear,),
}
