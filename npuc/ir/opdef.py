"""The op registry: every graph op is defined once, here.

An :class:`OpDef` holds, side by side, everything npuc knows about an op: its attribute dataclass
(frozen, typed fields with defaults), the number of operands it takes, its shape/type rule, its
attribute-domain verifier, its reference semantics (run by the interpreter, and the meaning
every later stage is checked against) and its :class:`Trait` s (unary or binary elementwise,
commutative, fusable as an epilogue step, image-preserving, a view, ...).  The printer, parser,
verifier, interpreter, frontend, lowering, code generation and ``npuc ops`` all read this one
table; the op sets later stages need are derived from it with :func:`ops_with`.

Op definitions live in :mod:`npuc.ir.ops` (one module per family) and call :func:`register`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from npuc.errors import VerifyError
from npuc.ir.types import TensorType


@dataclass(frozen=True)
class NoAttrs:
    """Attributes of an op that has none."""


@dataclass(frozen=True)
class ConstAttrs:
    """``const``: a reference to ``Graph.constants[name]`` of the given type."""

    name: str
    type: TensorType


class Trait(enum.Enum):
    """A fact about a graph op that later stages ask about (``OpDef.traits``)."""

    UNARY = "unary"  # elementwise on one tensor operand
    BINARY = "binary"  # elementwise on two broadcasting tensor operands
    COMMUTATIVE = "commutative"  # a binary op whose operands may be swapped
    EPILOGUE = "epilogue"  # in float, a vector step fused after the kernel producing its operand
    IMAGE_CONSUMER = "image_consumer"  # reads its 4-D operand as an image (a window over H and W)
    IMAGE_PRODUCER = "image_producer"  # its 4-D result is an image
    IMAGE_PRESERVING = "image_preserving"  # its 4-D result is an image when a 4-D operand is
    VIEW = "view"  # a new view of its operand's bytes (costs nothing beside its producer)
    TRANSCENDENTAL = "transcendental"  # evaluates a transcendental function per element


InferFn = Callable[[Sequence[TensorType], Any], Sequence[TensorType]]
VerifyFn = Callable[[Sequence[TensorType], Any], None]
ReferenceFn = Callable[[Sequence[torch.Tensor], Any], Sequence[torch.Tensor]]
TypedReferenceFn = Callable[[Sequence[torch.Tensor], Sequence[TensorType], Any], Sequence[torch.Tensor]]


@dataclass(frozen=True)
class OpDef:
    """The single definition of a graph op.

    ``infer`` returns the output types from the operand types and attributes and raises
    :class:`VerifyError` on operand types it does not accept.  ``verify`` (optional) checks the
    attribute domain (a stride of 0, a negative group count, ...).  ``reference`` computes the
    outputs with PyTorch, obviously right rather than fast.  ``min_inputs``/``max_inputs`` bound
    the operand count (``max_inputs=None`` for variadic ops such as ``concat``).  ``operands``
    names the operands for documentation: ``("x", "w", "[b]")``, optional ones in brackets,
    a variadic tail ending in ``...``.

    ``typed_reference`` (optional) replaces ``reference`` for ops whose meaning depends on their
    operand types beyond the tensors' data (the quantized ops read scales and zero points from
    them): ``typed_reference(tensors, operand_types, attrs)``.  Callers run an op through
    :meth:`evaluate`, which picks the right one.
    """

    name: str
    summary: str
    attrs: type
    infer: InferFn
    reference: ReferenceFn
    verify: VerifyFn | None = None
    min_inputs: int = 1
    max_inputs: int | None = 1
    category: str = "misc"
    operands: tuple[str, ...] = ()
    typed_reference: TypedReferenceFn | None = None
    traits: frozenset[Trait] = frozenset()

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    def evaluate(
        self, ins: Sequence[torch.Tensor], in_types: Sequence[TensorType], attrs: Any
    ) -> Sequence[torch.Tensor]:
        """The op's reference semantics on ``ins`` (of types ``in_types``)."""
        if self.typed_reference is not None:
            return self.typed_reference(ins, in_types, attrs)
        return self.reference(ins, attrs)

    def check(self, in_types: Sequence[TensorType], attrs: Any) -> tuple[TensorType, ...]:
        """Verify operands and attributes, and return the output types."""
        n = len(in_types)
        if n < self.min_inputs or (self.max_inputs is not None and n > self.max_inputs):
            want = (
                f"{self.min_inputs}"
                if self.max_inputs == self.min_inputs
                else f"{self.min_inputs}..{self.max_inputs if self.max_inputs is not None else 'n'}"
            )
            raise VerifyError(f"op '{self.name}' takes {want} operands, got {n}")
        if not isinstance(attrs, self.attrs):
            raise VerifyError(
                f"op '{self.name}' needs attributes of type {self.attrs.__name__}, got {type(attrs).__name__}"
            )
        problem = attr_type_problem(attrs)
        if problem:
            raise VerifyError(f"{self.name}: {problem}")
        if self.verify is not None:
            self.verify(in_types, attrs)
        return tuple(self.infer(in_types, attrs))

    def attr_fields(self) -> list[dataclasses.Field]:
        return list(dataclasses.fields(self.attrs))


