"""canonicalize: identities vanish, chains collapse, matmul + bias becomes linear."""

from __future__ import annotations

import textwrap

import torch

from npuc.ir import print_graph
from npuc.passes import canonicalize
from passlib import assert_same_function, graph, ops


def test_reshape_chain_collapses_to_one_reshape():
    g = graph("""
        graph @"t"(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>) {
          %a = reshape(%x) {shape = [6]} : tensor<6xf32>
          %b = reshape(%a) {shape = [1, 6]} : tensor<1x6xf32>
          %c = reshape(%b) {shape = [3, 2]} : tensor<3x2xf32>
          return %c
        }
    """)
    out = canonicalize(g)
    assert ops(out) == ["reshape"]
    assert out.nodes[0].inputs[0] is out.inputs[0]
    assert_same_function(g, out)


def test_reshape_back_to_the_input_shape_disappears():
    g = graph("""
        graph @"t"(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
          %a = reshape(%x) {shape = [6]} : tensor<6xf32>
          %b = reshape(%a) {shape = [2, 3]} : tensor<2x3xf32>
          %c = relu(%b) : tensor<2x3xf32>
          return %c
        }
    """)
    assert ops(canonicalize(g)) == ["relu"]


def test_permute_chain_composes_and_inverse_pair_cancels():
    g = graph("""
        graph @"t"(%x: tensor<2x3x4xf32>) -> (tensor<4x2x3xf32>, tensor<2x3x4xf32>) {
          %a = permute(%x) {perm = [1, 2, 0]} : tensor<3x4x2xf32>
          %b = permute(%a) {perm = [1, 2, 0]} : tensor<4x2x3xf32>
          %c = permute(%x) {perm = [0, 2, 1]} : tensor<2x4x3xf32>
          %d = permute(%c) {perm = [0, 2, 1]} : tensor<2x3x4xf32>
          return %b, %d
        }
    """)
    out = canonicalize(g)
    assert ops(out) == ["permute"]
    assert out.nodes[0].attrs.perm == (2, 0, 1)
    assert out.outputs[1] is out.inputs[0]
    assert_same_function(g, out)


def test_identity_data_movement_and_clamps_vanish():
    g = graph("""
        graph @"t"(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
          %a = cast(%x) {dtype = f32} : tensor<2x3xf32>
          %b = expand(%a) {shape = [2, 3]} : tensor<2x3xf32>
          %c = slice(%b) {dim = 1, start = 0, end = 3, step = 1} : tensor<2x3xf32>
          %d = pad(%c) {pads = [0, 0], value = 0.0} : tensor<2x3xf32>
          %e = concat(%d) {dim = 0} : tensor<2x3xf32>
          %f = clamp(%e) {min = -inf, max = none} : tensor<2x3xf32>
          %g = permute(%f) {perm = [0, 1]} : tensor<2x3xf32>
          return %g
        }
    """)
    out = canonicalize(g)
    assert ops(out) == []
    assert out.outputs[0] is out.inputs[0]


def test_real_data_movement_stays():
    g = graph("""
        graph @"t"(%x: tensor<2x3xf32>) -> (tensor<2x2xf32>) {
          %a = slice(%x) {dim = 1, start = 0, end = 2, step = 1} : tensor<2x2xf32>
          %b = clamp(%a) {min = 0.0, max = none} : tensor<2x2xf32>
          return %b
        }
    """)
    assert ops(canonicalize(g)) == ["slice", "clamp"]


def test_multiply_by_one_and_add_zero_vanish_unless_they_broadcast():
    g = graph(
        """
        graph @"t"(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<4x2x3xf32>) {
          %one = const @"one" : tensor<f32>
          %zeros = const @"zeros" : tensor<1x3xf32>
          %big = const @"big" : tensor<4x1x1xf32>
          %a = mul(%one, %x) : tensor<2x3xf32>
          %b = add(%a, %zeros) : tensor<2x3xf32>
          %c = div(%b, %one) : tensor<2x3xf32>
          %d = sub(%c, %zeros) : tensor<2x3xf32>
          %e = add(%d, %big) : tensor<4x2x3xf32>
          return %d, %e
        }
        """,
        one=torch.tensor(1.0), zeros=torch.zeros(1, 3), big=torch.zeros(4, 1, 1),
    )
    out = canonicalize(g)
    assert ops(out) == ["add"]
    assert out.outputs[0] is out.inputs[0]
    assert_same_function(g, out)


