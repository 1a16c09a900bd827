"""What a model handed to npuc is, and ``.pt2`` files.

npuc compiles a ``torch.nn.Module`` (exported here), a ``torch.export.ExportedProgram`` (used as
it is: float, or already quantized by PT2E) and a module converted by ``convert_pt2e`` (imported
as it is).  :func:`load_pt2` reads a program saved by ``torch.export.save``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from npuc.errors import ExportError
from npuc.frontend.quantized import is_quantized

ModelKind = Literal["module", "program", "quantized-program", "quantized-module"]


def model_kind(model: object) -> ModelKind:
    """``module`` (a float nn.Module), ``program`` (a float ExportedProgram), ``quantized-program``
    (an ExportedProgram with PT2E's quantize/dequantize ops) or ``quantized-module`` (a module
    converted by ``convert_pt2e``); ExportError for anything else."""
    if isinstance(model, torch.export.ExportedProgram):
        return "quantized-program" if is_quantized(model.graph) else "program"
    if isinstance(model, torch.fx.GraphModule) and is_quantized(model.graph):
        return "quantized-module"
    if isinstance(model, torch.nn.Module):
        return "module"
    raise ExportError(
        f"the model must be a torch.nn.Module, a torch.export.ExportedProgram or a module converted by "
        f"convert_pt2e, got a {type(model).__name__}"
    )


def load_pt2(path: str | Path) -> torch.export.ExportedProgram:
    """The ExportedProgram saved in ``path`` by ``torch.export.save``; ExportError when it cannot be read."""
    p = Path(path)
    if not p.is_file():
        raise ExportError(f"'{p}' does not exist (a .pt2 file saved by torch.export.save was expected)")
    try:
        ep = torch.export.load(p)
    except Exception as e:  # torch.export.load raises zipfile, pickle and runtime errors alike
        raise ExportError(f"cannot load '{p}' as a program saved by torch.export.save: {type(e).__name__}: {e}") from None
    return ep


def program_inputs(ep: torch.export.ExportedProgram) -> tuple[torch.Tensor, ...]:
    """The example inputs an ExportedProgram was exported with; without them, zeros of its user
    inputs' shapes and dtypes (enough for a float compile, which needs no data)."""
    example = ep.example_inputs
    if example is None:
        return _zero_inputs(ep)
    args, kwargs = example
    if kwargs:
        raise ExportError("the exported program takes keyword inputs; npuc compiles positional tensor inputs")
    return tuple(args)


def _zero_inputs(ep: torch.export.ExportedProgram) -> tuple[torch.Tensor, ...]:
    from torch.export.graph_signature import InputKind

    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    out = []
    for n in names:
        v = vals.get(n)
        if not isinstance(v, torch.Tensor):
            raise ExportError(f"input '{n}' of the exported program is not a tensor of known shape")
        out.append(torch.zeros(tuple(int(d) for d in v.shape), dtype=v.dtype))
    return tuple(out)
