"""Value ranges of a graph's integer values: the proof an integer op needs before it may run in int32.

The NPU has no 64-bit integers; its vector unit computes int32 exactly, saturating on overflow,
where PyTorch's int64 arithmetic does not overflow at all.  An int64 op may therefore run in int32
only when every value it reads and writes provably lies within int32.  :func:`int_ranges` gives
each integer or boolean value of a graph a closed interval ``[lo, hi]`` that contains every element
it can take, for any input of the graph's types, by one pass in program order:

- a model input has the range of its dtype (int64 ids: all of int64) unless the caller bounds it
  (``bounds``, by input name: a run-time check that the caller's data lies within);
- a constant is its own ``[min, max]``;
- comparisons and logical ops give ``[0, 1]``; ``where`` the union of its two values;
- a cast to an integer type keeps the range when it fits the new type, else (PyTorch wraps) the
  new type's whole range; a cast from a float is the new type's range; a cast to bool is ``[0, 1]``;
- ``add``, ``sub``, ``mul``, ``neg``, ``abs``, ``maximum``, ``minimum``, ``clamp``: interval
  arithmetic; ``cumsum`` of ``[lo, hi]`` along a dim of length n: every prefix of k <= n elements
  lies in ``[k lo, k hi]``, so ``[min(lo, n lo), max(hi, n hi)]``; ``reduce_sum`` the same with
  the reduced count; ``reduce_max`` / ``reduce_min`` and views (reshape, permute, expand, slice,
  select, concat) keep their operand's range (concat: the union);
- a result outside its own dtype's range (PyTorch wraps) and any other op have the dtype's range.

Every rule is an over-approximation, so a range never excludes a value eager can produce.  Float
values get no range.  :func:`int32_problem` says why a node's integer values are not proven to fit
int32 (None when they are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from npuc.ir.graph import Graph, Node, Value
from npuc.ir.types import DType

_COMPARE_OR_LOGIC = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or"})
_KEEP = frozenset({"reshape", "permute", "expand", "slice", "select", "reduce_max", "reduce_min"})


@dataclass(frozen=True)
class Interval:
    """The closed integer interval ``[lo, hi]`` (Python ints: exact, no overflow of their own)."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError(f"empty interval [{self.lo}, {self.hi}]")

    def within(self, other: "Interval") -> bool:
        return other.lo <= self.lo and self.hi <= other.hi

    def union(self, other: "Interval") -> "Interval":
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    def __add__(self, other: "Interval") -> "Interval":
        return Interval(self.lo + other.lo, self.hi + other.hi)

    def __sub__(self, other: "Interval") -> "Interval":
        return Interval(self.lo - other.hi, self.hi - other.lo)

    def __mul__(self, other: "Interval") -> "Interval":
        p = (self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi)
        return Interval(min(p), max(p))

    def __neg__(self) -> "Interval":
        return Interval(-self.hi, -self.lo)

    def abs(self) -> "Interval":
        if self.lo >= 0:
            return self
        if self.hi <= 0:
            return -self
        return Interval(0, max(-self.lo, self.hi))

    def prefix_sums(self, n: int) -> "Interval":
        """The range of a sum of k elements of this range, for any 1 <= k <= n."""
        return Interval(min(self.lo, n * self.lo), max(self.hi, n * self.hi))

    def __str__(self) -> str:
        return f"[{self.lo}, {self.hi}]"


BOOL = Interval(0, 1)
INT32 = Interval(-(2 ** 31), 2 ** 31 - 1)
_DTYPE_RANGE = {
    DType.bool: BOOL,
    DType.i32: INT32,
    DType.i64: Interval(-(2 ** 63), 2 ** 63 - 1),
}


def dtype_range(dt: DType) -> Interval | None:
    """The range of an integer or boolean dtype; None for a float dtype."""
    if dt in _DTYPE_RANGE:
        return _DTYPE_RANGE[dt]
    if dt.is_float:
        return None
    info = torch.iinfo(dt.torch)
    return Interval(int(info.min), int(info.max))


def _const_range(data: torch.Tensor) -> Interval | None:
    if data.dtype.is_floating_point or data.dtype.is_complex:
        return None
    if data.numel() == 0:
        return None
    d = data.to(torch.int64)
    return Interval(int(d.min()), int(d.max()))


def _clamp(node: Node, x: Interval) -> Interval:
    lo = x.lo if node.attrs.min is None else max(x.lo, _int_bound(node.attrs.min, "lo"))
    hi = x.hi if node.attrs.max is None else min(x.hi, _int_bound(node.attrs.max, "hi"))
    if lo > hi:  # torch.clamp with min > max gives max everywhere
        return Interval(hi, hi) if node.attrs.max is not None else Interval(lo, lo)
    return Interval(lo, hi)


