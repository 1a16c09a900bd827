"""Lowering rules for booleans: comparisons, logical ops, ``where`` and casts to and from bool.

A boolean of a float graph lives on the NPU as a mask in the NPU's dtype, 1.0 where true and 0.0
where false (docs/kernels.md, "Masks"): a comparison is a ``compare`` kernel (VCMP), ``where`` a
``select`` kernel (VSEL), and the logical ops of masks are ``eltwise`` steps -- ``and`` is a
product, ``or`` a maximum, ``not`` is ``1 - x``.  A cast of a mask to a float type is a view (the
mask already is 0/1 floats); a cast of a float to bool is ``x != 0``.

This is how scaled-dot-product attention's "safe softmax" (``eq(scores, -inf)``, ``logical_not``,
``where(all masked, 0, softmax)``) and causal or padding masks stay on the NPU.  What stays on
the CPU says why: a boolean that is a model input or output (the caller hands and receives real
bools) and logical ops of float operands.  Comparisons of integer tensors (token ids) are
integer ops (:mod:`npuc.lower.rules_int`), with int32 masks.
"""

from __future__ import annotations

import torch

from npuc.ir.graph import Node, Value
from npuc.ir.types import DType
from npuc.kir.kernel import CompareAttrs, EpilogueOp
from npuc.lower.context import LowerContext
from npuc.lower.layout import broadcast_to
from npuc.lower.rules import rule, single

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _is_mask(v: Value) -> bool:
    return v.type.dtype == DType.bool


def boundary_problem(ctx: LowerContext, node: Node) -> str | None:
    """Why ``node``'s booleans cannot live on the NPU as masks, or None: a model input or output
    that is a bool (the caller's tensors are real bools, not 0/1 floats)."""
    for v in list(node.inputs) + list(node.outputs):
        if _is_mask(v) and (v in ctx.g.inputs or v in ctx.g.outputs):
            return (f"{node.op}: a boolean model {'input' if v in ctx.g.inputs else 'output'} stays on the CPU "
                    "(the NPU holds booleans as 0/1 masks of its float type)")
    return None


def _operand(ctx: LowerContext, v: Value, shape: tuple[int, ...]):
    """``v`` as a kernel operand of the output's ``shape`` (a constant is read from its buffer)."""
    return broadcast_to(ctx.tensor(v), shape)


def _zero(ctx: LowerContext, node: Node, shape: tuple[int, ...]):
    return broadcast_to(ctx.const_tensor(f"{node.outputs[0].name}.zero", torch.zeros(1), ".zero"), shape)


def _float_operands(node: Node) -> str | None:
    for v in node.inputs:
        if not (v.type.dtype.is_float or _is_mask(v)):
            return (f"{node.op} of {v.type.dtype.value} values: the NPU compares only the fp16 values of a float "
                    "model (integer tensors such as token ids stay on the CPU)")
    return None


@rule(*COMPARISONS)
def lower_compare(ctx: LowerContext, node: Node):
    why = boundary_problem(ctx, node) or _float_operands(node)
    if why:
        return why
    a, b = node.inputs
    y = node.outputs[0]
    shape = y.type.shape
    k = ctx.kernel(node, "compare", (_operand(ctx, a, shape), _operand(ctx, b, shape)), ctx.out(y),
                   CompareAttrs(node.op))
    return single(k)


@rule("logical_not")
def lower_logical_not(ctx: LowerContext, node: Node):
    why = boundary_problem(ctx, node) or _float_operands(node)
    if why:
        return why
    x, y = node.inputs[0], node.outputs[0]
    shape = y.type.shape
    if _is_mask(x):  # 1 - mask
        epi = (EpilogueOp("sub", scalar=1.0, operand_first=True),)
        return single(ctx.kernel(node, "eltwise", (_operand(ctx, x, shape),), ctx.out(y), epilogue=epi))
    k = ctx.kernel(node, "compare", (_operand(ctx, x, shape), _zero(ctx, node, shape)), ctx.out(y), CompareAttrs("eq"))
    return single(k)


_LOGICAL_STEP = {"logical_and": "mul", "logical_or": "maximum"}


@rule(*_LOGICAL_STEP)
def lower_logical(ctx: LowerContext, node: Node):
    why = boundary_problem(ctx, node)
    if why:
        return why
    a, b = node.inputs
    if not (_is_mask(a) and _is_mask(b)):
        return f"{node.op} of non-boolean operands: the NPU combines 0/1 masks only (compare them with 0 first)"
    y = node.outputs[0]
    shape = y.type.shape
    main, other = (b, a) if a.type.shape != shape else (a, b)
    epi = (EpilogueOp(_LOGICAL_STEP[node.op], operand=_operand(ctx, other, shape)),)
    return single(ctx.kernel(node, "eltwise", (_operand(ctx, main, shape),), ctx.out(y), epilogue=epi))


@rule("where")
def lower_where(ctx: LowerContext, node: Node):
    why = boundary_problem(ctx, node)
    if why:
        return why
    m, a, b = node.inputs
    y = node.outputs[0]
    if not y.type.dtype.is_float:
        return f"where of {y.type.dtype.value} values: the NPU selects only the fp16 values of a float model"
    shape = y.type.shape
    k = ctx.kernel(node, "select", tuple(_operand(ctx, v, shape) for v in (m, a, b)), ctx.out(y))
    return single(k)


def lower_bool_cast(ctx: LowerContext, node: Node):
    """A cast from or to bool, or None when neither side is a bool (called by ``cast``'s rule)."""
    x, y = node.inputs[0], node.outputs[0]
    if not (_is_mask(x) or _is_mask(y)):
        return None
    why = boundary_problem(ctx, node)
    if why:
        return why
    if _is_mask(x) and y.type.dtype.is_float:  # the mask already is 0/1 in the NPU's float type
        return single(views=((y, ctx.tensor(x)),))
    if _is_mask(y) and x.type.dtype.is_float:  # x != 0
        shape = y.type.shape
        k = ctx.kernel(node, "compare", (_operand(ctx, x, shape), _zero(ctx, node, shape)), ctx.out(y),
                       CompareAttrs("ne"))
        return single(k)
    if _is_mask(x) and _is_mask(y):
        return single(views=((y, ctx.tensor(x)),))
    return (f"cast from {x.type.dtype.value} to {y.type.dtype.value}: the NPU holds booleans as 0/1 masks of a "
            "float model, not integers")
