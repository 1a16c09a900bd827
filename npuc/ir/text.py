"""Text form of the graph IR: printing and parsing.

::

    graph @tiny(%x: tensor<1x3x8x8xf32>) -> (tensor<1x4x8x8xf32>) {
      %w = const @"conv.weight" : tensor<4x3x3x3xf32>
      %0 = conv2d(%x, %w) {stride = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1} : tensor<1x4x8x8xf32> loc("model.py:12")
      return %0
    }

Every attribute field is printed, in declaration order, so a line says everything about its node.
Constants print as references; their data travels in ``Graph.constants`` and is handed back to
:func:`parse_graph`.  ``parse_graph(print_graph(g), g.constants)`` rebuilds ``g``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from typing import Any, Mapping

import torch

from npuc.errors import ParseError, VerifyError
from npuc.ir.graph import Graph, Node, Value
from npuc.ir.opdef import ConstAttrs, get_op
from npuc.ir.types import DType, QuantParams, TensorType

# ----------------------------------------------------------------------------------------- print


def format_scalar(v: Any) -> str | None:
    """A scalar in the text form (none, true/false, ints, floats with nan and +-inf, JSON strings,
    tensor types); ``None`` when ``v`` is not one.  The kernel IR's printer uses it too."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, TensorType):
        return str(v)
    return None


def format_attr(v: Any) -> str:
    if isinstance(v, DType):
        return v.value
    scalar = format_scalar(v)
    if scalar is not None:
        return scalar
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    raise TypeError(f"cannot print attribute value {v!r}")


def format_attrs(attrs: Any) -> str:
    fields = dataclasses.fields(attrs)
    if not fields:
        return ""
    body = ", ".join(f"{f.name} = {format_attr(getattr(attrs, f.name))}" for f in fields)
    return " {" + body + "}"


def print_node(n: Node) -> str:
    lhs = ", ".join(f"%{v.name}" for v in n.outputs)
    types = ", ".join(str(v.type) for v in n.outputs)
    if n.op == "const":
        line = f"{lhs} = const @{json.dumps(n.attrs.name)} : {types}"
    else:
        args = ", ".join(f"%{v.name}" for v in n.inputs)
        line = f"{lhs} = {n.op}({args}){format_attrs(n.attrs)} : {types}"
    if n.loc is not None:
        line += f" loc({json.dumps(n.loc)})"
    return line