def test_div_of_one_by_x_is_not_an_identity():
    g = graph("""
        graph @"t"(%x: tensor<3xf32>) -> (tensor<3xf32>) {
          %one = const @"one" : tensor<f32>
          %a = div(%one, %x) : tensor<3xf32>
          return %a
        }
    """, one=torch.tensor(1.0))
    assert ops(canonicalize(g)) == ["div"]


def test_addmm_form_becomes_linear_with_the_original_weight():
    w, b = torch.randn(5, 4), torch.randn(5)
    g = graph(
        """
        graph @"t"(%x: tensor<2x4xf32>) -> (tensor<2x5xf32>) {
          %w = const @"fc.weight" : tensor<5x4xf32>
          %b = const @"fc.bias" : tensor<5xf32>
          %wt = permute(%w) {perm = [1, 0]} : tensor<4x5xf32>
          %mm = matmul(%x, %wt) : tensor<2x5xf32>
          %y = add(%mm, %b) : tensor<2x5xf32>
          return %y
        }
        """,
        fc__weight=w, fc__bias=b,
    )
    out = canonicalize(g)
    expected = textwrap.dedent("""\
        graph @"t"(%x: tensor<2x4xf32>) -> (tensor<2x5xf32>) {
          %w = const @"fc.weight" : tensor<5x4xf32>
          %b = const @"fc.bias" : tensor<5xf32>
          %y = linear(%x, %w, %b) : tensor<2x5xf32>
          return %y
        }
    """)
    assert print_graph(out) == expected
    assert_same_function(g, out)


def test_matmul_by_a_constant_kn_weight_gets_a_transposed_constant():
    g = graph(
        """
        graph @"t"(%x: tensor<3x2x4xf32>) -> (tensor<3x2x5xf32>) {
          %w = const @"proj" : tensor<4x5xf32>
          %b = const @"bias" : tensor<1x1x5xf32>
          %mm = matmul(%x, %w) : tensor<3x2x5xf32>
          %y = add(%b, %mm) : tensor<3x2x5xf32>
          return %y
        }
        """,
        proj=torch.randn(4, 5), bias=torch.randn(1, 1, 5),
    )
    out = canonicalize(g)
    assert ops(out) == ["linear"]
    lin = next(n for n in out.nodes if n.op == "linear")
    assert len(lin.inputs) == 3 and lin.inputs[1].type.shape == (5, 4) and lin.inputs[2].type.shape == (5,)
    assert_same_function(g, out)


def test_bias_is_not_folded_into_a_matmul_with_other_users():
    g = graph(
        """
        graph @"t"(%x: tensor<2x4xf32>) -> (tensor<2x5xf32>, tensor<2x5xf32>) {
          %w = const @"w" : tensor<4x5xf32>
          %b = const @"b" : tensor<5xf32>
          %mm = matmul(%x, %w) : tensor<2x5xf32>
          %y = add(%mm, %b) : tensor<2x5xf32>
          return %y, %mm
        }
        """,
        w=torch.randn(4, 5), b=torch.randn(5),
    )
    out = canonicalize(g)
    assert ops(out) == ["linear", "add"]
    assert len(out.nodes[-1].inputs) == 2
    assert_same_function(g, out)


def test_matmul_of_two_activations_stays():
    g = graph("""
        graph @"t"(%x: tensor<2x4xf32>, %y: tensor<4x5xf32>) -> (tensor<2x5xf32>) {
          %mm = matmul(%x, %y) : tensor<2x5xf32>
          return %mm
        }
    """)
    assert ops(canonicalize(g)) == ["matmul"]
