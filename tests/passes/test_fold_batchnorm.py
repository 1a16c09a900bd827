"""fold_batchnorm: batch norms fold into conv/linear weights, or become a multiply-add."""

from __future__ import annotations

import torch

from npuc.passes import fold_batchnorm
from passlib import assert_same_function, graph, ops


def bn_params(c: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "bn__weight": torch.rand(c, generator=g) + 0.5,
        "bn__bias": torch.randn(c, generator=g),
        "bn__running_mean": torch.randn(c, generator=g),
        "bn__running_var": torch.rand(c, generator=g) + 0.1,
    }


BN = """
          %g = const @"bn.weight" : tensor<4xf32>
          %be = const @"bn.bias" : tensor<4xf32>
          %m = const @"bn.running_mean" : tensor<4xf32>
          %v = const @"bn.running_var" : tensor<4xf32>
"""


def test_conv_then_batch_norm_folds_into_the_conv():
    g = graph(
        """
        graph @"t"(%x: tensor<1x3x6x6xf32>) -> (tensor<1x4x6x6xf32>) {
          %w = const @"conv.weight" : tensor<4x3x3x3xf32>
          %c = conv2d(%x, %w) {stride = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1} : tensor<1x4x6x6xf32>
        """ + BN + """
          %y = batch_norm(%c, %g, %be, %m, %v) {eps = 0.001} : tensor<1x4x6x6xf32>
          return %y
        }
        """,
        conv__weight=torch.randn(4, 3, 3, 3), **bn_params(4),
    )
    out = fold_batchnorm(g)
    assert ops(out) == ["conv2d"]
    conv = next(n for n in out.nodes if n.op == "conv2d")
    assert len(conv.inputs) == 3
    assert conv.attrs.padding == (1, 1)
    assert sorted(out.constants) == ["conv.bias.bn_folded", "conv.weight.bn_folded"]
    assert_same_function(g, out)


def test_linear_then_batch_norm_folds_into_the_linear():
    g = graph(
        """
        graph @"t"(%x: tensor<2x5xf32>) -> (tensor<2x4xf32>) {
          %w = const @"fc.weight" : tensor<4x5xf32>
          %b = const @"fc.bias" : tensor<4xf32>
          %l = linear(%x, %w, %b) : tensor<2x4xf32>
        """ + BN + """
          %y = batch_norm(%l, %g, %be, %m, %v) {eps = 1e-05} : tensor<2x4xf32>
          return %y
        }
        """,
        fc__weight=torch.randn(4, 5), fc__bias=torch.randn(4), **bn_params(4),
    )
    out = fold_batchnorm(g)
    assert ops(out) == ["linear"]
    assert_same_function(g, out)


def test_conv_with_another_user_keeps_its_weights_and_the_norm_becomes_mul_add():
    g = graph(
        """
        graph @"t"(%x: tensor<1x3x6x6xf32>) -> (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) {
          %w = const @"conv.weight" : tensor<4x3x3x3xf32>
          %c = conv2d(%x, %w) {stride = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1} : tensor<1x4x6x6xf32>
        """ + BN + """
          %y = batch_norm(%c, %g, %be, %m, %v) {eps = 1e-05} : tensor<1x4x6x6xf32>
          return %y, %c
        }
        """,
        conv__weight=torch.randn(4, 3, 3, 3), **bn_params(4),
    )
    out = fold_batchnorm(g)
    assert ops(out) == ["conv2d", "mul", "add"]
    assert "conv.weight" in out.constants
    scale = next(n for n in out.nodes if n.op == "const" and n.attrs.name == "bn.bn_scale")
    assert scale.outputs[0].type.shape == (4, 1, 1)
    assert_same_function(g, out)


def test_lone_batch_norm_on_an_input_becomes_mul_add():
    g = graph(
        """
        graph @"t"(%x: tensor<2x4x3xf32>) -> (tensor<2x4x3xf32>) {
        """ + BN + """
          %y = batch_norm(%x, %g, %be, %m, %v) {eps = 1e-05} : tensor<2x4x3xf32>
          return %y
        }
        """,
        **bn_params(4),
    )
    out = fold_batchnorm(g)
    assert ops(out) == ["mul", "add"]
    assert_same_function(g, out)


def test_batch_norm_with_run_time_statistics_stays():
    g = graph(
        """
        graph @"t"(%x: tensor<2x4xf32>, %var: tensor<4xf32>) -> (tensor<2x4xf32>) {
          %g = const @"bn.weight" : tensor<4xf32>
          %be = const @"bn.bias" : tensor<4xf32>
          %m = const @"bn.running_mean" : tensor<4xf32>
          %y = batch_norm(%x, %g, %be, %m, %var) {eps = 1e-05} : tensor<2x4xf32>
          return %y
        }
        """,
        **{k: v for k, v in bn_params(4).items() if k != "bn__running_var"},
    )
    assert ops(fold_batchnorm(g)) == ["batch_norm"]
