"""Checks shared by the op families: dtype classes, ranks, dims and broadcasting.

Each helper raises the :func:`npuc.ir.opdef.fail` error of the op it checks for, so a message
always names the op, the operand or attribute, and the reason.
"""

from __future__ import annotations

from typing import Sequence

from npuc.ir.opdef import fail
from npuc.ir.types import DType, TensorType


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/PyTorch broadcasting of static shapes."""
    out: list[int] = []
    for i in range(1, max((len(s) for s in shapes), default=0) + 1):
        sizes = {s[-i] for s in shapes if i <= len(s)}
        big = sizes - {1}
        if len(big) > 1:
            listed = " and ".join(str(list(s)) for s in shapes)
            raise fail(op, f"shapes {listed} do not broadcast")
        out.append(big.pop() if big else 1)
    return tuple(reversed(out))


def require_float(op: str, t: TensorType, what: str = "input") -> None:
    """The operand must hold floating-point elements."""
    if not t.dtype.is_float:
        raise fail(op, f"{what} must be a floating-point tensor, got {t.dtype.value}")


def require_numeric(op: str, t: TensorType, what: str = "input") -> None:
    """The operand must hold numbers (not booleans)."""
    if t.dtype == DType.bool:
        raise fail(op, f"{what} must be numeric, got a boolean tensor")


def require_int(op: str, t: TensorType, what: str = "input") -> None:
    """The operand must hold integers (indices)."""
    if t.dtype.is_float or t.dtype == DType.bool:
        raise fail(op, f"{what} must be an integer tensor, got {t.dtype.value}")


def require_rank(op: str, t: TensorType, rank: int, what: str = "input") -> None:
    if t.rank != rank:
        raise fail(op, f"{what} must have rank {rank}, got {t} (rank {t.rank})")


def require_min_rank(op: str, t: TensorType, rank: int, what: str = "input") -> None:
    if t.rank < rank:
        raise fail(op, f"{what} must have rank >= {rank}, got {t} (rank {t.rank})")


def require_same_dtype(op: str, types: Sequence[TensorType]) -> None:
    dtypes = [t.dtype.value for t in types]
    if len(set(dtypes)) > 1:
        raise fail(op, f"operand dtypes differ ({', '.join(dtypes)})")


def require_dim(op: str, dim: int, rank: int, what: str = "dim") -> None:
    """``dim`` must be a normalized (non-negative) dimension index of a rank-``rank`` tensor."""
    if not 0 <= dim < rank:
        raise fail(op, f"{what} = {dim} is out of range for rank {rank} (normalized dims are 0..{rank - 1})")


def require_ints_at_least(op: str, name: str, values: Sequence[int], minimum: int, count: int | None = None) -> None:
    """Every entry of attribute ``name`` must be >= ``minimum`` (and there must be ``count`` of them)."""
    if count is not None and len(values) != count:
        raise fail(op, f"{name} must have {count} entries, got {list(values)}")
    if any(v < minimum for v in values):
        raise fail(op, f"{name} = {list(values)} must be >= {minimum} in every entry")


def require_permutation(op: str, name: str, values: Sequence[int], rank: int) -> None:
    if sorted(values) != list(range(rank)):
        raise fail(op, f"{name} = {list(values)} is not a permutation of 0..{rank - 1}")
