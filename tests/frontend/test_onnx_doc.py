"""docs/onnx-ops.md is the generated table of the ONNX operators npuc imports."""

from pathlib import Path

import pytest

pytest.importorskip("onnx")

from npuc.conformance.onnx_doc import onnx_ops_markdown  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "onnx-ops.md"


def test_docs_onnx_ops_md_is_up_to_date() -> None:
    assert DOC.read_text() == onnx_ops_markdown(), "regenerate with: npuc ops --onnx --write docs/onnx-ops.md"
