"""docs/targets.md is generated from the schema and the presets, and covers every key."""

from __future__ import annotations

from pathlib import Path

from npuc.targets.doc import _section_model, targets_markdown
from npuc.targets import list_presets
from npuc.targets.schema import MemorySchema, TargetSchema

DOC = Path(__file__).resolve().parents[2] / "docs" / "targets.md"


def test_committed_targets_md_is_generated():
    assert DOC.read_text(encoding="utf-8") == targets_markdown(), (
        "docs/targets.md is stale: run `python -m npuc.targets.doc > docs/targets.md`"
    )


def test_every_key_documented_with_unit_and_presets():
    text = targets_markdown()
    presets = len(list_presets())
    for section, info in TargetSchema.model_fields.items():
        if section == "memory":
            keys = [f"memory.NAME.{k}" for k in MemorySchema.model_fields]
        else:
            sub = getattr(_section_model(info.annotation), "model_fields", None)
            keys = [f"{section}.{k}" for k in sub] if sub else [section]
        for key in keys:
            line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{key}` |"))
            if section in ("dma", "dram") or key == "energy.dram_pj_per_byte":
                assert line.count("|") == 4, line  # the older form: key, unit, meaning
                continue
            assert line.count("|") == 4 + presets, line  # key, unit, meaning, one column per preset
    assert "flash [0x400000, 0x4400000)" in text
    assert "Horowitz" in text and "45 nm -> 7 nm" in text
    assert "Where the area figures come from" in text and "estimate" in text
