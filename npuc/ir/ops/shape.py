"""Shape and data-movement ops: reshape, permute, expand, slice, select, concat, constant pad,
nearest upsampling, embedding lookup and index_select.

Attributes are static and normalized: no -1 in shapes, non-negative dims and indices, slices with
0 <= start <= end <= size.  The frontend resolves PyTorch's conveniences before building nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from npuc.ir.opdef import NoAttrs, OpDef, Trait, fail, register
from npuc.ir.ops.common import (
    require_dim,
    require_float,
    require_int,
    require_ints_at_least,
    require_min_rank,
    require_permutation,
    require_rank,
    require_same_dtype,
)
from npuc.ir.types import DType, TensorType


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


# ----------------------------------------------------------------------------------- reshape


@dataclass(frozen=True)
class ReshapeAttrs:
    """``reshape``: the full static result shape (no -1)."""

    shape: tuple[int, ...] = ()


def _reshape_verify(ins, a: ReshapeAttrs) -> None:
    require_ints_at_least("reshape", "shape", a.shape, 0)
    if _numel(a.shape) != ins[0].numel:
        raise fail("reshape", f"cannot reshape {ins[0]} ({ins[0].numel} elements) to {list(a.shape)} ({_numel(a.shape)} elements)")


register(
    OpDef(
        name="reshape",
        traits=frozenset({Trait.VIEW}),
        summary="same elements in row-major order, new shape",
        attrs=ReshapeAttrs,
        infer=lambda ins, a: (ins[0].with_shape(a.shape),),
        verify=_reshape_verify,
        reference=lambda ins, a: (torch.reshape(ins[0], a.shape),),
        category="shape",
        operands=("x",),
    )
)

# ----------------------------------------------------------------------------------- permute


@dataclass(frozen=True)
class PermuteAttrs:
    """``permute``: result dim i is input dim perm[i]."""

    perm: tuple[int, ...] = ()


register(
    OpDef(
        name="permute",
        traits=frozenset({Trait.VIEW}),
        summary="reorder dims: result dim i is input dim perm[i]",
        attrs=PermuteAttrs,
        infer=lambda ins, a: (ins[0].with_shape(tuple(ins[0].shape[p] for p in a.perm)),),
        verify=lambda ins, a: require_permutation("permute", "perm", a.perm, ins[0].rank),
        reference=lambda ins, a: (torch.permute(ins[0], a.perm),),
        category="shape",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------------ expand


@dataclass(frozen=True)
class ExpandAttrs:
    """``expand``: the full static shape to broadcast to (no -1)."""

    shape: tuple[int, ...] = ()


def _expand_verify(ins, a: ExpandAttrs) -> None:
    x = ins[0]
    require_ints_at_least("expand", "shape", a.shape, 0)
    if len(a.shape) < x.rank:
        raise fail("expand", f"cannot expand {x} to the lower rank shape {list(a.shape)}")
    for have, want in zip(reversed(x.shape), reversed(a.shape)):
        if have != want and have != 1:
            raise fail("expand", f"cannot expand {x} to {list(a.shape)}: a dim of size {have} cannot become {want}")


register(
    OpDef(
        name="expand",
        traits=frozenset({Trait.VIEW}),
        summary="broadcast x to shape (new leading dims, size-1 dims repeated)",
        attrs=ExpandAttrs,
        infer=lambda ins, a: (ins[0].with_shape(a.shape),),
        verify=_expand_verify,
        reference=lambda ins, a: (ins[0].expand(a.shape).contiguous(),),
        category="shape",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------------- slice


@dataclass(frozen=True)
class SliceAttrs:
    """``slice``: elements start, start+step, ... < end of dim (0 <= start <= end <= size)."""

    dim: int = 0
    start: int = 0
    end: int = 0
    step: int = 1


def _slice_verify(ins, a: SliceAttrs) -> None:
    x = ins[0]
    require_min_rank("slice", x, 1)
    require_dim("slice", a.dim, x.rank)
    size = x.shape[a.dim]
    if not 0 <= a.start <= a.end <= size:
        raise fail("slice", f"need 0 <= start ({a.start}) <= end ({a.end}) <= size ({size}) of dim {a.dim} of {x}")
    if a.step < 1:
        raise fail("slice", f"step = {a.step} must be >= 1")


def _slice_infer(ins, a: SliceAttrs):
    x = ins[0]
    n = (a.end - a.start + a.step - 1) // a.step
    return (x.with_shape(x.shape[: a.dim] + (n,) + x.shape[a.dim + 1 :]),)


def _slice_ref(ins, a: SliceAttrs):
    index = (slice(None),) * a.dim + (slice(a.start, a.end, a.step),)
    return (ins[0][index].contiguous(),)


register(
    OpDef(
        name="slice",
        traits=frozenset({Trait.VIEW}),
        summary="x[start:end:step] along dim",
        attrs=SliceAttrs,
        infer=_slice_infer,
        verify=_slice_verify,
        reference=_slice_ref,
        category="shape",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------------ select


@dataclass(frozen=True)
class SelectAttrs:
    """``select``: one index (0 <= index < size) of dim; the dim is dropped."""

    dim: int = 0
    index: int = 0


def _select_verify(ins, a: SelectAttrs) -> None:
    x = ins[0]
    require_min_rank("select", x, 1)
    require_dim("select", a.dim, x.rank)
    if not 0 <= a.index < x.shape[a.dim]:
        raise fail("select", f"index {a.index} is out of range for dim {a.dim} of {x}")


register(
    OpDef(
        name="select",
        traits=frozenset({Trait.VIEW}),
        summary="x[..., index, ...] at dim, dropping that dim",
        attrs=SelectAttrs,
        infer=lambda ins, a: (ins[0].with_shape(ins[0].shape[: a.dim] + ins[0].shape[a.dim + 1 :]),),
        verify=_select_verify,
        reference=lambda ins, a: (ins[0].select(a.dim, a.index).contiguous(),),
        category="shape",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------------------ concat


@dataclass(frozen=True)
class ConcatAttrs:
    """``concat``: the dim the operands are joined along."""

    dim: int = 0


def _concat_infer(ins, a: ConcatAttrs):
    first = ins[0]
    require_min_rank("concat", first, 1, "operand 0")
    require_dim("concat", a.dim, first.rank)
    require_same_dtype("concat", ins)
    for i, t in enumerate(ins):
        same = t.rank == first.rank and all(
            s == f for d, (s, f) in enumerate(zip(t.shape, first.shape)) if d != a.dim
        )
        if not same:
            raise fail("concat", f"operand {i} {t} does not match operand 0 {first} outside dim {a.dim}")
    size = sum(t.shape[a.dim] for t in ins)
    return (first.with_shape(first.shape[: a.dim] + (size,) + first.shape[a.dim + 1 :]),)


register(
    OpDef(
        name="concat",
        traits=frozenset({Trait.IMAGE_PRESERVING}),
        summary="join the operands along dim (other dims equal)",
        attrs=ConcatAttrs,
        infer=_concat_infer,
        reference=lambda ins, a: (torch.cat(list(ins), a.dim),),
        min_inputs=1,
        max_inputs=None,
        category="shape",
        operands=("xs...",),
    )
)

# --------------------------------------------------------------------------------------- pad


@dataclass(frozen=True)
class PadAttrs:
    """``pad``: (before, after) pairs from the last dim backwards, as F.pad; negative crops."""

    pads: tuple[int, ...] = ()
    value: float = 0.0


def _padded_shape(x: TensorType, pads: tuple[int, ...]) -> tuple[int, ...]:
    shape = list(x.shape)
    for i in range(len(pads) // 2):
        shape[x.rank - 1 - i] += pads[2 * i] + pads[2 * i + 1]
    return tuple(shape)


def _pad_verify(ins, a: PadAttrs) -> None:
    x = ins[0]
    if len(a.pads) % 2 or not 2 <= len(a.pads) <= 2 * x.rank:
        raise fail("pad", f"pads = {list(a.pads)} must hold 1..{x.rank} (before, after) pairs for {x}")
    shape = _padded_shape(x, a.pads)
    if any(s < 0 for s in shape):
        raise fail("pad", f"pads = {list(a.pads)} would give {x} the negative shape {shape}")
    if not x.dtype.is_float and math.isfinite(a.value) and a.value != int(a.value):
        raise fail("pad", f"value {a.value} for an integer tensor must be an integer")
    if not x.dtype.is_float and not math.isfinite(a.value):
        raise fail("pad", f"value {a.value} for an integer tensor must be finite")


def _pad_ref(ins, a: PadAttrs):
    x = ins[0]
    value = a.value if x.dtype.is_floating_point else int(a.value)
    return (F.pad(x, a.pads, mode="constant", value=value),)


register(
    OpDef(
        name="pad",
        traits=frozenset({Trait.IMAGE_PRESERVING}),
        summary="constant padding (F.pad order: last dim first, (before, after)); negative pads crop",
        attrs=PadAttrs,
        infer=lambda ins, a: (ins[0].with_shape(_padded_shape(ins[0], a.pads)),),
        verify=_pad_verify,
        reference=_pad_ref,
        category="shape",
        operands=("x",),
    )
)

# ------------------------------------------------------------------------- upsample_nearest2d


@dataclass(frozen=True)
class UpsampleNearest2dAttrs:
    """``upsample_nearest2d``: the (h, w) output size."""

    output_size: tuple[int, int] = (1, 1)


def _upsample_infer(ins, a: UpsampleNearest2dAttrs):
    x = ins[0]
    require_rank("upsample_nearest2d", x, 4, "input (NCHW)")
    if not (x.dtype == DType.i8 and x.quant is not None):
        require_float("upsample_nearest2d", x, "input (floating point, or quantized i8)")
    return (x.with_shape(x.shape[:2] + tuple(a.output_size)),)


def _upsample_ref(ins, a: UpsampleNearest2dAttrs):
    x = ins[0]
    # PyTorch has no integer kernel; int8 codes pass through fp32 exactly.
    y = F.interpolate(x if x.dtype.is_floating_point else x.to(torch.float32), size=a.output_size, mode="nearest")
    return (y.to(x.dtype),)


register(
    OpDef(
        name="upsample_nearest2d",
        traits=frozenset({Trait.IMAGE_CONSUMER, Trait.IMAGE_PRODUCER}),
        summary="output pixel (i, j) copies input (floor(i*H/oh), floor(j*W/ow)) (mode 'nearest')",
        attrs=UpsampleNearest2dAttrs,
        infer=_upsample_infer,
        verify=lambda ins, a: require_ints_at_least("upsample_nearest2d", "output_size", a.output_size, 1, count=2),
        reference=_upsample_ref,
        category="shape",
        operands=("x",),
    )
)

# --------------------------------------------------------------------------------- embedding


def _embedding_infer(ins, a):
    weight, indices = ins
    require_rank("embedding", weight, 2, "weight [num, D]")
    require_int("embedding", indices, "indices")
    return (weight.with_shape(indices.shape + (weight.shape[1],)),)


register(
    OpDef(
        name="embedding",
        summary="rows of weight [num, D] picked by integer indices -> [*indices.shape, D]",
        attrs=NoAttrs,
        infer=_embedding_infer,
        reference=lambda ins, a: (F.embedding(ins[1], ins[0]),),
        min_inputs=2,
        max_inputs=2,
        category="shape",
        operands=("weight", "indices"),
    )
)

# ------------------------------------------------------------------------------ index_select


@dataclass(frozen=True)
class IndexSelectAttrs:
    """``index_select``: the dim the 1-D index picks entries of."""

    dim: int = 0


def _index_select_infer(ins, a: IndexSelectAttrs):
    x, index = ins
    require_min_rank("index_select", x, 1)
    require_dim("index_select", a.dim, x.rank)
    require_int("index_select", index, "index")
    if index.rank > 1:
        raise fail("index_select", f"index must have rank 0 or 1, got {index}")
    return (x.with_shape(x.shape[: a.dim] + (index.numel,) + x.shape[a.dim + 1 :]),)


register(
    OpDef(
        name="index_select",
        summary="entries index[k] of dim, in order (repeats allowed)",
        attrs=IndexSelectAttrs,
        infer=_index_select_infer,
        reference=lambda ins, a: (torch.index_select(ins[0], a.dim, ins[1]),),
        min_inputs=2,
        max_inputs=2,
        category="shape",
        operands=("x", "index"),
    )
)

# ------------------------------------------------------------------------------------- flip


@dataclass(frozen=True)
class FlipAttrs:
    """``flip``: the (non-negative, distinct) dims reversed."""

    dims: tuple[int, ...] = ()


def _flip_verify(ins, a: FlipAttrs) -> None:
    if len(set(a.dims)) != len(a.dims):
        raise fail("flip", f"dims {list(a.dims)} name a dim twice")
    for d in a.dims:
        require_dim("flip", d, ins[0].rank)


register(
    OpDef(
        name="flip",
        summary="x with the order of its elements reversed along each of dims",
        attrs=FlipAttrs,
        infer=lambda ins, a: (ins[0],),
        verify=_flip_verify,
        reference=lambda ins, a: (torch.flip(ins[0], list(a.dims)),),
        category="shape",
        operands=("x",),
    )
)

# ----------------------------------------------------------------------------------- gather


@dataclass(frozen=True)
class GatherAttrs:
    """``gather``: the dim indexed."""

    dim: int = 0


def _gather_infer(ins, a: GatherAttrs):
    x, index = ins
    require_int("gather", index, "index")
    if index.rank != x.rank:
        raise fail("gather", f"index must have the input's rank {x.rank}, got {index}")
    require_dim("gather", a.dim, x.rank)
    for d, (n, m) in enumerate(zip(index.shape, x.shape)):
        if d != a.dim and n > m:
            raise fail("gather", f"index dim {d} has {n} entries, more than the input's {m}")
    return (x.with_shape(index.shape),)


register(
    OpDef(
        name="gather",
        summary="out[i][j][k] = x[index[i][j][k]][j][k] (dim 0; likewise for other dims)",
        attrs=GatherAttrs,
        infer=_gather_infer,
        reference=lambda ins, a: (torch.gather(ins[0], a.dim, ins[1]),),
        min_inputs=2,
        max_inputs=2,
        category="shape",
        operands=("x", "index"),
    )
)
