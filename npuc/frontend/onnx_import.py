"""The ONNX frontend: an ONNX model becomes an npuc graph.

:func:`import_onnx_graph` reads a ``ModelProto`` (or a path to one) and walks its graph once, in
order:

- graph inputs become graph inputs, with their shapes from the file (a dynamic dimension needs a
  size from ``input_shapes``); inputs listed in ``fixed_inputs`` become constants instead;
- initializers are bound as :class:`~npuc.frontend.onnx_context.Known` tensors and enter the graph
  as ``const`` nodes named after the initializer when a graph op reads them;
- each node goes through the one table :data:`~npuc.frontend.onnx_table.ONNX_TABLE`;
- **import-time folding**: a node whose operands are all known at import time is evaluated right
  away by ONNX's reference implementation (``onnx.reference``) when the operator has no rule or
  none of its operands is a model weight: the ``Shape -> Gather -> Concat -> Reshape`` chains and
  the ``Constant``/``ConstantOfShape``/``Range`` nodes of exported models disappear;
- every node carries its ONNX node name as location.

Problems are collected over the whole graph and reported together in one
:class:`~npuc.errors.UnsupportedOpError` (operator, node name, reason); the users of a failed
node are skipped silently.  :func:`npuc.pipeline.import_onnx` adds the graph passes.

Opsets 13 to the current one of the installed ``onnx`` package are read as they are; an older
model is first converted by ``onnx.version_converter``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from npuc.errors import DynamicShapeError, ModelSpecError, NpucError, UnsupportedOpError, VerifyError
from npuc.frontend.onnx_context import (
    Known,
    OnnxContext,
    Unsupported,
    onnx_dtype_to_torch,
    tensor_from_numpy,
    value_name,
)
from npuc.frontend.onnx_table import ONNX_TABLE
from npuc.ir.graph import Graph, GraphBuilder, Value
from npuc.ir.types import DType, TensorType

try:
    import onnx
except ImportError:  # pragma: no cover - exercised only without the extra
    onnx = None

MIN_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")
# Never folded: their result is not a function of their operands.
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"})


def require_onnx():
    """The ``onnx`` module, or an NpucError saying how to install it."""
    if onnx is None:
        raise NpucError("reading ONNX models needs the onnx package: pip install 'npuc[onnx]'")
    return onnx


def max_opset() -> int:
    """The newest default-domain opset npuc reads (that of the installed onnx package)."""
    return require_onnx().defs.onnx_opset_version()


@dataclass(frozen=True)
class OnnxProblem:
    """One unsupported use of an ONNX operator, with the node it happened at."""

    op: str
    node: str
    reason: str

    def describe(self) -> str:
        return f"{self.op} (node '{self.node}'): {self.reason}"


@dataclass(frozen=True, eq=False)
class _Failed:
    """The result of a node that could not be imported; its users are skipped silently."""


def load_proto(model: Any) -> "onnx.ModelProto":
    """A ModelProto from a ModelProto, a path, or the bytes of a model file."""
    require_onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:
            raise ModelSpecError(f"the bytes given are not an ONNX model: {e}") from None
    path = Path(model)
    if not path.is_file():
        raise ModelSpecError(f"ONNX model file '{path}' does not exist")
    try:
        return onnx.load(str(path))
    except Exception as e:
        raise ModelSpecError(f"'{path}' is not a readable ONNX model: {type(e).__name__}: {e}") from None


def default_opset(proto: "onnx.ModelProto") -> int:
    for o in proto.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return int(o.version)
    raise ModelSpecError("the ONNX model imports no default-domain opset")


def normalized(proto: "onnx.ModelProto") -> "onnx.ModelProto":
    """The model with local functions inlined and an opset below 13 converted up to 13."""
    if proto.functions:
        from onnx import inliner

        proto = inliner.inline_local_functions(proto)
    opset = default_opset(proto)
    newest = max_opset()
    if opset > newest:
        raise ModelSpecError(
            f"the ONNX model uses opset {opset}, newer than the installed onnx package reads ({newest}); "
            "upgrade onnx"
        )
    if opset < MIN_OPSET:
        try:
            proto = onnx.version_converter.convert_version(proto, MIN_OPSET)
        except Exception as e:
            raise ModelSpecError(
                f"the ONNX model uses opset {opset}; npuc reads opsets {MIN_OPSET} to {newest} and "
                f"onnx.version_converter could not convert it: {e}"
            ) from None
    return proto


def graph_input_specs(
    proto: "onnx.ModelProto", input_shapes: Mapping[str, Sequence[int]] | None = None, skip: set[str] = frozenset()
):
    """``(name, shape, torch dtype)`` of each run-time input of the model (initializers excluded),
    dynamic dimensions filled from ``input_shapes``; :class:`DynamicShapeError` for one left open."""
    inits = {t.name for t in proto.graph.initializer}
    shapes = dict(input_shapes or {})
    specs = []
    names = [i.name for i in proto.graph.input if i.name not in inits]
    unknown = set(shapes) - set(names)
    if unknown:
        raise ModelSpecError(
            f"input shape given for {', '.join(sorted(unknown))}, which the model has no input named; "
            f"its inputs are {', '.join(names)}"
        )
    for vi in proto.graph.input:
        if vi.name in inits or vi.name in skip:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ModelSpecError(f"ONNX input '{vi.name}' is not a tensor (sequences, maps and optionals are not supported)")
        try:
            dtype = onnx_dtype_to_torch(tt.elem_type)
        except Unsupported as e:
            raise ModelSpecError(f"ONNX input '{vi.name}': {e}") from None
        if vi.name in shapes:
            shape = tuple(int(d) for d in shapes[vi.name])
            if tt.HasField("shape") and len(tt.shape.dim) != len(shape):
                raise ModelSpecError(
                    f"input shape {list(shape)} for '{vi.name}' has rank {len(shape)}, the model's input has "
                    f"rank {len(tt.shape.dim)}"
                )
            if tt.HasField("shape"):
                for k, (d, s) in enumerate(zip(tt.shape.dim, shape)):
                    if d.HasField("dim_value") and d.dim_value != s:
                        raise ModelSpecError(
                            f"input shape {list(shape)} for '{vi.name}' changes its static dim {k} ({d.dim_value})"
                        )
        else:
            if not tt.HasField("shape"):
                raise DynamicShapeError(
                    f"ONNX input '{vi.name}' has no shape in the file; give one with "
                    f"input_shapes={{'{vi.name}': [...]}} (CLI: --input-shape {vi.name}=D0,D1,...)"
                )
            dims = []
            for k, d in enumerate(tt.shape.dim):
                if not d.HasField("dim_value"):
                    label = f" ('{d.dim_param}')" if d.dim_param else ""
                    raise DynamicShapeError(
                        f"ONNX input '{vi.name}' has a dynamic dimension {k}{label}; npuc compiles static shapes: "
                        f"give its size with input_shapes={{'{vi.name}': [...]}} (CLI: --input-shape "
                        f"{vi.name}=D0,D1,...)"
                    )
                dims.append(int(d.dim_value))
            shape = tuple(dims)
        specs.append((vi.name, shape, dtype))
    return specs


def import_onnx_graph(
    model: Any,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    name: str | None = None,
    fixed_inputs: Mapping[str, Any] | None = None,
) -> Graph:
    """Import an ONNX model (a ModelProto, a path or bytes) as an unoptimized graph.

    ``input_shapes`` gives the sizes of dynamic input dimensions (name -> full shape);
    ``fixed_inputs`` (name -> array) makes inputs constants known at import time.
    """
    proto = normalized(load_proto(model))
    if name is None:
        name = proto.graph.name or (Path(model).stem if isinstance(model, (str, Path)) else "onnx")
    return _OnnxImporter(proto, name, input_shapes, fixed_inputs or {}).run()


class _OnnxImporter:
    def __init__(self, proto, name: str, input_shapes, fixed_inputs: Mapping[str, Any]) -> None:
        self.proto = proto
        self.opset = default_opset(proto)
        self.builder = GraphBuilder(value_name(name) or "onnx")
        self.env: dict[str, Any] = {}
        self.ctx = OnnxContext(self.builder, self.env, self.opset)
        self.problems: list[OnnxProblem] = []
        self.input_shapes = input_shapes
        self.fixed = dict(fixed_inputs)

    def run(self) -> Graph:
        g = self.proto.graph
        for init in g.initializer:
            self.env[init.name] = self._initializer(init)
        unknown = set(self.fixed) - {i.name for i in g.input}
        if unknown:
            raise ModelSpecError(f"fixed_inputs names {', '.join(sorted(unknown))}, which the model has no input named")
        for in_name in self.fixed:
            dtype = _input_dtype(g, in_name)
            t = tensor_from_numpy(np.asarray(self.fixed[in_name])).to(dtype)
            self.env[in_name] = Known(t, value_name(in_name) or "input", weight=False)
        for in_name, shape, dtype in graph_input_specs(self.proto, self.input_shapes, skip=set(self.fixed)):
            ty = TensorType(shape, DType.from_torch(dtype))
            self.env[in_name] = self.builder.input(ty, name=value_name(in_name) or None)
        for i, node in enumerate(g.node):
            self._node(i, node)
        outputs = [self._output(o.name) for o in g.output]
        if self.problems:
            raise UnsupportedOpError(_format_problems(self.problems))
        return self.builder.build(outputs)

    # ----------------------------------------------------------------- bindings

    def _initializer(self, init) -> Any:
        try:
            arr = onnx.numpy_helper.to_array(init)
            t = tensor_from_numpy(arr)
        except Unsupported as e:
            self.problems.append(OnnxProblem("initializer", init.name, str(e)))
            return _Failed()
        except Exception as e:
            self.problems.append(OnnxProblem("initializer", init.name, f"its data cannot be read: {e}"))
            return _Failed()
        if t.is_floating_point() and t.dtype != torch.float32:
            warnings.warn(f"initializer '{init.name}' is {t.dtype}; npuc keeps it as it is", stacklevel=4)
        return Known(t, value_name(init.name) or "initializer", weight=t.is_floating_point())

    def _output(self, name: str) -> Value:
        e = self.env.get(name)
        if isinstance(e, Value):
            return e
        if isinstance(e, Known):
            return self.builder.constant(value_name(name) or "output", e.tensor)
        if e is None:
            self.problems.append(OnnxProblem("graph output", name, "no node computes it"))
        return Value(f"failed_{len(self.problems)}", TensorType((), DType.f32))

    # ----------------------------------------------------------------- nodes

    def _node(self, index: int, node) -> None:
        label = node.name or f"#{index} {node.op_type}"
        missing = [n for n in node.input if n and n not in self.env]
        if missing:
            self._fail(node)
            self.problems.append(OnnxProblem(node.op_type, label, f"it reads {', '.join(missing)}, which nothing defines before it"))
            return
        operands = [self.env[n] for n in node.input if n]
        if any(isinstance(o, _Failed) for o in operands):
            self._fail(node)
            return
        if node.domain not in DEFAULT_DOMAINS:
            self._problem(node, label, f"operators of domain '{node.domain}' are not supported (only the default ONNX domain)")
            return
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            self._problem(node, label, "control flow (a subgraph attribute) has no form in npuc's straight-line graphs")
            return
        rule = ONNX_TABLE.get(node.op_type)
        all_known = all(isinstance(o, Known) for o in operands)
        if all_known and node.op_type not in RANDOM_OPS and (rule is None or not any(o.weight for o in operands)):
            self._fold(node, label)
            return
        if rule is None:
            if node.op_type in RANDOM_OPS:
                reason = "random operators cannot be imported (the result would not be reproducible)"
            else:
                reason = "npuc has no graph op for it (import-time folding needs operands known at import time)"
            self._problem(node, label, reason)
            return
        self.ctx.start(node, label)
        try:
            result = rule.convert(self.ctx)
        except Unsupported as e:
            self._problem(node, label, str(e))
            return
        except VerifyError as e:
            self._problem(node, label, f"its operands are outside what the graph op accepts: {e}")
            return
        self._bind(node, label, result)

    def _bind(self, node, label: str, result: Any) -> None:
        results = result if isinstance(result, tuple) else (result,)
        outs = list(node.output)
        if len(results) < len([o for o in outs if o]):
            self._problem(node, label, f"npuc computes {len(results)} of its {len(outs)} outputs")
            return
        for out_name, r in zip(outs, results):
            if not out_name:
                continue
            if isinstance(r, torch.Tensor):
                r = Known(r, value_name(out_name) or "folded")
            self.env[out_name] = r

    def _fold(self, node, label: str) -> None:
        """Evaluate ``node`` at import time: with ONNX's reference implementation, or with
        onnxruntime where the reference fails (it has gaps, such as some GatherElements shapes)."""
        feeds = {n: self.env[n].tensor.numpy() for n in node.input if n}
        try:
            results = fold_node(node, feeds, self.opset)
            tensors = tuple(tensor_from_numpy(np.asarray(r)) for r in results)
        except Unsupported as e:
            self._problem(node, label, f"its import-time result: {e}")
            return
        except Exception as e:
            self._problem(node, label, f"import-time folding failed: {type(e).__name__}: {e}")
            return
        self._bind(node, label, tensors if len(tensors) != 1 else tensors[0])

    def _fail(self, node) -> None:
        for o in node.output:
            if o:
                self.env[o] = _Failed()

    def _problem(self, node, label: str, reason: str) -> None:
        self._fail(node)
        self.problems.append(OnnxProblem(node.op_type, label, reason))


def fold_node(node, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """The outputs of one ONNX node on known operands (onnx.reference, then onnxruntime)."""
    from onnx.reference import ReferenceEvaluator

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return list(ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds))
    except Exception as first:
        try:
            import onnxruntime as ort
        except ImportError:
            raise first from None
        from onnx import helper

        ins = [helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
               for n, a in feeds.items()]
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = helper.make_graph([node], "fold", ins, outs)
        # IR version 10 (onnx 1.16): every onnxruntime this runs with reads it.
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        try:
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            return list(sess.run(None, feeds))
        except Exception:
            raise first from None


def _input_dtype(g, name: str) -> torch.dtype:
    vi = next(i for i in g.input if i.name == name)
    try:
        return onnx_dtype_to_torch(vi.type.tensor_type.elem_type)
    except Unsupported as e:
        raise ModelSpecError(f"ONNX input '{name}': {e}") from None


def _format_problems(problems: list[OnnxProblem]) -> str:
    ops = sorted({p.op for p in problems})
    head = (
        f"the ONNX model uses {len(ops)} operator{'s' if len(ops) != 1 else ''} npuc cannot import "
        f"({', '.join(ops)}), at {len(problems)} place{'s' if len(problems) != 1 else ''}:"
    )
    lines = [head] + [f"  - {p.describe()}" for p in problems]
    lines.append("Run `npuc ops --onnx` to list the supported ONNX operators.")
    return "\n".join(lines)
