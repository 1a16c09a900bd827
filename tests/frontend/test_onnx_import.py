"""The ONNX frontend's API, CLI and errors, on small models written with onnx.helper."""

from __future__ import annotations

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
from click.testing import CliRunner  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import npuc  # noqa: E402
from npuc.cli import main  # noqa: E402
from npuc.errors import DynamicShapeError, ModelSpecError, UnsupportedOpError  # noqa: E402
from npuc.interp import interpret  # noqa: E402


def conv_model(batch="N", opset=18) -> onnx.ModelProto:
    """x [batch, 3, 8, 8] -> Conv(4, 3x3, pad 1) -> Relu -> Reshape(Shape-derived) -> Gemm -> y."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.weight")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "conv.bias")
    fc = numpy_helper.from_array(rng.standard_normal((5, 256)).astype(np.float32), "fc.weight")
    shape = numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "flat")
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "flat"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.weight"], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])], [w, b, fc, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def reference(model, x: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def test_import_onnx_matches_onnx_reference_and_names_weights():
    m = conv_model(batch=2)
    g = npuc.import_onnx(m)
    assert [n.op for n in g.nodes if n.op != "const"] == ["conv2d", "relu", "reshape", "linear"]
    assert "conv.weight" in g.constants and "fc.weight" in g.constants
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    (y,) = interpret(g, torch.from_numpy(x))
    np.testing.assert_allclose(y.numpy(), reference(m, x), rtol=1e-5, atol=1e-5)


def test_dynamic_dimension_needs_a_shape_and_names_it(tmp_path):
    m = conv_model()
    with pytest.raises(DynamicShapeError, match=r"input 'x' has a dynamic dimension 0 \('N'\).*--input-shape x="):
        npuc.import_onnx(m)
    g = npuc.import_onnx(m, {"x": (3, 3, 8, 8)})
    assert g.inputs[0].type.shape == (3, 3, 8, 8) and g.outputs[0].type.shape == (3, 5)
    with pytest.raises(ModelSpecError, match="no input named"):
        npuc.import_onnx(m, {"z": (1, 3, 8, 8)})


def test_unsupported_operators_are_listed_with_node_and_reason():
    nodes = [
        helper.make_node("Floor", ["x"], ["a"], name="floor_it"),
        helper.make_node("Relu", ["a"], ["b"], name="after"),  # a user of a failed node: not reported again
        helper.make_node("Resize", ["x", "", "scales"], ["c"], name="grow", mode="linear"),
    ]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")
    g = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, None)], [scales])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(UnsupportedOpError) as e:
        npuc.import_onnx(m)
    text = str(e.value)
    assert text.startswith("the ONNX model uses 2 operators npuc cannot import (Floor, Resize), at 2 places:")
    assert "Floor (node 'floor_it'): npuc has no graph op for it" in text
    assert "Resize (node 'grow'): mode 'linear' has no graph op" in text
    assert "after" not in text


def test_old_opset_is_converted_and_bad_files_are_refused(tmp_path):
    g = npuc.import_onnx(conv_model(batch=1, opset=11))
    assert g.outputs[0].type.shape == (1, 5)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelSpecError, match="is not a readable ONNX model"):
        npuc.import_onnx(bad)
    with pytest.raises(ModelSpecError, match="does not exist"):
        npuc.import_onnx(tmp_path / "missing.onnx")


def test_compile_an_onnx_path_without_example_inputs(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(conv_model(batch=1), str(path))
    art = npuc.compile(str(path))
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (y,) = art.run(torch.from_numpy(x))
    ref = reference(conv_model(batch=1), x)
    assert float(np.linalg.norm(y.numpy() - ref) / np.linalg.norm(ref)) < 1e-2
    with pytest.raises(npuc.NpucError, match="int8 quantization of ONNX models"):
        npuc.compile(str(path), quantize="int8")


def test_cli_import_and_compile_take_an_onnx_model_with_input_shape(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(conv_model(), str(path))
    runner = CliRunner()
    out = runner.invoke(main, ["import", str(path)])
    assert out.exit_code == 1 and "dynamic dimension 0" in out.output
    out = runner.invoke(main, ["import", str(path), "--input-shape", "x=2,3,8,8"])
    assert out.exit_code == 0, out.output
    assert "matches" in out.output
    out = runner.invoke(main, ["compile", str(path), "--input-shape", "x=1,3,8,8", "-o", str(tmp_path / "c.npub")])
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["run", str(tmp_path / "c.npub"), "--model", str(path), "--input-shape", "x=1,3,8,8"])
    assert out.exit_code == 0 and "ok" in out.output, out.output
    out = runner.invoke(main, ["import", str(path), "--input-shape", "x"])
    assert out.exit_code == 1 and "is not NAME=D0,D1" in out.output
    out = runner.invoke(main, ["ops", "--onnx"])
    assert out.exit_code == 0 and "Conv" in out.output
