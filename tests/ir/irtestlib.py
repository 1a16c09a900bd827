"""Shared helpers of the IR tests: one-op graphs built from concrete operands, and running them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from npuc.interp import interpret
from npuc.ir import Graph, GraphBuilder, TensorType


@dataclass(frozen=True)
class Case:
    """One graph-op invocation: concrete operands, attributes, and which operands are constants."""

    op: str
    operands: tuple[torch.Tensor, ...]
    attrs: Any = None
    consts: frozenset[int] = field(default_factory=frozenset)


def build(case: Case, name: str = "case", loc: str | None = None) -> Graph:
    """A graph computing ``case``: constant operands become ``const`` nodes, the rest inputs."""
    b = GraphBuilder(name)
    values = []
    for i, t in enumerate(case.operands):
        if i in case.consts:
            values.append(b.constant(f"c{i}", t, loc=loc))
        else:
            values.append(b.input(TensorType.of(t), f"x{i}"))
    outs = b.add(case.op, values, case.attrs, loc=loc)
    return b.build(outs)


def graph_inputs(case: Case) -> list[torch.Tensor]:
    return [t for i, t in enumerate(case.operands) if i not in case.consts]


def run(case: Case) -> tuple[Graph, list[torch.Tensor]]:
    """Build ``case`` (infer + verify) and run it on the reference interpreter."""
    g = build(case)
    return g, interpret(g, *graph_inputs(case))


def check(case: Case, expected: torch.Tensor | tuple[torch.Tensor, ...]) -> None:
    """The inferred types and the interpreted values of ``case`` equal PyTorch's ``expected``."""
    g, got = run(case)
    want = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    assert len(g.outputs) == len(want)
    for v, w, o in zip(g.outputs, want, got):
        assert v.type == TensorType.of(w), f"{case.op}: inferred {v.type}, PyTorch gives {TensorType.of(w)}"
        torch.testing.assert_close(o, w, equal_nan=True)
