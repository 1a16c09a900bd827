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

:func:`import_graph_module` imports an FX graph module as torch.export's training IR leaves it
(a model converted by PT2E, imported without a second export): ``get_attr`` tensors are
constants, an in-place op is read as its functional form, and an op the table does not know
(``conv2d``, ``flatten``, ``dropout``, ...) is decomposed on its own, one node at a time, into the
core ATen ops that the table does know.
"""

from __future__ import annotations

import functools
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
    """Export ``model`` on ``example_inputs`` and import it as an unoptimized graph (an
    :class:`~npuc.frontend.onnx_model.OnnxModel` goes through the ONNX frontend instead)."""
    if getattr(model, "proto", None) is not None and type(model).__name__ == "OnnxModel":
        from npuc.frontend.onnx_import import import_onnx_graph

        shapes = {n: tuple(x.shape) for (n, _, _), x in zip(model.specs, example_inputs)}
        return import_onnx_graph(model.proto, shapes, name=name or model.model_name)
    ep = export_program(model, example_inputs, strict=strict, dynamic_shapes=dynamic_shapes)
    return import_program(ep, name=name or type(model).__name__)


def import_program(ep: ExportedProgram, *, name: str = "main") -> Graph:
    """Translate an exported, core-ATen program into an npuc graph."""
    return _Importer(ep.graph, name, ep=ep).run()


def import_with_origins(ep: ExportedProgram, *, name: str = "main") -> tuple[Graph, dict[str, str]]:
    """:func:`import_program`, and for each graph value the name of the FX node it was imported
    from (how a partitioner of the exported program maps npuc's decisions back to its nodes)."""
    importer = _Importer(ep.graph, name, ep=ep)
    return importer.run(), importer.origins


def import_graph_module(gm: torch.fx.GraphModule, *, name: str = "main") -> Graph:
    """Translate an FX graph module in torch.export's training IR (placeholders are the model's
    inputs, ``get_attr`` nodes its tensors) into an npuc graph; see the module docstring."""
    return _Importer(gm.graph, name, module=gm).run()


def _numbered_module_paths(graph: torch.fx.Graph) -> set[str]:
    """Module paths that are numbers (the children of a top-level ``Sequential``): the values they
    compute are named so, and numbering must leave those names to them."""
    out = set()
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            path = list(stack.values())[-1][0]
            if isinstance(path, str) and path.isdigit():
                out.add(path)
    return out


class _Importer:
    def __init__(self, graph: torch.fx.Graph, name: str, *, ep: ExportedProgram | None = None,
                 module: torch.fx.GraphModule | None = None) -> None:
        self.graph = graph
        self.ep = ep
        self.module = module
        self.decomposing = False
        self.origins: dict[str, str] = {}  # graph value name -> FX node name
        self.decompositions: dict[Any, torch.fx.GraphModule] = {}  # by op and operand types
        self.builder = GraphBuilder(name)
        self.env: dict[torch.fx.Node, Any] = {}
        self.ctx = ConvertContext(self.builder, self.env)
        self.problems: list[Problem] = []
        self.other_float_dtypes: set[str] = set()
        self.specs = {} if ep is None else {
            s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")
        }

    def run(self) -> Graph:
        outputs: list[Any] = []
        self.builder.reserve(_numbered_module_paths(self.graph))
        for node in self.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node)
            elif node.op == "call_function":
                first = len(self.builder.nodes)
                self.env[node] = self._call(node)
                for n in self.builder.nodes[first:]:
                    self.origins.update((v.name, node.name) for v in n.outputs)
            elif node.op == "output":
                outputs = list(node.args[0]) if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            elif node.op == "get_attr":
                self.env[node] = self._attribute(node)
            elif node.op == "call_module" and node.target == "_guards_fn":
                self.env[node] = None  # ExportedProgram.module()'s check of its input shapes
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

    def _attribute(self, node: torch.fx.Node) -> Any:
        """A tensor attribute of an imported graph module as a constant (quantization parameters
        are not model state); anything else is a subgraph of a control-flow op (reported there)."""
        value = _get_attr(self.module, str(node.target)) if self.module is not None else None
        if isinstance(value, torch.Tensor):
            name = str(node.target)
            return Folded(value.detach(), name, state=not name.startswith(("_scale", "_zero_point")))
        return _Subgraph(str(node.target))

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
        target = aten_of(target)
        if not isinstance(target, torch._ops.OpOverload):
            if not failed:  # users of a failed node are not reported again
                self._problem(node, _callable_name(target), _not_aten_reason(target))
            return _Failed()
        aten = str(target)
        if aten.startswith(SILENT_PREFIXES):
            return None
        rule = ATEN_TABLE.get(aten)
        if rule is None and _view_of_copy(target) is not None:
            target = _view_of_copy(target)  # edge dialect: permute_copy, view_copy, ... read as views
            aten = str(target)
            rule = ATEN_TABLE.get(aten)
        if rule is None and self.module is not None and ATEN_TABLE.get(str(_functional(target))) is not None:
            target = _functional(target)  # training IR: an in-place op read as its functional form
            rule = ATEN_TABLE[str(target)]
        if rule is None and self.module is not None and not self.decomposing and not failed:
            return self._decompose(node, target)
        if failed:
            # an op of the training IR would have been decomposed: only a failed operand stopped it
            if rule is None and aten not in SHAPE_ONLY_OPS and self.module is None:
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

    def _decompose(self, node: torch.fx.Node, target: torch._ops.OpOverload) -> Any:
        """Import one training-IR node the table does not know through its decomposition into
        core ATen (an in-place op through its functional form), traced on its own."""
        try:
            key = _decomposition_key(node, target, self.env)
            sub = self.decompositions.get(key) if key is not None else None
            if sub is None:
                sub = decompose_node(node, target, self.env)
                if key is not None:
                    self.decompositions[key] = sub
        except Exception as e:  # PyTorch could not decompose the op: report it like an unsupported op
            self._problem(node, str(target), f"npuc has no graph op for it and decomposing it failed: {e}")
            return _Failed()
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        operands = [a for a in _node_args(node)]
        for ph, arg in zip(placeholders, operands):
            self.env[ph] = self.env[arg]
        result: Any = None
        self.decomposing = True
        try:
            for n in sub.graph.nodes:
                if n.op == "call_function":  # the decomposed ops carry the node's source and module
                    own = {k: n.meta[k] for k in ("val", "tensor_meta") if k in n.meta}
                    n.meta = {**{k: v for k, v in node.meta.items() if k not in own}, **own}
                    self.env[n] = self._call(n)
                elif n.op == "get_attr":
                    self.env[n] = Folded(_get_attr(sub, str(n.target)).detach(), f"{node.name}.{n.target}")
                elif n.op == "output":
                    result = self.ctx.resolve(n.args[0])
        finally:
            self.decomposing = False
        if isinstance(result, (list, tuple)) and len(result) == 1 and not isinstance(node.meta.get("val"), (list, tuple)):
            result = result[0]
        return result

    def _problem(self, node: torch.fx.Node, aten: str, reason: str) -> None:
        frame = user_frame(node)
        self.problems.append(
            Problem(aten, node.name, frame.loc if frame else None, frame.code if frame else None, reason)
        )


