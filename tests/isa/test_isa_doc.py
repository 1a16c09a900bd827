"""docs/isa.md is generated from the instruction definitions and documents every instruction."""

from __future__ import annotations

from pathlib import Path

from npuc.isa import all_defs
from npuc.isa.doc import isa_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "isa.md"


def test_committed_isa_md_is_generated():
    assert DOC.read_text(encoding="utf-8") == isa_markdown(), (
        "docs/isa.md is stale: run `python -m npuc.isa.doc > docs/isa.md`"
    )


def test_every_instruction_and_field_documented():
    text = isa_markdown()
    for d in all_defs():
        assert f"### {d.name} (opcode 0x{d.opcode:02x})" in text
        assert d.semantics_doc in text and d.timing_doc in text and d.energy_doc in text
        for f in d.fields:
            assert f"| `{f.name}` | {f.bits} |" in text
    for topic in ("## Dependency tokens", "## Timing model", "## Energy model", "SaturatingRoundingDoublingHighMul", "SCALE-Sim"):
        assert topic in text
