"""Helpers for pass tests: graphs written as text, numeric checks through the interpreter."""

from __future__ import annotations

import textwrap

import torch

from npuc.interp import interpret
from npuc.ir import Graph, parse_graph, verify


def graph(text: str, **constants: torch.Tensor) -> Graph:
    """Parse a graph written as text; constants are given by name (``w=torch.randn(...)``)."""
    return parse_graph(textwrap.dedent(text), {k.replace("__", "."): v for k, v in constants.items()})


def ops(g: Graph) -> list[str]:
    """The ops of ``g``'s nodes in order, constants left out."""
    return [n.op for n in g.nodes if n.op != "const"]


def random_inputs(g: Graph, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for v in g.inputs:
        dt = v.type.dtype.torch
        if dt.is_floating_point:
            out.append(torch.randn(v.type.shape, generator=gen).to(dt))
        elif dt == torch.bool:
            out.append(torch.rand(v.type.shape, generator=gen) > 0.5)
        else:
            out.append(torch.randint(0, 4, v.type.shape, generator=gen, dtype=dt))
    return out


def assert_same_function(before: Graph, after: Graph, *, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """``after`` verifies and computes what ``before`` computes on random inputs."""
    verify(after)
    assert [v.type for v in before.inputs] == [v.type for v in after.inputs]
    for seed in range(2):
        xs = random_inputs(before, seed)
        for a, b in zip(interpret(before, *xs), interpret(after, *xs)):
            torch.testing.assert_close(b, a, rtol=rtol, atol=atol)
