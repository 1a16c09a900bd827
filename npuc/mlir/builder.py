"""Building MLIR with xDSL: types, constants and operations of upstream dialects.

Operations are created through xDSL: its own TOSA classes where ``xdsl.dialects.tosa`` defines the
operation, xDSL's generic operation API (``UnregisteredOp.with_name``) where it does not (conv2d,
reshape, transpose, exp, ...).  The module is printed in MLIR's generic form, which every MLIR
tool parses whatever the custom syntax of an operation is.  Constants larger than a few elements
are ``dense_resource`` blobs (raw little-endian bytes, printed as hex in the module's
``dialect_resources`` section), so that printing a model with millions of weights stays fast.
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np
import torch
from xdsl.dialect_interfaces.op_asm import OpAsmDialectInterface
from xdsl.dialects import func, tosa
from xdsl.dialects.builtin import (  # noqa: F401  (the element types are re-exported)
    BFloat16Type,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DenseResourceAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    UnregisteredAttr,
    UnregisteredOp,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.printer import Printer

from npuc.errors import NpucError

# xDSL's own TOSA operation classes, by name; the others are made with the generic API.
XDSL_TOSA_OPS: dict[str, type[Operation]] = {
    cls.name: cls
    for cls in vars(tosa).values()
    if isinstance(cls, type) and issubclass(cls, Operation) and getattr(cls, "name", "").startswith("tosa.")
}

DENSE_INLINE_LIMIT = 16  # constants with more elements become dense_resource blobs

_ELEMENT = {
    torch.float32: Float32Type(),
    torch.float16: Float16Type(),
    torch.bfloat16: BFloat16Type(),
    torch.float64: Float64Type(),
    torch.int64: i64,
    torch.int32: i32,
    torch.int8: i8,
    torch.bool: i1,
    torch.int16: IntegerType(16),
    torch.uint8: IntegerType(8),
}


class ExportError(NpucError):
    """A graph cannot be written as MLIR (an op or a form with no upstream-dialect lowering)."""


def element_type(dtype: torch.dtype) -> Attribute:
    try:
        return _ELEMENT[dtype]
    except KeyError:
        raise ExportError(f"MLIR export has no element type for {dtype}") from None


def tensor_type(shape: Sequence[int], dtype: torch.dtype) -> TensorType:
    return TensorType(element_type(dtype), list(shape))


_SHAPE_TYPE = UnregisteredAttr.with_name_and_type("tosa.shape", True)


def shape_type(n: int) -> Attribute:
    """``!tosa.shape<n>``, the type of a TOSA shape operand (xDSL defines no TOSA shape type, so
    it is xDSL's generic unregistered type)."""
    return _SHAPE_TYPE("tosa.shape", True, False, str(n))


class MlirBuilder:
    """Appends operations to one function body and keeps the constant blobs."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self.resources = OpAsmDialectInterface()
        self._resource_names: set[str] = set()
        self._counter = 0

    def op(self, name: str, operands: Sequence[SSAValue], result: Attribute | Sequence[Attribute],
           properties: dict[str, Attribute] | None = None) -> SSAValue | tuple[SSAValue, ...]:
        """Append ``name(operands) <{properties}> -> result`` and return its result(s)."""
        cls = XDSL_TOSA_OPS.get(name) or UnregisteredOp.with_name(name)
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        o = cls.create(operands=list(operands), result_types=results, properties=dict(properties or {}))
        self.ops.append(o)
        return o.results[0] if not isinstance(result, (list, tuple)) else tuple(o.results)

    # ------------------------------------------------------------------ constants

    def dense(self, t: torch.Tensor) -> Attribute:
        """A dense elements attribute holding ``t`` (a blob reference when it is large)."""
        t = t.detach().contiguous()
        ty = tensor_type(tuple(t.shape), t.dtype)
        if t.numel() <= DENSE_INLINE_LIMIT or t.dtype == torch.bool:
            if t.dtype == torch.bool:
                return DenseIntOrFPElementsAttr.from_list(ty, [int(v) for v in t.reshape(-1).tolist()])
            if t.dtype.is_floating_point:
                return DenseIntOrFPElementsAttr.from_list(ty, [float(v) for v in t.reshape(-1).float().tolist()])
            return DenseIntOrFPElementsAttr.from_list(ty, [int(v) for v in t.reshape(-1).tolist()])
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        key = f"c{self._counter}"
        self._counter += 1
        self.resources.declare_resource(key)
        # MLIR's blob encoding: a 32-bit little-endian alignment, then the raw bytes.
        align = max(t.element_size(), 4)
        self.resources.parse_resource(key, "0x" + align.to_bytes(4, "little").hex().upper() + raw.hex().upper())
        return DenseResourceAttr.from_params(key, ty)

    def const(self, t: torch.Tensor) -> SSAValue:
        """``tosa.const`` holding ``t``."""
        return self.op("tosa.const", (), tensor_type(tuple(t.shape), t.dtype), {"values": self.dense(t)})

    def scalar_like(self, x: float, dtype: torch.dtype, rank: int) -> SSAValue:
        """A constant of shape [1] * rank (TOSA broadcasts only between equal ranks)."""
        return self.const(torch.full((1,) * rank, x, dtype=dtype))

    def shape(self, values: Sequence[int]) -> SSAValue:
        """``tosa.const_shape``: a static shape operand."""
        attr = DenseIntOrFPElementsAttr.from_list(TensorType(IndexType(), [len(values)]), [int(v) for v in values])
        return self.op("tosa.const_shape", (), shape_type(len(values)), {"values": attr})


def i64_array(values: Sequence[int]) -> Attribute:
    return DenseArrayBase.from_list(i64, [int(v) for v in values])


def i32_array(values: Sequence[int]) -> Attribute:
    return DenseArrayBase.from_list(i32, [int(v) for v in values])


def f32_attr(x: float) -> Attribute:
    return FloatAttr(float(x), Float32Type())


def float_attr(x: float, dtype: torch.dtype) -> Attribute:
    return FloatAttr(float(x), element_type(dtype))


def int_attr(x: int, bits: int = 32) -> Attribute:
    return IntegerAttr(int(x), IntegerType(bits))


def str_attr(s: str) -> Attribute:
    return StringAttr(s)


def print_module(fn_name: str, arg_types: Sequence[Attribute], body: Block, results: Sequence[SSAValue],
                 builder: MlirBuilder) -> str:
    """The generic-form text of a module holding one public function ``fn_name`` over ``body``."""
    body.add_ops(builder.ops)
    body.add_op(func.ReturnOp(*results))
    fn = func.FuncOp(fn_name, (list(arg_types), [r.type for r in results]), Region(body))
    module = ModuleOp([fn])
    out = io.StringIO()
    printer = Printer(stream=out, print_generic_format=True)
    printer.print_op(module)
    printer.print_metadata([Dialect("builtin", [], [], [builder.resources])])
    out.write("\n")
    return out.getvalue()
