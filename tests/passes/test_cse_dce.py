"""cse merges repeated computations and bit-identical constants; dce drops what nothing reads."""

from __future__ import annotations

import torch

from npuc.ir import print_graph
from npuc.passes import cse, dce
from passlib import assert_same_function, graph, ops


def test_repeated_computations_merge_into_the_first():
    g = graph("""
        graph @"t"(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
          %a = relu(%x) : tensor<2x3xf32>
          %b = relu(%x) : tensor<2x3xf32>
          %c = add(%a, %b) : tensor<2x3xf32>
          %d = add(%a, %b) : tensor<2x3xf32>
          %e = mul(%c, %d) : tensor<2x3xf32>
          return %e
        }
    """)
    out = cse(g)
    assert ops(out) == ["relu", "add", "mul"]
    relu, add, mul = (n for n in out.nodes)
    assert relu.outputs[0].name == "a" and add.outputs[0].name == "c"
    assert add.inputs == (relu.outputs[0], relu.outputs[0])
    assert mul.inputs == (add.outputs[0], add.outputs[0])
    assert_same_function(g, out)


def test_different_attributes_or_operand_order_do_not_merge():
    g = graph("""
        graph @"t"(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<6xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
          %a = reshape(%x) {shape = [3, 2]} : tensor<3x2xf32>
          %b = reshape(%x) {shape = [6]} : tensor<6xf32>
          %c = sub(%x, %y) : tensor<2x3xf32>
          %d = sub(%y, %x) : tensor<2x3xf32>
          return %a, %b, %c, %d
        }
    """)
    assert ops(cse(g)) == ["reshape", "reshape", "sub", "sub"]


def test_bit_identical_constants_merge_whatever_their_names():
    g = graph(
        """
        graph @"t"(%x: tensor<3xf32>) -> (tensor<3xf32>) {
          %p = const @"p" : tensor<3xf32>
          %q = const @"q" : tensor<3xf32>
          %z = const @"z" : tensor<3xf32>
          %nz = const @"nz" : tensor<3xf32>
          %a = add(%x, %p) : tensor<3xf32>
          %b = add(%x, %q) : tensor<3xf32>
          %c = mul(%a, %b) : tensor<3xf32>
          %d = add(%c, %z) : tensor<3xf32>
          %e = add(%d, %nz) : tensor<3xf32>
          return %e
        }
        """,
        p=torch.tensor([1.0, 2.0, 3.0]), q=torch.tensor([1.0, 2.0, 3.0]),
        z=torch.zeros(3), nz=-torch.zeros(3),
    )
    out = cse(g)
    assert sorted(out.constants) == ["nz", "p", "z"]  # 0.0 and -0.0 differ in bits
    assert ops(out) == ["add", "mul", "add", "add"]
    assert_same_function(g, out)


def test_cse_is_deterministic():
    text = """
        graph @"t"(%x: tensor<4xf32>) -> (tensor<4xf32>) {
          %c1 = const @"c1" : tensor<4xf32>
          %c2 = const @"c2" : tensor<4xf32>
          %a = add(%x, %c1) : tensor<4xf32>
          %b = add(%x, %c2) : tensor<4xf32>
          %m = mul(%a, %b) : tensor<4xf32>
          return %m
        }
    """
    t = torch.arange(4.0)
    first = print_graph(cse(graph(text, c1=t, c2=t.clone())))
    assert all(print_graph(cse(graph(text, c1=t, c2=t.clone()))) == first for _ in range(3))


def test_dce_drops_dead_nodes_and_their_constants():
    g = graph(
        """
        graph @"t"(%x: tensor<3xf32>) -> (tensor<3xf32>) {
          %w = const @"unused" : tensor<3xf32>
          %k = const @"kept" : tensor<3xf32>
          %dead = mul(%x, %w) : tensor<3xf32>
          %dead2 = exp(%dead) : tensor<3xf32>
          %y = add(%x, %k) : tensor<3xf32>
          return %y
        }
        """,
        unused=torch.ones(3), kept=torch.ones(3),
    )
    out = dce(g)
    assert ops(out) == ["add"]
    assert list(out.constants) == ["kept"]
    assert dce(out) is out
    assert_same_function(g, out)
