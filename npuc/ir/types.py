"""Types of graph IR values: element types and static tensor types."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch


class DType(enum.Enum):
    """Element types a graph value can hold.  The value is the name used in the text form."""

    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    f64 = "f64"
    i64 = "i64"
    i32 = "i32"
    i16 = "i16"
    i8 = "i8"
    u8 = "u8"
    bool = "i1"

    @property
    def torch(self) -> torch.dtype:
        return _TO_TORCH[self]

    @property
    def itemsize(self) -> int:
        return _TO_TORCH[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.f32, DType.f16, DType.bf16, DType.f64)

    @staticmethod
    def from_torch(dt: torch.dtype) -> "DType":
        try:
            return _FROM_TORCH[dt]
        except KeyError:
            from npuc.errors import NpucError

            raise NpucError(f"npuc has no element type for torch dtype {dt}") from None

    @staticmethod
    def parse(text: str) -> "DType":
        for d in DType:
            if d.value == text:
                return d
        from npuc.errors import ParseError

        raise ParseError(f"unknown element type '{text}'")


_TO_TORCH = {
    DType.f32: torch.float32,
    DType.f16: torch.float16,
    DType.bf16: torch.bfloat16,
    DType.f64: torch.float64,
    DType.i64: torch.int64,
    DType.i32: torch.int32,
    DType.i16: torch.int16,
    DType.i8: torch.int8,
    DType.u8: torch.uint8,
    DType.bool: torch.bool,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization of a tensor: real = scale * (q - zero_point).

    Per-tensor when ``axis`` is None, otherwise one scale/zero point per index of ``axis``.
    Reserved for the quantization work; the float pipeline leaves it None.
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None


@dataclass(frozen=True)
class TensorType:
    """A statically shaped tensor type: ``tensor<1x3x224x224xf32>``.

    ``quant`` and ``layout`` are reserved for later stages (quantized types, NPU layouts).
    """

    shape: tuple[int, ...]
    dtype: DType
    quant: QuantParams | None = None
    layout: str | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> "TensorType":
        return TensorType(tuple(shape), self.dtype, self.quant, self.layout)

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(self.shape, dtype, self.quant, self.layout)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        extra = ""
        if self.layout is not None:
            extra += f", layout={self.layout}"
        if self.quant is not None:
            q = self.quant
            extra += f", quant=({list(q.scale)}, {list(q.zero_point)}, {q.axis})"
        return f"tensor<{dims}{self.dtype.value}{extra}>"

    @staticmethod
    def of(t: torch.Tensor) -> "TensorType":
        return TensorType(tuple(int(d) for d in t.shape), DType.from_torch(t.dtype))
