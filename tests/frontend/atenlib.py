"""Test helpers: export a call of one PyTorch function, import it, interpret it, compare to eager."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from npuc.errors import ExportError, UnsupportedOpError
from npuc.frontend.export import export_program
from npuc.frontend.importer import import_program
from npuc.interp import interpret
from npuc.ir import Graph


class Call(torch.nn.Module):
    """``forward(*tensors)`` calls ``fn`` with the tensors put back in their places in the arguments."""

    def __init__(self, fn: Callable, spec: pytree.TreeSpec, leaves: list[Any]) -> None:
        super().__init__()
        self.fn = fn
        self.spec = spec
        self.leaves = leaves

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        leaves = [next(it) if isinstance(x, torch.Tensor) else x for x in self.leaves]
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(*args, **kwargs)


@dataclass
class CaseResult:
    """How one call fared: 'ok' (imported and matched), 'unsupported' or 'export' (refused)."""

    status: str
    aten_ops: frozenset[str] = frozenset()
    graph: Graph | None = None
    error: str = ""


def as_module(fn: Callable, args: tuple, kwargs: dict) -> tuple[Call, tuple[torch.Tensor, ...]]:
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    leaves = [x.detach() if isinstance(x, torch.Tensor) else x for x in leaves]
    tensors = tuple(x for x in leaves if isinstance(x, torch.Tensor))
    return Call(fn, spec, leaves).eval(), tensors


def run_case(fn: Callable, args: tuple, kwargs: dict | None = None, *, rtol: float = 1e-4, atol: float = 1e-5) -> CaseResult:
    """Export ``fn(*args, **kwargs)``, import and interpret it; assert it matches eager.

    Returns 'unsupported'/'export' results (instead of raising) when npuc refuses the call with a
    user-facing error, so that callers decide whether a refusal is acceptable.
    """
    module, tensors = as_module(fn, args, kwargs or {})
    with torch.no_grad():
        expected = module(*tensors)
    try:
        ep = export_program(module, tensors)
    except ExportError as e:
        return CaseResult("export", error=str(e))
    ops = frozenset(str(n.target) for n in ep.graph.nodes if n.op == "call_function")
    try:
        g = import_program(ep, name="case")
    except UnsupportedOpError as e:
        return CaseResult("unsupported", ops, error=str(e))
    got = interpret(g, *tensors)
    want = [x for x in pytree.tree_leaves(expected) if isinstance(x, torch.Tensor)]
    assert len(got) == len(want), f"{len(got)} outputs, eager has {len(want)}"
    for i, (o, e) in enumerate(zip(got, want)):
        assert o.shape == e.shape, f"output {i}: shape {tuple(o.shape)} != eager {tuple(e.shape)}"
        assert o.dtype == e.dtype, f"output {i}: dtype {o.dtype} != eager {e.dtype}"
        torch.testing.assert_close(o, e, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"output {i}: {m}")
    return CaseResult("ok", ops, g)