def _value_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` does not match the annotation ``hint``, or None."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        if any(_value_problem(value, a) is None for a in args):
            return None
        return f"{value!r} is none of {', '.join(getattr(a, '__name__', str(a)) for a in args)}"
    if hint is type(None):
        return None if value is None else f"{value!r} is not none"
    if origin is tuple:
        if not isinstance(value, tuple):
            return f"{value!r} is not a tuple"
        if len(args) == 2 and args[1] is Ellipsis:
            items = [(v, args[0]) for v in value]
        else:
            if len(args) != len(value):
                return f"{value!r} needs {len(args)} entries, has {len(value)}"
            items = list(zip(value, args))
        for v, a in items:
            p = _value_problem(v, a)
            if p:
                return p
        return None
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"{value!r} is not a number"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"{value!r} is not an integer"
    if isinstance(hint, type):
        return None if isinstance(value, hint) else f"{value!r} is not a {hint.__name__}"
    return None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def attr_type_problem(attrs: Any) -> str | None:
    """Why an attribute record's field values do not match their declared types, or None."""
    hints = _hints(type(attrs))
    for f in dataclasses.fields(attrs):
        p = _value_problem(getattr(attrs, f.name), hints[f.name])
        if p:
            return f"attribute '{f.name}': {p}"
    return None


_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in _REGISTRY:
        raise RuntimeError(f"op '{opdef.name}' registered twice")
    if not (dataclasses.is_dataclass(opdef.attrs) and opdef.attrs.__dataclass_params__.frozen):
        raise RuntimeError(f"attributes of op '{opdef.name}' must be a frozen dataclass")
    _REGISTRY[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    _load_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise VerifyError(f"unknown op '{name}' (see `npuc ops` for the list)") from None


def all_ops() -> list[OpDef]:
    """Every registered op, sorted by name."""
    _load_ops()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def ops_with(*traits: Trait) -> frozenset[str]:
    """Names of the ops that have every one of ``traits``."""
    return frozenset(op.name for op in all_ops() if set(traits) <= op.traits)


def _load_ops() -> None:
    # Importing the package registers every op family once.
    import npuc.ir.ops  # noqa: F401


def fail(op: str, msg: str) -> VerifyError:
    """Build the error an infer/verify function raises: ``raise fail("conv2d", "...")``."""
    return VerifyError(f"{op}: {msg}")


# `const` is the one op the IR itself needs; every other op lives in npuc.ir.ops.
register(
    OpDef(
        name="const",
        summary="A constant tensor, stored in Graph.constants and printed by reference.",
        attrs=ConstAttrs,
        infer=lambda ins, a: (a.type,),
        reference=lambda ins, a: (_missing_const(a),),
        min_inputs=0,
        max_inputs=0,
        category="core",
    )
)


def _missing_const(a: ConstAttrs) -> torch.Tensor:
    # The interpreter resolves constants itself; reaching this means a caller skipped that.
    raise VerifyError(f"constant @{a.name} must be resolved from Graph.constants")
