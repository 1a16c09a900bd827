"""Pooling ops over the two spatial dims of an NCHW tensor: max, average and adaptive average."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from npuc.ir.opdef import OpDef, Trait, fail, register
from npuc.ir.ops.common import require_float, require_ints_at_least, require_rank
from npuc.ir.types import DType, TensorType


def pool_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """Output length of a pooling window (PyTorch's rule, ceil_mode included).

    With ceil_mode the last window may hang over the end, but it must start inside the input or
    the left padding; a window that would start in the right padding is dropped.
    """
    span = size + 2 * padding - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _check_window(op: str, kernel, stride, padding, dilation) -> None:
    require_ints_at_least(op, "kernel", kernel, 1, count=2)
    require_ints_at_least(op, "stride", stride, 1, count=2)
    require_ints_at_least(op, "padding", padding, 0, count=2)
    require_ints_at_least(op, "dilation", dilation, 1, count=2)
    for k, p in zip(kernel, padding):
        if p > k // 2:
            raise fail(op, f"padding {list(padding)} must be at most half of the kernel {list(kernel)}")


def _pool_infer(op: str, x: TensorType, kernel, stride, padding, dilation, ceil_mode: bool, int8: bool = False):
    require_rank(op, x, 4, "input (NCHW)")
    if not (int8 and x.dtype == DType.i8 and x.quant is not None):
        require_float(op, x, "input (floating point, or quantized i8 for max_pool2d)" if int8 else "input")
    n, c, h, w = x.shape
    oh = pool_output_size(h, kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = pool_output_size(w, kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise fail(op, f"output would be {oh}x{ow}: the window {list(kernel)} does not fit the input {x}")
    return (x.with_shape((n, c, oh, ow)),)


# -------------------------------------------------------------------------------- max_pool2d


@dataclass(frozen=True)
class MaxPool2dAttrs:
    """``max_pool2d``: window size, stride, padding (with -inf), dilation, each (h, w)."""

    kernel: tuple[int, int] = (2, 2)
    stride: tuple[int, int] = (2, 2)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False


def _max_pool_ref(ins, a: MaxPool2dAttrs):
    return (F.max_pool2d(ins[0], a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode),)


register(
    OpDef(
        name="max_pool2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="max over each (dilated) window; padding never wins (float, or quantized i8 kept as is)",
        attrs=MaxPool2dAttrs,
        infer=lambda ins, a: _pool_infer("max_pool2d", ins[0], a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode,
                                         int8=True),
        verify=lambda ins, a: _check_window("max_pool2d", a.kernel, a.stride, a.padding, a.dilation),
        reference=_max_pool_ref,
        category="pooling",
        operands=("x",),
    )
)

# -------------------------------------------------------------------------------- avg_pool2d


@dataclass(frozen=True)
class AvgPool2dAttrs:
    """``avg_pool2d``: window, stride, zero padding; whether padding counts in the divisor, or a
    fixed divisor."""

    kernel: tuple[int, int] = (2, 2)
    stride: tuple[int, int] = (2, 2)
    padding: tuple[int, int] = (0, 0)
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None


def _avg_pool_verify(ins, a: AvgPool2dAttrs) -> None:
    _check_window("avg_pool2d", a.kernel, a.stride, a.padding, (1, 1))
    if a.divisor_override is not None and a.divisor_override < 1:
        raise fail("avg_pool2d", f"divisor_override = {a.divisor_override} must be >= 1 or none")


def _avg_pool_ref(ins, a: AvgPool2dAttrs):
    return (
        F.avg_pool2d(ins[0], a.kernel, a.stride, a.padding, a.ceil_mode, a.count_include_pad, a.divisor_override),
    )


register(
    OpDef(
        name="avg_pool2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="mean over each window (divisor: window incl. or excl. padding, or divisor_override)",
        attrs=AvgPool2dAttrs,
        infer=lambda ins, a: _pool_infer("avg_pool2d", ins[0], a.kernel, a.stride, a.padding, (1, 1), a.ceil_mode),
        verify=_avg_pool_verify,
        reference=_avg_pool_ref,
        category="pooling",
        operands=("x",),
    )
)

# ----------------------------------------------------------------------- adaptive_avg_pool2d


@dataclass(frozen=True)
class AdaptiveAvgPool2dAttrs:
    """``adaptive_avg_pool2d``: the (h, w) output size."""

    output_size: tuple[int, int] = (1, 1)


def _adaptive_infer(ins, a: AdaptiveAvgPool2dAttrs):
    x = ins[0]
    require_rank("adaptive_avg_pool2d", x, 4, "input (NCHW)")
    require_float("adaptive_avg_pool2d", x)
    return (x.with_shape(x.shape[:2] + tuple(a.output_size)),)


register(
    OpDef(
        name="adaptive_avg_pool2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="mean over windows [floor(i*H/oh), ceil((i+1)*H/oh)) giving an output_size map",
        attrs=AdaptiveAvgPool2dAttrs,
        infer=_adaptive_infer,
        verify=lambda ins, a: require_ints_at_least("adaptive_avg_pool2d", "output_size", a.output_size, 1, count=2),
        reference=lambda ins, a: (F.adaptive_avg_pool2d(ins[0], a.output_size),),
        category="pooling",
        operands=("x",),
    )
)
