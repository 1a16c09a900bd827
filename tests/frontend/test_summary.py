"""graph_summary: per-node rows and totals, with exact MACs for conv2d, linear and matmul."""

from __future__ import annotations

import torch

from npuc.frontend.summary import graph_summary, node_macs
from npuc.ir import parse_graph

TEXT = """
graph @"t"(%x: tensor<2x3x8x8xf32>, %q: tensor<2x5x7xf32>, %k: tensor<2x7x4xf32>) -> (tensor<2x10xf32>, tensor<2x5x4xf32>) {
  %w = const @"conv.weight" : tensor<6x1x3x3xf32>
  %b = const @"conv.bias" : tensor<6xf32>
  %c = conv2d(%x, %w, %b) {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 3} : tensor<2x6x4x4xf32>
  %r = relu(%c) : tensor<2x6x4x4xf32>
  %f = reshape(%r) {shape = [2, 96]} : tensor<2x96xf32>
  %fw = const @"fc.weight" : tensor<10x96xf32>
  %y = linear(%f, %fw) : tensor<2x10xf32>
  %m = matmul(%q, %k) : tensor<2x5x4xf32>
  return %y, %m
}
"""


def sample():
    return parse_graph(TEXT, {
        "conv.weight": torch.zeros(6, 1, 3, 3), "conv.bias": torch.zeros(6), "fc.weight": torch.zeros(10, 96),
    })


def test_rows_and_exact_macs():
    rows, totals = graph_summary(sample())
    assert [r.op for r in rows] == ["conv2d", "relu", "reshape", "linear", "matmul"]
    by_op = {r.op: r for r in rows}
    # conv: 2*6*4*4 outputs, each (3/3 input channels) * 3 * 3 MACs
    assert by_op["conv2d"].macs == 2 * 6 * 4 * 4 * 1 * 3 * 3
    assert by_op["conv2d"].params == 6 * 9 + 6
    assert by_op["conv2d"].shape == "2x6x4x4"
    assert by_op["linear"].macs == 2 * 10 * 96 and by_op["linear"].params == 960
    assert by_op["matmul"].macs == 2 * 5 * 4 * 7 and by_op["matmul"].params == 0
    assert by_op["relu"].macs == 0
    assert totals.nodes == 5
    assert totals.params == 54 + 6 + 960
    assert totals.macs == sum(r.macs for r in rows)
    assert totals.op_counts == {"conv2d": 1, "linear": 1, "matmul": 1, "relu": 1, "reshape": 1}


def test_non_compute_nodes_have_no_macs():
    g = sample()
    assert all(node_macs(n) == 0 for n in g.nodes if n.op in ("const", "relu", "reshape"))