def print_graph(g: Graph) -> str:
    params = ", ".join(f"%{v.name}: {v.type}" for v in g.inputs)
    results = ", ".join(str(v.type) for v in g.outputs)
    lines = [f"graph @{json.dumps(g.name)}({params}) -> ({results}) {{"]
    lines += ["  " + print_node(n) for n in g.nodes]
    lines.append("  return " + ", ".join(f"%{v.name}" for v in g.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------- parse

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<type>tensor<[^>]*>)
  | (?P<value>%[A-Za-z0-9_.]+)
  | (?P<symbol>@"(?:[^"\\]|\\.)*")
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<arrow>->)
  | (?P<punct>[(){}\[\],=:])
    """,
    re.VERBOSE,
)


class _Tokens:
    def __init__(self, text: str) -> None:
        self.toks: list[tuple[str, str, int]] = []
        pos = 0
        line = 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ParseError(f"line {line}: unexpected character {text[pos]!r}")
            kind = m.lastgroup
            s = m.group()
            if kind != "space":
                self.toks.append((kind, s, line))
            line += s.count("\n")
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", "", -1)

    def next(self) -> tuple[str, str, int]:
        t = self.peek()
        self.i += 1
        return t

    def expect(self, text: str) -> None:
        kind, s, line = self.next()
        if s != text:
            raise ParseError(f"line {line}: expected '{text}', found '{s or 'end of text'}'")

    def expect_kind(self, kind: str) -> str:
        k, s, line = self.next()
        if k != kind:
            raise ParseError(f"line {line}: expected a {kind}, found '{s or 'end of text'}'")
        return s

    def expect_type(self) -> TensorType:
        """The next token as a tensor type; errors name the line."""
        k, s, line = self.next()
        if k != "type":
            raise ParseError(f"line {line}: expected a type, found '{s or 'end of text'}'")
        try:
            return parse_type(s)
        except ParseError as e:
            raise ParseError(f"line {line}: {e}") from None

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text:
            self.i += 1
            return True
        return False


def parse_type(text: str) -> TensorType:
    """Parse ``tensor<2x3xf32>`` (and the quantized/layout variants the printer writes)."""
    m = re.fullmatch(r"tensor<([^,>]*)(.*)>", text.strip())
    if m is None:
        raise ParseError(f"malformed tensor type '{text}'")
    parts = m.group(1).split("x")
    try:
        shape = tuple(int(p) for p in parts[:-1])
    except ValueError:
        raise ParseError(f"malformed shape in tensor type '{text}'") from None
    dtype = DType.parse(parts[-1])
    layout = None
    quant = None
    extra = m.group(2)
    lm = re.search(r"layout=([A-Za-z0-9_]+)", extra)
    if lm:
        layout = lm.group(1)
    qm = re.search(r"quant=\(\[([^\]]*)\], \[([^\]]*)\], (\w+)\)", extra)
    if qm:
        scales = tuple(float(s) for s in qm.group(1).split(",") if s.strip())
        zps = tuple(int(s) for s in qm.group(2).split(",") if s.strip())
        axis = None if qm.group(3) == "None" else int(qm.group(3))
        quant = QuantParams(scales, zps, axis)
    return TensorType(shape, dtype, quant, layout)


def _parse_literal(t: _Tokens) -> Any:
    kind, s, line = t.next()
    if s == "[":
        items = []
        if not t.accept("]"):
            while True:
                items.append(_parse_literal(t))
                if t.accept("]"):
                    break
                t.expect(",")
        return tuple(items)
    if kind == "number":
        if s in ("inf", "-inf"):
            return float(s)
        return float(s) if any(c in s for c in ".eE") else int(s)
    if kind == "string":
        return json.loads(s)
    if kind == "type":
        t.i -= 1
        return t.expect_type()
    if kind == "ident":
        if s == "true":
            return True
        if s == "false":
            return False
        if s == "none":
            return None
        if s == "nan":
            return float("nan")
        if s == "inf":
            return float("inf")
        try:
            return DType.parse(s)
        except ParseError as e:
            raise ParseError(f"line {line}: {e}") from None
    raise ParseError(f"line {line}: expected an attribute value, found '{s}'")


def _coerce(value: Any, hint: Any) -> Any:
    """Make a parsed literal match the attribute's declared type (int written where float is wanted)."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for a in args:
            if a is type(None):
                continue
            if a is float and isinstance(value, int) and not isinstance(value, bool):
                return float(value)
            if typing.get_origin(a) is tuple and isinstance(value, tuple):
                return _coerce(value, a)
        return value
    if origin is tuple and isinstance(value, tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0]) for v in value)
        return tuple(_coerce(v, a) for v, a in zip(value, args))
    return value


def _parse_attrs(t: _Tokens, op: str, line: int) -> Any:
    try:
        opdef = get_op(op)
    except VerifyError:
        raise ParseError(f"line {line}: unknown op '{op}'") from None
    values: dict[str, Any] = {}
    if t.accept("{"):
        if not t.accept("}"):
            while True:
                key = t.expect_kind("ident")
                t.expect("=")
                values[key] = _parse_literal(t)
                if t.accept("}"):
                    break
                t.expect(",")
    hints = typing.get_type_hints(opdef.attrs)
    names = {f.name for f in dataclasses.fields(opdef.attrs)}
    unknown = set(values) - names
    if unknown:
        raise ParseError(f"line {line}: op '{op}' has no attribute(s) {sorted(unknown)}")
    try:
        return opdef.attrs(**{k: _coerce(v, hints[k]) for k, v in values.items()})
    except TypeError as e:
        raise ParseError(f"line {line}: bad attributes for '{op}': {e}") from None


def parse_graph(text: str, constants: Mapping[str, torch.Tensor] | None = None) -> Graph:
    """Parse the text form back into a graph.  ``constants`` supplies the referenced tensors.

    Malformed text raises :class:`ParseError` (with a line number where one is known), never a
    bare ValueError from a literal deep inside.
    """
    try:
        return _parse_graph(text, constants)
    except (ValueError, TypeError, OverflowError) as e:
        raise ParseError(f"malformed graph text: {e}") from None


