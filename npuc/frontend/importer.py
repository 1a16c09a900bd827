"""The torch.export frontend: an exported program becomes an (unoptimized) npuc graph.

:func:`import_graph` exports the model (:mod:`npuc.frontend.export`) and walks the FX graph once,
in order:

- user inputs become graph inputs; parameters, buffers and lifted tensor constants are bound as
  :class:`~npuc.frontend.context.Folded` tensors and enter the graph as ``const`` nodes named by
  their fully qualified name (``layer1.0.conv1.weight``) when a graph op reads them;
- each ATen call goes through the one table :data:`~npuc.frontend.aten_table.ATEN_TABLE`;
- **import-time folding**: a call whose tensor operands are all known at import time is evaluated
  right away with PyTorch, when the op has no graph op (``arange``, ``full``, ``scalar_tensor``,
  ``triu``, ``cumsum``, ``gather``, ...) or when none of its operands is a model weight (so the
  attention-mask arithmetic of transformers models disappears, while a weight keeps its name and
  layout for the graph passes).  Ops that read only the shape of a run-time tensor (``full_like``,
  ``zeros_like``, ``new_ones``, ...) are folded too.  Random ops are never folded;
- every node carries ``loc``, the user's source line it was traced from.

Problems are collected over the whole program, and all unsupported ops are reported in one
:class:`~npuc.errors.UnsupportedOpError` before anything else runs.
"""

from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from npuc.errors import NpucError, UnsupportedOpError, VerifyError
from npuc.frontend.aten_table import ATEN_TABLE
from npuc.frontend.context import ConvertContext, Dropped, Folded, Unsupported, bind_arguments
from npuc.frontend.export import export_program
from npuc.frontend.source import user_frame
from npuc.ir.graph import Graph, GraphBuilder, Value
from npuc.ir.types import DType, TensorType

# ATen ops whose result depends only on the shape and dtype of their tensor operands.
SHAPE_ONLY_OPS = frozenset(
    f"aten.{n}"
    for n in (
        "full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default",
        "new_full.default", "new_zeros.default", "new_ones.default", "new_empty.default",
        "sym_size.int", "sym_numel.default",
    )
)


class NotImportedWarning(UserWarning):
    """Something of the model was kept as it is, or dropped, during the import (fp16 weights, ...)."""


@dataclass(frozen=True, eq=False)
class _Failed:
    """The result of a node that could not be imported; its users are skipped silently."""


@dataclass(frozen=True)
class _Subgraph:
    """A subgraph attribute (the branches of torch.cond, the body of a loop)."""

    name: str


# Shape assertions only emitted around symbolic sizes: they check nothing in a static graph.
SILENT_PREFIXES = ("aten._assert_scalar", "aten._assert_async", "aten.sym_constrain_range")


def _callable_name(target: Any) -> str:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"torch.{target.name()}"
    return getattr(target, "__name__", str(target))


def _not_aten_reason(target: Any) -> str:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return (
            "control flow (a higher-order op) has no form in npuc's straight-line graphs: compute both "
            "branches and select with torch.where, or make the condition a Python constant"
        )
    return "only ATen operators can be imported; this is a Python-level operation on sizes or values"


@dataclass(frozen=True)
class Problem:
    """One unsupported use of an ATen op, with where it came from in the model."""

    aten: str
    node: str
    where: str | None
    code: str | None
    reason: str

    def describe(self) -> str:
        at = f" at {self.where}" if self.where else ""
        code = f" `{self.code}`" if self.code else ""
        return f"{self.aten} (FX node %{self.node}){at}{code}: {self.reason}"


def import_graph(
    model: torch.nn.Module,
    example_inputs: tuple,
    *,
    name: str | None = None,
    strict: bool = False,
    dynamic_shapes: Any = None,
) -> Graph:
    """Export ``model`` on ``example_inputs`` and import it as an unoptimized graph."""
    ep = export_program(model, example_inputs, strict=strict, dynamic_shapes=dynamic_shapes)
    return import_program(ep, name=name or type(model).__name__)


