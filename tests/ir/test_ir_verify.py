"""Negative tests: the verifier, the ops' type rules and attribute domains, and the parser."""

from __future__ import annotations

import re

import pytest
import torch

from npuc.errors import ParseError, VerifyError
from npuc.ir import ConstAttrs, DType, Graph, GraphBuilder, NoAttrs, Node, TensorType, Value, verify
from npuc.ir import parse_graph
from npuc.ir.ops.elementwise import ClampAttrs, GeluAttrs, PowAttrs
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.ir.ops.norm import BatchNormAttrs, LayerNormAttrs, SoftmaxAttrs
from npuc.ir.ops.pooling import AdaptiveAvgPool2dAttrs, AvgPool2dAttrs, MaxPool2dAttrs
from npuc.ir.ops.reduction import ArgmaxAttrs, ReduceAttrs
from npuc.ir.ops.shape import (
    ConcatAttrs,
    ExpandAttrs,
    IndexSelectAttrs,
    PadAttrs,
    PermuteAttrs,
    ReshapeAttrs,
    SelectAttrs,
    SliceAttrs,
    UpsampleNearest2dAttrs,
)

F32 = DType.f32


def t(*shape: int, dtype: DType = F32) -> TensorType:
    return TensorType(tuple(shape), dtype)


def add_node(op: str, types: list[TensorType], attrs=None) -> None:
    """Build ``op`` on fresh inputs of ``types`` (runs verify + infer)."""
    b = GraphBuilder()
    b.add(op, [b.input(ty) for ty in types], attrs)


# ----------------------------------------------------------------------- attribute domains

DOMAIN_ERRORS = [
    ("conv2d", [t(1, 4, 8, 8), t(4, 4, 3, 3)], Conv2dAttrs(stride=(0, 1)), "stride"),
    ("conv2d", [t(1, 4, 8, 8), t(4, 4, 3, 3)], Conv2dAttrs(padding=(-1, 0)), "padding"),
    ("conv2d", [t(1, 4, 8, 8), t(4, 4, 3, 3)], Conv2dAttrs(dilation=(1, 0)), "dilation"),
    ("conv2d", [t(1, 4, 8, 8), t(4, 4, 3, 3)], Conv2dAttrs(groups=0), "groups"),
    ("conv2d", [t(1, 6, 8, 8), t(4, 2, 3, 3)], Conv2dAttrs(groups=3), "does not divide the 4 output channels"),
    ("conv2d", [t(1, 5, 8, 8), t(5, 1, 3, 3)], Conv2dAttrs(groups=2), "does not divide the 5 input channels"),
    ("conv2d", [t(1, 4, 8, 8), t(4, 4, 3, 3)], Conv2dAttrs(stride=(1, 1, 1)), "2 entries"),
    ("max_pool2d", [t(1, 1, 8, 8)], MaxPool2dAttrs(kernel=(0, 2)), "kernel"),
    ("max_pool2d", [t(1, 1, 8, 8)], MaxPool2dAttrs(kernel=(3, 3), padding=(2, 0)), "half of the kernel"),
    ("avg_pool2d", [t(1, 1, 8, 8)], AvgPool2dAttrs(divisor_override=0), "divisor_override"),
    ("avg_pool2d", [t(1, 1, 8, 8)], AvgPool2dAttrs(stride=(2, 0)), "stride"),
    ("adaptive_avg_pool2d", [t(1, 1, 8, 8)], AdaptiveAvgPool2dAttrs((0, 1)), "output_size"),
    ("upsample_nearest2d", [t(1, 1, 8, 8)], UpsampleNearest2dAttrs((4, 0)), "output_size"),
    ("softmax", [t(2, 3)], SoftmaxAttrs(2), "dim = 2 is out of range"),
    ("log_softmax", [t(2, 3)], SoftmaxAttrs(-1), "dim = -1 is out of range"),
    ("reduce_sum", [t(2, 3)], ReduceAttrs((1, 0)), "sorted and unique"),
    ("reduce_mean", [t(2, 3)], ReduceAttrs(()), "at least one"),
    ("reduce_max", [t(2, 3)], ReduceAttrs((2,)), "out of range"),
    ("argmax", [t(2, 3)], ArgmaxAttrs(5), "out of range"),
    ("permute", [t(2, 3, 4)], PermuteAttrs((0, 0, 1)), "not a permutation"),
    ("permute", [t(2, 3, 4)], PermuteAttrs((0, 1)), "not a permutation"),
    ("reshape", [t(2, 3)], ReshapeAttrs((5,)), "6 elements"),
    ("reshape", [t(2, 3)], ReshapeAttrs((-1, 3)), ">= 0"),
    ("expand", [t(3, 2)], ExpandAttrs((3, 4)), "cannot expand"),
    ("expand", [t(3, 2)], ExpandAttrs((2,)), "lower rank"),
    ("slice", [t(5)], SliceAttrs(0, 3, 2, 1), "start (3) <= end (2)"),
    ("slice", [t(5)], SliceAttrs(0, 0, 6, 1), "<= size (5)"),
    ("slice", [t(5)], SliceAttrs(0, -1, 2, 1), "0 <= start"),
    ("slice", [t(5)], SliceAttrs(0, 0, 5, 0), "step"),
    ("select", [t(2, 3)], SelectAttrs(1, 3), "index 3 is out of range"),
    ("select", [t(2, 3)], SelectAttrs(1, -1), "out of range"),
    ("concat", [t(2, 3), t(2, 3)], ConcatAttrs(2), "out of range"),
    ("pad", [t(2, 3)], PadAttrs((1, 1, 1, 1, 1, 1)), "pairs"),
    ("pad", [t(2, 3)], PadAttrs((1,)), "pairs"),
    ("pad", [t(2, 3)], PadAttrs((-2, -2)), "negative shape"),
    ("pad", [t(2, 3, dtype=DType.i32)], PadAttrs((1, 1), 0.5), "integer"),
    ("gelu", [t(2)], GeluAttrs("fast"), "approximate"),
    ("clamp", [t(2)], ClampAttrs(None, None), "at least one"),
    ("clamp", [t(2, dtype=DType.i32)], ClampAttrs(0.5, None), "integers"),
    ("pow", [t(2, dtype=DType.i64)], PowAttrs(-1.0), "non-negative integer"),
    ("batch_norm", [t(2, 3)] + [t(3)] * 4, BatchNormAttrs(-1e-5), "eps"),
    ("layer_norm", [t(2, 3), t(3), t(3)], LayerNormAttrs(0), "normalized_rank"),
    ("layer_norm", [t(2, 3), t(2, 3), t(2, 3)], LayerNormAttrs(3), "normalized_rank"),
]


