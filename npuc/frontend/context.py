"""What an ATen converter sees: the node's bound arguments and a builder that knows their values.

During an import every FX node of the exported program is bound to one of:

- a :class:`~npuc.ir.graph.Value` of the graph being built (computed at run time),
- a :class:`Folded` tensor (known at import time: a parameter, a buffer, a lifted constant, or the
  result of import-time folding),
- a :class:`Dropped` output (an ATen result npuc does not compute, such as pool indices),
- a plain Python value (ints, floats, lists of them, None) or a tuple of the above.

Converters in :mod:`npuc.frontend.aten_table` read their arguments through :class:`ConvertContext`
and add graph nodes through it; every node they add carries the user's source location.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx

from npuc.ir.graph import GraphBuilder, Value
from npuc.ir.opdef import get_op
from npuc.ir.types import DType, TensorType


class Unsupported(Exception):
    """Raised by a converter: this use of the ATen op has no graph-op form (the reason says why)."""


@dataclass(frozen=True, eq=False)
class Folded:
    """A tensor known at import time.

    ``state`` marks the model's own tensors (parameters, buffers, lifted constants), which enter the
    graph as ``const`` nodes named by their fully qualified name; other folded tensors are results
    of import-time folding, named after the FX node that produced them.
    """

    tensor: torch.Tensor
    name: str
    state: bool = False


@dataclass(frozen=True)
class Dropped:
    """An ATen result npuc does not compute (saved batch-norm statistics, max-pool indices)."""

    what: str


Scalar = bool | int | float


def bind_arguments(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every argument of ``op``'s schema by name: positional, keyword, then schema defaults."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


def proxy_tensor(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A cheap stand-in tensor of ``dtype`` and rank ``len(shape)`` for type-promotion queries."""
    return torch.empty((1,) * len(shape), dtype=dtype)


class ConvertContext:
    """Resolves FX arguments to graph values and adds nodes for the FX node being converted."""

    def __init__(self, builder: GraphBuilder, env: dict[torch.fx.Node, Any]) -> None:
        self.builder = builder
        self.env = env
        self.node: torch.fx.Node | None = None
        self.loc: str | None = None
        self._materialized: dict[int, Value] = {}

    # ------------------------------------------------------------------ reading arguments

    def resolve(self, x: Any) -> Any:
        """The bound entry of an FX argument (lists and tuples element-wise)."""
        if isinstance(x, torch.fx.Node):
            return self.env[x]
        if isinstance(x, (list, tuple)):
            return type(x)(self.resolve(y) for y in x)
        return x

    def folded(self, x: Any) -> torch.Tensor | None:
        """The import-time tensor behind ``x``, or None when it is computed at run time."""
        r = self.resolve(x)
        return r.tensor if isinstance(r, Folded) else None

    def dtype_of(self, x: Any) -> torch.dtype | None:
        """The element type of a tensor argument (None for a Python scalar)."""
        r = self.resolve(x)
        if isinstance(r, Value):
            return r.type.dtype.torch
        if isinstance(r, Folded):
            return r.tensor.dtype
        return None

    def shape_of(self, x: Any) -> tuple[int, ...]:
        r = self.resolve(x)
        if isinstance(r, Value):
            return r.type.shape
        if isinstance(r, Folded):
            return tuple(r.tensor.shape)
        return ()

    def promoted(self, a: Any, b: Any) -> torch.dtype:
        """PyTorch's result type of ``a op b`` (tensors by dtype and rank, scalars as weak types)."""
        return torch.result_type(self._proxy(a), self._proxy(b))

    def _proxy(self, x: Any) -> Any:
        r = self.resolve(x)
        if isinstance(r, (Value, Folded)):
            return proxy_tensor(self.shape_of(x), self.dtype_of(x))
        if isinstance(r, (bool, int, float)):
            return r
        raise Unsupported(f"operand {r!r} is neither a tensor nor a number")

    def meta(self, x: torch.fx.Node | None = None) -> Any:
        """The example value torch.export recorded for ``x`` (default: the current node)."""
        return (x if x is not None else self.node).meta.get("val")

    def out_shape(self, index: int | None = None) -> tuple[int, ...]:
        val = self.meta()
        if index is not None:
            val = val[index]
        return tuple(int(d) for d in val.shape)

    def out_dtype(self, index: int | None = None) -> torch.dtype:
        val = self.meta()
        if index is not None:
            val = val[index]
        return val.dtype

    # ------------------------------------------------------------------ making values

    def value(self, x: Any, dtype: torch.dtype | None = None) -> Value:
        """A graph value for argument ``x``, cast to ``dtype`` when given.

        Folded tensors become ``const`` nodes (once each); Python numbers become 0-d constants of
        ``dtype``, which is then required.
        """
        r = self.resolve(x)
        if isinstance(r, Dropped):
            raise Unsupported(f"it uses the {r.what}, which npuc does not compute")
        if isinstance(r, Folded):
            v = self._const(r)
        elif isinstance(r, Value):
            v = r
        elif isinstance(r, (bool, int, float)):
            if dtype is None:
                raise Unsupported(f"the scalar {r!r} has no tensor to take its type from")
            return self.scalar(r, dtype)
        else:
            raise Unsupported(f"operand {r!r} is not a tensor")
        return v if dtype is None else self.cast(v, dtype)

    def _const(self, f: Folded) -> Value:
        key = id(f)
        if key not in self._materialized:
            self._materialized[key] = self.builder.constant(f.name, f.tensor, loc=None if f.state else self.loc)
        return self._materialized[key]

    def scalar(self, x: Scalar, dtype: torch.dtype) -> Value:
        """A 0-d constant holding ``x`` as ``dtype``."""
        name = f"{self.node.name}.scalar" if self.node is not None else "scalar"
        return self.builder.constant(name, torch.tensor(x, dtype=dtype), loc=self.loc)

    def tensor_const(self, name: str, t: torch.Tensor) -> Value:
        """A constant made by a converter (ones for an absent weight, ...)."""
        return self.builder.constant(f"{self.node.name}.{name}", t, loc=self.loc)

    def cast(self, v: Value, dtype: torch.dtype) -> Value:
        if v.type.dtype.torch == dtype:
            return v
        return self.add("cast", (v,), dtype=DType.from_torch(dtype))

    def add(self, op: str, inputs: Sequence[Value], **attrs: Any) -> Value:
        """Append a single-output graph node ``op(inputs) {attrs}`` at the current location."""
        a = get_op(op).attrs(**attrs)
        return self.builder.add(op, inputs, a, loc=self.loc, names=[self._name_hint(op)])[0]

    def _name_hint(self, op: str) -> str | None:
        """Name a new value after the module that computes it (``layer1.0.conv1``); an op inside
        a module's own forward gets the op's name after the module's (``layer1.0.add``)."""
        stack = self.node.meta.get("nn_module_stack") if self.node is not None else None
        if not stack:
            return None
        path, cls = list(stack.values())[-1]
        if not isinstance(path, str) or not path:
            return None
        builtin = isinstance(cls, str) and cls.startswith("torch.nn.modules.")
        return path if builtin else f"{path}.{op}"

    def reshape(self, v: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        if v.type.shape == shape:
            return v
        return self.add("reshape", (v,), shape=shape)

    def type_of(self, v: Value) -> TensorType:
        return v.type