def _int_bound(b, side: str) -> int:
    import math

    b = float(b)
    return math.floor(b) if side == "lo" else math.ceil(b)


def _transfer(g: Graph, node: Node, r: Mapping[Value, Interval]) -> Interval | None:
    """The range ``node``'s output can take (before it is limited to its dtype), or None: unknown."""
    op, ins = node.op, node.inputs
    y = node.outputs[0]
    if op == "const":
        return _const_range(g.constants[node.attrs.name])
    if op in _COMPARE_OR_LOGIC:
        return BOOL
    got = [r.get(v) for v in ins]
    if op == "cast":
        x = got[0]
        if y.type.dtype == DType.bool:
            return BOOL
        return x  # None from a float: the dtype's range below
    if op in _KEEP or op in ("gather", "index_select", "embedding"):  # a gather picks table elements
        return got[0]
    if op == "concat":
        return None if any(v is None for v in got) else _union(got)
    if op == "where":
        return None if got[1] is None or got[2] is None else got[1].union(got[2])
    if op in ("add", "sub", "mul", "maximum", "minimum"):
        a, b = got
        if a is None or b is None:
            return None
        if op == "maximum":
            return Interval(max(a.lo, b.lo), max(a.hi, b.hi))
        if op == "minimum":
            return Interval(min(a.lo, b.lo), min(a.hi, b.hi))
        return {"add": a + b, "sub": a - b, "mul": a * b}[op]
    if got and got[0] is None:
        return None
    if op == "neg":
        return -got[0]
    if op == "abs":
        return got[0].abs()
    if op == "relu":
        return Interval(max(0, got[0].lo), max(0, got[0].hi))
    if op == "clamp":
        return _clamp(node, got[0])
    if op == "cumsum":
        return got[0].prefix_sums(max(1, ins[0].type.shape[node.attrs.dim]))
    if op == "reduce_sum":
        n = 1
        for d in _reduced_dims(node):
            n *= ins[0].type.shape[d]
        return got[0].prefix_sums(max(1, n))
    return None


def _reduced_dims(node: Node) -> tuple[int, ...]:
    x = node.inputs[0]
    dims = getattr(node.attrs, "dims", None)
    if dims is None:
        return tuple(range(x.type.rank))
    return tuple(d % max(1, x.type.rank) for d in dims)


def _union(rs) -> Interval:
    out = rs[0]
    for x in rs[1:]:
        out = out.union(x)
    return out


def int_ranges(g: Graph, bounds: Mapping[str, tuple[int, int]] | None = None) -> dict[Value, Interval]:
    """The range of every integer and boolean value of ``g`` (see the module docstring);
    ``bounds`` limits model inputs by name to ``(lo, hi)``, which a caller must then check at
    run time."""
    bounds = dict(bounds or {})
    r: dict[Value, Interval] = {}
    for v in g.inputs:
        full = dtype_range(v.type.dtype)
        if full is None:
            continue
        if v.name in bounds:
            lo, hi = bounds[v.name]
            b = Interval(int(lo), int(hi))
            full = Interval(max(full.lo, b.lo), min(full.hi, b.hi))
        r[v] = full
    for node in g.nodes:
        for y in node.outputs:
            full = dtype_range(y.type.dtype)
            if full is None:
                continue
            got = _transfer(g, node, r) if len(node.outputs) == 1 else None
            r[y] = got if got is not None and got.within(full) else full
    return r


def int32_problem(node: Node, ranges: Mapping[Value, Interval]) -> str | None:
    """Why ``node``'s integer values are not proven to fit int32, or None when every integer or
    boolean value it reads and writes does (float values are not its concern)."""
    for v in list(node.inputs) + list(node.outputs):
        if dtype_range(v.type.dtype) is None:
            continue
        got = ranges.get(v)
        if got is None or not got.within(INT32):
            shown = "unknown" if got is None else str(got)
            if got == dtype_range(v.type.dtype):
                shown = f"all of {v.type.dtype.value}"
            role = "input" if v in node.inputs else "result"
            return (f"{node.op}: its {v.type.dtype.value} {role} %{v.name} is not proven to fit int32 "
                    f"(range {shown})")
    return None


def range_note(node: Node, ranges: Mapping[Value, Interval]) -> str | None:
    """What the analysis proves about a CPU node's integer values, for its reason (None when it
    has no integer values other than booleans): the int32 problem, or the ranges that fit."""
    ints = [v for v in list(node.inputs) + list(node.outputs)
            if dtype_range(v.type.dtype) is not None and v.type.dtype != DType.bool]
    if not ints:
        return None
    why = int32_problem(node, ranges)
    if why is not None:
        return why.split(": ", 1)[1]
    shown = ", ".join(f"%{v.name} {ranges[v]}" for v in ints if v in ranges)
    return f"its integer values are proven to fit int32 ({shown})"
