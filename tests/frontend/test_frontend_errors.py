"""The frontend's user-facing errors, and what an import keeps of the model (names, locations, dtypes)."""

from __future__ import annotations

import inspect
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F

from npuc.errors import DynamicShapeError, ExportError, ModelSpecError, NpucError, UnsupportedOpError
from npuc.frontend import import_graph, supported_aten_ops
from npuc.frontend.export import check_static
from npuc.frontend.importer import NotImportedWarning
from npuc.interp import interpret
from npuc.ir.opdef import all_ops
from npuc.zoo import load_model, zoo_names

THIS_FILE = "test_frontend_errors.py"


def line_of(fn, text: str) -> int:
    """The line number of the first line of ``fn``'s source that contains ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ------------------------------------------------------------------------------ unsupported ops


class TwoUnsupported(torch.nn.Module):
    def forward(self, x):
        a = torch.atan(x)
        b = torch.floor(x) + a
        return torch.atan(b)


def test_unsupported_ops_are_all_listed_with_their_source_lines():
    with pytest.raises(UnsupportedOpError) as info:
        import_graph(TwoUnsupported(), (torch.randn(3, 4),))
    msg = str(info.value)
    assert "aten.atan.default" in msg and "aten.floor.default" in msg
    assert "2 operators" in msg and "3 places" in msg
    fwd = TwoUnsupported.forward
    for code in ("a = torch.atan(x)", "b = torch.floor(x) + a", "return torch.atan(b)"):
        assert f"{THIS_FILE}:{line_of(fwd, code)}" in msg
        assert code in msg
    assert "FX node %atan" in msg
    assert "run `npuc ops` to list supported ops" in msg.lower()
    assert "Traceback" not in msg


def test_unsupported_use_of_a_supported_op_says_why():
    class Floor(torch.nn.Module):
        def forward(self, x):
            return torch.div(x, 3.0, rounding_mode="floor")

    with pytest.raises(UnsupportedOpError, match="rounding_mode='floor'"):
        import_graph(Floor(), (torch.randn(4),))


def test_returning_max_pool_indices_is_refused():
    class PoolWithIndices(torch.nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 2, return_indices=True)

    with pytest.raises(UnsupportedOpError, match="indices output of max_pool2d"):
        import_graph(PoolWithIndices(), (torch.randn(1, 2, 4, 4),))


# ------------------------------------------------------------------------------ export failures


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


def test_data_dependent_control_flow_is_an_export_error_with_a_hint():
    with pytest.raises(ExportError) as info:
        import_graph(DataDependent(), (torch.randn(3),))
    msg = str(info.value)
    assert "torch.cond" in msg and "torch.where" in msg
    assert f"{THIS_FILE}:{line_of(DataDependent.forward, 'if x.sum() > 0')}" in msg
    assert "if x.sum() > 0:" in msg
    assert info.value.__cause__ is not None
    assert len(msg.splitlines()) == 1


def test_a_model_that_fails_eagerly_is_an_export_error():
    class ShapeBug(torch.nn.Module):
        def forward(self, x):
            return x @ x

    with pytest.raises(ExportError, match="exporting the model with torch.export failed"):
        import_graph(ShapeBug(), (torch.randn(2, 3),))


def test_training_mode_batch_norm_is_refused():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).train()
    with pytest.raises(ExportError, match=r"model.eval\(\)"):
        import_graph(model, (torch.randn(1, 3, 8, 8),))


# ------------------------------------------------------------------------------ dynamic shapes


def test_dynamic_shapes_request_is_refused():
    with pytest.raises(DynamicShapeError, match="static shapes only"):
        import_graph(torch.nn.ReLU(), (torch.randn(2, 3),), dynamic_shapes={"input": {0: torch.export.Dim("b")}})


def test_dynamic_dimension_of_an_exported_program_is_named():
    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    ep = torch.export.export(Twice(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    with pytest.raises(DynamicShapeError, match=r"dimension 0 of model input 0 \('x'\) is dynamic"):
        check_static(ep)


@pytest.mark.parametrize("bad", [(torch.randn(2), 3), (torch.randn(2), [torch.randn(2)]), "text"])
def test_non_tensor_inputs_are_refused(bad):
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    with pytest.raises(DynamicShapeError, match="tensor"):
        import_graph(Add(), bad)


# ------------------------------------------------------------------------------ model specs


def test_unknown_zoo_name_lists_the_zoo():
    with pytest.raises(ModelSpecError) as info:
        load_model("torchvision:resnet19")
    for name in zoo_names():
        assert name in str(info.value)


def test_user_model_file(tmp_path):
    f = tmp_path / "mymodel.py"
    f.write_text(textwrap.dedent("""
        import torch

        def build():
            return torch.nn.Linear(4, 2), torch.randn(1, 4)

        def wrong():
            return 42

        def broken():
            raise ValueError("no weights here")
    """))
    model, inputs = load_model(f"{f}:build")
    assert isinstance(model, torch.nn.Linear) and not model.training
    assert inputs[0].shape == (1, 4)
    with pytest.raises(ModelSpecError, match="defines no function 'missing'"):
        load_model(f"{f}:missing")
    with pytest.raises(ModelSpecError, match=r"must return \(model, example_inputs\)"):
        load_model(f"{f}:wrong")
    with pytest.raises(ModelSpecError, match=r"broken\(\) of model file .* raised ValueError: no weights here \(at mymodel.py:\d+"):
        load_model(f"{f}:broken")
    with pytest.raises(ModelSpecError, match="does not exist"):
        load_model(f"{tmp_path / 'nope.py'}:build")
    with pytest.raises(ModelSpecError, match="names a file but no function"):
        load_model(str(f))


def test_user_model_file_that_does_not_import(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("import not_a_module_npuc_knows\n")
    with pytest.raises(ModelSpecError, match="importing model file .* failed: ModuleNotFoundError"):
        load_model(f"{f}:build")


def test_every_error_is_an_npuc_error():
    for cls in (UnsupportedOpError, ExportError, DynamicShapeError, ModelSpecError):
        assert issubclass(cls, NpucError)


# ------------------------------------------------------------------------------ what an import keeps


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 5)

    def forward(self, image):
        y = torch.relu(self.conv(image))
        y = y.mean(dim=(2, 3))
        return self.head(y) * 2


def test_weights_are_named_by_fqn_and_inputs_keep_their_names():
    g = import_graph(Small().eval(), (torch.randn(1, 3, 8, 8),))
    names = {n.attrs.name for n in g.nodes if n.op == "const"}
    assert {"conv.weight", "conv.bias", "head.weight", "head.bias"} <= names
    assert [v.name for v in g.inputs] == ["image"]
    relu = next(n for n in g.nodes if n.op == "relu")
    assert relu.loc.endswith(f"{THIS_FILE}:{line_of(Small.forward, 'torch.relu')}")


def test_python_scalars_become_0d_constants_of_the_other_operand_type():
    class IntPlusFloat(torch.nn.Module):
        def forward(self, x, i):
            return x * 2 + i

    x, i = torch.randn(3), torch.arange(3)
    g = import_graph(IntPlusFloat(), (x, i))
    scalar = [g.constants[n.attrs.name] for n in g.nodes if n.op == "const"]
    assert any(t.dim() == 0 and t.dtype == torch.float32 and float(t) == 2.0 for t in scalar)
    assert any(n.op == "cast" for n in g.nodes)
    torch.testing.assert_close(interpret(g, x, i)[0], x * 2 + i)


def test_constant_only_computations_are_folded_at_import_time():
    class Masked(torch.nn.Module):
        def forward(self, x):
            n = x.shape[-1]
            mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
            positions = torch.arange(n).cumsum(0)
            return torch.softmax(x + mask, dim=-1) * positions

    x = torch.randn(2, 5, 5)
    g = import_graph(Masked(), (x,))
    assert {n.op for n in g.nodes} <= {"const", "add", "softmax", "mul", "cast"}
    folded = [g.constants[n.attrs.name] for n in g.nodes if n.op == "const"]
    assert any(t.shape == (5, 5) and bool(torch.isinf(t).any()) for t in folded)
    assert any(t.tolist() == [0, 1, 3, 6, 10] for t in folded)
    torch.testing.assert_close(interpret(g, x)[0], Masked()(x))


def test_fp16_weights_are_kept_and_noted():
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).half().eval()
    x = torch.randn(2, 8, dtype=torch.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = import_graph(model, (x,))
    assert any(issubclass(w.category, NotImportedWarning) and "float16" in str(w.message) for w in caught)
    assert g.outputs[0].type.dtype.value == "f16"
    torch.testing.assert_close(interpret(g, x)[0], model(x))


def test_supported_aten_ops_name_registered_graph_ops():
    graph_ops = {op.name for op in all_ops()}
    table = supported_aten_ops()
    assert "aten.convolution.default" in table and table["aten.convolution.default"] == "conv2d, conv_transpose2d"
    for aten, ops in table.items():
        assert aten.startswith(("aten.", "quantized_decomposed.", "dim_order_ops."))  # the last: ExecuTorch's
        for op in ops.replace(" ", "").split(","):
            assert op in graph_ops or op in ("(identity)", "(dropped)"), (aten, op)


def test_torch_cond_is_reported_as_control_flow():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))

    with pytest.raises(UnsupportedOpError) as info:
        import_graph(Branchy(), (torch.randn(3),))
    msg = str(info.value)
    assert "torch.cond" in msg and "control flow" in msg and "1 operator " in msg


def test_ops_after_a_data_dependent_shape_are_reported_once_without_follow_up_noise():
    class MaskSelect(torch.nn.Module):
        def forward(self, x):
            return x[x > 0].atan()

    with pytest.raises(UnsupportedOpError) as info:
        import_graph(MaskSelect(), (torch.randn(6),))
    msg = str(info.value)
    assert "boolean mask" in msg and "aten.atan.default" in msg
    assert "2 operators" in msg and "sym_size" not in msg and "_assert" not in msg
