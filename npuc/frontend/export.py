"""Capturing a model with torch.export, and saying in plain words why a capture failed.

:func:`export_program` runs ``torch.export.export`` (non-strict by default: the model's Python runs
as is, which suits models such as the transformers ones), then ``run_decompositions`` down to core
ATen with the default decomposition table, minus the ops npuc has a graph op for and would rather
keep whole (:data:`KEPT_OPS`: ``linear``, ``silu``, ``hardswish``, ...).  It refuses what npuc
cannot compile: non-tensor inputs, dynamic shapes and models that mutate their buffers.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from typing import Any, Iterator

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from npuc.errors import DynamicShapeError, ExportError

# Ops the default decomposition table would break up but that npuc maps to one graph op each.
KEPT_OPS: tuple[torch._ops.OpOverload, ...] = (
    torch.ops.aten.linear.default,
    torch.ops.aten.matmul.default,
    torch.ops.aten.silu.default,
    torch.ops.aten.hardswish.default,
    torch.ops.aten.hardsigmoid.default,
    torch.ops.aten.adaptive_avg_pool2d.default,
)

# Loggers that print traced graphs and guard details while torch.export fails; npuc reports the
# failure itself, as one error.
_NOISY_LOGGERS = (
    "torch.fx.experimental.symbolic_shapes",
    "torch._dynamo",
    "torch._export",
    "torch.export",
    "torch._subclasses.fake_tensor",
)


def check_inputs(example_inputs: Any) -> tuple[torch.Tensor, ...]:
    """The example inputs as a tuple of tensors; DynamicShapeError for anything else."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise DynamicShapeError(
            f"example inputs must be a tuple of tensors, got a {type(example_inputs).__name__}"
        )
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise DynamicShapeError(
                f"model input {i} is a {type(x).__name__}, not a tensor: npuc compiles models whose "
                "inputs are all tensors of static shape (bind other arguments in a wrapper module)"
            )
    return tuple(example_inputs)


def export_program(
    model: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    *,
    strict: bool = False,
    dynamic_shapes: Any = None,
) -> ExportedProgram:
    """Export ``model`` and decompose it to core ATen (keeping :data:`KEPT_OPS`)."""
    return decompose_program(capture_program(model, example_inputs, strict=strict, dynamic_shapes=dynamic_shapes))


def capture_program(
    model: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    *,
    strict: bool = False,
    dynamic_shapes: Any = None,
) -> ExportedProgram:
    """``torch.export.export`` of ``model`` (torch.export's training IR, not decomposed)."""
    if dynamic_shapes is not None:
        raise DynamicShapeError(
            "a dynamic_shapes request was given, but npuc compiles static shapes only: export with "
            "the example inputs' shapes (one compiled model per input shape)"
        )
    inputs = check_inputs(example_inputs)
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"the model must be a torch.nn.Module, got a {type(model).__name__}")
    with quiet_torch_logs():
        try:
            ep = torch.export.export(model, inputs, strict=strict)
        except Exception as e:  # torch.export raises many exception types; all mean the same to a user
            raise export_error(e) from e
    check_static(ep)
    return ep


def decomposition_table() -> dict:
    """torch.export's core-ATen decomposition table without the ops of :data:`KEPT_OPS`."""
    table = torch.export.default_decompositions()
    for op in KEPT_OPS:
        if op in table:
            del table[op]
    return table


def decompose_program(ep: ExportedProgram) -> ExportedProgram:
    """``ep`` decomposed to core ATen (keeping :data:`KEPT_OPS`); checked for static shapes and
    for writes to its own state."""
    check_static(ep)
    if is_edge_program(ep):  # ExecuTorch's edge dialect is core ATen already
        check_no_mutation(ep)
        return ep
    with quiet_torch_logs():
        try:
            ep = ep.run_decompositions(decomposition_table())
        except Exception as e:
            raise export_error(e, stage="decomposing the exported program to core ATen") from e
    check_static(ep)
    check_no_mutation(ep)
    return ep


