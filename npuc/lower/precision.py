"""Precision: which element type the NPU computes a graph in, in one place.

A float graph runs on the NPU in fp16 (weights converted at compile time, fp32 accumulation in the
array); the API's inputs and outputs stay fp32 and are converted at the edges.  A target without
fp16 runs a float graph on the CPU until it is quantized (the int8 path plugs in here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from npuc.errors import NpucError
from npuc.ir.types import DType as IRType
from npuc.isa.enums import DType

NO_FP16_REASON = "target has no fp16 path; quantize to int8 (--quantize int8)"


@dataclass(frozen=True)
class Precision:
    """How the NPU computes: ``dtype`` of every kernel and NPU-side DRAM tensor, or None when the
    NPU can take no node (``reason`` then says why)."""

    dtype: DType | None
    reason: str | None = None

    @property
    def ir_dtype(self) -> IRType:
        """The graph element type of NPU-side tensors (as stored in DRAM)."""
        return IR_OF_ISA[self.dtype] if self.dtype is not None else IRType.f32


IR_OF_ISA: dict[DType, IRType] = {
    DType.int8: IRType.i8,
    DType.int16: IRType.i16,
    DType.int32: IRType.i32,
    DType.fp16: IRType.f16,
    DType.fp32: IRType.f32,
}


def choose_precision(target, quantize: str | None) -> Precision:
    """The precision a graph compiles to on ``target`` (``quantize``: None or "int8")."""
    if quantize is not None:
        raise NpucError(
            f"quantize={quantize!r} is not available yet: this npuc compiles float models to fp16; "
            "leave quantize unset"
        )
    if not target.has_fp16:
        return Precision(None, NO_FP16_REASON)
    return Precision(DType.fp16)


def is_float(t: IRType) -> bool:
    return t.is_float


def pack_constant(tensor: torch.Tensor, dtype: DType, order: tuple[int, ...] | None) -> bytes:
    """The bytes of ``tensor`` (logical shape) converted to ``dtype``, dims stored in ``order``."""
    t = tensor.detach().to(torch.float32)
    if order is not None and t.dim() > 0:
        t = t.permute(order)
    arr = t.contiguous().numpy().astype(dtype.np)
    return arr.tobytes()


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
