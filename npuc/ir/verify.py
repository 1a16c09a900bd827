"""The graph verifier: well-formedness, types and attribute domains.

Checks, for every node in order: the op is registered, every operand is defined before use,
result names are unique, attributes verify and the declared result types equal what the op's
type rule infers; ``const`` nodes reference a present constant of the declared shape and dtype;
the graph's outputs are defined.  Raises :class:`npuc.errors.VerifyError` naming the node.
"""

from __future__ import annotations

from npuc.errors import VerifyError
from npuc.ir.graph import Graph, Node
from npuc.ir.opdef import get_op
from npuc.ir.types import TensorType


def _where(n: Node) -> str:
    outs = ", ".join(f"%{v.name}" for v in n.outputs)
    loc = f" (from {n.loc})" if n.loc else ""
    return f"node '{outs} = {n.op}'{loc}"


def verify(g: Graph) -> Graph:
    """Check ``g`` and return it unchanged; raise VerifyError on the first problem."""
    defined: set[int] = set()
    names: set[str] = set()

    def define(v) -> None:
        if v.name in names:
            raise VerifyError(f"value %{v.name} is defined twice")
        names.add(v.name)
        defined.add(id(v))

    for v in g.inputs:
        define(v)
    for n in g.nodes:
        for i, v in enumerate(n.inputs):
            if id(v) not in defined:
                raise VerifyError(f"{_where(n)}: operand {i} (%{v.name}) is used before it is defined")
        try:
            opdef = get_op(n.op)
            inferred = opdef.check(tuple(v.type for v in n.inputs), n.attrs)
        except VerifyError as e:
            raise VerifyError(f"{_where(n)}: {e}") from None
        declared = tuple(v.type for v in n.outputs)
        if inferred != declared:
            got = ", ".join(str(t) for t in declared)
            want = ", ".join(str(t) for t in inferred)
            raise VerifyError(f"{_where(n)}: result type {got} but the op's rule gives {want}")
        if n.op == "const":
            name = n.attrs.name
            if name not in g.constants:
                raise VerifyError(f"{_where(n)}: constant @{name} is missing from the graph")
            actual = TensorType.of(g.constants[name])
            if (actual.shape, actual.dtype) != (n.attrs.type.shape, n.attrs.type.dtype):
                raise VerifyError(f"{_where(n)}: constant @{name} is {actual}, declared {n.attrs.type}")
        for v in n.outputs:
            define(v)
    for i, v in enumerate(g.outputs):
        if id(v) not in defined:
            raise VerifyError(f"graph output {i} (%{v.name}) is not defined")
    return g
