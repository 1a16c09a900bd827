"""The graph-op reference table (docs/ops.md), generated from the op registry."""

from __future__ import annotations

import dataclasses

from npuc.ir.opdef import OpDef, all_ops
from npuc.ir.text import format_attr

_HEADER = """# Graph ops

Generated from the op registry by `npuc.ir.opdoc.ops_markdown()` (`npuc ops --write docs/ops.md`);
do not edit by hand.  Each op is defined once in `npuc/ir/ops/` with its attributes, shape rule,
verifier and reference semantics.  Operands in brackets are optional; `xs...` is variadic.
Attribute defaults are written as in the IR's text form.  Binary ops take operands of one dtype.

Ops that only compute constants from constants (arange, full, zeros, ones, triu, ...) have no graph
op: the frontend evaluates them at import time (import-time folding) and emits a `const`.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _field_text(f: dataclasses.Field) -> str:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if f.default is not dataclasses.MISSING:
        default = f" = {format_attr(f.default)}"
    elif f.default_factory is not dataclasses.MISSING:
        default = f" = {format_attr(f.default_factory())}"
    else:
        default = " (required)"
    return f"`{f.name}: {kind}{default}`"


def _operands(op: OpDef) -> str:
    if op.operands:
        return ", ".join(op.operands)
    if op.max_inputs == 0:
        return "none"
    most = "n" if op.max_inputs is None else str(op.max_inputs)
    return f"{op.min_inputs}..{most}" if most != str(op.min_inputs) else most


def _row(op: OpDef) -> str:
    attrs = "<br>".join(_field_text(f) for f in op.attr_fields()) or ""
    cells = [f"`{op.name}`", op.category, _operands(op), attrs, op.summary]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def ops_markdown() -> str:
    """The Markdown table of every registered op, grouped by category then sorted by name."""
    ops = sorted(all_ops(), key=lambda o: (o.category, o.name))
    lines = [_HEADER, f"{len(ops)} ops.", "", "| op | category | operands | attributes | summary |",
             "|---|---|---|---|---|"]
    lines += [_row(op) for op in ops]
    return "\n".join(lines) + "\n"
