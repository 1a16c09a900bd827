"""Linear algebra ops: 2-D convolution, linear (fully connected) layers and batched matmul."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from npuc.ir.opdef import NoAttrs, OpDef, Trait, fail, register
from npuc.ir.ops.common import (
    broadcast_shapes,
    require_float,
    require_ints_at_least,
    require_min_rank,
    require_numeric,
    require_rank,
    require_same_dtype,
)
from npuc.ir.types import TensorType


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a convolution window sliding over ``size`` elements (PyTorch's rule)."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


# ------------------------------------------------------------------------------------ conv2d


@dataclass(frozen=True)
class Conv2dAttrs:
    """``conv2d``: window stride, symmetric zero padding, dilation (each (h, w)) and groups."""

    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


def _conv2d_verify(ins, a: Conv2dAttrs) -> None:
    require_ints_at_least("conv2d", "stride", a.stride, 1, count=2)
    require_ints_at_least("conv2d", "padding", a.padding, 0, count=2)
    require_ints_at_least("conv2d", "dilation", a.dilation, 1, count=2)
    if a.groups < 1:
        raise fail("conv2d", f"groups = {a.groups} must be >= 1")
    x, w = ins[0], ins[1]
    if x.rank == 4 and x.shape[1] % a.groups:
        raise fail("conv2d", f"groups = {a.groups} does not divide the {x.shape[1]} input channels")
    if w.rank == 4 and w.shape[0] % a.groups:
        raise fail("conv2d", f"groups = {a.groups} does not divide the {w.shape[0]} output channels")


def _conv2d_infer(ins, a: Conv2dAttrs):
    x, w = ins[0], ins[1]
    require_rank("conv2d", x, 4, "input (NCHW)")
    require_rank("conv2d", w, 4, "weight [O, I/groups, kh, kw]")
    require_float("conv2d", x)
    require_same_dtype("conv2d", ins)
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    if i * a.groups != c:
        raise fail("conv2d", f"weight {w} expects {i} x {a.groups} groups input channels, input {x} has {c}")
    if kh < 1 or kw < 1:
        raise fail("conv2d", f"kernel size {kh}x{kw} must be >= 1")
    if len(ins) == 3 and ins[2].shape != (o,):
        raise fail("conv2d", f"bias must be of shape [{o}], got {ins[2]}")
    oh = conv_output_size(h, kh, a.stride[0], a.padding[0], a.dilation[0])
    ow = conv_output_size(wd, kw, a.stride[1], a.padding[1], a.dilation[1])
    if oh < 1 or ow < 1:
        raise fail("conv2d", f"output would be {oh}x{ow}: the dilated kernel does not fit the padded input {x}")
    return (TensorType((n, o, oh, ow), x.dtype),)


def _conv2d_ref(ins, a: Conv2dAttrs):
    b = ins[2] if len(ins) == 3 else None
    return (F.conv2d(ins[0], ins[1], b, a.stride, a.padding, a.dilation, a.groups),)


register(
    OpDef(
        name="conv2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="2-D cross-correlation, NCHW input, weight [O, I/groups, kh, kw], optional bias [O]",
        attrs=Conv2dAttrs,
        infer=_conv2d_infer,
        verify=_conv2d_verify,
        reference=_conv2d_ref,
        min_inputs=2,
        max_inputs=3,
        category="linalg",
        operands=("x", "w", "[b]"),
    )
)

# ------------------------------------------------------------------------------------ linear


def _linear_infer(ins, a):
    x, w = ins[0], ins[1]
    require_min_rank("linear", x, 1)
    require_rank("linear", w, 2, "weight [N, K]")
    require_float("linear", x)
    require_same_dtype("linear", ins)
    n, k = w.shape
    if x.shape[-1] != k:
        raise fail("linear", f"input {x} has {x.shape[-1]} features, weight {w} expects {k}")
    if len(ins) == 3 and ins[2].shape != (n,):
        raise fail("linear", f"bias must be of shape [{n}], got {ins[2]}")
    return (x.with_shape(x.shape[:-1] + (n,)),)


def _linear_ref(ins, a):
    b = ins[2] if len(ins) == 3 else None
    return (F.linear(ins[0], ins[1], b),)


register(
    OpDef(
        name="linear",
        summary="x @ w^T + b: x [..., K], w [N, K], optional b [N] -> [..., N]",
        attrs=NoAttrs,
        infer=_linear_infer,
        reference=_linear_ref,
        min_inputs=2,
        max_inputs=3,
        category="linalg",
        operands=("x", "w", "[b]"),
    )
)

# ------------------------------------------------------------------------------------ matmul


def _matmul_infer(ins, a):
    x, y = ins
    require_min_rank("matmul", x, 2, "first operand")
    require_min_rank("matmul", y, 2, "second operand")
    require_numeric("matmul", x)
    require_same_dtype("matmul", ins)
    if x.shape[-1] != y.shape[-2]:
        raise fail("matmul", f"inner dimensions differ: {x} @ {y}")
    batch = broadcast_shapes("matmul", x.shape[:-2], y.shape[:-2])
    return (TensorType(batch + (x.shape[-2], y.shape[-1]), x.dtype),)


register(
    OpDef(
        name="matmul",
        summary="matrix product of the last two dims, leading (batch) dims broadcast; ranks >= 2",
        attrs=NoAttrs,
        infer=_matmul_infer,
        reference=lambda ins, a: (torch.matmul(ins[0], ins[1]),),
        min_inputs=2,
        max_inputs=2,
        category="linalg",
        operands=("a", "b"),
    )
)

# -------------------------------------------------------------------------- conv_transpose2d


@dataclass(frozen=True)
class ConvTranspose2dAttrs:
    """``conv_transpose2d``: stride, padding, output padding, dilation (each (h, w)) and groups."""

    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    output_padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


def verify_conv_transpose(ins, a: ConvTranspose2dAttrs, op: str = "conv_transpose2d") -> None:
    """The window attributes of a transposed convolution (float or int8) are in their domains."""
    require_ints_at_least(op, "stride", a.stride, 1, count=2)
    require_ints_at_least(op, "padding", a.padding, 0, count=2)
    require_ints_at_least(op, "output_padding", a.output_padding, 0, count=2)
    require_ints_at_least(op, "dilation", a.dilation, 1, count=2)
    if a.groups < 1 or (ins[0].rank == 4 and ins[0].shape[1] % a.groups):
        raise fail(op, f"groups = {a.groups} must divide the input channels")
    for i in range(2):
        if a.output_padding[i] >= max(a.stride[i], a.dilation[i]):
            raise fail(op, f"output_padding {list(a.output_padding)} must be smaller than the stride or the dilation")


def conv_transpose_output_size(size: int, kernel: int, stride: int, padding: int, output_padding: int,
                               dilation: int) -> int:
    """Output length of a transposed convolution (PyTorch's rule)."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def _conv_t_infer(ins, a: ConvTranspose2dAttrs):
    op = "conv_transpose2d"
    x, w = ins[0], ins[1]
    require_rank(op, x, 4, "input (NCHW)")
    require_rank(op, w, 4, "weight [I, O/groups, kh, kw]")
    require_float(op, x)
    require_same_dtype(op, ins)
    n, c, h, wd = x.shape
    i, o, kh, kw = w.shape
    if i != c:
        raise fail(op, f"weight {w} expects {i} input channels, input {x} has {c}")
    out_c = o * a.groups
    if len(ins) == 3 and ins[2].shape != (out_c,):
        raise fail(op, f"bias must be of shape [{out_c}], got {ins[2]}")
    oh = conv_transpose_output_size(h, kh, a.stride[0], a.padding[0], a.output_padding[0], a.dilation[0])
    ow = conv_transpose_output_size(wd, kw, a.stride[1], a.padding[1], a.output_padding[1], a.dilation[1])
    if oh < 1 or ow < 1:
        raise fail(op, f"output would be {oh}x{ow}: the padding removes every output pixel")
    return (TensorType((n, out_c, oh, ow), x.dtype),)


def _conv_t_ref(ins, a: ConvTranspose2dAttrs):
    b = ins[2] if len(ins) == 3 else None
    return (F.conv_transpose2d(ins[0], ins[1], b, a.stride, a.padding, a.output_padding, a.groups, a.dilation),)


register(
    OpDef(
        name="conv_transpose2d",
        summary="2-D transposed convolution (the gradient of conv2d), weight [I, O/groups, kh, kw], optional bias",
        attrs=ConvTranspose2dAttrs,
        infer=_conv_t_infer,
        verify=verify_conv_transpose,
        reference=_conv_t_ref,
        min_inputs=2,
        max_inputs=3,
        category="linalg",
        operands=("x", "w", "[b]"),
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
    )
)
