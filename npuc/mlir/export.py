"""npuc graphs as MLIR in upstream dialects (TOSA), built with xDSL.

:func:`export_mlir` writes the optimized graph of a model (or a graph) as one ``func.func @main``
whose arguments and results are the graph's inputs and outputs, lowered op by op through
:data:`~npuc.mlir.tosa_table.TOSA_TABLE`.  The text is MLIR's generic form with constants as
``dense_resource`` blobs; IREE (``iree-compile``, llvm-cpu) compiles it (docs/mlir.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from npuc.errors import NpucError
from npuc.ir.graph import Graph, Value
from npuc.ir.types import TensorType

DIALECTS = ("tosa",)


def _require_xdsl():
    try:
        import xdsl  # noqa: F401
    except ImportError:
        raise NpucError("MLIR export needs xDSL: pip install 'npuc[mlir]'") from None


class Emitter:
    """Maps graph values to MLIR values while the lowerings append TOSA operations."""

    def __init__(self, g: Graph, builder, args) -> None:
        self.g = g
        self.b = builder
        self.env: dict[int, Any] = {id(v): a for v, a in zip(g.inputs, args)}
        self.consts: dict[int, torch.Tensor] = {}
        self._const_values: dict[int, Any] = {}
        self._types: dict[int, Any] = {}
        for n in g.nodes:
            if n.op == "const":
                self.consts[id(n.outputs[0])] = g.constants[n.attrs.name]

    # -------------------------------------------------------------- values

    def known(self, v: Value) -> torch.Tensor | None:
        return self.consts.get(id(v))

    def value(self, v: Value):
        if id(v) in self.env:
            return self.env[id(v)]
        t = self.consts.get(id(v))
        if t is None:
            raise NpucError(f"value %{v.name} is used before it is defined")
        c = self.b.const(t)
        self.env[id(v)] = c
        return c

    def value_at_rank(self, v: Value, rank: int):
        x = self.value(v)
        if v.type.rank == rank:
            return x
        return self.reshape(x, (1,) * (rank - v.type.rank) + v.type.shape, v.type.dtype.torch)

    def broadcast_pair(self, a: Value, b: Value):
        r = max(a.type.rank, b.type.rank)
        return self.value_at_rank(a, r), self.value_at_rank(b, r)

    def ty_of(self, x):
        return x.type

    def dtype_of(self, x) -> torch.dtype:
        from npuc.mlir import builder as mb

        et = x.type.element_type
        for dt, e in mb._ELEMENT.items():
            if e == et:
                return dt
        raise NpucError(f"no torch dtype for MLIR element type {et}")

    # -------------------------------------------------------------- ops

    def op(self, name: str, operands, ty, props=None):
        from npuc.mlir.builder import tensor_type

        result = tensor_type(ty.shape, ty.dtype.torch) if isinstance(ty, TensorType) else ty
        return self.b.op(name, operands, result, props)

    def scalar(self, x: float, dtype: torch.dtype, rank: int):
        return self.b.scalar_like(x, dtype, rank)

    def reshape(self, x, shape: Sequence[int], dtype: torch.dtype):
        from npuc.mlir.builder import tensor_type

        if tuple(x.type.get_shape()) == tuple(shape):
            return x
        return self.b.op("tosa.reshape", (x, self.b.shape(shape)), tensor_type(shape, dtype))

    def mul(self, a, b, ty):
        shift = self.b.const(torch.zeros(1, dtype=torch.int8))
        return self.op("tosa.mul", (a, b, shift), ty)

    def clamp_int(self, x, lo: int, hi: int, ty):
        """``tosa.clamp`` of an integer tensor to [lo, hi]."""
        from npuc.mlir.builder import int_attr

        dt = ty.dtype.torch if isinstance(ty, TensorType) else self.dtype_of_type(ty)
        bits = torch.iinfo(dt).bits
        if dt == torch.int8:
            return self.op("tosa.clamp", (x,), ty, {"min_val": int_attr(lo, bits), "max_val": int_attr(hi, bits)})
        # TOSA's integer profile clamps int8 and int16 only: wider values take maximum and minimum.
        rank = len(ty.shape) if isinstance(ty, TensorType) else len(ty.get_shape())
        x = self.op("tosa.maximum", (x, self.b.const(torch.full((1,) * rank, lo, dtype=dt))), ty)
        return self.op("tosa.minimum", (x, self.b.const(torch.full((1,) * rank, hi, dtype=dt))), ty)

    def dtype_of_type(self, ty) -> torch.dtype:
        from npuc.mlir import builder as mb

        for dt, e in mb._ELEMENT.items():
            if e == ty.element_type:
                return dt
        raise NpucError(f"no torch dtype for MLIR element type {ty.element_type}")

    def clamp(self, x, lo: float | None, hi: float | None, ty):
        from npuc.mlir.builder import float_attr, int_attr

        dt = ty.dtype.torch
        if dt.is_floating_point:
            lo_a = float_attr(-float("inf") if lo is None else lo, dt)
            hi_a = float_attr(float("inf") if hi is None else hi, dt)
        else:
            info = torch.iinfo(dt)
            lo_a = int_attr(info.min if lo is None else int(lo), info.bits)
            hi_a = int_attr(info.max if hi is None else int(hi), info.bits)
        return self.op("tosa.clamp", (x,), ty, {"min_val": lo_a, "max_val": hi_a})


def graph_to_mlir(g: Graph, dialect: str = "tosa") -> str:
    """The MLIR text of ``g`` in ``dialect`` (``"tosa"``)."""
    _require_xdsl()
    if dialect not in DIALECTS:
        raise NpucError(f"unknown MLIR dialect {dialect!r}: npuc writes {', '.join(DIALECTS)}")
    from xdsl.ir import Block

    from npuc.mlir.builder import ExportError, MlirBuilder, print_module, tensor_type
    from npuc.mlir import tosa_int8  # noqa: F401  (registers the int8 lowerings)
    from npuc.mlir.tosa_table import TOSA_TABLE

    arg_types = [tensor_type(v.type.shape, v.type.dtype.torch) for v in g.inputs]
    body = Block(arg_types=arg_types)
    b = MlirBuilder()
    em = Emitter(g, b, body.args)
    missing = sorted({n.op for n in g.nodes if n.op != "const" and n.op not in TOSA_TABLE})
    if missing:
        raise ExportError(f"MLIR export has no lowering for the graph op(s) {', '.join(missing)}")
    for n in g.nodes:
        if n.op == "const":
            continue
        try:
            em.env[id(n.outputs[0])] = TOSA_TABLE[n.op](em, n)
        except ExportError as e:
            where = f" (from {n.loc})" if n.loc else ""
            raise ExportError(f"node %{n.outputs[0].name} = {n.op}{where}: {e}") from None
    results = [em.value(v) for v in g.outputs]
    return print_module("main", arg_types, body, results, b)


def export_mlir(model_or_graph: Any, example_inputs: Sequence[torch.Tensor] | None = None, dialect: str = "tosa",
                path: str | Path | None = None, **import_opts: Any) -> str:
    """The optimized graph of a model (a ``torch.nn.Module`` with its example inputs, an ONNX model,
    or an npuc ``Graph``) as MLIR text; also written to ``path`` (atomically) when given."""
    from npuc.fileio import check_output_path, write_atomic

    if path is not None:
        check_output_path(path, "the MLIR text")  # before the import, not after it
    g = _graph_of(model_or_graph, example_inputs, import_opts)
    text = graph_to_mlir(g, dialect)
    if path is not None:
        write_atomic(path, text, "the MLIR text")
    return text


def _graph_of(model: Any, example_inputs, import_opts) -> Graph:
    if isinstance(model, Graph):
        return model
    from npuc.frontend.onnx_model import is_onnx_spec

    if is_onnx_spec(model):
        from npuc.pipeline import import_onnx
        from npuc.frontend.onnx_model import load_onnx_model

        m = load_onnx_model(model, import_opts.pop("input_shapes", None))
        if example_inputs is not None:
            m = load_onnx_model(m, {n: tuple(x.shape) for (n, _, _), x in zip(m.specs, example_inputs)})
        return import_onnx(m.proto, {n: s for n, s, _ in m.specs}, name=m.model_name)
    if example_inputs is None:
        raise NpucError("export_mlir() needs example_inputs for a PyTorch model")
    from npuc.pipeline import import_model

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    return import_model(model, tuple(example_inputs), **import_opts)
