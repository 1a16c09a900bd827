"""Lowering rules for gathers by indices known only at run time: ``embedding``, ``index_select``
and ``gather`` as one ``gather`` kernel each (VGATHER of table rows, docs/kernels.md).

The indices keep their own dtype in DRAM (the caller's or the CPU's int64, or int32; the NPU's
int32 when an integer kernel computed them, :mod:`npuc.lower.rules_int`) and the kernel reads
their int32 words (an int64 index is checked to fit int32).  A gather of an integer table proven
to fit int32 copies int32 rows.  A table the kernel cannot read as rows (a strided view) is copied dense
first; an output that is not dense rows goes through a dense temporary and a copy.  Constant
gathers of constants never get here (the frontend folds them).
"""

from __future__ import annotations

import math

import torch

from npuc.ir.graph import Node
from npuc.isa.enums import DType
from npuc.kir.kernel import GatherRowsAttrs
from npuc.kir.tensor import DramTensor
from npuc.lower.context import LowerContext
from npuc.lower.rules import rule, single
from npuc.lower.rules_int import INT_TYPES, int_tensor

# The operand each gather op reads as indices: integer, never an NPU activation.
INDEX_OPERAND: dict[str, int] = {"embedding": 1, "index_select": 1, "gather": 1}


def index_operand(node: Node):
    """The index value of a gather node (an integer the NPU reads, not computes), or None."""
    i = INDEX_OPERAND.get(node.op)
    return None if i is None else node.inputs[i]


def _table(ctx: LowerContext, node: Node, v) -> DramTensor | None:
    """The table ``v`` as the kernel reads it: the NPU's float tensor, or for a gather of integers
    (proven to fit int32, npuc.lower.rules_int) its int32 words; None when the NPU cannot read it."""
    if node.outputs[0].type.dtype in INT_TYPES:
        return int_tensor(ctx, v)
    return ctx.tensor(v)


def _rows(ctx: LowerContext, node: Node, t: DramTensor, shape: tuple[int, int], pre: list, what: str) -> DramTensor:
    """``t`` seen as ``shape`` (rows of a table), through a dense copy when its strides do not allow it."""
    view = t.reshape(shape)
    if view is None:
        dense = ctx.temp(f"{node.outputs[0].name}.{what}", t.shape, dtype=t.dtype)
        pre.append(ctx.kernel(node, "copy", (t,), dense, suffix=f".{what}", dtype=t.dtype))
        view = dense.reshape(shape)
    return view


def _gather(ctx: LowerContext, node: Node, table: DramTensor, words: DramTensor, base: torch.Tensor | None,
            attrs: GatherRowsAttrs, pre: list):
    y = node.outputs[0]
    rows, b = math.prod(words.shape[:-1]), table.shape[1]
    dt = table.dtype
    out = ctx.int_out(y) if dt is DType.int32 else ctx.out(y)
    dest = out.reshape((rows, b))
    post = []
    if dest is None:
        dense = ctx.temp(f"{y.name}.rows", out.shape, dtype=dt)
        dest = dense.reshape((rows, b))
        post.append(ctx.kernel(node, "copy", (dense,), out, suffix=".out", dtype=dt))
    inputs = (table, words)
    if base is not None and bool(base.any()):
        inputs += (ctx.const_tensor(f"{y.name}.gather", base.to(torch.int32), ".base", dtype=DType.int32),)
    k = ctx.kernel(node, "gather", inputs, dest, attrs, dtype=dt)
    return single(*pre, k, *post)


def _words_or_reason(ctx: LowerContext, node: Node):
    words = ctx.index_words(index_operand(node))
    if words is None:
        return None, f"{node.op} by {index_operand(node).type.dtype.value} indices: the NPU reads int32 or int64 indices"
    return words, None


@rule("embedding")
def lower_embedding(ctx: LowerContext, node: Node):
    w = node.inputs[0]
    words, why = _words_or_reason(ctx, node)
    if why:
        return why
    pre: list = []
    n, d = w.type.shape
    t = _table(ctx, node, w)
    if t is None:
        return f"{node.op}: the NPU cannot read the integer table %{w.name} as int32 words"
    table = _rows(ctx, node, t, (n, d), pre, "table")
    return _gather(ctx, node, table, words, None, GatherRowsAttrs(n), pre)


@rule("index_select")
def lower_index_select(ctx: LowerContext, node: Node):
    """Rows ``a * N + index[k]`` of ``x`` seen as ``[A * N, B]`` (A the dims before ``dim``, B those
    after): the index broadcast over ``a`` (a zero stride), ``a * N`` the row offsets."""
    x = node.inputs[0]
    words, why = _words_or_reason(ctx, node)
    if why:
        return why
    dim = node.attrs.dim
    shape = x.type.shape
    a, n, b = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    k = words.shape[0]
    pre: list = []
    t = _table(ctx, node, x)
    if t is None:
        return f"{node.op}: the NPU cannot read the integer table %{x.name} as int32 words"
    table = _rows(ctx, node, t, (a * n, b), pre, "table")
    base = None
    if a > 1:
        words = DramTensor(words.name, (a,) + words.shape, words.dtype, words.addr, (0,) + words.strides)
        base = (torch.arange(a, dtype=torch.int64) * n).repeat_interleave(k)
    return _gather(ctx, node, table, words, base, GatherRowsAttrs(n), pre)


@rule("gather")
def lower_gather(ctx: LowerContext, node: Node):
    """Single elements: ``x`` dense as a table of numel rows of one element; the row of output
    element ``s`` is ``index[s] * stride(dim) + sum over the other dims d of s_d * stride(d)``."""
    x, index = node.inputs
    words, why = _words_or_reason(ctx, node)
    if why:
        return why
    dim = node.attrs.dim
    shape = x.type.shape
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    ishape = index.type.shape
    pre: list = []
    t = _table(ctx, node, x)
    if t is None:
        return f"{node.op}: the NPU cannot read the integer table %{x.name} as int32 words"
    table = _rows(ctx, node, t, (max(1, x.type.numel), 1), pre, "table")
    coords = torch.meshgrid(*(torch.arange(n, dtype=torch.int64) for n in ishape), indexing="ij") if ishape else ()
    base = torch.zeros(ishape, dtype=torch.int64)
    for d, c in enumerate(coords):
        if d != dim:
            base += c * strides[d]
    return _gather(ctx, node, table, words, base.reshape(-1), GatherRowsAttrs(shape[dim], strides[dim]), pre)
