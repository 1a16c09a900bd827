"""fold_constants: all-constant nodes become constants, within a size cap."""

from __future__ import annotations

import logging

import torch

from npuc.passes import fold_constants
from npuc.passes.fold_constants import SIZE_CAP_BYTES
from passlib import assert_same_function, graph, ops


def test_constant_subgraph_folds_into_one_constant():
    a, b = torch.randn(2, 3), torch.randn(3)
    g = graph(
        """
        graph @"t"(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
          %a = const @"a" : tensor<2x3xf32>
          %b = const @"b" : tensor<3xf32>
          %s = add(%a, %b) : tensor<2x3xf32>
          %e = exp(%s) : tensor<2x3xf32>
          %y = mul(%x, %e) : tensor<2x3xf32>
          return %y
        }
        """,
        a=a, b=b,
    )
    out = fold_constants(g)
    assert ops(out) == ["mul"]
    (const,) = [n for n in out.nodes if n.op == "const"]
    torch.testing.assert_close(out.constants[const.attrs.name], torch.exp(a + b))
    assert set(out.constants) == {const.attrs.name}
    assert_same_function(g, out)


def test_folded_weight_transpose_is_named_after_the_weight():
    g = graph(
        """
        graph @"t"(%x: tensor<2x4xf32>) -> (tensor<2x5xf32>) {
          %w = const @"fc.weight" : tensor<5x4xf32>
          %wt = permute(%w) {perm = [1, 0]} : tensor<4x5xf32>
          %y = matmul(%x, %wt) : tensor<2x5xf32>
          return %y
        }
        """,
        fc__weight=torch.randn(5, 4),
    )
    out = fold_constants(g)
    assert ops(out) == ["matmul"]
    assert list(out.constants) == ["fc.weight.permute"]
    assert_same_function(g, out)


def test_nodes_reading_an_input_are_not_folded():
    g = graph("""
        graph @"t"(%x: tensor<3xf32>) -> (tensor<3xf32>) {
          %a = const @"a" : tensor<3xf32>
          %y = add(%x, %a) : tensor<3xf32>
          return %y
        }
    """, a=torch.ones(3))
    assert ops(fold_constants(g)) == ["add"]


def test_a_fold_that_would_grow_past_the_cap_is_skipped_and_logged(caplog):
    n = SIZE_CAP_BYTES // 4 + 1024
    g = graph(f"""
        graph @"t"(%x: tensor<1x{n}xf32>) -> (tensor<1x{n}xf32>) {{
          %c = const @"c" : tensor<f32>
          %big = expand(%c) {{shape = [1, {n}]}} : tensor<1x{n}xf32>
          %small = expand(%c) {{shape = [1, 4]}} : tensor<1x4xf32>
          %s = reduce_sum(%small) {{dims = [1], keepdim = true}} : tensor<1x1xf32>
          %y = add(%x, %big) : tensor<1x{n}xf32>
          %z = mul(%y, %s) : tensor<1x{n}xf32>
          return %z
        }}
    """, c=torch.tensor(0.5))
    with caplog.at_level(logging.INFO, logger="npuc.passes.fold_constants"):
        out = fold_constants(g)
    assert ops(out) == ["expand", "add", "mul"]
    assert "not folding expand" in caplog.text
    assert_same_function(g, out)