def is_edge_program(ep: ExportedProgram) -> bool:
    """Whether ``ep`` is in ExecuTorch's edge dialect (its ops are ``EdgeOpOverload``)."""
    return any(n.op == "call_function" and type(n.target).__name__ == "EdgeOpOverload" for n in ep.graph.nodes)


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """Silence PyTorch's own reports of a failing export (logged guards, the partial FX graph it
    prints to stderr): npuc raises one error of its own instead.  What the model itself writes to
    stderr during a successful export is passed on."""
    saved = []
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.CRITICAL)
    captured = io.StringIO()
    ok = False
    try:
        with contextlib.redirect_stderr(captured):
            yield
        ok = True
    finally:
        for logger, level in saved:
            logger.setLevel(level)
        if ok and captured.getvalue():
            sys.stderr.write(captured.getvalue())


# --------------------------------------------------------------------------------- checks


def check_static(ep: ExportedProgram) -> None:
    """DynamicShapeError naming the first user input with a symbolic dimension."""
    user_inputs = [s for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for index, spec in enumerate(user_inputs):
        node = placeholders.get(spec.arg.name)
        val = None if node is None else node.meta.get("val")
        if val is None:
            continue
        if not isinstance(val, torch.Tensor):
            raise DynamicShapeError(
                f"model input {index} ('{spec.arg.name}') is a {type(val).__name__}, not a tensor: "
                "npuc compiles tensor inputs of static shape"
            )
        for dim, size in enumerate(val.shape):
            if not isinstance(size, int):
                raise DynamicShapeError(
                    f"dimension {dim} of model input {index} ('{spec.arg.name}') is dynamic ({size}): "
                    "npuc compiles static shapes only; export with fixed input shapes"
                )


def check_no_mutation(ep: ExportedProgram) -> None:
    """ExportError when the program writes to its buffers or inputs (a model left in training mode)."""
    for spec in ep.graph_signature.output_specs:
        if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION):
            what = "buffer" if spec.kind == OutputKind.BUFFER_MUTATION else "input"
            raise ExportError(
                f"the model writes to its {what} '{spec.target}' when it runs; npuc imports inference "
                "graphs: call model.eval() (batch-norm statistics are updated in training mode) and "
                "remove in-place updates of module state"
            )


# --------------------------------------------------------------------------------- errors

_HINTS: tuple[tuple[str, str], ...] = (
    (
        r"data-dependent|GuardOnDataDependent|Could not guard on|could not extract specialized integer",
        "the model branches on (or sizes a tensor by) the value of a tensor, which a static graph "
        "cannot express: rewrite the condition with torch.where, use torch.cond for true control "
        "flow, or make the condition a Python constant",
    ),
    (
        r"Unsupported|not supported|graph break",
        "this Python construct is not supported by strict tracing; npuc exports with strict=False "
        "by default, so try that, or move the construct out of forward()",
    ),
    (
        r"Constraints violated|dynamic",
        "npuc compiles static shapes: do not mark input dimensions as dynamic",
    ),
)
_GENERIC_HINT = "check that the model runs eagerly on the example inputs, in eval mode"


def export_error(e: Exception, stage: str = "exporting the model with torch.export") -> ExportError:
    """An ExportError that reads as a sentence: what failed, where in the model, and what to try."""
    text = f"{type(e).__name__}: {e}"
    summary = first_lines(str(e)) or type(e).__name__
    where = raising_user_line(str(e))
    hint = next((h for pat, h in _HINTS if re.search(pat, text)), _GENERIC_HINT)
    msg = f"{stage} failed: {summary}"
    if where:
        msg += f" (at {where})"
    return ExportError(f"{msg}. Hint: {hint}.")


def first_lines(text: str, limit: int = 2) -> str:
    """The first ``limit`` non-empty lines of an error message, up to its first blank line."""
    lines: list[str] = []
    for line in text.strip().splitlines():
        if not line.strip():
            if lines:
                break
            continue
        lines.append(line.strip())
        if len(lines) == limit:
            break
    return " ".join(lines).rstrip(".")


_RAISED_AT = re.compile(
    r'The following call raised this error:\s*\n\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*\n\s*(?P<code>[^\n]*)'
)


def raising_user_line(text: str) -> str | None:
    """``file:line: code`` of the user's call named in torch.export's message, when present."""
    from npuc.frontend.source import short_path

    m = _RAISED_AT.search(text)
    if m is None:
        return None
    return f"{short_path(m.group('file'))}:{m.group('line')}: {m.group('code').strip()}"