def aten_of(target: Any) -> Any:
    """The ATen op of an ExecuTorch edge-dialect op (``EdgeOpOverload``); any other target as it is."""
    op = getattr(target, "_op", None)
    if type(target).__name__ == "EdgeOpOverload" and isinstance(op, torch._ops.OpOverload):
        return op
    return target


def _view_of_copy(target: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """``aten.permute`` for ``aten.permute_copy`` (the edge dialect's copying views), when the
    view has a rule; None otherwise."""
    packet = target.overloadpacket.__name__
    if not packet.endswith("_copy") or target.namespace != "aten":
        return None
    view = getattr(torch.ops.aten, packet.removesuffix("_copy"), None)
    op = getattr(view, target._overloadname, None) if view is not None else None
    return op if op is not None and str(op) in ATEN_TABLE else None


def _get_attr(module: torch.nn.Module, target: str) -> Any:
    obj: Any = module
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _node_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The FX nodes among ``node``'s arguments, in order (the operands of its decomposition)."""
    flat, _ = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    return [a for a in flat if isinstance(a, torch.fx.Node)]


def _functional(target: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """The functional overload of an in-place ATen op (``hardtanh_`` -> ``hardtanh``), else the op."""
    packet = target.overloadpacket.__name__
    if packet.endswith("_") and not packet.startswith("_"):
        functional = getattr(torch.ops.aten, packet[:-1], None)
        if functional is not None and hasattr(functional, target._overloadname):
            return getattr(functional, target._overloadname)
    return target


def _decomposition_key(node: torch.fx.Node, target: Any, env: dict) -> Any:
    """What a node's decomposition depends on: the op, its operands' shapes and dtypes and its
    other arguments (None when an argument cannot be part of a key)."""
    def key(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            r = env[a]
            if isinstance(r, Value):
                return ("tensor", r.type.shape, r.type.dtype)
            if isinstance(r, Folded):
                return ("tensor", tuple(r.tensor.shape), r.tensor.dtype)
            return ("value", key(r))
        if isinstance(a, (list, tuple)):
            return tuple(key(x) for x in a)
        if isinstance(a, dict):
            return tuple(sorted((k, key(v)) for k, v in a.items()))
        hash(a)
        return (type(a).__name__, a)

    try:
        return (str(target), key(node.args), key(node.kwargs))
    except TypeError:
        return None


def _stand_in(r: Any) -> Any:
    """A tensor standing for an import-time binding while a node is decomposed."""
    if isinstance(r, Folded):
        return r.tensor
    if isinstance(r, Value):
        return torch.zeros(r.type.shape, dtype=r.type.dtype.torch)
    if isinstance(r, (list, tuple)):
        return type(r)(_stand_in(x) for x in r)
    return r


@functools.lru_cache(maxsize=1)
def _decompositions() -> tuple[dict, dict]:
    """(composite ops -> how to treat them, the op decomposition table), split as
    ExportedProgram.run_decompositions splits npuc's table: composite ops of KEPT_OPS (matmul,
    linear, ...) stay whole, the others decompose by their own implementation or the table."""
    from torch.export.exported_program import _split_decomp_table_to_cia_and_python_decomp

    from npuc.frontend.export import decomposition_table

    return _split_decomp_table_to_cia_and_python_decomp(dict(decomposition_table().items()))


def decompose_node(node: torch.fx.Node, target: torch._ops.OpOverload, env: dict) -> torch.fx.GraphModule:
    """The core-ATen graph of one node (its FX operands become the placeholders, in order)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    fn_target = _functional(target)
    flat, spec = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    slots = [i for i, a in enumerate(flat) if isinstance(a, torch.fx.Node)]

    def call(*tensors: Any) -> Any:
        leaves = list(flat)
        for i, t in zip(slots, tensors):
            leaves[i] = t
        args, kwargs = torch.utils._pytree.tree_unflatten(leaves, spec)
        return fn_target(*args, **kwargs)

    stand_ins = [_stand_in(env[flat[i]]) for i in slots]
    from torch.export.exported_program import _override_composite_implicit_decomp

    composite, table = _decompositions()
    with _override_composite_implicit_decomp(composite):
        return make_fx(call, decomposition_table=table, tracing_mode="fake")(*stand_ins)


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