@pytest.mark.parametrize("op,types,attrs,needle", DOMAIN_ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(DOMAIN_ERRORS)])
def test_attribute_domain_errors(op, types, attrs, needle) -> None:
    with pytest.raises(VerifyError, match=re.escape(needle)) as err:
        add_node(op, types, attrs)
    assert str(err.value).startswith(f"{op}: ")


# --------------------------------------------------------------------- operand type errors

TYPE_ERRORS = [
    ("add", [t(2), t(2, dtype=DType.i32)], None, "dtypes differ"),
    ("add", [t(2, 3), t(4, 3)], None, "do not broadcast"),
    ("sub", [t(2, dtype=DType.bool), t(2, dtype=DType.bool)], None, "numeric"),
    ("div", [t(2, dtype=DType.i32), t(2, dtype=DType.i32)], None, "floating-point"),
    ("exp", [t(2, dtype=DType.i64)], None, "floating-point"),
    ("where", [t(2), t(2), t(2)], None, "bool"),
    ("where", [t(2, dtype=DType.bool), t(3), t(2)], None, "do not broadcast"),
    ("conv2d", [t(1, 3, 8, 8), t(4, 4, 3, 3)], Conv2dAttrs(), "input channels"),
    ("conv2d", [t(1, 3, 8), t(4, 3, 3, 3)], Conv2dAttrs(), "rank 4"),
    ("conv2d", [t(1, 3, 8, 8), t(4, 3, 3, 3), t(5)], Conv2dAttrs(), "bias"),
    ("conv2d", [t(1, 3, 2, 2), t(4, 3, 3, 3)], Conv2dAttrs(), "does not fit"),
    ("conv2d", [t(1, 3, 8, 8, dtype=DType.i8), t(4, 3, 3, 3, dtype=DType.i8)], Conv2dAttrs(), "floating-point"),
    ("linear", [t(2, 5), t(4, 6)], None, "features"),
    ("matmul", [t(2, 3), t(4, 5)], None, "inner"),
    ("matmul", [t(2, 3, 4), t(3, 4, 5)], None, "do not broadcast"),
    ("matmul", [t(3), t(3, 4)], None, "rank >= 2"),
    ("batch_norm", [t(2, 3)] + [t(4)] * 4, BatchNormAttrs(), "weight must be of shape [3]"),
    ("layer_norm", [t(2, 3), t(2), t(3)], LayerNormAttrs(), "weight must be of shape [3]"),
    ("max_pool2d", [t(1, 1, 1, 1)], MaxPool2dAttrs(kernel=(2, 2)), "does not fit"),
    ("avg_pool2d", [t(1, 8, 8)], AvgPool2dAttrs(), "rank 4"),
    ("concat", [t(2, 3), t(3, 3)], ConcatAttrs(1), "does not match"),
    ("concat", [t(2, 3), t(2, 3, dtype=DType.f16)], ConcatAttrs(0), "dtypes differ"),
    ("embedding", [t(10, 4), t(3)], None, "integer"),
    ("index_select", [t(4, 5), t(2, 2, dtype=DType.i64)], IndexSelectAttrs(0), "rank 0 or 1"),
    ("argmax", [t(0, 3)], ArgmaxAttrs(0), "empty"),
]


