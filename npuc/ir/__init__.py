"""Graph IR: types, values, the op registry, text form and verifier."""

from npuc.ir.graph import Graph, GraphBuilder, Node, Value
from npuc.ir.opdef import ConstAttrs, NoAttrs, OpDef, all_ops, get_op, register
from npuc.ir.text import graphs_equal, parse_graph, parse_type, print_graph
from npuc.ir.types import DType, QuantParams, TensorType
from npuc.ir.verify import verify

__all__ = [
    "ConstAttrs", "DType", "Graph", "GraphBuilder", "NoAttrs", "Node", "OpDef", "QuantParams",
    "TensorType", "Value", "all_ops", "get_op", "graphs_equal", "parse_graph", "parse_type",
    "print_graph", "register", "verify",
]