def _parse_graph(text: str, constants: Mapping[str, torch.Tensor] | None) -> Graph:
    from npuc.ir.verify import verify

    constants = dict(constants or {})
    t = _Tokens(text)
    t.expect("graph")
    name = json.loads(t.expect_kind("symbol")[1:])
    env: dict[str, Value] = {}

    def define(vname: str, ty: TensorType, line: int) -> Value:
        if vname in env:
            raise ParseError(f"line {line}: value %{vname} defined twice")
        v = Value(vname, ty)
        env[vname] = v
        return v

    def use(tok: tuple[str, str, int]) -> Value:
        kind, s, line = tok
        if kind != "value":
            raise ParseError(f"line {line}: expected a value, found '{s}'")
        if s[1:] not in env:
            raise ParseError(f"line {line}: use of undefined value {s}")
        return env[s[1:]]

    inputs: list[Value] = []
    t.expect("(")
    if not t.accept(")"):
        while True:
            _, vname, line = t.next()
            if not vname.startswith("%"):
                raise ParseError(f"line {line}: expected a graph parameter, found '{vname}'")
            t.expect(":")
            inputs.append(define(vname[1:], t.expect_type(), line))
            if t.accept(")"):
                break
            t.expect(",")
    t.expect("->")
    t.expect("(")
    result_types: list[TensorType] = []
    if not t.accept(")"):
        while True:
            result_types.append(t.expect_type())
            if t.accept(")"):
                break
            t.expect(",")
    t.expect("{")

    nodes: list[Node] = []
    outputs: list[Value] = []
    while True:
        kind, s, line = t.peek()
        if s == "return":
            t.next()
            outputs.append(use(t.next()))
            while t.accept(","):
                outputs.append(use(t.next()))
            t.expect("}")
            break
        if kind != "value":
            raise ParseError(f"line {line}: expected a node or 'return', found '{s or 'end of text'}'")
        lhs = [t.next()[1][1:]]
        while t.accept(","):
            lhs.append(t.expect_kind("value")[1:])
        t.expect("=")
        op = t.expect_kind("ident")
        if op == "const":
            cname = json.loads(t.expect_kind("symbol")[1:])
            t.expect(":")
            ty = t.expect_type()
            if cname not in constants:
                raise ParseError(f"line {line}: constant @{cname} was not supplied")
            attrs: Any = ConstAttrs(name=cname, type=ty)
            ins: list[Value] = []
            types = [ty]
        else:
            t.expect("(")
            ins = []
            if not t.accept(")"):
                while True:
                    ins.append(use(t.next()))
                    if t.accept(")"):
                        break
                    t.expect(",")
            attrs = _parse_attrs(t, op, line)
            t.expect(":")
            types = [t.expect_type()]
            while t.accept(","):
                types.append(t.expect_type())
        loc = None
        if t.peek()[1] == "loc":
            t.next()
            t.expect("(")
            loc = json.loads(t.expect_kind("string"))
            t.expect(")")
        if len(types) != len(lhs):
            raise ParseError(f"line {line}: {len(lhs)} results but {len(types)} types")
        outs = tuple(define(n, ty, line) for n, ty in zip(lhs, types))
        nodes.append(Node(op, tuple(ins), outs, attrs, loc))
    if t.peek()[0] != "eof":
        raise ParseError(f"line {t.peek()[2]}: unexpected text after the graph")
    if [v.type for v in outputs] != result_types:
        raise ParseError("the returned values do not match the declared result types")
    used = {n.attrs.name for n in nodes if n.op == "const"}
    g = Graph(name, tuple(inputs), tuple(nodes), tuple(outputs), {k: constants[k] for k in sorted(used)})
    verify(g)
    return g


def graphs_equal(a: Graph, b: Graph) -> bool:
    """Structural equality: same text form and bit-identical constants."""
    if print_graph(a) != print_graph(b):
        return False
    if set(a.constants) != set(b.constants):
        return False
    return all(torch.equal(a.constants[k], b.constants[k]) for k in a.constants)