@pytest.mark.parametrize("op,types,attrs,needle", TYPE_ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(TYPE_ERRORS)])
def test_operand_type_errors(op, types, attrs, needle) -> None:
    with pytest.raises(VerifyError, match=re.escape(needle)):
        add_node(op, types, attrs)


def test_wrong_operand_count() -> None:
    with pytest.raises(VerifyError, match="'add' takes 2 operands, got 1"):
        add_node("add", [t(2)])
    with pytest.raises(VerifyError, match=r"'conv2d' takes 2\.\.3 operands, got 4"):
        add_node("conv2d", [t(1, 1, 3, 3), t(1, 1, 1, 1), t(1), t(1)], Conv2dAttrs())
    with pytest.raises(VerifyError, match=r"'concat' takes 1\.\.n operands, got 0"):
        add_node("concat", [], ConcatAttrs(0))


def test_wrong_attribute_class() -> None:
    with pytest.raises(VerifyError, match="needs attributes of type Conv2dAttrs, got NoAttrs"):
        add_node("conv2d", [t(1, 1, 3, 3), t(1, 1, 1, 1)], NoAttrs())


def test_unknown_op() -> None:
    with pytest.raises(VerifyError, match="unknown op 'conv3d'"):
        add_node("conv3d", [t(2)])
    x = Value("x", t(2))
    g = Graph("g", (x,), (Node("frobnicate", (x,), (Value("y", t(2)),), NoAttrs()),), (x,))
    with pytest.raises(VerifyError, match="unknown op 'frobnicate'"):
        verify(g)


# ------------------------------------------------------------------------ graph structure


def test_use_before_def() -> None:
    x = Value("x", t(2))
    a, b = Value("a", t(2)), Value("b", t(2))
    nodes = (Node("relu", (b,), (a,), NoAttrs()), Node("relu", (x,), (b,), NoAttrs()))
    with pytest.raises(VerifyError, match=r"operand 0 \(%b\) is used before it is defined"):
        verify(Graph("g", (x,), nodes, (a,)))


def test_duplicate_names() -> None:
    x = Value("x", t(2))
    y = Value("x", t(2))
    with pytest.raises(VerifyError, match="%x is defined twice"):
        verify(Graph("g", (x,), (Node("relu", (x,), (y,), NoAttrs()),), (y,)))


def test_wrong_result_type() -> None:
    x = Value("x", t(2, 3))
    y = Value("y", t(3, 2))
    with pytest.raises(VerifyError, match=r"result type tensor<3x2xf32> but the op's rule gives tensor<2x3xf32>"):
        verify(Graph("g", (x,), (Node("relu", (x,), (y,), NoAttrs(), loc="m.py:7"),), (y,)))


def test_undefined_graph_output() -> None:
    x = Value("x", t(2))
    with pytest.raises(VerifyError, match="graph output 0"):
        verify(Graph("g", (x,), (), (Value("z", t(2)),)))


def test_missing_constant() -> None:
    c = Value("c", t(2))
    node = Node("const", (), (c,), ConstAttrs("w", t(2)))
    with pytest.raises(VerifyError, match="constant @w is missing"):
        verify(Graph("g", (), (node,), (c,), {}))


def test_constant_of_wrong_shape_or_dtype() -> None:
    c = Value("c", t(2))
    node = Node("const", (), (c,), ConstAttrs("w", t(2)))
    with pytest.raises(VerifyError, match="constant @w is tensor<3xf32>, declared tensor<2xf32>"):
        verify(Graph("g", (), (node,), (c,), {"w": torch.zeros(3)}))
    with pytest.raises(VerifyError, match="constant @w is tensor<2xi32>"):
        verify(Graph("g", (), (node,), (c,), {"w": torch.zeros(2, dtype=torch.int32)}))


