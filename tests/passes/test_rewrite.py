"""The rewrite helper: callbacks see rewritten operands, kept values keep names, dead nodes go."""

from __future__ import annotations

import pytest
import torch

from npuc.ir.rewrite import count_users, prune_dead, rewrite
from passlib import assert_same_function, graph, ops

TEXT = """
    graph @"t"(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
      %w = const @"w" : tensor<3xf32>
      %a = relu(%x) : tensor<2x3xf32>
      %b = add(%a, %w) : tensor<2x3xf32>
      %c = relu(%b) : tensor<2x3xf32>
      return %c
    }
"""


def relu_to_clamp(node, rw):
    if node.op == "relu":
        return rw.add("clamp", node.inputs, min=0.0, max=None)
    return None


def test_keeping_every_node_rebuilds_an_equal_graph():
    g = graph(TEXT, w=torch.ones(3))
    out = rewrite(g, lambda n, rw: None)
    assert str(out) == str(g)
    assert out is not g and out.inputs[0] is not g.inputs[0]
    assert g.nodes[0].outputs[0] is out.nodes[0].outputs[0]  # kept values are shared, not copied


def test_replacements_take_fresh_names_and_users_follow():
    g = graph(TEXT, w=torch.ones(3))
    out = rewrite(g, relu_to_clamp)
    assert ops(out) == ["clamp", "add", "clamp"]
    add = next(n for n in out.nodes if n.op == "add")
    assert add.outputs[0].name == "b"
    assert add.inputs[0] is out.nodes[1].outputs[0] and out.nodes[1].op == "clamp"
    assert_same_function(g, out)
    assert len({v.name for n in out.nodes for v in n.outputs}) == len(out.nodes)


def test_callback_sees_operands_after_rewriting():
    g = graph("""
        graph @"t"(%x: tensor<4xf32>) -> (tensor<4xf32>) {
          %a = neg(%x) : tensor<4xf32>
          %b = neg(%a) : tensor<4xf32>
          %c = neg(%b) : tensor<4xf32>
          %d = neg(%c) : tensor<4xf32>
          return %d
        }
    """)

    def cancel(node, rw):
        p = rw.producer(node.inputs[0])
        if node.op == "neg" and p is not None and p.op == "neg":
            return p.inputs[0]
        return None

    out = rewrite(g, cancel)
    assert ops(out) == []  # neg(neg(neg(neg(x)))) -> x in one walk
    assert out.outputs[0] is out.inputs[0]


def test_constants_made_in_a_rewrite_get_unique_names():
    g = graph(TEXT, w=torch.ones(3))

    def add_const(node, rw):
        if node.op == "add":
            c = rw.constant("w", torch.full((3,), 2.0))
            assert rw.const(c) is not None and float(rw.const(c)[0]) == 2.0
            return rw.add("add", (node.inputs[0], c))
        return None

    out = rewrite(g, add_const)
    assert list(out.constants) == ["w_1"]
    assert float(out.constants["w_1"][0]) == 2.0


def test_num_users_counts_source_uses_and_outputs():
    g = graph("""
        graph @"t"(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
          %a = exp(%x) : tensor<3xf32>
          %b = add(%a, %a) : tensor<3xf32>
          return %b, %a
        }
    """)
    seen = {}

    def look(node, rw):
        seen[node.op] = rw.num_users(node.inputs[0])
        return None

    rewrite(g, look)
    assert seen == {"exp": 1, "add": 3}
    counts = count_users(g)
    assert counts[g.inputs[0]] == 1


def test_wrong_number_of_replacements_is_a_bug_report():
    g = graph(TEXT, w=torch.ones(3))
    with pytest.raises(ValueError, match="returned 2 values for 1 results"):
        rewrite(g, lambda n, rw: (n.inputs[0], n.inputs[0]) if n.op == "relu" else None)


def test_prune_dead_keeps_live_nodes_in_order():
    g = graph("""
        graph @"t"(%x: tensor<3xf32>) -> (tensor<3xf32>) {
          %a = exp(%x) : tensor<3xf32>
          %b = neg(%x) : tensor<3xf32>
          %c = sin(%a) : tensor<3xf32>
          return %c
        }
    """)
    assert ops(prune_dead(g)) == ["exp", "sin"]
