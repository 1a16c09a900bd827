"""The zoo exported with torch.onnx.export, imported back by npuc's ONNX frontend, and run on the
reference interpreter: outputs match PyTorch eager and onnxruntime on the same file (fp32
tolerance: relative L2 error <= 1e-5)."""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from npuc.pipeline import import_onnx  # noqa: E402
from npuc.frontend.onnx_model import load_onnx_model  # noqa: E402
from npuc.interp import interpret  # noqa: E402
from npuc.report.accuracy import rel_l2  # noqa: E402
from npuc.zoo import ZOO  # noqa: E402

FP32_TOL = 1e-5


def _listed(out):
    return [out] if isinstance(out, torch.Tensor) else list(out)


def roundtrip(name: str, tmp_path) -> None:
    model, inputs = ZOO[name].load()
    path = tmp_path / (name.replace(":", "_") + ".onnx")
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), dynamo=True)
    g = import_onnx(path)
    got = interpret(g, *inputs)
    with torch.no_grad():
        eager = _listed(model(*inputs))
    ort = _listed(load_onnx_model(path)(*inputs))
    assert len(got) == len(eager) == len(ort)
    for k, (o, e, r) in enumerate(zip(got, eager, ort)):
        assert o.shape == e.shape == r.shape
        assert rel_l2(o, e) <= FP32_TOL, f"{name} output {k} vs PyTorch: {rel_l2(o, e):.2e}"
        assert rel_l2(o, r) <= FP32_TOL, f"{name} output {k} vs onnxruntime: {rel_l2(o, r):.2e}"


def test_llama_tiny_roundtrip(tmp_path) -> None:
    roundtrip("transformers:llama-tiny", tmp_path)


@pytest.mark.zoo
@pytest.mark.parametrize("name", [n for n in ZOO if n != "transformers:llama-tiny"])
def test_zoo_roundtrip(name, tmp_path) -> None:
    roundtrip(name, tmp_path)
