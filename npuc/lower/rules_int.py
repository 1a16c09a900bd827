"""Lowering rules for integer arithmetic proven to fit int32 (RoBERTa's position ids).

The NPU has no 64-bit integers; its vector unit computes int32 exactly, saturating on overflow.
An integer op of a float model runs on the NPU when the value-range analysis
(:mod:`npuc.lower.int_range`) proves that every integer it reads and writes lies within int32:
then int32 arithmetic gives PyTorch's int64 (or int32) result exactly, and saturation never
happens.  Such values are stored on the NPU as int32 (an int64 graph value narrowed); the CPU
reads them widened exactly to their own dtype (the runtime converts a home's element type); an
integer model output is written by the CPU, so the caller receives its own dtype.  A value the
NPU reads but did not compute (a model input, a CPU result) is read in its own storage: the low
int32 word of each int64 element, which is the value itself when the range proves it fits.

- ``eq`` / ``ne`` / ``lt`` / ``le`` / ``gt`` / ``ge``: ``compare`` (VCMP int32), a 0/1 int32 mask.
  ``eq`` and ``ne`` of an int64 value of unknown range (token ids) with a constant compare both
  32-bit words (equal exactly when both words are), so they need no range: two ``compare``
  kernels and an ``eltwise`` product (eq) or maximum (ne) of the two masks;
- ``add``, ``sub``, ``mul``, ``maximum``, ``minimum``: ``eltwise`` with a VBIN int32 step (a
  constant operand becomes an int32 constant);
- ``cast`` between integer types, and from a 0/1 int32 mask to an integer: a view (the int32
  words already are the value);
- ``cumsum``: a scan of ceil(log2 n) steps (Hillis-Steele): step s copies the first s elements
  along the dim and adds the element s before to every other (an ``eltwise`` add of two slices),
  between two buffers.  Every partial sum is a sum of at most n consecutive elements, inside the
  proven range, so no step saturates.

What is not proven stays on the CPU with the analysis's reason.
"""

from __future__ import annotations

import torch

from npuc.ir.graph import Node, Value
from npuc.ir.types import DType as IRType
from npuc.isa.enums import DType
from npuc.kir.kernel import CompareAttrs, EpilogueOp
from npuc.kir.tensor import DramTensor
from npuc.lower.context import LowerContext
from npuc.lower.int_range import INT32, int32_problem
from npuc.lower.layout import broadcast_to
from npuc.lower.rules import single

INT_TYPES = (IRType.i32, IRType.i64)
_COMPARES = ("eq", "ne", "lt", "le", "gt", "ge")
_BINARY = ("add", "sub", "mul", "maximum", "minimum")
_GATHERS = ("embedding", "index_select", "gather")


def _is_int(v: Value) -> bool:
    return v.type.dtype in INT_TYPES


def is_integer_node(node: Node) -> bool:
    """Whether ``node`` is integer arithmetic these rules decide (its reason comes from them)."""
    if node.op in _COMPARES:
        return any(_is_int(v) for v in node.inputs)
    if node.op in _BINARY or node.op == "cumsum":
        return _is_int(node.outputs[0])
    if node.op == "cast":
        x, y = node.inputs[0], node.outputs[0]
        return _is_int(y) and (_is_int(x) or x.type.dtype == IRType.bool)
    if node.op in _GATHERS:  # a gather of an integer table (its rule reads int32 words)
        return _is_int(node.outputs[0])
    return False


def _output_problem(ctx: LowerContext, node: Node) -> str | None:
    y = node.outputs[0]
    if y in ctx.g.outputs and y.type.dtype != IRType.i32:
        return (f"{node.op}: a {y.type.dtype.value} model output is written by the CPU (the NPU stores "
                f"integers and their masks as int32; the caller receives {y.type.dtype.value})")
    if y.type.dtype == IRType.bool:
        for u in ctx.users.get(y, ()):
            if not is_integer_node(u):  # a float op wants a mask of the NPU's float type
                kind = node.inputs[0].type.dtype.value
                return (f"{node.op} of {kind} values: its mask is read by {u.op} (%{u.outputs[0].name}) as a "
                        "float mask, and the NPU compares integers into int32 masks")
    return None


def int_tensor(ctx: LowerContext, v: Value) -> DramTensor | None:
    """``v`` as int32 words of its shape: the NPU's int32 buffer, the low word of an int64 (or the
    int32) storage of a model input or CPU result, or an int32 constant; None for an int32 mask
    the NPU did not compute (a bool stored as bytes, a float mask)."""
    if ctx.is_npu_int32(v):
        return ctx.homes[v]
    if v in ctx.homes or not _is_int(v):  # a float or fp16-mask home: not integers
        return None
    words = ctx.index_words(v)
    if words is None:
        return None
    low = words.select(words.rank - 1, 0)
    return low if v.type.shape else DramTensor(low.name, (), low.dtype, low.addr, ())


def _const_words(ctx: LowerContext, v: Value, word: int) -> DramTensor:
    """One 32-bit word (0: low, 1: high, as signed int32) of each element of an integer constant."""
    data = ctx.const(v).to(torch.int64)
    w = (data >> 32) if word else data & 0xFFFFFFFF
    w = torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)
    return ctx.const_tensor(ctx.const_of[v], w, f".w{word}", dtype=DType.int32)


