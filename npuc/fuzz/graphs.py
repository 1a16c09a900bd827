"""Random graphs for differential testing: small PyTorch modules over every graph op npuc claims.

A :class:`Recipe` is a short straight-line program: its inputs (shapes and kinds), its constants
(drawn from a seeded generator) and its steps, each one line of PyTorch.  :func:`recipe_source`
turns a recipe into the text of a self-contained Python file whose ``build()`` returns
``(model, example_inputs)`` -- the module that is tested is made by running that very text, so
the reproducer printed for a failure is exactly what failed (``npuc import file.py:build`` takes
it as it is).

:func:`random_recipe` draws a recipe from a seed.  Each step is proposed by the proposer of one
graph op (:data:`PROPOSERS`: every op of the registry that a PyTorch program produces, the
quantized ops coming from the int8 path), run eagerly at once on the example inputs, and kept
only when PyTorch accepts it, so shapes never need computing here.  Sizes include 1, odd and
prime extents; binary ops broadcast; convolutions and pools draw strides, padding, dilation and
groups.

Values that feed comparisons, ``argmax`` and ``eq`` must be exact in fp16, or the fp16 path would
legitimately flip a comparison PyTorch's fp32 run decides the other way: the inputs are
multiples of 1/8 (exact in fp16), and a value stays *exact* through the ops that only move,
select or negate (relu, abs, neg, max/min, pooling by max, shape ops).  Comparisons take exact
values and thresholds halfway between the grid points, so no comparison is ever a tie.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

# ----------------------------------------------------------------------------- recipes


@dataclass(frozen=True)
class Const:
    """A constant of the module: ``kind`` randn (scaled), rand (positive) or index (int64)."""

    name: str
    shape: tuple[int, ...]
    kind: str = "randn"
    scale: float = 1.0
    high: int = 0  # index constants: values in [0, high)


@dataclass(frozen=True)
class Input:
    name: str
    shape: tuple[int, ...]
    kind: str = "float"  # "float" (multiples of 1/8) or "index" (int64 in [0, high))
    high: int = 0


@dataclass(frozen=True)
class Step:
    """``name = expr``; ``op`` is the graph op the step is there for."""

    name: str
    expr: str
    op: str


@dataclass(frozen=True)
class Recipe:
    seed: int
    inputs: tuple[Input, ...]
    consts: tuple[Const, ...]
    steps: tuple[Step, ...]
    outputs: tuple[str, ...]

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(s.op for s in self.steps)

    def without_step(self, i: int) -> "Recipe | None":
        """The recipe with step ``i`` removed (its uses read the step's first operand instead),
        or None when that leaves nothing to compute."""
        if len(self.steps) <= 1:
            return None
        gone = self.steps[i].name
        rest = self.steps[:i] + self.steps[i + 1:]
        used = _names_in(self.steps[i].expr, self._names())
        stand_in = next((n for n in used if n != gone), None)
        if stand_in is None:
            return None
        steps = tuple(replace(s, expr=_rename(s.expr, gone, stand_in)) for s in rest)
        outputs = tuple(stand_in if o == gone else o for o in self.outputs)
        return _pruned(replace(self, steps=steps, outputs=tuple(dict.fromkeys(outputs))))

    def _names(self) -> list[str]:
        return [i.name for i in self.inputs] + [f"self.{c.name}" for c in self.consts] + [s.name for s in self.steps]


def _names_in(expr: str, names: list[str]) -> list[str]:
    import re

    return [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", expr)]


def _rename(expr: str, old: str, new: str) -> str:
    import re

    return re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, expr)


def _pruned(r: Recipe) -> Recipe:
    """Drop steps and constants nothing reads any more."""
    needed = set(r.outputs)
    keep = []
    for s in reversed(r.steps):
        if s.name in needed:
            keep.append(s)
            needed |= set(_names_in(s.expr, r._names()))
    steps = tuple(reversed(keep))
    text = " ".join(s.expr for s in steps)
    consts = tuple(c for c in r.consts if _names_in(text, [f"self.{c.name}"]))
    return replace(r, steps=steps, consts=consts)


# ----------------------------------------------------------------------------- source text


def _const_init(c: Const) -> str:
    shape = ", ".join(str(n) for n in c.shape) + ("," if len(c.shape) == 1 else "")
    if c.kind == "index":
        return f"torch.randint(0, {c.high}, ({shape}), generator=g)"
    if c.kind == "rand":
        return f"torch.rand(({shape}), generator=g) * {c.scale} + 0.5"
    return f"torch.randn(({shape}), generator=g) * {c.scale}"


def _input_init(i: Input) -> str:
    shape = ", ".join(str(n) for n in i.shape) + ("," if len(i.shape) == 1 else "")
    if i.kind == "index":
        return f"torch.randint(0, {i.high}, ({shape}), generator=g)"
    return f"torch.round(torch.randn(({shape}), generator=g) * 8) / 8"


def recipe_source(r: Recipe) -> str:
    """A self-contained Python file: ``class M`` and ``build()`` returning (model, inputs)."""
    args = ", ".join(i.name for i in r.inputs)
    lines = [
        f"# npuc random graph, seed {r.seed}: {', '.join(r.ops)}",
        "import torch",
        "import torch.nn.functional as F",
        "",
        "",
        "class M(torch.nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        g = torch.Generator().manual_seed({r.seed})",
    ]
    for c in r.consts:
        lines.append(f"        self.register_buffer({c.name!r}, {_const_init(c)})")
    lines += ["", f"    def forward(self, {args}):"]
    for s in r.steps:
        lines.append(f"        {s.name} = {s.expr}")
    outs = ", ".join(r.outputs)
    lines.append(f"        return {outs}" if len(r.outputs) == 1 else f"        return ({outs},)")
    lines += ["", "", "def build():", f"    g = torch.Generator().manual_seed({r.seed + 1})"]
    lines.append("    inputs = (" + "".join(f"{_input_init(i)}, " for i in r.inputs) + ")")
    lines += ["    return M().eval(), inputs", ""]
    return "\n".join(lines)


def build(r: Recipe) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The module and example inputs of ``r``, made by running :func:`recipe_source`."""
    space: dict = {"__name__": f"npuc_random_graph_{r.seed}"}
    exec(compile(recipe_source(r), f"<random graph {r.seed}>", "exec"), space)  # noqa: S102 (our own text)
    return space["build"]()


# ----------------------------------------------------------------------------- generation


@dataclass
class _Value:
    name: str
    t: torch.Tensor
    exact: bool  # exact in fp16 and on the 1/8 grid: safe to compare


@dataclass
class _Gen:
    rng: random.Random
    seed: int
    inputs: list[Input] = field(default_factory=list)
    consts: list[Const] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    values: list[_Value] = field(default_factory=list)
    ns: dict = field(default_factory=dict)
    const_vals: dict = field(default_factory=dict)

    # values
    def floats(self, rank: int | None = None, min_rank: int = 0, exact: bool = False) -> list[_Value]:
        return [v for v in self.values if v.t.is_floating_point() and (rank is None or v.t.dim() == rank)
                and v.t.dim() >= min_rank and (v.exact or not exact)]

    def pick(self, vals: list[_Value]) -> _Value | None:
        if not vals:
            return None
        # prefer recent values: graphs become chains with some branching
        weights = [1 + 3 * (i >= len(vals) - 2) for i in range(len(vals))]
        return self.rng.choices(vals, weights)[0]

    def const(self, shape: tuple[int, ...], kind: str = "randn", scale: float = 1.0, high: int = 0) -> str:
        name = f"c{len(self.consts)}"
        c = Const(name, tuple(shape), kind, scale, high)
        g = torch.Generator().manual_seed(self.seed * 1000 + len(self.consts))
        shape_t = tuple(shape)
        if kind == "index":
            val = torch.randint(0, high, shape_t, generator=g)
        elif kind == "rand":
            val = torch.rand(shape_t, generator=g) * scale + 0.5
        else:
            val = torch.randn(shape_t, generator=g) * scale
        self.consts.append(c)
        self.const_vals[name] = val
        return f"self.{name}"

    def try_step(self, op: str, expr: str, exact: bool = False) -> bool:
        """Run ``expr`` eagerly; keep it as a step when PyTorch accepts it and it is usable."""
        name = f"v{len(self.steps)}"
        env = dict(self.ns)
        env.update({v.name: v.t for v in self.values})
        env["self"] = _Self(self.const_vals)
        try:
            with torch.no_grad():
                out = eval(expr, {"torch": torch, "F": torch.nn.functional}, env)  # noqa: S307 (our own text)
        except Exception:  # noqa: BLE001 (PyTorch refuses the proposal: try another)
            self._undo_consts(expr)
            return False
        if not isinstance(out, torch.Tensor) or out.numel() == 0 or out.numel() > 4096 or out.dim() > 5:
            self._undo_consts(expr)
            return False
        if out.is_floating_point() and not bool(torch.isfinite(out).all()):
            self._undo_consts(expr)
            return False
        self.steps.append(Step(name, expr, op))
        self.values.append(_Value(name, out, exact))
        return True

    def _undo_consts(self, expr: str) -> None:
        while self.consts and f"self.{self.consts[-1].name}" in expr:
            c = self.consts.pop()
            del self.const_vals[c.name]


class _Self:
    def __init__(self, vals: dict) -> None:
        self.__dict__.update(vals)


# sizes: 1, odd, prime and even extents
SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16)
SMALL = (1, 2, 3, 5, 7)


