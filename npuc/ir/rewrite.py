"""The pattern-rewrite helper most graph passes are written with.

:func:`rewrite` walks a graph in program order and offers each node to a callback.  The callback
sees the node with its operands already mapped into the graph being built, so a pattern that looks
at its operands' producers (``rw.producer(v)``) sees them *after* rewriting: chains such as
``reshape(reshape(reshape(x)))`` collapse in one walk.  It returns

- ``None`` to keep the node (copied as is; its results keep their names), or
- the replacement values, one per result of the node (a single :class:`Value` for a one-result
  node), built with ``rw.add`` / ``rw.constant`` or taken from existing values.

Nodes left without users are removed at the end (graphs are pure dataflow).  The source graph is
never changed: a pass is a function ``Graph -> Graph``.  Names are deterministic: kept values keep
theirs; a new value that replaces a node's result takes the name asked with ``rw.add(...,
name=...)``, else the replaced result's name, when the finished graph leaves that name free (so a
layer keeps its module's name through the passes); other new values are numbered.  Constants keep
their names and new constants are made unique.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from npuc.ir.graph import Graph, GraphBuilder, Node, Value
from npuc.ir.opdef import ConstAttrs, get_op
from npuc.ir.types import QuantParams

RewriteFn = Callable[[Node, "Rewriter"], "Value | Sequence[Value] | None"]


class Rewriter:
    """What a rewrite callback builds with and asks about the graph under construction."""

    def __init__(self, source: Graph, builder: GraphBuilder) -> None:
        self.source = source
        self.builder = builder
        self.node: Node | None = None
        self._producer: dict[Value, Node] = {}
        self._stands_for: dict[Value, Value] = {}
        self._user_counts = count_users(source)
        self._constants: dict[str, torch.Tensor] = dict(source.constants)
        self._wanted: dict[Value, str] = {}  # names asked for new values (rw.add(..., name=))
        self._created: set[Value] = set()  # values built during the walk (the only ones renamed)

    # ------------------------------------------------------------------ questions

    def producer(self, v: Value) -> Node | None:
        """The node of the new graph that defines ``v`` (None for a graph input)."""
        return self._producer.get(v)

    def const(self, v: Value) -> torch.Tensor | None:
        """The constant tensor behind ``v`` when a ``const`` node defines it, else None."""
        n = self._producer.get(v)
        if n is None or n.op != "const":
            return None
        return self._constants[n.attrs.name]

    def num_users(self, v: Value) -> int:
        """How many nodes (and graph outputs) read ``v`` in the source graph.

        For a replacement value, the count of the source value it stands for.  Counts describe the
        source graph: a rewrite earlier in the same walk may have dropped a use.
        """
        return self._user_counts.get(self._stands_for.get(v, v), 0)

    # ------------------------------------------------------------------ building

    def add(
        self, op: str, inputs: Sequence[Value], attrs: Any = None, *, loc: str | None = None,
        name: str | None = None, **fields: Any,
    ) -> Value:
        """Append ``op(inputs)`` (attributes as an instance or as fields) and return its result.

        The node takes the location of the node being rewritten unless ``loc`` is given; its
        result is named ``name`` when the finished graph leaves that name free.
        """
        v = self.add_multi(op, inputs, attrs, loc=loc, **fields)[0]
        if name is not None:
            self._wanted[v] = name
        return v

    def want_name(self, v: Value, name: str) -> None:
        """Ask for the new value ``v`` to be named ``name`` (kept when the finished graph leaves it free)."""
        self._wanted[v] = name

    def add_multi(
        self, op: str, inputs: Sequence[Value], attrs: Any = None, *, loc: str | None = None, **fields: Any
    ) -> tuple[Value, ...]:
        if attrs is None:
            attrs = get_op(op).attrs(**fields)
        where = loc if loc is not None else (self.node.loc if self.node is not None else None)
        inputs = tuple(inputs)
        outs = self.builder.add(op, inputs, attrs, loc=where)
        self._record(Node(op, inputs, outs, attrs, where))
        self._created.update(outs)
        return outs

    def constant(
        self, name: str, tensor: torch.Tensor, *, loc: str | None = None, quant: QuantParams | None = None
    ) -> Value:
        """A new constant (renamed ``name_1``, ... if the name is taken), with the quantization
        parameters ``quant`` in its type when given."""
        key, i = name, 1
        while key in self._constants:
            key, i = f"{name}_{i}", i + 1
        tensor = tensor.detach().contiguous()
        self._constants[key] = tensor
        v = self.builder.constant(key, tensor, loc=loc, quant=quant)
        self._record(Node("const", (), (v,), ConstAttrs(name=key, type=v.type), loc))
        return v

    # ------------------------------------------------------------------ internals

    def _record(self, node: Node) -> None:
        for v in node.outputs:
            self._producer[v] = node


def count_users(g: Graph) -> dict[Value, int]:
    """How many node operands and graph outputs read each value of ``g``."""
    counts: dict[Value, int] = {}
    for n in g.nodes:
        for v in n.inputs:
            counts[v] = counts.get(v, 0) + 1
    for v in g.outputs:
        counts[v] = counts.get(v, 0) + 1
    return counts


def rewrite(g: Graph, fn: RewriteFn, *, name: str | None = None) -> Graph:
    """Rebuild ``g`` with ``fn`` offered every node in order; dead nodes are dropped."""
    builder = GraphBuilder(name or g.name)
    mapping: dict[Value, Value] = {}
    for v in g.inputs:
        mapping[v] = builder.input(v.type, name=v.name)
    for n in g.nodes:
        for v in n.outputs:
            builder.fresh_name(v.name)  # reserve: kept values keep their names
    rw = Rewriter(g, builder)
    for old, new in mapping.items():
        rw._stands_for[new] = old
    for cname in g.constants:
        builder.copy_constant(g, cname)
    for node in g.nodes:
        inputs = tuple(mapping.get(v, v) for v in node.inputs)
        local = node if inputs == node.inputs else Node(node.op, inputs, node.outputs, node.attrs, node.loc)
        rw.node = local
        result = fn(local, rw)
        if result is None:
            builder.append_node(local)
            rw._record(local)
            continue
        replacements = (result,) if isinstance(result, Value) else tuple(result)
        if len(replacements) != len(node.outputs):
            raise ValueError(
                f"a rewrite of '{node.op}' returned {len(replacements)} values for {len(node.outputs)} results"
            )
        for old, new in zip(node.outputs, replacements):
            mapping[old] = new
            if new is not old:
                rw._stands_for.setdefault(new, old)
    outputs = [mapping.get(v, v) for v in g.outputs]
    inputs_of_g = set(g.inputs)
    for old, new in mapping.items():
        if new in rw._created and new not in rw._wanted and old not in inputs_of_g:
            rw._wanted[new] = old.name
    wanted = {v: name for v, name in rw._wanted.items() if v in rw._created}
    return _rename(prune_dead(builder.build(outputs)), wanted)


def _rename(g: Graph, wanted: dict[Value, str]) -> Graph:
    """``g`` with the values of ``wanted`` renamed where the name is free (in program order)."""
    taken = {v.name for v in g.inputs} | {v.name for n in g.nodes for v in n.outputs}
    renamed: dict[Value, Value] = {}
    for n in g.nodes:
        for v in n.outputs:
            want = wanted.get(v)
            if want is not None and want not in taken:
                taken.discard(v.name)
                taken.add(want)
                renamed[v] = Value(want, v.type)
    if not renamed:
        return g
    nodes = tuple(
        Node(n.op, tuple(renamed.get(v, v) for v in n.inputs), tuple(renamed.get(v, v) for v in n.outputs), n.attrs, n.loc)
        for n in g.nodes
    )
    return Graph(g.name, g.inputs, nodes, tuple(renamed.get(v, v) for v in g.outputs), g.constants)


def prune_dead(g: Graph) -> Graph:
    """``g`` without the nodes whose results nothing reads (and without unused constants)."""
    live: set[Value] = set(g.outputs)
    keep: list[Node] = []
    for n in reversed(g.nodes):
        if any(v in live for v in n.outputs):
            keep.append(n)
            live.update(n.inputs)
    if len(keep) == len(g.nodes):
        return g
    keep.reverse()
    used = {n.attrs.name for n in keep if n.op == "const"}
    consts = {k: g.constants[k] for k in sorted(used)}
    return Graph(g.name, g.inputs, tuple(keep), g.outputs, consts)
