"""docs/ops.md is the generated table of every registered op."""

from __future__ import annotations

from pathlib import Path

from npuc.ir import all_ops
from npuc.ir.opdoc import ops_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def test_docs_ops_md_is_up_to_date() -> None:
    assert DOC.read_text() == ops_markdown(), "regenerate with: npuc ops --write docs/ops.md"


def test_table_lists_every_op_with_operands_and_attribute_defaults() -> None:
    text = ops_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(all_ops())
    conv = next(r for r in rows if r.startswith("| `conv2d`"))
    assert "x, w, [b]" in conv and "`stride: tuple[int, int] = [1, 1]`" in conv and "`groups: int = 1`" in conv
    clamp = next(r for r in rows if r.startswith("| `clamp`"))
    assert "`min: float \\| None = none`" in clamp  # pipes escaped inside the table
    assert f"{len(all_ops())} ops." in text


def test_every_op_documents_itself() -> None:
    for op in all_ops():
        assert op.summary and op.category != "misc", op.name
        assert op.operands or op.max_inputs == 0, op.name