def import_program(ep: ExportedProgram, *, name: str = "main") -> Graph:
    """Translate an exported, core-ATen program into an npuc graph."""
    return _Importer(ep, name).run()


class _Importer:
    def __init__(self, ep: ExportedProgram, name: str) -> None:
        self.ep = ep
        self.builder = GraphBuilder(name)
        self.env: dict[torch.fx.Node, Any] = {}
        self.ctx = ConvertContext(self.builder, self.env)
        self.problems: list[Problem] = []
        self.other_float_dtypes: set[str] = set()
        self.specs = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}

    def run(self) -> Graph:
        outputs: list[Any] = []
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node)
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                outputs = list(node.args[0]) if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            elif node.op == "get_attr":  # a subgraph of a control-flow op; the op itself is reported
                self.env[node] = _Subgraph(str(node.target))
            else:
                self._problem(node, str(node.target), f"FX '{node.op}' nodes have no graph form")
                self.env[node] = _Failed()
        values = [self._output(i, o) for i, o in enumerate(outputs)]
        if self.problems:
            raise UnsupportedOpError(_format_problems(self.problems))
        if self.other_float_dtypes:
            warnings.warn(
                f"the model has {', '.join(sorted(self.other_float_dtypes))} weights; npuc keeps them as "
                "they are (the graph computes in those types)",
                NotImportedWarning,
                stacklevel=3,
            )
        return self.builder.build(values)

    # ----------------------------------------------------------------- placeholders and outputs

    def _placeholder(self, node: torch.fx.Node) -> Any:
        spec = self.specs.get(node.name)
        if spec is None or spec.kind == InputKind.USER_INPUT:
            val = node.meta["val"]
            if isinstance(val, torch.Tensor) and val.numel() == 0:
                raise NpucError(
                    f"model input '{node.name}' has shape {list(val.shape)}, which holds no element: npuc "
                    "compiles tensors of at least one element (give an example input with every dimension >= 1)"
                )
            return self.builder.input(TensorType.of(val), name=node.name)
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            tensor = self.ep.state_dict.get(spec.target)
            if tensor is None:
                tensor = self.ep.constants[spec.target]
            state = spec.kind == InputKind.PARAMETER or (spec.persistent is not False and tensor.is_floating_point())
            if tensor.is_floating_point() and tensor.dtype != torch.float32:
                self.other_float_dtypes.add(str(tensor.dtype))
            return Folded(tensor.detach(), spec.target, state=state)
        if spec.kind == InputKind.CONSTANT_TENSOR:
            return Folded(self.ep.constants[spec.target].detach(), spec.target, state=False)
        self._problem(node, f"{spec.kind.name.lower()} input", "this kind of program input has no graph form")
        return _Failed()

    def _output(self, index: int, out: Any) -> Value:
        r = self.ctx.resolve(out)
        if isinstance(r, Value):
            return r
        if isinstance(r, Folded):
            self.ctx.node, self.ctx.loc = out, None
            return self.ctx.value(out)
        if isinstance(r, Dropped):
            self._output_problem(index, out, f"model output {index} is the {r.what}, which npuc does not compute")
        elif not isinstance(r, _Failed):
            self._output_problem(index, out, f"model output {index} is a {type(r).__name__}, not a tensor")
        return Value(f"failed{index}", TensorType((), DType.f32))

    def _output_problem(self, index: int, out: Any, reason: str) -> None:
        if isinstance(out, torch.fx.Node):
            self._problem(out, "model output", reason)
        else:
            self.problems.append(Problem("model output", f"output{index}", None, None, reason))

    # ----------------------------------------------------------------- calls

    def _call(self, node: torch.fx.Node) -> Any:
        target = node.target
        if target is operator.getitem:
            src = self.ctx.resolve(node.args[0])
            return src if isinstance(src, _Failed) else src[node.args[1]]
        operands = _tensor_operands(self.ctx.resolve(list(node.args) + list(node.kwargs.values())))
        failed = any(isinstance(o, _Failed) for o in operands)
        if not isinstance(target, torch._ops.OpOverload):
            if not failed:  # users of a failed node are not reported again
                self._problem(node, _callable_name(target), _not_aten_reason(target))
            return _Failed()
        aten = str(target)
        if aten.startswith(SILENT_PREFIXES):
            return None
        rule = ATEN_TABLE.get(aten)
        if failed:
            if rule is None and aten not in SHAPE_ONLY_OPS:
                self._problem(node, aten, "npuc has no graph op for it")
            return _Failed()
        if _all_known(operands) and (rule is None or (rule.fold and not any(o.state for o in operands))):
            return self._fold(node, target)
        if rule is None and aten in SHAPE_ONLY_OPS:
            return self._fold(node, target, shape_only=True)
        if rule is None:
            self._problem(node, aten, "npuc has no graph op for it (import-time folding needs operands known at import time)")
            return _Failed()
        self.ctx.node = node
        frame = user_frame(node)
        self.ctx.loc = frame.loc if frame else None
        try:
            return rule.convert(self.ctx, bind_arguments(target, node.args, node.kwargs))
        except Unsupported as e:
            self._problem(node, aten, str(e))
            return _Failed()
        except VerifyError as e:
            self._problem(node, aten, f"its arguments are outside what the graph op accepts: {e}")
            return _Failed()

    def _fold(self, node: torch.fx.Node, target: torch._ops.OpOverload, shape_only: bool = False) -> Any:
        """Evaluate ``node`` with PyTorch at import time (import-time folding)."""
        if torch.Tag.nondeterministic_seeded in target.tags:
            self._problem(node, str(target), "random ops cannot be imported (the result would not be reproducible)")
            return _Failed()

        def real(x: Any) -> Any:
            if isinstance(x, torch.fx.Node):
                r = self.env[x]
                if isinstance(r, Folded):
                    return r.tensor
                if isinstance(r, Value) and shape_only:
                    return torch.zeros(r.type.shape, dtype=r.type.dtype.torch)
                return r
            if isinstance(x, (list, tuple)):
                return type(x)(real(y) for y in x)
            return x

        try:
            result = target(*real(list(node.args)), **{k: real(v) for k, v in node.kwargs.items()})
        except Exception as e:  # PyTorch rejected the call: report it like an unsupported op
            self._problem(node, str(target), f"import-time folding failed: {type(e).__name__}: {e}")
            return _Failed()
        if "empty" in str(target):
            result = result.zero_() if isinstance(result, torch.Tensor) else result
        return _wrap_folded(result, node.name)

    def _problem(self, node: torch.fx.Node, aten: str, reason: str) -> None:
        frame = user_frame(node)
        self.problems.append(
            Problem(aten, node.name, frame.loc if frame else None, frame.code if frame else None, reason)
        )


def _tensor_operands(args: Any) -> list[Any]:
    out: list[Any] = []
    for a in args:
        if isinstance(a, (Value, Folded, Dropped, _Failed)):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_tensor_operands(a))
    return out


def _all_known(operands: list[Any]) -> bool:
    return all(isinstance(o, Folded) for o in operands)


def _wrap_folded(result: Any, name: str) -> Any:
    if isinstance(result, torch.Tensor):
        return Folded(result.detach(), name)
    if isinstance(result, (list, tuple)):
        return tuple(_wrap_folded(r, f"{name}.{i}") for i, r in enumerate(result))
    return result


def _format_problems(problems: list[Problem]) -> str:
    ops = sorted({p.aten for p in problems})
    head = (
        f"the model uses {len(ops)} operator{'s' if len(ops) != 1 else ''} npuc cannot import "
        f"({', '.join(ops)}), at {len(problems)} place{'s' if len(problems) != 1 else ''}:"
    )
    lines = [head] + [f"  - {p.describe()}" for p in problems]
    lines.append("Run `npuc ops` to list supported ops.")
    return "\n".join(lines)
