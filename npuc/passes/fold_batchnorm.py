"""Batch-norm folding: inference batch norms disappear into weights, or into a multiply-add.

An inference ``batch_norm`` is the per-channel affine map ``y = x * scale + shift`` with
``scale = weight / sqrt(running_var + eps)`` and ``shift = bias - running_mean * scale``.

- After a ``conv2d`` (or a ``linear`` with a 2-D output, whose channel is its last dim) whose
  weight and bias are constants and whose result feeds only this batch norm, the map is folded into
  a new weight ``W * scale`` and bias ``b * scale + shift``.
- Any other batch norm with constant statistics becomes ``mul`` and ``add`` by constants.

So no ``batch_norm`` with constant operands remains.  The per-channel scale and shift are
computed in float64; the weight is multiplied in its own type (one rounding per element).
"""

from __future__ import annotations

import torch

from npuc.ir.graph import Graph, Node, Value
from npuc.ir.rewrite import Rewriter, rewrite


def fold_batchnorm(g: Graph) -> Graph:
    """``g`` with every constant-statistics batch norm folded away."""
    return rewrite(g, _fold)


def _fold(node: Node, rw: Rewriter) -> Value | None:
    if node.op != "batch_norm":
        return None
    params = [rw.const(v) for v in node.inputs[1:]]
    if any(p is None for p in params):
        return None
    weight, bias, mean, var = (p.double() for p in params)
    scale = weight / torch.sqrt(var + node.attrs.eps)
    shift = bias - mean * scale
    x = node.inputs[0]
    producer = rw.producer(x)
    if producer is not None and rw.num_users(x) == 1:
        folded = _into_producer(producer, rw, scale, shift)
        if folded is not None:
            return folded
    return _as_mul_add(x, rw, scale, shift)


def _into_producer(p: Node, rw: Rewriter, scale: torch.Tensor, shift: torch.Tensor) -> Value | None:
    """The producer (conv2d, or linear with a [N, C] result) with the batch norm in its weights."""
    if p.op == "conv2d":
        expand = (-1, 1, 1, 1)
    elif p.op == "linear" and p.outputs[0].type.rank == 2:
        expand = (-1, 1)
    else:
        return None
    w = rw.const(p.inputs[1])
    b = rw.const(p.inputs[2]) if len(p.inputs) == 3 else None
    if w is None or (len(p.inputs) == 3 and b is None):
        return None
    dtype = w.dtype
    new_w = w * scale.to(dtype).reshape(expand)
    old_b = b.double() if b is not None else torch.zeros_like(scale)
    new_b = (old_b * scale + shift).to(dtype)
    wname = rw.producer(p.inputs[1]).attrs.name
    bname = wname[: -len("weight")] + "bias" if wname.endswith("weight") else f"{wname}.bias"
    w_v = rw.constant(f"{wname}.bn_folded", new_w)
    b_v = rw.constant(f"{bname}.bn_folded", new_b)
    return rw.add(p.op, (p.inputs[0], w_v, b_v), p.attrs, loc=p.loc, name=p.outputs[0].name)


def _as_mul_add(x: Value, rw: Rewriter, scale: torch.Tensor, shift: torch.Tensor) -> Value:
    """``x * scale + shift`` with the per-channel constants shaped to broadcast over dim 1."""
    shape = (-1,) + (1,) * (x.type.rank - 2)
    dtype = x.type.dtype.torch
    name = rw.producer(rw.node.inputs[1]).attrs.name
    base = name[: -len(".weight")] if name.endswith(".weight") else name
    s = rw.constant(f"{base}.bn_scale", scale.reshape(shape).to(dtype))
    t = rw.constant(f"{base}.bn_shift", shift.reshape(shape).to(dtype))
    return rw.add("add", (rw.add("mul", (x, s)), t))
