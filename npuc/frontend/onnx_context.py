"""What an ONNX converter sees: one node, its attributes, and a builder that knows its operands.

During an ONNX import every tensor name of the model is bound to one of:

- a :class:`~npuc.ir.graph.Value` of the graph being built (computed at run time), or
- a :class:`Known` tensor (known at import time: an initializer, a ``Constant``, or the result of
  import-time folding, such as the ``Shape -> Gather -> Concat`` chains that feed a ``Reshape``).

Converters in :mod:`npuc.frontend.onnx_table` read operands and attributes through
:class:`OnnxContext` and add graph nodes through it; every node carries the ONNX node's name as
its location.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import onnx
import torch
from onnx import helper

from npuc.frontend.context import Unsupported
from npuc.ir.graph import GraphBuilder, Value
from npuc.ir.opdef import get_op
from npuc.ir.types import DType

__all__ = ["Known", "OnnxContext", "Unsupported", "onnx_dtype_to_torch", "torch_dtype_to_onnx"]


@dataclass(frozen=True, eq=False)
class Known:
    """A tensor known at import time; ``weight`` marks a floating-point initializer (a model weight)."""

    tensor: torch.Tensor
    name: str
    weight: bool = False


_TORCH_OF_ONNX = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}
_ONNX_OF_TORCH = {v: k for k, v in _TORCH_OF_ONNX.items()}


def onnx_type_name(elem_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"type {elem_type}"


def onnx_dtype_to_torch(elem_type: int) -> torch.dtype:
    """The torch dtype of an ONNX element type; :class:`Unsupported` for one npuc has no type for."""
    try:
        return _TORCH_OF_ONNX[elem_type]
    except KeyError:
        raise Unsupported(f"npuc has no element type for ONNX {onnx_type_name(elem_type)}") from None


def torch_dtype_to_onnx(dt: torch.dtype) -> int:
    return _ONNX_OF_TORCH[dt]


def tensor_from_numpy(a: np.ndarray) -> torch.Tensor:
    """A torch tensor holding a numpy array's data (copied; numpy's own types only)."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16, as onnx returns it
        return torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16)
    if a.dtype.kind not in "biuf" or a.dtype in (np.uint16, np.uint32, np.uint64):
        raise Unsupported(f"npuc has no element type for numpy {a.dtype}")
    return torch.from_numpy(a.copy())


class OnnxContext:
    """Resolves the current ONNX node's operands and adds graph nodes for it."""

    def __init__(self, builder: GraphBuilder, env: dict[str, Any], opset: int) -> None:
        self.builder = builder
        self.env = env
        self.opset = opset
        self.node: onnx.NodeProto | None = None
        self.loc: str | None = None
        self._attrs: dict[str, Any] = {}
        self._materialized: dict[int, Value] = {}

    def start(self, node: onnx.NodeProto, loc: str) -> None:
        self.node = node
        self.loc = loc
        self._attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    # ------------------------------------------------------------------ attributes and operands

    def attr(self, name: str, default: Any = None) -> Any:
        """An attribute of the node (bytes decoded to str), or ``default`` when absent."""
        v = self._attrs.get(name, default)
        if isinstance(v, bytes):
            return v.decode()
        if isinstance(v, (list, tuple)):
            return [x.decode() if isinstance(x, bytes) else x for x in v]
        return v

    def n_inputs(self) -> int:
        return len(self.node.input)

    def has(self, i: int) -> bool:
        """Whether optional operand ``i`` is given (present and not the empty name)."""
        return i < len(self.node.input) and self.node.input[i] != ""

    def entry(self, i: int) -> Value | Known:
        return self.env[self.node.input[i]]

    def known(self, i: int) -> torch.Tensor | None:
        """Operand ``i``'s tensor when known at import time, else None."""
        if not self.has(i):
            return None
        e = self.entry(i)
        return e.tensor if isinstance(e, Known) else None

    def need_known(self, i: int, what: str) -> torch.Tensor:
        """Operand ``i``'s import-time tensor; :class:`Unsupported` when it is computed at run time."""
        t = self.known(i)
        if t is None:
            raise Unsupported(
                f"its {what} (input {i}, '{self.node.input[i]}') must be known at import time "
                "(an initializer or computed from initializers), but it is computed at run time"
            )
        return t

    def ints(self, i: int, what: str) -> list[int] | None:
        """A known integer operand as a list, None when the optional operand is absent."""
        if not self.has(i):
            return None
        return [int(v) for v in self.need_known(i, what).reshape(-1).tolist()]

    def shape(self, i: int) -> tuple[int, ...]:
        e = self.entry(i)
        return e.type.shape if isinstance(e, Value) else tuple(e.tensor.shape)

    def rank(self, i: int) -> int:
        return len(self.shape(i))

    def dtype(self, i: int) -> torch.dtype:
        e = self.entry(i)
        return e.type.dtype.torch if isinstance(e, Value) else e.tensor.dtype

    def value(self, i: int, dtype: torch.dtype | None = None) -> Value:
        """Operand ``i`` as a graph value (a known tensor becomes a ``const`` node, once)."""
        e = self.entry(i)
        if isinstance(e, Known):
            key = id(e)
            if key not in self._materialized:
                self._materialized[key] = self.builder.constant(
                    e.name, e.tensor, loc=None if e.weight else self.loc
                )
            v = self._materialized[key]
        else:
            v = e
        return v if dtype is None else self.cast(v, dtype)

    def values(self) -> list[Value]:
        return [self.value(i) for i in range(len(self.node.input)) if self.has(i)]

    # ------------------------------------------------------------------ making values

    def const(self, t: torch.Tensor, what: str = "const") -> Value:
        """A constant made by a converter (a scalar, ones for an absent scale, ...)."""
        return self.builder.constant(f"{self._hint()}.{what}", t, loc=self.loc)

    def scalar(self, x: float | int | bool, dtype: torch.dtype) -> Value:
        return self.const(torch.tensor(x, dtype=dtype), "scalar")

    def cast(self, v: Value, dtype: torch.dtype) -> Value:
        if v.type.dtype.torch == dtype:
            return v
        return self.add("cast", (v,), dtype=DType.from_torch(dtype))

    def add(self, op: str, inputs: Sequence[Value], **attrs: Any) -> Value:
        """Append a single-output graph node ``op(inputs) {attrs}`` at the node's location."""
        a = get_op(op).attrs(**attrs)
        return self.builder.add(op, inputs, a, loc=self.loc, names=[self._hint()])[0]

    def reshape(self, v: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return v if v.type.shape == shape else self.add("reshape", (v,), shape=shape)

    def _hint(self) -> str | None:
        out = self.node.output[0] if self.node is not None and self.node.output else ""
        return value_name(out) or None


def value_name(onnx_name: str) -> str:
    """An IR value name from an ONNX tensor name (``/layer1/conv/Conv_output_0`` ->
    ``layer1.conv.Conv_output_0``)."""
    out = "".join(c if (c.isalnum() or c in "_.") else "." for c in onnx_name)
    while ".." in out:
        out = out.replace("..", ".")
    return out.strip(".")
