"""The graph IR: SSA values, nodes and graphs.

A graph is immutable once built: passes are functions ``Graph -> Graph`` that build a new graph
(usually through :class:`GraphBuilder` or :func:`npuc.ir.rewrite.rewrite`).  Values compare by
identity; their names are only for printing and are unique within a graph.

Constants (weights, buffers, folded tensors) live in ``Graph.constants`` keyed by name and enter the
dataflow through ``const`` nodes, so that the text form prints them as references (``@conv1.weight``)
rather than data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

import torch

from npuc.ir.types import QuantParams, TensorType


@dataclass(frozen=True, eq=False)
class Value:
    """An SSA value: the result of one node, or a graph input."""

    name: str
    type: TensorType

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


@dataclass(frozen=True, eq=False)
class Node:
    """One operation: ``outputs = op(inputs) {attrs}``.

    ``attrs`` is an instance of the op's frozen attribute dataclass (see :mod:`npuc.ir.opdef`).
    ``loc`` is the user's source location the node came from (``file.py:12``), when known.
    """

    op: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: Any
    loc: str | None = None

    @property
    def output(self) -> Value:
        """The single output of a single-output node."""
        if len(self.outputs) != 1:
            from npuc.errors import VerifyError

            raise VerifyError(f"node {self.op} has {len(self.outputs)} outputs, not one")
        return self.outputs[0]


@dataclass(frozen=True, eq=False)
class Graph:
    """A function over tensors in SSA form."""

    name: str
    inputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    constants: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "constants", MappingProxyType(dict(self.constants)))

    def producers(self) -> dict[Value, Node]:
        """Map each node output to the node that defines it."""
        return {v: n for n in self.nodes for v in n.outputs}

    def users(self) -> dict[Value, list[Node]]:
        """Map each value to the nodes that read it (in program order)."""
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def ops(self, name: str | None = None) -> Iterator[Node]:
        """Nodes in order, optionally only those of op ``name``."""
        return (n for n in self.nodes if name is None or n.op == name)

    def __str__(self) -> str:
        from npuc.ir.text import print_graph

        return print_graph(self)


class GraphBuilder:
    """Builds a graph node by node, inferring result types from the op registry.

    ``add`` verifies the node's attributes and infers its output types, so a built graph is well
    typed by construction; :func:`npuc.ir.verify.verify` re-checks a whole graph.
    """

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self._inputs: list[Value] = []
        self._nodes: list[Node] = []
        self._constants: dict[str, torch.Tensor] = {}
        self._names: set[str] = set()
        self._reserved: set[str] = set()  # names kept for a later hint (numbering skips them)
        self._counter = 0

    def reserve(self, names: Iterable[str]) -> None:
        """Keep ``names`` for values that will be named so later (a ``Sequential`` child's module
        path "0" must not lose its name to a numbered value)."""
        self._reserved.update(n for n in names if n not in self._names)
    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes added so far, in order."""
        return tuple(self._nodes)

    def fresh_name(self, hint: str | None = None) -> str:
        """A value name not used yet: ``hint`` (or ``hint_1``, ``hint_2``, ...) when it is an
        identifier, else the next number."""
        if hint is not None and hint in self._reserved:
            self._reserved.discard(hint)
            self._names.add(hint)
            return hint
        if hint is not None and _is_ident(hint):
            name, k = hint, 0
            while name in self._names:
                k += 1
                name = f"{hint}_{k}"
            self._names.add(name)
            return name
        while str(self._counter) in self._names or str(self._counter) in self._reserved:
            self._counter += 1
        name = str(self._counter)
        self._counter += 1
        self._names.add(name)
        return name

    def input(self, type: TensorType, name: str | None = None) -> Value:
        v = Value(self.fresh_name(name), type)
        self._inputs.append(v)
        return v

    def constant(
        self, name: str, tensor: torch.Tensor, loc: str | None = None, quant: QuantParams | None = None
    ) -> Value:
        """Add ``tensor`` as constant ``name`` (made unique if taken) and return its value;
        ``quant`` gives the value's type quantization parameters (an i8 weight, an i32 bias)."""
        from npuc.ir.opdef import ConstAttrs

        key = name
        i = 1
        while key in self._constants:
            key = f"{name}_{i}"
            i += 1
        tensor = tensor.detach().contiguous()
        self._constants[key] = tensor
        ty = TensorType.of(tensor)
        if quant is not None:
            ty = TensorType(ty.shape, ty.dtype, quant)
        return self.add("const", (), ConstAttrs(name=key, type=ty), loc=loc, names=[key])[0]

    def add(
        self,
        op: str,
        inputs: Iterable[Value],
        attrs: Any = None,
        loc: str | None = None,
        names: Iterable[str | None] | None = None,
    ) -> tuple[Value, ...]:
        """Append ``op(inputs) {attrs}`` and return its output values."""
        from npuc.ir.opdef import get_op

        opdef = get_op(op)
        inputs = tuple(inputs)
        if attrs is None:
            attrs = opdef.attrs()
        out_types = opdef.check(tuple(v.type for v in inputs), attrs)
        hints = list(names) if names is not None else [None] * len(out_types)
        outs = tuple(Value(self.fresh_name(h), t) for h, t in zip(hints, out_types))
        self._nodes.append(Node(op, inputs, outs, attrs, loc))
        return outs

    def add1(self, op: str, inputs: Iterable[Value], attrs: Any = None, loc: str | None = None) -> Value:
        """Like :meth:`add` for a single-output op."""
        outs = self.add(op, inputs, attrs, loc)
        return outs[0]

    def copy_constant(self, g: Graph, name: str) -> None:
        """Make constant ``name`` of ``g`` available under the same name (for rebuilding passes)."""
        self._constants[name] = g.constants[name]

    def append_node(self, node: Node) -> None:
        """Append an already built node as is (its values keep their names)."""
        for v in node.outputs:
            self._names.add(v.name)
        self._nodes.append(node)

    def build(self, outputs: Iterable[Value], constants: Mapping[str, torch.Tensor] | None = None) -> Graph:
        consts = dict(self._constants)
        if constants is not None:
            consts.update(constants)
        used = {n.attrs.name for n in self._nodes if n.op == "const"}
        consts = {k: consts[k] for k in sorted(used)}
        return Graph(self.name, tuple(self._inputs), tuple(self._nodes), tuple(outputs), consts)


def _is_ident(s: str) -> bool:
    return bool(s) and all(c.isalnum() or c in "_." for c in s)