def _shape_for(rng: random.Random, rank: int) -> tuple[int, ...]:
    if rank == 4:
        return (rng.choice((1, 1, 2)), rng.choice((1, 2, 3, 4, 5, 8)), rng.choice(SIZES[:8]), rng.choice(SIZES[:8]))
    if rank == 3:
        return (rng.choice((1, 2, 3)), rng.choice(SIZES[:8]), rng.choice(SIZES))
    return (rng.choice((1, 2, 3, 5)), rng.choice(SIZES))


def _fits(small: torch.Size, big: torch.Size) -> bool:
    """``small`` broadcasts to exactly ``big``."""
    if len(small) > len(big):
        return False
    return all(a in (1, b) for a, b in zip(reversed(small), reversed(big)))


def _bcast_shape(rng: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape``: some dims 1, maybe fewer leading dims."""
    out = [n if rng.random() < 0.6 else 1 for n in shape]
    drop = rng.randrange(0, len(out)) if rng.random() < 0.3 else 0
    return tuple(out[drop:]) or (1,)


# ----------------------------------------------------------------------------- proposers
#
# Each proposer adds one step for its graph op (or returns False when it has nothing to work on).
# Most ops transform one float value: they are rows of :data:`ONE_VALUE`, each the values it
# takes and a function that draws the op's parameters and writes its line of PyTorch; one driver
# (:func:`_one_value`) picks the value, writes the step and runs it.  Ops that combine values,
# make masks or need helper steps have their own proposers below the table.

Proposer = Callable[[_Gen], bool]
Expr = Callable[[_Gen, _Value], "str | None"]


@dataclass(frozen=True)
class OneValue:
    """An op on one float value: ``expr(g, x)`` draws its parameters and returns the step's
    expression (None: nothing to propose for ``x``).  ``rank``/``min_rank``/``exact`` select the
    values it takes; ``keeps_exact``: its result is exact (on the 1/8 grid) when its input is."""

    expr: Expr
    rank: int | None = None
    min_rank: int = 0
    exact: bool = False
    keeps_exact: bool = False


def _one_value(op: str, spec: OneValue) -> Proposer:
    def propose(g: _Gen) -> bool:
        x = g.pick(g.floats(rank=spec.rank, min_rank=spec.min_rank, exact=spec.exact))
        if x is None:
            return False
        expr = spec.expr(g, x)
        return expr is not None and g.try_step(op, expr, exact=spec.keeps_exact and x.exact)

    return propose

_UNARY = {
    "abs": ("torch.abs({x})", True), "neg": ("torch.neg({x})", True), "relu": ("torch.relu({x})", True),
    "cos": ("torch.cos({x})", False), "sin": ("torch.sin({x})", False), "erf": ("torch.erf({x})", False),
    "sigmoid": ("torch.sigmoid({x})", False), "tanh": ("torch.tanh({x})", False),
    "silu": ("F.silu({x})", False), "hardswish": ("F.hardswish({x})", False),
    "hardsigmoid": ("F.hardsigmoid({x})", False),
    "exp": ("torch.exp(torch.clamp({x}, -4.0, 4.0))", False),
    "log": ("torch.log(torch.abs({x}) + 0.5)", False),
    "sqrt": ("torch.sqrt(torch.abs({x}) + 0.25)", False),
    "rsqrt": ("torch.rsqrt(torch.abs({x}) + 0.5)", False),
    "reciprocal": ("torch.reciprocal(torch.abs({x}) + 0.5)", False),
    "pow": ("torch.pow({x}, 2)", False),
    "log1p": ("torch.log1p(torch.abs({x}))", False),
    "expm1": ("torch.expm1(torch.clamp({x}, -4.0, 4.0))", False),
}




def _gelu_expr(g: _Gen, x: _Value) -> str | None:
    approx = g.rng.choice(("none", "tanh"))
    return f"F.gelu({x.name}, approximate={approx!r})"


def _clamp_expr(g: _Gen, x: _Value) -> str | None:
    lo, hi = g.rng.choice(((-1.0, 1.0), (0.0, 6.0), (-0.5, None), (None, 0.25)))
    return f"torch.clamp({x.name}, min={lo}, max={hi})"


_BINARY = {"add": "+", "sub": "-", "mul": "*"}


def _binary(op: str) -> Proposer:
    def propose(g: _Gen) -> bool:
        x = g.pick(g.floats())
        if x is None:
            return False
        if g.rng.random() < 0.5:
            same = [v for v in g.floats() if v is not x and _fits(v.t.shape, x.t.shape)] \
                if len(g.floats()) > 1 else []
            other = g.pick(same) if same else None
            y = other.name if other else g.const(_bcast_shape(g.rng, tuple(x.t.shape)), scale=0.5)
        else:
            y = g.const(_bcast_shape(g.rng, tuple(x.t.shape)), scale=0.5)
        if op == "div":
            return g.try_step("div", f"{x.name} / (torch.abs({y}) + 0.5)")
        if op in ("maximum", "minimum"):
            return g.try_step(op, f"torch.{op}({x.name}, {y})")
        a, b = (x.name, y) if g.rng.random() < 0.7 else (y, x.name)
        return g.try_step(op, f"{a} {_BINARY[op]} {b}")

    return propose


def _scalar_binary(g: _Gen) -> bool:
    x = g.pick(g.floats())
    if x is None:
        return False
    op, expr = g.rng.choice((("mul", "{x} * 0.5"), ("add", "{x} + 1.25"), ("sub", "2.0 - {x}"),
                             ("div", "{x} / 3.0"), ("div", "1.5 / (torch.abs({x}) + 0.5)")))
    return g.try_step(op, expr.format(x=x.name))


_COMPARE = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def _mask(g: _Gen, op: str | None = None) -> str | None:
    """A boolean mask from an exact value (a comparison that is never a tie)."""
    x = g.pick(g.floats(exact=True))
    if x is None:
        return None
    op = op or g.rng.choice(sorted(_COMPARE))
    thr = g.rng.choice((-0.5, 0.0, 0.25, 1.0))
    if op not in ("eq", "ne"):
        thr += 1 / 16  # halfway between grid points: never a tie
    if g.try_step(op, f"{x.name} {_COMPARE[op]} {thr}"):
        return g.steps[-1].name
    return None


def _compare(op: str) -> Proposer:
    def propose(g: _Gen) -> bool:
        m = _mask(g, op)
        if m is None:
            return False
        return _use_mask(g, m)

    return propose


def _use_mask(g: _Gen, m: str) -> bool:
    """Turn a mask into floats: select with it (where) or cast it."""
    mt = g.values[-1].t
    if g.rng.random() < 0.5:
        cands = [v for v in g.floats() if _fits(v.t.shape, mt.shape)]
        x = g.pick(cands)
        if x is not None:
            return g.try_step("where", f"torch.where({m}, {x.name}, {g.rng.choice(('0.0', '-1.0'))})", exact=x.exact)
    return g.try_step("cast", f"{m}.to(torch.float32)", exact=True)


def _logical(op: str) -> Proposer:
    def propose(g: _Gen) -> bool:
        a = _mask(g)
        if a is None:
            return False
        if op == "logical_not":
            ok = g.try_step(op, f"torch.logical_not({a})")
        else:
            b = _mask(g)
            if b is None:
                return False
            ok = g.try_step(op, f"torch.{op}({a}, {b})")
        return ok and _use_mask(g, g.steps[-1].name)

    return propose


def _where(g: _Gen) -> bool:
    m = _mask(g)
    if m is None:
        return False
    mt = g.values[-1].t
    cands = [v for v in g.floats() if _fits(v.t.shape, mt.shape)]
    x = g.pick(cands)
    if x is None:
        return False
    y = g.const(_bcast_shape(g.rng, tuple(mt.shape)), scale=0.5)
    return g.try_step("where", f"torch.where({m}, {x.name}, {y})")


def _conv2d_expr(g: _Gen, x: _Value) -> str | None:
    c = x.t.shape[1]
    groups = g.rng.choice([d for d in (1, 1, 2, 3, c) if c % d == 0])
    out = groups * g.rng.choice((1, 2, 3)) if groups > 1 else g.rng.choice((1, 2, 3, 4, 5, 8, 16))
    k = g.rng.choice((1, 1, 2, 3, 3, 5))
    kw = k if g.rng.random() < 0.8 else g.rng.choice((1, 3))
    stride = g.rng.choice((1, 1, 2, 3))
    pad = g.rng.choice((0, 1, k // 2))
    dil = g.rng.choice((1, 1, 2))
    fan = (c // groups) * k * kw
    w = g.const((out, c // groups, k, kw), scale=round(1.0 / fan ** 0.5, 4))
    b = g.const((out,), scale=0.1) if g.rng.random() < 0.6 else "None"
    return f"F.conv2d({x.name}, {w}, {b}, stride={stride}, padding={pad}, dilation={dil}, groups={groups})"


def _linear_expr(g: _Gen, x: _Value) -> str | None:
    k = x.t.shape[-1]
    n = g.rng.choice((1, 2, 3, 5, 8, 13, 16))
    w = g.const((n, k), scale=round(1.0 / k ** 0.5, 4))
    b = g.const((n,), scale=0.1) if g.rng.random() < 0.6 else "None"
    return f"F.linear({x.name}, {w}, {b})"


def _matmul_expr(g: _Gen, x: _Value) -> str | None:
    k = x.t.shape[-1]
    n = g.rng.choice((1, 2, 3, 5, 8))
    lead = tuple(x.t.shape[:-2])
    if lead and g.rng.random() < 0.5:
        lead = _bcast_shape(g.rng, lead) if g.rng.random() < 0.5 else lead
    elif g.rng.random() < 0.5:
        lead = ()
    w = g.const(lead + (k, n), scale=round(1.0 / k ** 0.5, 4))
    if g.rng.random() < 0.3:
        others = [v for v in g.floats(min_rank=2) if v is not x and v.t.shape[-2] == k]
        o = g.pick(others)
        if o is not None:
            w = o.name
    return f"torch.matmul({x.name}, {w})"


def _avg_pool_expr(g: _Gen, x: _Value) -> str | None:
    k = g.rng.choice((1, 2, 3))
    s = g.rng.choice((1, 2, k))
    p = g.rng.choice((0, k // 2))
    ceil = g.rng.random() < 0.3
    cip = g.rng.random() < 0.5
    return (f"F.avg_pool2d({x.name}, {k}, stride={s}, padding={p}, ceil_mode={ceil}, "
            f"count_include_pad={cip})")


def _max_pool_expr(g: _Gen, x: _Value) -> str | None:
    k = g.rng.choice((2, 3))
    s = g.rng.choice((1, 2))
    p = g.rng.choice((0, 1))
    d = g.rng.choice((1, 1, 2))
    ceil = g.rng.random() < 0.3
    return f"F.max_pool2d({x.name}, {k}, stride={s}, padding={p}, dilation={d}, ceil_mode={ceil})"


def _adaptive_expr(g: _Gen, x: _Value) -> str | None:
    h, w = x.t.shape[-2:]
    size = g.rng.choice(((1, 1), (1, 1), (max(1, h // 2), max(1, w // 2)), (h, w), (min(h, 3), min(w, 2))))
    return f"F.adaptive_avg_pool2d({x.name}, {size})"


def _batch_norm_expr(g: _Gen, x: _Value) -> str | None:
    c = x.t.shape[1]
    mean, var = g.const((c,), scale=0.2), g.const((c,), "rand", 1.0)
    w, b = g.const((c,), "rand", 1.0), g.const((c,), scale=0.2)
    return f"F.batch_norm({x.name}, {mean}, {var}, {w}, {b}, False, 0.1, 1e-5)"


def _layer_norm_expr(g: _Gen, x: _Value) -> str | None:
    dims = tuple(x.t.shape[-g.rng.choice((1, 1, 2)):])
    affine = g.rng.random() < 0.7
    w = g.const(dims, "rand", 1.0) if affine else "None"
    b = g.const(dims, scale=0.2) if affine else "None"
    return f"F.layer_norm({x.name}, {dims}, {w}, {b}, 1e-5)"


def _softmax_expr(op: str) -> Expr:
    fn = "torch.softmax" if op == "softmax" else "torch.log_softmax"

    def expr(g: _Gen, x: _Value) -> str:
        return f"{fn}({x.name}, dim={g.rng.randrange(-x.t.dim(), x.t.dim())})"

    return expr


_REDUCE = {"reduce_sum": "torch.sum", "reduce_mean": "torch.mean", "reduce_max": "torch.amax", "reduce_min": "torch.amin"}


def _reduce_expr(op: str) -> Expr:
    def expr(g: _Gen, x: _Value) -> str:
        r = x.t.dim()
        dims = tuple(sorted(g.rng.sample(range(r), g.rng.choice((1, 1, 2)) if r > 1 else 1)))
        return f"{_REDUCE[op]}({x.name}, dim={list(dims)}, keepdim={g.rng.random() < 0.5})"

    return expr


def _argmax(g: _Gen) -> bool:
    x = g.pick(g.floats(exact=True, min_rank=1))
    if x is None:
        return False
    d = g.rng.randrange(x.t.dim())
    # distinct values along the dimension: add a ramp that is exact in fp16 (no ties)
    n = x.t.shape[d]
    ramp_shape = [1] * x.t.dim()
    ramp_shape[d] = n
    ramp = f"torch.arange({n}, dtype=torch.float32).reshape({tuple(ramp_shape)}) / 64.0"
    if not g.try_step("add", f"{x.name} * 4.0 + {ramp}", exact=True):
        return False
    if not g.try_step("argmax", f"torch.argmax({g.steps[-1].name}, dim={d}, keepdim={g.rng.random() < 0.5})"):
        return False
    return g.try_step("cast", f"{g.steps[-1].name}.to(torch.float32)", exact=True)


def _concat_expr(g: _Gen, x: _Value) -> str | None:
    d = g.rng.randrange(x.t.dim())
    others = [v for v in g.floats(rank=x.t.dim()) if all(a == b for i, (a, b) in enumerate(zip(v.t.shape, x.t.shape)) if i != d)]
    parts = [x.name] + [v.name for v in g.rng.sample(others, min(len(others), g.rng.choice((1, 2))))]
    if len(parts) == 1:
        shape = list(x.t.shape)
        shape[d] = g.rng.choice((1, 2, 3))
        parts.append(g.const(tuple(shape), scale=0.5))
    return f"torch.cat([{', '.join(parts)}], dim={d})"


def _embedding(g: _Gen) -> bool:
    if any(i.kind == "index" for i in g.inputs):
        idx = next(i.name for i in g.inputs if i.kind == "index")
        vocab = next(i.high for i in g.inputs if i.kind == "index")
    else:
        vocab = g.rng.choice((5, 7, 16))
        idx = f"ix{len(g.inputs)}"
        inp = Input(idx, (1, g.rng.choice((1, 3, 4, 6))), "index", vocab)
        gen = torch.Generator().manual_seed(g.seed + 1)
        g.inputs.append(inp)
        g.ns[idx] = torch.randint(0, vocab, inp.shape, generator=gen)
    table = g.const((vocab, g.rng.choice((1, 3, 8, 16))), scale=1.0)
    return g.try_step("embedding", f"F.embedding({idx}, {table})")


def _index_input(g: _Gen, shape: tuple[int, ...], high: int) -> str:
    """A new int64 model input of ``shape`` drawn in [0, high) (indices known only at run time)."""
    name = f"ix{len(g.inputs)}"
    inp = Input(name, tuple(shape), "index", high)
    g.inputs.append(inp)
    g.ns[name] = torch.randint(0, high, inp.shape, generator=torch.Generator().manual_seed(g.seed + len(g.inputs)))
    return name


def _signed(name: str, n: int) -> str:
    """The indices of ``name`` in the upper half of [0, n) counted from the end (negative, as x[idx] allows)."""
    return f"torch.where({name} >= {(n + 1) // 2}, {name} - {n}, {name})"


def _runtime_gather(g: _Gen) -> bool:
    """index_select or gather of a float value by indices that are a model input."""
    x = g.pick(g.floats(min_rank=1))
    if x is None:
        return False
    d = g.rng.randrange(x.t.dim())
    n = x.t.shape[d]
    if g.rng.random() < 0.5:
        ix = _index_input(g, (g.rng.choice((1, 2, 3, 5, 7)),), n)
        return g.try_step("runtime_gather", f"torch.index_select({x.name}, {d}, {ix})", exact=x.exact)
    shape = tuple(g.rng.randint(1, m) if i != d else g.rng.choice((1, 2, 3, 5)) for i, m in enumerate(x.t.shape))
    return g.try_step("runtime_gather", f"torch.gather({x.name}, {d}, {_index_input(g, shape, n)})", exact=x.exact)


def _advanced_index(g: _Gen) -> bool:
    """``x[i]``, ``x[i, j]`` or ``x[i, :, j]`` by run-time indices, some negative."""
    x = g.pick(g.floats(min_rank=1))
    if x is None:
        return False
    shape = x.t.shape
    form = g.rng.choice(("one", "pair", "apart")) if x.t.dim() >= 3 else ("one" if x.t.dim() == 1 else g.rng.choice(("one", "pair")))
    k = g.rng.choice((1, 2, 3, 5))
    i = _signed(_index_input(g, (k,), shape[0]), shape[0])
    if form == "one":
        return g.try_step("advanced_index", f"{x.name}[{i}]", exact=x.exact)
    d = 1 if form == "pair" else 2
    j = _signed(_index_input(g, g.rng.choice(((k,), (1,), (2, 1))), shape[d]), shape[d])
    sep = ", :" if form == "apart" else ""
    return g.try_step("advanced_index", f"{x.name}[{i}{sep}, {j}]", exact=x.exact)


def _index_select_expr(g: _Gen, x: _Value) -> str | None:
    d = g.rng.randrange(x.t.dim())
    n = x.t.shape[d]
    idx = g.const((g.rng.choice((1, 2, 3, 5)),), "index", high=n)
    return f"torch.index_select({x.name}, {d}, {idx})"


def _expand_expr(g: _Gen, x: _Value) -> str | None:
    if 1 not in x.t.shape:
        return None
    shape = [g.rng.choice((2, 3, 5)) if n == 1 else n for n in x.t.shape]
    return f"{x.name}.expand({shape})"


def _pad_expr(g: _Gen, x: _Value) -> str | None:
    k = g.rng.choice((2, 4))
    pads = tuple(g.rng.choice((0, 1, 2)) for _ in range(k))
    value = g.rng.choice((0.0, 0.0, -1.0))
    return f"F.pad({x.name}, {pads}, value={value})"


def _permute_expr(g: _Gen, x: _Value) -> str | None:
    perm = list(range(x.t.dim()))
    g.rng.shuffle(perm)
    return f"{x.name}.permute({perm})"


def _reshape_expr(g: _Gen, x: _Value) -> str | None:
    n = x.t.numel()
    lead = x.t.shape[0]
    choices = [[n], [lead, n // lead], [1, n], [n, 1]]
    return f"{x.name}.reshape({g.rng.choice(choices)})"


def _select_expr(g: _Gen, x: _Value) -> str | None:
    d = g.rng.randrange(x.t.dim())
    i = g.rng.randrange(x.t.shape[d])
    return f"{x.name}.select({d}, {i})"


def _slice_expr(g: _Gen, x: _Value) -> str | None:
    d = g.rng.randrange(x.t.dim())
    n = x.t.shape[d]
    start = g.rng.randrange(n)
    end = g.rng.randrange(start + 1, n + 1)
    step = g.rng.choice((1, 1, 2, 3))
    idx = ", ".join([":"] * d + [f"{start}:{end}:{step}"])
    return f"{x.name}[{idx}]"


def _upsample_expr(g: _Gen, x: _Value) -> str | None:
    f = g.rng.choice((2, 3))
    return f"F.interpolate({x.name}, scale_factor={f}, mode='nearest')"


def _elu_expr(g: _Gen, x: _Value) -> str | None:
    expr = g.rng.choice(("F.elu({x}, alpha={a})", "F.selu({x})", "F.celu({x}, alpha={a})"))
    return expr.format(x=x.name, a=g.rng.choice((0.5, 1.0, 1.5)))


def _flip_expr(g: _Gen, x: _Value) -> str | None:
    dims = sorted(g.rng.sample(range(x.t.dim()), g.rng.randint(1, x.t.dim())))
    return f"torch.flip({x.name}, {dims})"


def _cumsum_expr(g: _Gen, x: _Value) -> str | None:
    return f"torch.cumsum({x.name}, dim={g.rng.randrange(-x.t.dim(), x.t.dim())})"


def _gather_expr(g: _Gen, x: _Value) -> str | None:
    d = g.rng.randrange(x.t.dim())
    shape = tuple(g.rng.randint(1, n) if i != d else g.rng.choice((1, 2, 3, 5)) for i, n in enumerate(x.t.shape))
    idx = g.const(shape, "index", high=x.t.shape[d])
    return f"torch.gather({x.name}, {d}, {idx})"


def _group_norm(g: _Gen) -> bool:
    x = g.pick(g.floats(rank=4)) or g.pick(g.floats(rank=3))
    if x is None:
        return False
    c = x.t.shape[1]
    if g.rng.random() < 0.4 and x.t.dim() == 4:
        affine = g.rng.random() < 0.5
        expr = f"F.instance_norm({x.name}, weight={g.const((c,), 'rand', 1.0) if affine else None}, " \
               f"bias={g.const((c,), scale=0.2) if affine else None})"
        return g.try_step("group_norm", expr)
    groups = g.rng.choice([d for d in (1, 2, 3, c) if c % d == 0])
    return g.try_step("group_norm", f"F.group_norm({x.name}, {groups}, {g.const((c,), 'rand', 1.0)}, "
                                    f"{g.const((c,), scale=0.2)}, 1e-5)")


def _bilinear_expr(g: _Gen, x: _Value) -> str | None:
    ac = g.rng.random() < 0.5
    if g.rng.random() < 0.5:
        return (f"F.interpolate({x.name}, scale_factor={g.rng.choice((2, 3))}, "
                f"mode='bilinear', align_corners={ac})")
    size = (g.rng.choice((1, 2, 5, 7)), g.rng.choice((1, 3, 4, 9)))
    return f"F.interpolate({x.name}, size={size}, mode='bilinear', align_corners={ac})"


def _conv_transpose_expr(g: _Gen, x: _Value) -> str | None:
    c = x.t.shape[1]
    groups = g.rng.choice([d for d in (1, 1, 2, c) if c % d == 0])
    out = g.rng.choice((1, 2, 3, 4))
    k = g.rng.choice((1, 2, 3, 4))
    stride = g.rng.choice((1, 2, 3))
    pad = g.rng.choice((0, 1))
    dil = g.rng.choice((1, 1, 2))
    opad = g.rng.randrange(max(stride, dil)) if g.rng.random() < 0.3 else 0
    w = g.const((c, out, k, k), scale=round(1.0 / (c * k) ** 0.5, 4))
    b = g.const((out * groups,), scale=0.1) if g.rng.random() < 0.5 else "None"
    return (f"F.conv_transpose2d({x.name}, {w}, {b}, stride={stride}, padding={pad}, "
            f"output_padding={opad}, groups={groups}, dilation={dil})")


def _grid_sample_expr(g: _Gen, x: _Value) -> str | None:
    n = x.t.shape[0]
    grid = g.const((n, g.rng.choice((1, 2, 3, 5)), g.rng.choice((1, 2, 4)), 2), scale=0.6)
    mode = g.rng.choice(("bilinear", "nearest"))
    pad = g.rng.choice(("zeros", "border", "reflection"))
    return (f"F.grid_sample({x.name}, {grid}, mode={mode!r}, padding_mode={pad!r}, "
            f"align_corners={g.rng.random() < 0.5})")


# The ops on one float value, in the order the generator has always drawn them (a seed keeps
# its graph).
ONE_VALUE: dict[str, OneValue] = {
    **{op: OneValue(lambda g, x, t=template: t.format(x=x.name), keeps_exact=keeps)
       for op, (template, keeps) in _UNARY.items()},
    "gelu": OneValue(_gelu_expr),
    "clamp": OneValue(_clamp_expr, keeps_exact=True),
    "conv2d": OneValue(_conv2d_expr, rank=4),
    "linear": OneValue(_linear_expr, min_rank=1),
    "matmul": OneValue(_matmul_expr, min_rank=2),
    "avg_pool2d": OneValue(_avg_pool_expr, rank=4),
    "max_pool2d": OneValue(_max_pool_expr, rank=4, keeps_exact=True),
    "adaptive_avg_pool2d": OneValue(_adaptive_expr, rank=4),
    "batch_norm": OneValue(_batch_norm_expr, rank=4),
    "layer_norm": OneValue(_layer_norm_expr, min_rank=2),
    "concat": OneValue(_concat_expr, min_rank=1),
    "index_select": OneValue(_index_select_expr, min_rank=1, keeps_exact=True),
    "expand": OneValue(_expand_expr, min_rank=1, keeps_exact=True),
    "pad": OneValue(_pad_expr, min_rank=2, keeps_exact=True),
    "permute": OneValue(_permute_expr, min_rank=2, keeps_exact=True),
    "reshape": OneValue(_reshape_expr, min_rank=1, keeps_exact=True),
    "select": OneValue(_select_expr, min_rank=2, keeps_exact=True),
    "slice": OneValue(_slice_expr, min_rank=1, keeps_exact=True),
    "upsample_nearest2d": OneValue(_upsample_expr, rank=4, keeps_exact=True),
    "elu": OneValue(_elu_expr),
    "flip": OneValue(_flip_expr, min_rank=1, keeps_exact=True),
    "cumsum": OneValue(_cumsum_expr, min_rank=1),
    "gather": OneValue(_gather_expr, min_rank=1, keeps_exact=True),
    "upsample_bilinear2d": OneValue(_bilinear_expr, rank=4),
    "conv_transpose2d": OneValue(_conv_transpose_expr, rank=4),
    "grid_sample": OneValue(_grid_sample_expr, rank=4),
    **{op: OneValue(_softmax_expr(op), min_rank=1) for op in ("softmax", "log_softmax")},
    **{op: OneValue(_reduce_expr(op), min_rank=2, keeps_exact=op in ("reduce_max", "reduce_min")) for op in _REDUCE},
}

PROPOSERS: dict[str, Proposer] = {
    **{op: _one_value(op, spec) for op, spec in ONE_VALUE.items()},
    **{op: _binary(op) for op in ("add", "sub", "mul", "div", "maximum", "minimum")},
    "scalar_binary": _scalar_binary,
    **{op: _compare(op) for op in _COMPARE},
    **{op: _logical(op) for op in ("logical_and", "logical_or", "logical_not")},
    "where": _where,
    "argmax": _argmax,
    "embedding": _embedding,
    "runtime_gather": _runtime_gather,
    "advanced_index": _advanced_index,
    "group_norm": _group_norm,
}

# Graph ops a PyTorch program does not produce directly: the quantized ops (the int8 path makes
# them), const (every constant), cast (comparisons and argmax are cast back to float here).
NOT_PROPOSED = frozenset({"const", "quantize", "dequantize", "qadd", "qavg_pool2d", "qclamp", "qconv2d",
                          "qconv_transpose2d", "qlinear", "qlut", "qmatmul", "qmean", "qmul"})


IMAGE_OPS = frozenset({"conv2d", "avg_pool2d", "max_pool2d", "adaptive_avg_pool2d", "batch_norm", "upsample_nearest2d",
                       "group_norm", "upsample_bilinear2d", "conv_transpose2d", "grid_sample"})


def random_recipe(seed: int, max_steps: int = 4) -> Recipe:
    """A random graph: the op ``seed`` selects first (so a run of seeds covers every op), then
    up to ``max_steps`` random steps (a step may add helper steps)."""
    rng = random.Random(seed)
    g = _Gen(rng, seed)
    ops = sorted(PROPOSERS)
    first = ops[seed % len(ops)]  # every op leads a graph once per len(ops) seeds
    rank = 4 if first in IMAGE_OPS else rng.choice((2, 3, 4, 4))
    n_inputs = rng.choice((1, 1, 2))
    gen = torch.Generator().manual_seed(seed + 1)
    for i in range(n_inputs):
        shape = _shape_for(rng, rank) if i == 0 or rng.random() < 0.5 else tuple(g.inputs[0].shape)
        inp = Input(f"x{i}", shape)
        g.inputs.append(inp)
    for inp in g.inputs:  # drawn in order, as build() draws them
        g.ns[inp.name] = torch.round(torch.randn(inp.shape, generator=gen) * 8) / 8
        g.values.append(_Value(inp.name, g.ns[inp.name], True))
    for _ in range(8):
        if PROPOSERS[first](g):
            break
    want = rng.randint(1, max_steps)
    tries = 0
    while len(g.steps) < want and tries < 40:
        tries += 1
        PROPOSERS[rng.choice(ops)](g)
    if not g.steps:
        g.try_step("relu", f"torch.relu({g.inputs[0].name})", exact=True)
    # outputs: the last step, and sometimes another float value
    last = g.steps[-1].name
    outputs = [last]
    extra = [s.name for s in g.steps[:-1] if g.values[[v.name for v in g.values].index(s.name)].t.is_floating_point()]
    if extra and rng.random() < 0.25:
        outputs.insert(0, rng.choice(extra))
    if not g.values[-1].t.is_floating_point():
        g.try_step("cast", f"{last}.to(torch.float32)", exact=True)
        outputs[-1] = g.steps[-1].name
    # index inputs were drawn after the float inputs; rebuild the input tensors in that order
    r = Recipe(seed, tuple(g.inputs), tuple(g.consts), tuple(g.steps), tuple(outputs))
    return _pruned_inputs(_pruned(r))


def _pruned_inputs(r: Recipe) -> Recipe:
    """Keep every input (forward's signature), even one no step reads."""
    return r