def test_error_names_the_node_and_its_location() -> None:
    x = Value("x", t(2, 3))
    y = Value("y", t(2, 3))
    g = Graph("g", (x,), (Node("softmax", (x,), (y,), SoftmaxAttrs(4), loc="net.py:12"),), (y,))
    with pytest.raises(VerifyError, match=re.escape("node '%y = softmax' (from net.py:12): softmax: dim = 4")):
        verify(g)


# -------------------------------------------------------------------------------- parser

GOOD = (
    'graph @"g"(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {\n'
    '  %w = const @"w" : tensor<2x3xf32>\n'
    "  %0 = add(%x, %w) : tensor<2x3xf32>\n"
    "  %1 = softmax(%0) {dim = 1} : tensor<2x3xf32>\n"
    "  return %1\n"
    "}\n"
)
CONSTS = {"w": torch.zeros(2, 3)}


def test_good_text_parses() -> None:
    assert len(parse_graph(GOOD, CONSTS).nodes) == 3


PARSE_ERRORS = [
    ("%0 = add(%x, %w)", "%0 = add(%x, %w) $", 3, "unexpected character"),
    ("%0 = add(%x, %w)", "%0 add(%x, %w)", 3, "expected '='"),
    ("%0 = add(%x, %w)", "%0 = add(%x, %v)", 3, "undefined value %v"),
    ("%0 = add(%x, %w)", "%0 = addd(%x, %w)", 3, "unknown op 'addd'"),
    ("{dim = 1}", "{dim = 1, axis = 2}", 4, "no attribute(s) ['axis']"),
    ("{dim = 1}", "{dim = q8}", 4, "unknown element type 'q8'"),
    ("{dim = 1}", "{dim 1}", 4, "expected '='"),
    ("%1 = softmax(%0) {dim = 1} : tensor<2x3xf32>", "%1 = softmax(%0) {dim = 1} : tensor<2x3xq9>", 4,
     "unknown element type 'q9'"),
    ("%1 = softmax(%0) {dim = 1} : tensor<2x3xf32>", "%1 = softmax(%0) {dim = 1} : tensor<2xbx3xf32>", 4,
     "malformed shape"),
    ("%1 = softmax(%0)", "%0 = softmax(%0)", 4, "%0 defined twice"),
    ('%w = const @"w"', '%w = const @"v"', 2, "constant @v was not supplied"),
    ("  return %1\n", "", 5, "expected a node or 'return'"),
    ("}\n", "}\n}\n", 7, "unexpected text after the graph"),
    ("tensor<2x3xf32>) {", "tensor<2x3xf32> {", 1, "expected ','"),
]


@pytest.mark.parametrize("old,new,line,needle", PARSE_ERRORS, ids=[e[3][:24] for e in PARSE_ERRORS])
def test_parse_errors_name_the_line(old: str, new: str, line: int, needle: str) -> None:
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    with pytest.raises(ParseError) as err:
        parse_graph(text, CONSTS)
    msg = str(err.value)
    assert msg.startswith(f"line {line}: "), msg
    assert needle in msg, msg


def test_parsed_graph_is_verified() -> None:
    bad = GOOD.replace("{dim = 1}", "{dim = 7}")
    with pytest.raises(VerifyError, match="dim = 7 is out of range"):
        parse_graph(bad, CONSTS)


def test_declared_results_must_match_returned_values() -> None:
    bad = GOOD.replace("-> (tensor<2x3xf32>)", "-> (tensor<3x2xf32>)")
    with pytest.raises(ParseError, match="do not match the declared result types"):
        parse_graph(bad, CONSTS)


def test_attribute_field_types_are_checked() -> None:
    from npuc.ir.ops.linalg import Conv2dAttrs

    with pytest.raises(VerifyError, match="attribute 'stride': 2 is not a tuple"):
        add_node("conv2d", [TensorType((1, 3, 8, 8), DType.f32), TensorType((4, 3, 3, 3), DType.f32)], Conv2dAttrs(stride=2))


def test_malformed_literals_are_parse_errors() -> None:
    from npuc.errors import ParseError
    from npuc.ir.text import parse_graph

    bad_string = 'graph @"g"(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n  %0 = relu(%x) : tensor<2xf32> loc("a\\x")\n  return %0\n}\n'
    with pytest.raises(ParseError):
        parse_graph(bad_string)
