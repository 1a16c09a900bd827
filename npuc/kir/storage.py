"""How NPU-side tensors are stored in DRAM: element types and the names of dense layouts.

The ISA element type of a kernel's tensors maps to a graph element type (``IR_OF_ISA``), a graph
element type to the numpy type its bytes are read as (``numpy_dtype``); a dense layout is named by
the order of its dimensions, outermost first: ``NCHW`` (row-major, written as no layout at all),
``NHWC``, or ``order=2,0,1`` for any other permutation (``layout_name``/``parse_layout``).  The
lowering, the packer and the runtime read these one definitions.
"""

from __future__ import annotations

import numpy as np

from npuc.errors import NpucError
from npuc.ir.types import DType as IRType
from npuc.isa.enums import DType
from npuc.kir.tensor import NHWC

IR_OF_ISA: dict[DType, IRType] = {
    DType.int8: IRType.i8,
    DType.int16: IRType.i16,
    DType.int32: IRType.i32,
    DType.fp16: IRType.f16,
    DType.fp32: IRType.f32,
}


_NP_OF_IR: dict[IRType, np.dtype] = {
    IRType.f32: np.dtype("<f4"),
    IRType.f16: np.dtype("<f2"),
    IRType.f64: np.dtype("<f8"),
    IRType.i64: np.dtype("<i8"),
    IRType.i32: np.dtype("<i4"),
    IRType.i16: np.dtype("<i2"),
    IRType.i8: np.dtype("i1"),
    IRType.u8: np.dtype("u1"),
    IRType.bool: np.dtype("?"),
}


def numpy_dtype(dtype: IRType) -> np.dtype:
    """The numpy element type a graph dtype is stored as in DRAM (bf16 has none: refused)."""
    try:
        return _NP_OF_IR[dtype]
    except KeyError:
        raise NpucError(f"npuc cannot store {dtype.value} tensors in DRAM") from None


def storage_dtype(dtype: IRType) -> IRType:
    """How a CPU-side value of ``dtype`` is stored in DRAM (bf16 widens to f32; others as is)."""
    return IRType.f32 if dtype == IRType.bf16 else dtype


def layout_name(order: tuple[int, ...]) -> str | None:
    """The IO/binding layout string of a dense order (None for row-major)."""
    if order == tuple(range(len(order))):
        return None
    if order == NHWC:
        return "NHWC"
    return "order=" + ",".join(str(d) for d in order)


def parse_layout(layout: str | None, rank: int) -> tuple[int, ...]:
    """The order a layout string names (the inverse of :func:`layout_name`)."""
    if layout is None or layout == "NCHW":
        return tuple(range(rank))
    if layout == "NHWC" and rank == 4:
        return NHWC
    if layout.startswith("order="):
        try:
            order = tuple(int(x) for x in layout[6:].split(","))
        except ValueError:
            order = ()
        if sorted(order) == list(range(rank)):
            return order
    raise NpucError(f"unknown layout '{layout}' for a rank-{rank} tensor")
