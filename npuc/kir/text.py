"""Text form of the kernel-level IR: printing and parsing kernels, NPU segments and the lowered model.

::

    npu segment "npu0" in ["x"] out ["fc"] {
      kernel "stem" = conv2d[fp16] ops ["conv2d", "relu"] macs 55296 loc "model.py:72" {
        in x<1x3x32x32xfp16 @0x0 strides=[6144, 2, 192, 6]>
        in @stem.weight/2310<8x3x3x3xfp16 @0x0 strides=[2, 16, 144, 48]>
        out 0<1x8x16x16xfp16 @0x0 strides=[4096, 2, 256, 16]>
        attrs graph.conv2d{stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1}
        epilogue add operand @stem.bias<1x8x16x16xfp16 @0x0 strides=[16, 2, 0, 0]>
        epilogue relu
        sources ["stem", "0"]
      }
    }

A tensor is ``NAME<DIMSxDTYPE @0xADDR strides=[...]>`` (the name in JSON quotes when it holds
characters other than letters, digits and ``_.@/~+:-``).  An attribute record prints every field
in declaration order: ``graph.OP{...}`` is the attribute record of graph op OP, ``PoolAttrs{...}``
and the other kind records of :mod:`npuc.kir.kernel` by their class name.  Lines that are empty
or the defaults (no epilogue, no quant, no attrs) are left out.

The whole model (:func:`print_lowered`) adds one line per precision, buffer, home, IO name,
placement and CPU fallback, and prints CPU segments with their subgraph in the graph IR's text
form.  Constant data prints by reference, as in the graph IR: :func:`parse_lowered` takes the
buffers' data and the CPU subgraphs' constants beside the text.  ``parse_kernel(print_kernel(k))
== k``, ``parse_segment(print_segment(s)) == s`` and ``lowered_equal(parse_lowered(
print_lowered(m), ...), m)`` are tested (tests/kir/).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from typing import Any, Mapping

from npuc.errors import ParseError, VerifyError
from npuc.ir.opdef import all_ops, get_op
from npuc.ir.text import format_scalar
from npuc.ir.types import DType as IRType
from npuc.ir.types import TensorType
from npuc.isa.enums import DType
from npuc.kir import kernel as kernel_records
from npuc.kir.kernel import EpilogueOp, Kernel
from npuc.kir.program import Buffer, ConstData, CpuOp, CpuSegment, Home, LKernel, LoweredModel, NpuSegment, Precision
from npuc.kir.tensor import DramTensor

# Attribute records of the kernel kinds, by class name (every frozen dataclass of npuc.kir.kernel
# that is not a kernel or an epilogue step).
KIND_RECORDS: dict[str, type] = {
    name: cls
    for name, cls in vars(kernel_records).items()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == kernel_records.__name__
    and cls not in (Kernel, EpilogueOp)
}
_ENUMS: dict[str, type[enum.Enum]] = {"ir": IRType, "isa": DType}
_BARE_NAME = re.compile(r"[A-Za-z0-9_.@/~+:\-]+")

# ----------------------------------------------------------------------------------------- print


def _graph_attr_names() -> dict[type, str]:
    """Graph attribute class -> the (first, by name) graph op that carries it."""
    names: dict[type, str] = {}
    for op in sorted(all_ops(), key=lambda o: o.name):
        names.setdefault(op.attrs, op.name)
    return names


def format_value(v: Any) -> str:
    """One attribute value in the text form (see the module docstring)."""
    if isinstance(v, enum.Enum):
        for prefix, cls in _ENUMS.items():
            if isinstance(v, cls):
                return f"{prefix}.{v.name}"
        raise TypeError(f"cannot print enum value {v!r}")
    scalar = format_scalar(v)
    if scalar is not None:
        return scalar
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return format_record(v)
    raise TypeError(f"cannot print attribute value {v!r}")


def format_record(r: Any) -> str:
    cls = type(r)
    if KIND_RECORDS.get(cls.__name__) is cls:
        head = cls.__name__
    else:
        op = _graph_attr_names().get(cls)
        if op is None:
            raise TypeError(f"cannot print attribute record {r!r}: neither a kernel-kind nor a graph-op record")
        head = f"graph.{op}"
    body = ", ".join(f"{f.name} = {format_value(getattr(r, f.name))}" for f in dataclasses.fields(r))
    return f"{head}{{{body}}}"


def _name(name: str) -> str:
    return name if _BARE_NAME.fullmatch(name) and name != "tensor" else json.dumps(name)


def format_tensor(t: DramTensor) -> str:
    dims = "x".join(str(d) for d in t.shape)
    ty = f"{dims}x{t.dtype.name}" if t.shape else t.dtype.name
    return f"{_name(t.name)}<{ty} @0x{t.addr:x} strides=[{', '.join(str(s) for s in t.strides)}]>"


def format_epilogue(e: EpilogueOp) -> str:
    parts = [f"epilogue {e.op}"]
    if e.operand is not None:
        parts.append(f"operand {format_tensor(e.operand)}")
    if e.scalar is not None:
        parts.append(f"scalar {format_value(e.scalar)}")
    if e.operand_first:
        parts.append("first")
    if e.params:
        parts.append("{" + ", ".join(f"{k} = {format_value(v)}" for k, v in e.params) + "}")
    return " ".join(parts)


def _kernel_body(k: Kernel) -> list[str]:
    lines = [f"in {format_tensor(t)}" for t in k.inputs]
    lines.append(f"out {format_tensor(k.output)}")
    members = getattr(k.attrs, "members", ())
    if k.attrs is not None:
        lines.append(f"attrs {format_value(dataclasses.replace(k.attrs, members=()) if members else k.attrs)}")
    for m in members:  # a fused chain's member kernels, nested
        lines += print_kernel(m).splitlines()
    if k.quant is not None:
        lines.append(f"quant {format_record(k.quant)}")
    lines += [format_epilogue(e) for e in k.epilogue]
    if k.sources:
        lines.append(f"sources {format_value(k.sources)}")
    return lines


def print_kernel(k: Kernel | LKernel, indent: str = "") -> str:
    """A kernel (or a lowered kernel with its provenance) as text, ending in a newline."""
    kern = k.kernel if isinstance(k, LKernel) else k
    head = f"kernel {json.dumps(kern.name)} = {kern.kind}[{kern.dtype.name}]"
    if isinstance(k, LKernel):
        head += f" ops {format_value(k.ops)} macs {k.macs}"
        if k.loc is not None:
            head += f" loc {json.dumps(k.loc)}"
    lines = [indent + head + " {"] + [indent + "  " + s for s in _kernel_body(kern)] + [indent + "}"]
    return "\n".join(lines) + "\n"


def print_segment(s: NpuSegment, indent: str = "") -> str:
    """An NPU segment: its kernels in program order."""
    head = f"{indent}npu segment {json.dumps(s.name)} in {format_value(s.inputs)} out {format_value(s.outputs)} {{\n"
    return head + "".join(print_kernel(k, indent + "  ") for k in s.kernels) + indent + "}\n"


# ----------------------------------------------------------------------------------------- parse

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<type>tensor<[^>]*>)
  | (?P<tensor>(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.@/~+:\-]+)<[^<>]*>)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)|-inf)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}\[\],=])
    """,
    re.VERBOSE,
)
_TENSOR = re.compile(
    r'(?P<name>"(?:[^"\\]|\\.)*"|[^<]+)<(?:(?P<dims>[0-9x]*)x)?(?P<dtype>[a-z0-9]+) @0x(?P<addr>[0-9a-f]+) '
    r"strides=\[(?P<strides>[-0-9, ]*)\]>"
)


