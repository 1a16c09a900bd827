"""Reductions over dims: sum, mean, max, min, and argmax."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from npuc.ir.opdef import OpDef, fail, register
from npuc.ir.ops.common import require_dim, require_float, require_min_rank, require_numeric
from npuc.ir.types import DType, TensorType


def reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    """The shape left after reducing ``dims`` (kept as size 1 when ``keepdim``)."""
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


@dataclass(frozen=True)
class ReduceAttrs:
    """``reduce_*``: the dims reduced (non-negative, sorted, unique) and whether they are kept."""

    dims: tuple[int, ...] = (0,)
    keepdim: bool = False


def _reduce_verify(name: str):
    def verify(ins, a: ReduceAttrs) -> None:
        x = ins[0]
        require_min_rank(name, x, 1)
        if not a.dims:
            raise fail(name, "dims must name at least one dim")
        for d in a.dims:
            require_dim(name, d, x.rank, "dims entry")
        if list(a.dims) != sorted(set(a.dims)):
            raise fail(name, f"dims = {list(a.dims)} must be sorted and unique")

    return verify


def _reduce(name: str, summary: str, fn, accepts_float_only: bool) -> None:
    def infer(ins, a: ReduceAttrs):
        x = ins[0]
        (require_float if accepts_float_only else require_numeric)(name, x, "input")
        return (x.with_shape(reduced_shape(x.shape, a.dims, a.keepdim)),)

    register(
        OpDef(
            name=name,
            summary=summary,
            attrs=ReduceAttrs,
            infer=infer,
            verify=_reduce_verify(name),
            reference=lambda ins, a: (fn(ins[0], a.dims, a.keepdim).to(ins[0].dtype),),
            category="reduction",
            operands=("x",),
        )
    )


_reduce("reduce_sum", "sum over dims (in the input dtype)", lambda x, d, k: torch.sum(x, d, k, dtype=x.dtype), False)
_reduce("reduce_mean", "mean over dims", torch.mean, True)
_reduce("reduce_max", "max over dims (NaN propagates)", torch.amax, False)
_reduce("reduce_min", "min over dims (NaN propagates)", torch.amin, False)

# ------------------------------------------------------------------------------------ argmax


@dataclass(frozen=True)
class ArgmaxAttrs:
    """``argmax``: the dim searched and whether it is kept as size 1."""

    dim: int = 0
    keepdim: bool = False


def _argmax_verify(ins, a: ArgmaxAttrs) -> None:
    require_min_rank("argmax", ins[0], 1)
    require_dim("argmax", a.dim, ins[0].rank)


def _argmax_infer(ins, a: ArgmaxAttrs):
    x = ins[0]
    require_numeric("argmax", x)
    if x.shape[a.dim] == 0:
        raise fail("argmax", f"cannot take the argmax of the empty dim {a.dim} of {x}")
    return (TensorType(reduced_shape(x.shape, (a.dim,), a.keepdim), DType.i64),)


register(
    OpDef(
        name="argmax",
        summary="index (i64) of the first maximum along dim",
        attrs=ArgmaxAttrs,
        infer=_argmax_infer,
        verify=_argmax_verify,
        reference=lambda ins, a: (torch.argmax(ins[0], a.dim, a.keepdim),),
        category="reduction",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------------ cumsum


@dataclass(frozen=True)
class CumsumAttrs:
    """``cumsum``: the (non-negative) dim summed along."""

    dim: int = 0


def _cumsum_infer(ins, a: CumsumAttrs):
    x = ins[0]
    require_numeric("cumsum", x)
    require_min_rank("cumsum", x, 1)
    require_dim("cumsum", a.dim, x.rank)
    return (x,)


register(
    OpDef(
        name="cumsum",
        summary="out[..., i, ...] = sum of x[..., :i+1, ...] along dim (same dtype as x)",
        attrs=CumsumAttrs,
        infer=_cumsum_infer,
        reference=lambda ins, a: (torch.cumsum(ins[0], a.dim, dtype=ins[0].dtype),),
        category="reduction",
        operands=("x",),
    )
)
