"""Text form: parse(print(g)) == g for every op, and printing again gives the same text."""

from __future__ import annotations

import pytest
import torch
from ircases import CASES
from irtestlib import Case, build

from npuc.ir import DType, Graph, GraphBuilder, TensorType, graphs_equal, parse_graph, print_graph
from npuc.ir.ops.elementwise import CastAttrs, ClampAttrs, GeluAttrs
from npuc.ir.ops.pooling import AvgPool2dAttrs
from npuc.ir.ops.shape import PadAttrs, PermuteAttrs, ReshapeAttrs


def round_trip(g: Graph) -> Graph:
    text = print_graph(g)
    g2 = parse_graph(text, g.constants)
    assert graphs_equal(g, g2)
    assert print_graph(g2) == text
    return g2


@pytest.mark.parametrize("name,case", [(n, c) for n, c, _ in CASES], ids=[c[0] for c in CASES])
def test_round_trip_every_case(name: str, case: Case) -> None:
    round_trip(build(case, name=f"case {name}", loc=f'model.py:{len(name)} in "{name}"'))


def test_round_trip_odd_attribute_values() -> None:
    b = GraphBuilder('g "quoted" \\ name')
    x = b.input(TensorType((1, 2, 5, 5), DType.f32), "x")
    y = b.add1("clamp", [x], ClampAttrs(-0.5, None), loc="a.py:1")
    y = b.add1("clamp", [y], ClampAttrs(None, 1e-7))
    y = b.add1("pad", [y], PadAttrs((1, -1, 2, 0), float("-inf")))
    y = b.add1("pad", [y], PadAttrs((0, 1), float("nan")), loc='quote " and backslash \\ and ünïcode')
    y = b.add1("avg_pool2d", [y], AvgPool2dAttrs((3, 3), (1, 2), (1, 0), True, False, None))
    y = b.add1("avg_pool2d", [y], AvgPool2dAttrs((1, 1), (1, 1), (0, 0), False, True, 7))
    y = b.add1("gelu", [y], GeluAttrs("tanh"))
    z = b.add1("cast", [y], CastAttrs(DType.bool))
    z = b.add1("cast", [z], CastAttrs(DType.bf16))
    g = b.build([y, z, x])
    text = print_graph(g)
    assert "value = -inf" in text and "value = nan" in text and "divisor_override = none" in text
    assert "dtype = i1" in text and "max = 1e-07" in text and "min = none" in text
    round_trip(g)


def test_round_trip_scalars_empty_tuples_and_constants() -> None:
    b = GraphBuilder("scalars")
    s = b.input(TensorType((), DType.f32), "s")
    e = b.input(TensorType((0, 3), DType.i64), "empty")
    c = b.constant('weight "w".0', torch.tensor(1.5))
    t = b.add1("permute", [s], PermuteAttrs(()))
    t = b.add1("reshape", [t], ReshapeAttrs(()))
    t = b.add1("add", [t, c])
    f = b.add1("reshape", [e], ReshapeAttrs((3, 0)))
    g = b.build([t, f])
    assert "tensor<f32>" in print_graph(g) and "tensor<0x3xi64>" in print_graph(g)
    round_trip(g)


def test_round_trip_graph_without_nodes() -> None:
    b = GraphBuilder("identity")
    x = b.input(TensorType((2,), DType.u8), "x")
    round_trip(b.build([x, x]))


def test_printed_form_of_a_node() -> None:
    g = build(Case("reshape", (torch.zeros(2, 3),), ReshapeAttrs((3, 2))), loc="m.py:3")
    assert print_graph(g) == (
        'graph @"case"(%x0: tensor<2x3xf32>) -> (tensor<3x2xf32>) {\n'
        '  %0 = reshape(%x0) {shape = [3, 2]} : tensor<3x2xf32> loc("m.py:3")\n'
        "  return %0\n"
        "}\n"
    )


def test_parser_accepts_ints_for_float_attributes_and_omitted_defaults() -> None:
    text = (
        'graph @"g"(%x: tensor<4xf32>) -> (tensor<4xf32>) {\n'
        "  %0 = clamp(%x) {min = 0, max = 6} : tensor<4xf32>\n"
        "  %1 = gelu(%0) : tensor<4xf32>\n"
        "  return %1\n"
        "}\n"
    )
    g = parse_graph(text)
    assert g.nodes[0].attrs == ClampAttrs(0.0, 6.0)
    assert g.nodes[1].attrs == GeluAttrs("none")
    assert g.nodes[0].attrs.min.__class__ is float
