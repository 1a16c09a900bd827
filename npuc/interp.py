"""The reference interpreter: runs a graph node by node on each op's PyTorch reference.

It is the meaning of a graph: every later stage (passes, quantization, the NPU simulator) is
checked against what this returns.  Obviously right rather than fast.
"""

from __future__ import annotations

import torch

from npuc.errors import NpucError, VerifyError
from npuc.ir.graph import Graph, Node
from npuc.ir.opdef import get_op
from npuc.ir.types import DType, TensorType


def interpret(g: Graph, *inputs: torch.Tensor) -> list[torch.Tensor]:
    """Run ``g`` on ``inputs`` and return its outputs, in order."""
    env = _run(g, inputs)
    return [env[id(v)] for v in g.outputs]


def interpret_all(g: Graph, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run ``g`` and return every value it computes (inputs included), keyed by value name.

    Keys follow program order: graph inputs first, then each node's outputs.
    """
    env = _run(g, inputs)
    values = list(g.inputs) + [v for n in g.nodes for v in n.outputs]
    return {v.name: env[id(v)] for v in values}


def interpret_from(g: Graph, values: dict[str, torch.Tensor], start: int) -> list[torch.Tensor]:
    """The outputs of ``g`` when the values of its inputs and first ``start`` nodes are ``values``
    (by name, as :func:`interpret_all` returns them, possibly altered): only nodes ``start`` and
    later run (the numerical debugger replays the rest of a model after changing one value)."""
    env: dict[int, torch.Tensor] = {id(v): values[v.name] for v in g.inputs}
    for node in g.nodes[:start]:
        for v in node.outputs:
            env[id(v)] = values[v.name]
    with torch.no_grad():
        for node in g.nodes[start:]:
            for v, t in zip(node.outputs, _eval_node(g, node, env)):
                env[id(v)] = t
    return [env[id(v)] for v in g.outputs]


def _run(g: Graph, inputs: tuple[torch.Tensor, ...]) -> dict[int, torch.Tensor]:
    _check_inputs(g, inputs)
    env: dict[int, torch.Tensor] = {id(v): t for v, t in zip(g.inputs, inputs)}
    with torch.no_grad():
        for node in g.nodes:
            for v, t in zip(node.outputs, _eval_node(g, node, env)):
                env[id(v)] = t
    return env


def _check_inputs(g: Graph, inputs: tuple[torch.Tensor, ...]) -> None:
    if len(inputs) != len(g.inputs):
        raise NpucError(f"graph @{g.name} takes {len(g.inputs)} inputs, got {len(inputs)}")
    for i, (v, t) in enumerate(zip(g.inputs, inputs)):
        if not isinstance(t, torch.Tensor):
            raise NpucError(f"input {i} (%{v.name}) of graph @{g.name} must be a torch.Tensor, got {type(t).__name__}")
        got = _type_of(t)
        if tuple(t.shape) != v.type.shape or got != v.type.dtype:
            shown = f"tensor of shape {list(t.shape)} and dtype {t.dtype}"
            raise NpucError(f"input {i} (%{v.name}) of graph @{g.name} must be {v.type}, got a {shown}")


def _type_of(t: torch.Tensor) -> DType | None:
    try:
        return DType.from_torch(t.dtype)
    except NpucError:
        return None


def _eval_node(g: Graph, node: Node, env: dict[int, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    if node.op == "const":
        name = node.attrs.name
        if name not in g.constants:
            raise VerifyError(f"constant @{name} of graph @{g.name} is missing from its constants")
        return (g.constants[name],)
    args = []
    for v in node.inputs:
        if id(v) not in env:
            raise VerifyError(f"value %{v.name} is used by '{node.op}' before it is defined")
        args.append(env[id(v)])
    try:
        outs = tuple(get_op(node.op).evaluate(args, [v.type for v in node.inputs], node.attrs))
    except (RuntimeError, IndexError, ValueError) as e:
        # Data-dependent failures, such as an embedding index outside the table.
        where = f" (from {node.loc})" if node.loc else ""
        names = ", ".join(f"%{v.name}" for v in node.outputs)
        raise NpucError(f"node '{names} = {node.op}'{where} failed on its inputs: {e}") from None
    _check_outputs(node, outs)
    return outs


def _check_outputs(node: Node, outs: tuple[torch.Tensor, ...]) -> None:
    # A mismatch here is a bug in an op's shape rule or reference, not in the user's model.
    if len(outs) != len(node.outputs):
        raise VerifyError(f"reference of '{node.op}' returned {len(outs)} results, the node declares {len(node.outputs)}")
    for v, t in zip(node.outputs, outs):
        if TensorType(tuple(t.shape), _type_of(t)) != TensorType(v.type.shape, v.type.dtype):
            raise VerifyError(
                f"reference of '{node.op}' gave a {t.dtype} tensor of shape {list(t.shape)} for %{v.name}, "
                f"declared {v.type}"
            )