def _operand(ctx: LowerContext, v: Value, shape) -> DramTensor | None:
    if v in ctx.const_of:
        return broadcast_to(_const_words(ctx, v, 0), shape)
    t = int_tensor(ctx, v)
    return None if t is None else broadcast_to(t, shape)


def _unreadable(node: Node, v: Value) -> str:
    return (f"{node.op}: the NPU cannot read %{v.name} as int32 words (a boolean stored as bytes, or a "
            "mask of a float comparison)")


def lower_int(ctx: LowerContext, node: Node):
    """The NPU kernels of integer node ``node``, or why it stays on the CPU."""
    why = _output_problem(ctx, node)
    if why:
        return why
    if node.op in ("eq", "ne") and int32_problem(node, ctx.int_ranges) is not None:
        return _lower_wide_equality(ctx, node)
    why = int32_problem(node, ctx.int_ranges)
    if why:
        return why
    if node.op in _GATHERS:
        from npuc.lower.rules import RULES

        return RULES[node.op](ctx, node)
    return {"cast": _lower_cast, "cumsum": _lower_cumsum}.get(node.op, _lower_elementwise)(ctx, node)


def _lower_elementwise(ctx: LowerContext, node: Node):
    a, b = node.inputs
    y = node.outputs[0]
    shape = y.type.shape
    ta, tb = _operand(ctx, a, shape), _operand(ctx, b, shape)
    for v, t in ((a, ta), (b, tb)):
        if t is None:
            return _unreadable(node, v)
    if node.op in _COMPARES:
        k = ctx.kernel(node, "compare", (ta, tb), ctx.int_out(y), CompareAttrs(node.op), dtype=DType.int32)
        return single(k)
    epi = (EpilogueOp(node.op, operand=tb),)
    return single(ctx.kernel(node, "eltwise", (ta,), ctx.int_out(y), epilogue=epi, dtype=DType.int32))


def _lower_wide_equality(ctx: LowerContext, node: Node):
    """``x == c`` / ``x != c`` of an int64 ``x`` of any value and an int64 constant ``c``: compare
    the low words and the high words (as int32 bit patterns), then AND / OR the two masks."""
    a, b = node.inputs
    if a in ctx.const_of:
        a, b = b, a
    y = node.outputs[0]
    if b not in ctx.const_of or a.type.dtype != IRType.i64 or a in ctx.homes:
        return int32_problem(node, ctx.int_ranges)
    words = ctx.index_words(a)
    if words is None:
        return int32_problem(node, ctx.int_ranges)
    shape = y.type.shape
    word = [broadcast_to(words.select(words.rank - 1, i) if shape else
                         DramTensor(words.name, (), DType.int32, words.addr + 4 * i, ()), shape) for i in (0, 1)]
    const = [broadcast_to(_const_words(ctx, b, i), shape) for i in (0, 1)]
    low = ctx.temp(f"{y.name}.low", shape, dtype=DType.int32)
    high = ctx.temp(f"{y.name}.high", shape, dtype=DType.int32)
    ks = [ctx.kernel(node, "compare", (word[0], const[0]), low, CompareAttrs(node.op), suffix=".low", dtype=DType.int32),
          ctx.kernel(node, "compare", (word[1], const[1]), high, CompareAttrs(node.op), suffix=".high", dtype=DType.int32)]
    both = EpilogueOp("mul" if node.op == "eq" else "maximum", operand=low)
    ks.append(ctx.kernel(node, "eltwise", (high,), ctx.int_out(y), epilogue=(both,), suffix=".words",
                         dtype=DType.int32))
    return single(*ks)


def _lower_cast(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    t = int_tensor(ctx, x) if x.type.dtype != IRType.bool else (ctx.homes[x] if ctx.is_npu_int32(x) else None)
    if t is None:
        return _unreadable(node, x)
    return single(views=((y, t),))


def _lower_cumsum(ctx: LowerContext, node: Node):
    x, y = node.inputs[0], node.outputs[0]
    d = node.attrs.dim
    n = x.type.shape[d]
    cur = int_tensor(ctx, x)
    if cur is None:
        return _unreadable(node, x)
    out = ctx.int_out(y)
    if n == 1:
        return single(ctx.kernel(node, "copy", (cur,), out, dtype=DType.int32))
    steps = []
    s = 1
    while s < n:
        steps.append(s)
        s *= 2
    pair = [ctx.temp(f"{y.name}.scan", x.type.shape, dtype=DType.int32) for _ in range(min(2, len(steps) - 1))]
    ks = []
    for i, s in enumerate(steps):
        nxt = out if i == len(steps) - 1 else pair[i % 2]
        ks.append(ctx.kernel(node, "copy", (cur.slice(d, 0, s),), nxt.slice(d, 0, s), suffix=f".s{s}.head",
                             dtype=DType.int32))
        add = EpilogueOp("add", operand=cur.slice(d, 0, n - s))
        ks.append(ctx.kernel(node, "eltwise", (cur.slice(d, s, n),), nxt.slice(d, s, n), epilogue=(add,),
                             suffix=f".s{s}", dtype=DType.int32))
        cur = nxt
    return single(*ks)


__all__ = ["INT32", "is_integer_node", "lower_int", "int_tensor"]