class _Tokens:
    def __init__(self, text: str) -> None:
        self.toks: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ParseError(f"line {line}: unexpected character {text[pos]!r}")
            if m.lastgroup != "space":
                self.toks.append((m.lastgroup or "", m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", "", self.toks[-1][2] if self.toks else 1)

    def next(self) -> tuple[str, str, int]:
        t = self.peek()
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text and self.peek()[0] != "string":
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> None:
        kind, s, line = self.next()
        if s != text or kind == "string":
            raise ParseError(f"line {line}: expected '{text}', found '{s or 'end of text'}'")

    def expect_kind(self, kind: str, what: str) -> str:
        k, s, line = self.next()
        if k != kind:
            raise ParseError(f"line {line}: expected {what}, found '{s or 'end of text'}'")
        return s

    def string(self, what: str) -> str:
        return json.loads(self.expect_kind("string", what))

    def line(self) -> int:
        return self.peek()[2]


def parse_tensor(text: str, line: int = 0) -> DramTensor:
    m = _TENSOR.fullmatch(text)
    where = f"line {line}: " if line else ""
    if m is None:
        raise ParseError(f"{where}malformed tensor '{text}'")
    name = json.loads(m["name"]) if m["name"].startswith('"') else m["name"]
    try:
        dtype = DType[m["dtype"]]
    except KeyError:
        raise ParseError(f"{where}unknown element type '{m['dtype']}' in tensor '{text}'") from None
    shape = tuple(int(d) for d in m["dims"].split("x")) if m["dims"] else ()
    strides = tuple(int(s) for s in m["strides"].split(",") if s.strip())
    if len(strides) != len(shape):
        raise ParseError(f"{where}tensor '{text}' has {len(shape)} dims but {len(strides)} strides")
    return DramTensor(name, shape, dtype, int(m["addr"], 16), strides)


def _tensor(t: _Tokens) -> DramTensor:
    line = t.line()
    return parse_tensor(t.expect_kind("tensor", "a tensor"), line)


def _value(t: _Tokens) -> Any:
    kind, s, line = t.next()
    if s == "[" and kind == "punct":
        items: list[Any] = []
        if not t.accept("]"):
            while True:
                items.append(_value(t))
                if t.accept("]"):
                    break
                t.expect(",")
        return tuple(items)
    if kind == "number":
        return float(s) if any(c in s for c in ".eEi") else int(s)
    if kind == "string":
        return json.loads(s)
    if kind == "type":
        from npuc.ir.text import parse_type

        return parse_type(s)
    if kind == "ident":
        words = {"true": True, "false": False, "none": None, "nan": math.nan, "inf": math.inf}
        if s in words:
            return words[s]
        prefix, _, member = s.partition(".")
        if prefix in _ENUMS and member and t.peek()[1] != "{":
            try:
                return _ENUMS[prefix][member]
            except KeyError:
                raise ParseError(f"line {line}: unknown {prefix} element type '{member}'") from None
        t.i -= 1
        return _record(t)
    raise ParseError(f"line {line}: expected a value, found '{s}'")


def _fields(t: _Tokens) -> dict[str, Any]:
    t.expect("{")
    values: dict[str, Any] = {}
    if not t.accept("}"):
        while True:
            key = t.expect_kind("ident", "a field name")
            t.expect("=")
            values[key] = _value(t)
            if t.accept("}"):
                break
            t.expect(",")
    return values


def _record(t: _Tokens) -> Any:
    line = t.line()
    head = t.expect_kind("ident", "an attribute record")
    if head.startswith("graph."):
        try:
            cls = get_op(head[6:]).attrs
        except VerifyError:
            raise ParseError(f"line {line}: unknown graph op '{head[6:]}'") from None
    elif head in KIND_RECORDS:
        cls = KIND_RECORDS[head]
    else:
        raise ParseError(f"line {line}: '{head}' is neither a kernel-kind record nor graph.OP")
    values = _fields(t)
    names = {f.name for f in dataclasses.fields(cls)}
    if set(values) - names:
        raise ParseError(f"line {line}: {head} has no field(s) {sorted(set(values) - names)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ParseError(f"line {line}: bad fields for {head}: {e}") from None


def _epilogue(t: _Tokens) -> EpilogueOp:
    op = t.expect_kind("ident", "an epilogue op")
    operand = scalar = None
    first = False
    params: tuple[tuple[str, Any], ...] = ()
    if t.accept("operand"):
        operand = _tensor(t)
    if t.accept("scalar"):
        scalar = float(_value(t))
    if t.accept("first"):
        first = True
    if t.peek()[1] == "{":
        params = tuple(_fields(t).items())
    return EpilogueOp(op, operand, scalar, first, params)


def _kernel(t: _Tokens) -> Kernel | LKernel:
    line = t.line()
    t.expect("kernel")
    name = t.string("a kernel name")
    t.expect("=")
    kind = t.expect_kind("ident", "a kernel kind")
    t.expect("[")
    dt = t.expect_kind("ident", "an element type")
    t.expect("]")
    try:
        dtype = DType[dt]
    except KeyError:
        raise ParseError(f"line {line}: unknown element type '{dt}' of kernel '{name}'") from None
    provenance = None
    if t.accept("ops"):
        ops = _value(t)
        t.expect("macs")
        macs = int(t.expect_kind("number", "a MAC count"))
        loc = t.string("a source location") if t.accept("loc") else None
        provenance = (tuple(ops), loc, macs)
    t.expect("{")
    inputs: list[DramTensor] = []
    output = None
    attrs = quant = None
    epilogue: list[EpilogueOp] = []
    sources: tuple[str, ...] = ()
    members: list[Kernel] = []
    while not t.accept("}"):
        kw_line = t.line()
        kw = t.expect_kind("ident", "a kernel line (in, out, attrs, quant, epilogue, sources, kernel)")
        if kw == "in":
            inputs.append(_tensor(t))
        elif kw == "out":
            output = _tensor(t)
        elif kw == "attrs":
            attrs = _value(t)
        elif kw == "quant":
            quant = _record(t)
        elif kw == "epilogue":
            epilogue.append(_epilogue(t))
        elif kw == "sources":
            sources = tuple(_value(t))
        elif kw == "kernel":  # a member of a fused chain
            t.i -= 1
            members.append(_kernel(t))
        else:
            raise ParseError(f"line {kw_line}: unknown kernel line '{kw}'")
    if output is None:
        raise ParseError(f"line {line}: kernel '{name}' has no 'out' line")
    if members:
        if not dataclasses.is_dataclass(attrs) or "members" not in {f.name for f in dataclasses.fields(attrs)}:
            raise ParseError(f"line {line}: kernel '{name}' nests kernels but its attrs take no members")
        if any(isinstance(m, LKernel) for m in members):
            raise ParseError(f"line {line}: a member of kernel '{name}' carries provenance (ops ... macs)")
        attrs = dataclasses.replace(attrs, members=tuple(members))
    k = Kernel(name, kind, tuple(inputs), output, attrs, tuple(epilogue), dtype, sources, quant)
    if provenance is None:
        return k
    ops, loc, macs = provenance
    return LKernel(k, ops, loc, macs)


def _segment(t: _Tokens) -> NpuSegment:
    t.expect("npu")
    t.expect("segment")
    name = t.string("a segment name")
    t.expect("in")
    inputs = tuple(_value(t))
    t.expect("out")
    outputs = tuple(_value(t))
    t.expect("{")
    kernels = []
    while not t.accept("}"):
        line = t.line()
        k = _kernel(t)
        if not isinstance(k, LKernel):
            raise ParseError(f"line {line}: a kernel of a segment needs its 'ops ... macs ...' provenance")
        kernels.append(k)
    return NpuSegment(name, tuple(kernels), inputs, outputs)


def _parse(text: str, fn):
    try:
        t = _Tokens(text)
        out = fn(t)
        if t.peek()[0] != "eof":
            kind, s, line = t.peek()
            raise ParseError(f"line {line}: unexpected '{s}' after the end")
        return out
    except (ValueError, TypeError, OverflowError) as e:
        raise ParseError(f"malformed kernel IR text: {e}") from None


def parse_kernel(text: str) -> Kernel | LKernel:
    """Parse :func:`print_kernel`'s text (a :class:`LKernel` when it carries ``ops ... macs``)."""
    return _parse(text, _kernel)


def parse_segment(text: str) -> NpuSegment:
    """Parse :func:`print_segment`'s text."""
    return _parse(text, _segment)


# ------------------------------------------------------------------------------ the lowered model


def _opt_string(v: str | None) -> str:
    return "none" if v is None else json.dumps(v)


def _buffer_line(b: Buffer) -> str:
    line = f"buffer {json.dumps(b.name)} {b.kind} {b.nbytes}"
    if b.const is not None:
        c = b.const
        line += f" const {json.dumps(c.const)} {format_value(tuple(c.data.shape))} as {c.dtype.value}"
        if c.order is not None:
            line += f" order {format_value(c.order)}"
    return line


def _cpu_block(s: CpuSegment) -> str:
    from npuc.ir.text import print_graph

    head = (f"cpu segment {json.dumps(s.name)} in {format_value(s.inputs)} out {format_value(s.outputs)} "
            f"seconds {format_value(s.seconds)} flops {s.flops} bytes {s.transfer_bytes} {{\n")
    body = "".join("  " + line + "\n" for line in print_graph(s.graph).splitlines())
    return head + body + "}\n"


def print_lowered(m: LoweredModel) -> str:
    """The whole lowered model (for --print-after): precision, buffers, homes, IO, where each node
    runs and why, the CPU fallbacks, and its segments in order.  Constant buffers name their data
    by reference (the graph constant and the shape a kernel sees); CPU segments print their
    subgraph in the graph IR's text form.  :func:`parse_lowered` reads it back."""
    p = m.precision
    lines = [f"lowered {json.dumps(m.name)} for {json.dumps(m.target.name)} segments {len(m.segments)}",
             f"precision {p.dtype.name if p.dtype is not None else 'none'} reason {_opt_string(p.reason)}"]
    lines += [_buffer_line(b) for b in m.buffers]
    lines += [f"home {json.dumps(h.value)} in {json.dumps(h.buffer)} at {h.offset} {h.type}" for h in m.homes]
    lines += [f"input {json.dumps(io)} {json.dumps(v)}" for io, v in m.inputs]
    lines += [f"output {json.dumps(io)} {json.dumps(v)}" for io, v in m.outputs]
    lines += [f"place {json.dumps(v)} {op} {side} {json.dumps(reason)}" for v, op, side, reason in m.placement]
    lines += [f"cpu_op {json.dumps(c.value)} {c.op} loc {_opt_string(c.loc)} seconds {format_value(c.seconds)} "
              f"reason {json.dumps(c.reason)}" for c in m.cpu_ops]
    body = "\n".join(lines) + "\n"
    for seg in m.segments:
        body += print_segment(seg) if isinstance(seg, NpuSegment) else _cpu_block(seg)
    return body


def _line_tokens(line: str, number: int) -> _Tokens:
    t = _Tokens(line)
    t.toks = [(k, s, number) for k, s, _ in t.toks]
    return t


def _opt(t: _Tokens, what: str) -> str | None:
    if t.accept("none"):
        return None
    return t.string(what)


def _end(t: _Tokens) -> None:
    if t.peek()[0] != "eof":
        kind, s, line = t.peek()
        raise ParseError(f"line {line}: unexpected '{s}' at the end of the line")


def _block(lines: list[str], start: int) -> int:
    """Index of the line that closes the block opened at ``start`` (a ``}`` in column 0)."""
    for j in range(start + 1, len(lines)):
        if lines[j] == "}":
            return j
    raise ParseError(f"line {start + 1}: the block opened here is never closed")


def parse_lowered(text: str, buffer_data: Mapping[str, Any], graph_constants: Mapping[str, Any],
                  target: Any) -> LoweredModel:
    """Parse :func:`print_lowered`'s text.  ``buffer_data`` gives the data of each constant
    buffer (by buffer name), ``graph_constants`` the constants of the CPU subgraphs, ``target``
    the target it was lowered for (its name must match the text's)."""
    try:
        return _parse_lowered(text.splitlines(), buffer_data, graph_constants, target)
    except (ValueError, TypeError, OverflowError, KeyError) as e:
        raise ParseError(f"malformed lowered model text: {e}") from None


def _parse_lowered(lines: list[str], buffer_data, graph_constants, target) -> LoweredModel:
    from npuc.ir.text import parse_graph

    if not lines:
        raise ParseError("empty lowered model text")
    t = _line_tokens(lines[0], 1)
    t.expect("lowered")
    name = t.string("the model name")
    t.expect("for")
    tname = t.string("the target name")
    if tname != target.name:
        raise ParseError(f"line 1: the model was lowered for '{tname}', not for '{target.name}'")
    t.expect("segments")
    count = int(t.expect_kind("number", "a segment count"))
    _end(t)
    precision = None
    buffers, homes, inputs, outputs, placement, cpu_ops, segments = [], [], [], [], [], [], []
    i = 1
    while i < len(lines):
        line, number = lines[i], i + 1
        if not line.strip():
            i += 1
            continue
        if line.startswith("npu segment "):
            j = _block(lines, i)
            try:
                segments.append(parse_segment("\n".join(lines[i:j + 1])))
            except ParseError as e:
                raise ParseError(f"in the npu segment at line {number}: {e}") from None
            i = j + 1
            continue
        t = _line_tokens(line, number)
        kw = t.expect_kind("ident", "a line of the lowered model")
        if kw == "precision":
            dt = t.expect_kind("ident", "an element type")
            t.expect("reason")
            precision = Precision(None if dt == "none" else DType[dt], _opt(t, "a reason"))
        elif kw == "buffer":
            buffers.append(_parse_buffer(t, buffer_data))
        elif kw == "home":
            value = t.string("a value name")
            t.expect("in")
            buf = t.string("a buffer name")
            t.expect("at")
            offset = int(t.expect_kind("number", "an offset"))
            ty = _value(t)
            homes.append(Home(value, buf, offset, ty.shape, ty.dtype, ty.layout, ty.quant))
        elif kw in ("input", "output"):
            (inputs if kw == "input" else outputs).append((t.string("an IO name"), t.string("a value name")))
        elif kw == "place":
            v = t.string("a value name")
            op = t.expect_kind("ident", "an op")
            side = t.expect_kind("ident", "npu or cpu")
            placement.append((v, op, side, t.string("a reason")))
        elif kw == "cpu_op":
            v = t.string("a value name")
            op = t.expect_kind("ident", "an op")
            t.expect("loc")
            loc = _opt(t, "a source location")
            t.expect("seconds")
            seconds = float(_value(t))
            t.expect("reason")
            cpu_ops.append(CpuOp(v, op, loc, t.string("a reason"), seconds))
        elif kw == "cpu":
            j = _block(lines, i)
            t.expect("segment")
            sname = t.string("a segment name")
            t.expect("in")
            ins = tuple(_value(t))
            t.expect("out")
            outs = tuple(_value(t))
            t.expect("seconds")
            seconds = float(_value(t))
            t.expect("flops")
            flops = int(t.expect_kind("number", "a FLOP count"))
            t.expect("bytes")
            nbytes = int(t.expect_kind("number", "a byte count"))
            t.expect("{")
            graph_text = "\n".join(x[2:] for x in lines[i + 1:j]) + "\n"
            graph = parse_graph(graph_text, graph_constants)
            segments.append(CpuSegment(sname, graph, ins, outs, seconds, flops, nbytes))
            i = j + 1
            continue
        else:
            raise ParseError(f"line {number}: unknown line '{kw}' of a lowered model")
        _end(t)
        i += 1
    if precision is None:
        raise ParseError("the lowered model text has no 'precision' line")
    if len(segments) != count:
        raise ParseError(f"line 1: the model has {count} segments, the text holds {len(segments)}")
    return LoweredModel(name, target, precision, tuple(segments), tuple(buffers), tuple(homes), tuple(inputs),
                        tuple(outputs), tuple(cpu_ops), tuple(placement))


def _parse_buffer(t: _Tokens, buffer_data: Mapping[str, Any]) -> Buffer:
    line = t.line()
    name = t.string("a buffer name")
    kind = t.expect_kind("ident", "a buffer kind")
    nbytes = int(t.expect_kind("number", "a size"))
    const = None
    if t.accept("const"):
        cname = t.string("a constant name")
        shape = tuple(_value(t))
        t.expect("as")
        dtype = IRType.parse(t.expect_kind("ident", "an element type"))
        order = tuple(_value(t)) if t.accept("order") else None
        if name not in buffer_data:
            raise ParseError(f"line {line}: no data given for constant buffer '{name}'")
        data = buffer_data[name]
        if tuple(data.shape) != shape:
            raise ParseError(f"line {line}: the data given for '{name}' is {tuple(data.shape)}, the text says {shape}")
        const = ConstData(cname, data, dtype, order)
    return Buffer(name, nbytes, kind, const)


def buffer_data(m: LoweredModel) -> dict[str, Any]:
    """The data of every constant buffer of ``m`` by buffer name (what :func:`parse_lowered` needs)."""
    return {b.name: b.const.data for b in m.buffers if b.const is not None}


def graph_constants(m: LoweredModel) -> dict[str, Any]:
    """The constants of every CPU subgraph of ``m``."""
    out: dict[str, Any] = {}
    for s in m.segments:
        if isinstance(s, CpuSegment):
            out.update(s.graph.constants)
    return out


def lowered_equal(a: LoweredModel, b: LoweredModel) -> bool:
    """Structural equality of two lowered models: the same text and bit-identical constant data."""
    import torch

    from npuc.ir.text import graphs_equal

    if print_lowered(a) != print_lowered(b) or a.target != b.target:
        return False
    for x, y in zip(a.buffers, b.buffers):
        if (x.const is None) != (y.const is None) or (x.const and not torch.equal(x.const.data, y.const.data)):
            return False
    cpu = [(x, y) for x, y in zip(a.segments, b.segments) if isinstance(x, CpuSegment)]
    return all(isinstance(y, CpuSegment) and graphs_equal(x.graph, y.graph) for x, y in cpu) and all(
        x == y for x, y in zip(a.segments, b.segments) if isinstance(x, NpuSegment))
