"""Layout: how each value is stored in DRAM, and the view helpers lowering uses.

Rule: a 4-D float (or int8) value that is an image (produced by a convolution, a pooling or an upsampling,
a graph input read by one, or an elementwise/pad/concat result of an image) is stored
channels-last (NHWC: the channel stride is the element size), which is what the array and
pooling kernels read without a transpose.  Every other value is row-major in its logical order.
Views (reshape, permute, slice, select, expand, float casts) are new strides over the producer's
bytes; only a reshape the strides cannot express costs a ``copy``.

A dense layout is named by the order of its dimensions, outermost first: ``NCHW`` (row-major,
written as no layout at all), ``NHWC``, or ``order=2,0,1`` for any other permutation.
"""

from __future__ import annotations

from npuc.kir.tensor import NHWC, DramTensor, row_major_strides
from npuc.errors import CompileError
from npuc.ir.graph import Graph, Value
from npuc.ir.opdef import Trait, ops_with
from npuc.ir.types import DType as IRType

IMAGE_CONSUMERS = ops_with(Trait.IMAGE_CONSUMER)
IMAGE_PRODUCERS = ops_with(Trait.IMAGE_PRODUCER)
# Ops whose 4-D result is an image when one of their 4-D inputs is.
IMAGE_PRESERVING = ops_with(Trait.IMAGE_PRESERVING)


def _storable(v: Value) -> bool:
    """A 4-D float or int8 value (int8: a quantized activation) may be stored as an image."""
    return v.type.rank == 4 and (v.type.dtype.is_float or v.type.dtype == IRType.i8)


def image_values(g: Graph) -> set[Value]:
    """The values stored channels-last (see the module docstring)."""
    users = g.users()
    images: set[Value] = set()
    for v in g.inputs:
        if _storable(v) and any(u.op in IMAGE_CONSUMERS for u in users.get(v, [])):
            images.add(v)
    for n in g.nodes:
        for v in n.outputs:
            if not _storable(v):
                continue
            if n.op in IMAGE_PRODUCERS or (n.op in IMAGE_PRESERVING and any(i in images for i in n.inputs)):
                images.add(v)
    return images


def order_of(v: Value, images: set[Value]) -> tuple[int, ...]:
    """The storage order of a value with its own buffer (outermost logical dimension first)."""
    return NHWC if v in images else tuple(range(v.type.rank))


def is_channels_last(t: DramTensor) -> bool:
    """A 4-D tensor whose channel stride is the element size (what image kernels read)."""
    return t.rank == 4 and (t.strides[1] == t.dtype.size or t.shape[1] == 1)


def broadcast_to(t: DramTensor, shape: tuple[int, ...]) -> DramTensor:
    """``t`` seen with ``shape`` by NumPy broadcasting: new and size-1 dims get stride 0."""
    shape = tuple(shape)
    pad = len(shape) - t.rank
    if pad < 0:
        raise CompileError(f"cannot broadcast {t} to the lower-rank shape {list(shape)}")
    old_shape = (1,) * pad + t.shape
    old_strides = (0,) * pad + t.strides
    strides = []
    for have, want, s in zip(old_shape, shape, old_strides):
        if have == want:
            strides.append(s)
        elif have == 1:
            strides.append(0)
        else:
            raise CompileError(f"cannot broadcast {t} to {list(shape)}")
    return DramTensor(t.name, shape, t.dtype, t.addr, tuple(strides))


def dense_order(t: DramTensor) -> tuple[int, ...] | None:
    """The order in which ``t`` is stored densely (no gaps, no repeats), or None.

    Size-1 dims may sit anywhere; row-major, then NHWC, is preferred when the bytes agree.
    """
    candidates = [tuple(range(t.rank))]
    if t.rank == 4:
        candidates.append(NHWC)
    units = [d for d in range(t.rank) if t.shape[d] == 1]
    rest = sorted((d for d in range(t.rank) if t.shape[d] != 1), key=lambda d: (-t.strides[d], d))
    candidates.append(tuple(units + rest))
    for order in candidates:
        if _stored_in(t, order):
            return order
    return None


def _stored_in(t: DramTensor, order: tuple[int, ...]) -> bool:
    want = row_major_strides(t.shape, t.dtype.size, order)
    return all(t.strides[d] == want[d] for d in range(t.rank) if t.shape[d] != 1)
