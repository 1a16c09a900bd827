"""Elementwise ops: unary activations and broadcasting binary arithmetic."""

from __future__ import annotations

import torch

from npuc.ir.opdef import NoAttrs, OpDef, fail, register
from npuc.ir.types import TensorType


def broadcast_shapes(op: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/PyTorch broadcasting of two static shapes."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise fail(op, f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(reversed(out))


def _same_type(ins, a):
    return (ins[0],)


def _unary(name: str, summary: str, fn) -> None:
    register(
        OpDef(
            name=name,
            summary=summary,
            attrs=NoAttrs,
            infer=_same_type,
            reference=lambda ins, a: (fn(ins[0]),),
            category="elementwise",
        )
    )


def _binary_infer(name: str):
    def infer(ins, a):
        x, y = ins
        if x.dtype != y.dtype:
            raise fail(name, f"operand dtypes differ ({x.dtype.value} and {y.dtype.value})")
        return (TensorType(broadcast_shapes(name, x.shape, y.shape), x.dtype),)

    return infer


def _binary(name: str, summary: str, fn) -> None:
    register(
        OpDef(
            name=name,
            summary=summary,
            attrs=NoAttrs,
            infer=_binary_infer(name),
            reference=lambda ins, a: (fn(ins[0], ins[1]),),
            min_inputs=2,
            max_inputs=2,
            category="elementwise",
        )
    )


_unary("relu", "max(x, 0)", torch.relu)
_binary("add", "x + y with broadcasting", torch.add)
