"""The reference interpreter: results, intermediates, constants, and input checking."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from npuc.errors import NpucError, VerifyError
from npuc.interp import interpret, interpret_all
from npuc.ir import ConstAttrs, DType, Graph, GraphBuilder, NoAttrs, Node, TensorType, Value
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.ir.ops.pooling import AdaptiveAvgPool2dAttrs
from npuc.ir.ops.shape import ReshapeAttrs


def small_cnn() -> tuple[Graph, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    w, bias, fc_w = torch.randn(4, 3, 3, 3), torch.randn(4), torch.randn(5, 4)
    b = GraphBuilder("cnn")
    x = b.input(TensorType((2, 3, 8, 8), DType.f32), "x")
    y = b.add1("conv2d", [x, b.constant("conv.weight", w), b.constant("conv.bias", bias)],
               Conv2dAttrs((2, 2), (1, 1), (1, 1), 1), loc="net.py:3")
    y = b.add1("relu", [y])
    y = b.add1("adaptive_avg_pool2d", [y], AdaptiveAvgPool2dAttrs((1, 1)))
    y = b.add1("reshape", [y], ReshapeAttrs((2, 4)))
    z = b.add1("linear", [y, b.constant("fc.weight", fc_w)])
    return b.build([z, y]), {"w": w, "b": bias, "fc": fc_w}


def eager(x: torch.Tensor, p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    y = F.adaptive_avg_pool2d(F.relu(F.conv2d(x, p["w"], p["b"], 2, 1)), 1).flatten(1)
    return F.linear(y, p["fc"]), y


def test_interpret_matches_eager() -> None:
    g, p = small_cnn()
    x = torch.randn(2, 3, 8, 8)
    got = interpret(g, x)
    want = eager(x, p)
    assert len(got) == 2
    for o, w in zip(got, want):
        torch.testing.assert_close(o, w)


def test_interpret_all_returns_every_value_in_program_order() -> None:
    g, p = small_cnn()
    x = torch.randn(2, 3, 8, 8)
    values = interpret_all(g, x)
    names = [v.name for v in g.inputs] + [v.name for n in g.nodes for v in n.outputs]
    assert list(values) == names
    assert torch.equal(values["x"], x)
    conv_out = next(g.ops("conv2d")).output
    torch.testing.assert_close(values[conv_out.name], F.conv2d(x, p["w"], p["b"], 2, 1))
    torch.testing.assert_close(values[g.outputs[0].name], interpret(g, x)[0])


def test_wrong_input_count() -> None:
    g, _ = small_cnn()
    with pytest.raises(NpucError, match="graph @cnn takes 1 inputs, got 2"):
        interpret(g, torch.randn(2, 3, 8, 8), torch.randn(1))
    with pytest.raises(NpucError, match="takes 1 inputs, got 0"):
        interpret_all(g)


def test_wrong_input_shape() -> None:
    g, _ = small_cnn()
    with pytest.raises(NpucError, match=r"input 0 \(%x\) of graph @cnn must be tensor<2x3x8x8xf32>, got a tensor of shape \[1, 3, 8, 8\]"):
        interpret(g, torch.randn(1, 3, 8, 8))


def test_wrong_input_dtype() -> None:
    g, _ = small_cnn()
    with pytest.raises(NpucError, match="must be tensor<2x3x8x8xf32>, got a tensor of shape .* and dtype torch.float64"):
        interpret(g, torch.randn(2, 3, 8, 8, dtype=torch.float64))
    with pytest.raises(NpucError, match="dtype torch.complex64"):
        interpret(g, torch.randn(2, 3, 8, 8, dtype=torch.complex64))


def test_input_must_be_a_tensor() -> None:
    g, _ = small_cnn()
    with pytest.raises(NpucError, match="must be a torch.Tensor, got list"):
        interpret(g, [[1.0]])


def test_missing_constant_is_reported() -> None:
    c = Value("c", TensorType((2,), DType.f32))
    g = Graph("g", (), (Node("const", (), (c,), ConstAttrs("w", c.type)),), (c,), {})
    with pytest.raises(VerifyError, match="constant @w of graph @g is missing"):
        interpret(g)


def test_data_dependent_failure_names_the_node() -> None:
    b = GraphBuilder("lookup")
    table = b.constant("table", torch.randn(4, 2))
    idx = b.input(TensorType((3,), DType.i64), "idx")
    out = b.add1("embedding", [table, idx], loc="model.py:9")
    graph = b.build([out])
    with pytest.raises(NpucError, match=r"node '%\w+ = embedding' \(from model.py:9\) failed on its inputs: index out of range"):
        interpret(graph, torch.tensor([0, 4, 1]))


def test_outputs_do_not_alias_inputs_mutations() -> None:
    b = GraphBuilder("id")
    x = b.input(TensorType((3,), DType.f32), "x")
    y = b.add1("relu", [x])
    g = b.build([y])
    inp = torch.tensor([-1.0, 0.0, 2.0])
    out = interpret(g, inp)[0]
    inp[2] = 100.0
    assert out.tolist() == [0.0, 0.0, 2.0]


def test_reference_result_is_checked_against_the_declared_type() -> None:
    # A node whose declared type disagrees with what the reference computes is caught at run time
    # (here the graph was built by hand, skipping the verifier).
    x = Value("x", TensorType((2, 3), DType.f32))
    y = Value("y", TensorType((3, 2), DType.f32))
    g = Graph("g", (x,), (Node("relu", (x,), (y,), NoAttrs()),), (y,))
    with pytest.raises(VerifyError, match="reference of 'relu' gave a torch.float32 tensor of shape \\[2, 3\\] for %y"):
        interpret(g, torch.zeros(2, 3))
