"""Definitions in one place: the op sets, ISA limits, lane costs and dataflow spellings that later
stages use are derived from their definitions; each derived table is checked against its intent."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import npuc
from npuc.codegen import epilogue as epi
from npuc.ir.opdef import Trait, all_ops, get_op, ops_with
from npuc.isa.enums import Dataflow, DType, UnOp
from npuc.isa.instr import all_defs, get_def
from npuc.kir.kernel import BINARY_EPILOGUE_OPS, COMMUTATIVE_EPILOGUE_OPS, KERNEL_KINDS, UNARY_EPILOGUE_OPS, EpilogueOp
from npuc.kir.tensor import DramTensor
from npuc.lower.fusion import PRODUCERS
from npuc.lower.layout import IMAGE_CONSUMERS, IMAGE_PRESERVING, IMAGE_PRODUCERS
from npuc.lower.rules import RULES, VIEW_OPS
from npuc.targets import load_target

MID = load_target("npu-mid")


def _epilogue_step(op: str) -> EpilogueOp:
    params = {"gelu": (("approximate", "tanh"),), "clamp": (("min", 0.0), ("max", 6.0))}.get(op, ())
    return EpilogueOp(op, params=params)


# ----------------------------------------------------------------------------- op traits


def test_arity_traits_match_the_operand_counts():
    for op in all_ops():
        if op.has(Trait.UNARY):
            assert op.max_inputs == 1, op.name
        if op.has(Trait.BINARY) or op.has(Trait.COMMUTATIVE):
            assert op.has(Trait.BINARY) and op.min_inputs == op.max_inputs == 2, op.name
        if op.category == "elementwise" and op.max_inputs in (1, 2):
            assert op.has(Trait.UNARY) or op.has(Trait.BINARY), op.name


@pytest.mark.parametrize("op", sorted(UNARY_EPILOGUE_OPS))
def test_every_unary_epilogue_op_is_lowered_accepted_and_has_a_vector_op(op):
    assert op in RULES
    assert epi.epilogue_supports((_epilogue_step(op),), DType.fp16, MID) is None
    assert op in UnOp.__members__  # the VUN op that computes it (gelu: also gelu_tanh)
    assert epi.epilogue_lane_ops((EpilogueOp(op),)) == UnOp[op].lane_ops


@pytest.mark.parametrize("op", sorted(BINARY_EPILOGUE_OPS))
def test_every_binary_epilogue_op_is_lowered_and_accepted_with_an_operand_or_a_scalar(op):
    assert op in RULES
    t = DramTensor("b", (1, 4), DType.fp16)
    assert epi.epilogue_supports((EpilogueOp(op, operand=t),), DType.fp16, MID) is None
    assert epi.epilogue_supports((EpilogueOp(op, scalar=2.0),), DType.fp16, MID) is None
    assert "exactly one" in epi.epilogue_supports((EpilogueOp(op),), DType.fp16, MID)


def test_the_epilogue_ops_are_the_float_vector_ops_of_the_registry():
    assert UNARY_EPILOGUE_OPS == {"relu", "clamp", "sigmoid", "tanh", "silu", "gelu", "hardswish", "hardsigmoid",
                                  "exp", "neg", "abs", "sqrt", "rsqrt", "reciprocal", "log", "log1p"}
    assert BINARY_EPILOGUE_OPS == {"add", "sub", "mul", "div", "maximum", "minimum"}
    assert not (UNARY_EPILOGUE_OPS | BINARY_EPILOGUE_OPS) - ops_with(Trait.IMAGE_PRESERVING)


@pytest.mark.parametrize("op", sorted(ops_with(Trait.BINARY) - ops_with(Trait.COMMUTATIVE) | COMMUTATIVE_EPILOGUE_OPS))
def test_commutative_means_the_reference_is_symmetric(op):
    opdef = get_op(op)
    if opdef.category != "elementwise":
        pytest.skip("quantized ops need operand types")
    torch.manual_seed(0)
    a, b = torch.rand(3, 4) + 0.5, torch.rand(3, 4) + 0.5
    attrs = opdef.attrs()
    ab, ba = opdef.reference([a, b], attrs)[0], opdef.reference([b, a], attrs)[0]
    assert torch.equal(ab, ba) == opdef.has(Trait.COMMUTATIVE)


def test_image_traits():
    assert IMAGE_CONSUMERS == {"conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "upsample_nearest2d",
                               "conv_transpose2d",
                               "qconv2d", "qconv_transpose2d", "qavg_pool2d"}
    assert IMAGE_PRODUCERS == IMAGE_CONSUMERS | {"batch_norm"}
    for op in all_ops():  # an elementwise result keeps the layout unless it is bool
        if op.category == "elementwise" and op.has(Trait.UNARY) | op.has(Trait.BINARY):
            bool_result = op.name in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not")
            assert (op.name in IMAGE_PRESERVING) != bool_result, op.name


def test_views_are_the_shape_ops_that_move_no_data_and_float_casts():
    assert VIEW_OPS == {"reshape", "permute", "expand", "slice", "select", "cast"}
    assert all(get_op(o).category == "shape" for o in VIEW_OPS - {"cast"})


def test_transcendental_ops_cost_more_on_the_host():
    from npuc.frontend import import_graph
    from npuc.lower.cpu_cost import node_flops

    g = import_graph(torch.nn.Sequential(torch.nn.Tanh(), torch.nn.ReLU()).eval(), (torch.randn(1, 64),))
    flops = {n.op: node_flops(n) for n in g.nodes}
    assert "tanh" in ops_with(Trait.TRANSCENDENTAL) and "relu" not in ops_with(Trait.TRANSCENDENTAL)
    assert flops["tanh"] == 10 * flops["relu"]


def test_kernel_kind_tables():
    assert PRODUCERS == {"conv2d", "gemm", "depthwise_conv2d", "eltwise"}
    assert {k for k, d in KERNEL_KINDS.items() if d.counts_macs} == {"conv2d", "gemm", "depthwise_conv2d"}


# ----------------------------------------------------------------------------- ISA limits


def _fields(pred):
    return [(d.name, f) for d in all_defs() for f in d.fields if pred(f.name)]


def test_count_limit_is_every_count_field():
    counts = _fields(lambda n: n in ("n0", "n1", "n2", "c", "ow", "oh", "k", "n", "m", "m0", "m1"))
    assert counts and {f.max_value for _, f in counts} == {epi.MAX_COUNT} == {65535}


def test_stride_limits_are_the_fields_they_split_for():
    vector = {d.name for d in all_defs() if d.queue == get_def("VBIN").queue and d.name.startswith("V")}
    inner = [f for d, f in _fields(lambda n: n.endswith("_s0") and n != "dram_s0") if d in vector]
    outer = [f for d, f in _fields(lambda n: n.endswith("_s1") and n != "dram_s1")]
    assert {f.max_value for f in inner} == {epi.MAX_VEC_S0}
    assert {f.max_value for f in outer} | {get_def("DMA_LOAD").field("local_s2").max_value} == {epi.MAX_S1}
    assert epi.MAX_DRAM_S0 == get_def("DMA_STORE").field("dram_s0").max_value == (1 << 20) - 1
    assert epi.MAX_DRAM_S == get_def("DMA_STORE").field("dram_s2").max_value == (1 << 32) - 1


def test_lane_costs_are_the_isa_s():
    assert epi.epilogue_lane_ops((EpilogueOp("gelu", params=(("approximate", "tanh"),)),)) == UnOp.gelu_tanh.lane_ops
    assert epi.epilogue_lane_ops((EpilogueOp("div", scalar=2.0),)) == 1 + UnOp.reciprocal.lane_ops
    assert epi.epilogue_lane_ops((EpilogueOp("sub", scalar=2.0, operand_first=True),)) == 1 + UnOp.neg.lane_ops


# ----------------------------------------------------------------------------- dataflows


def test_one_spelling_per_dataflow():
    """No string in npuc's code spells a dataflow but npuc.isa.enums.Dataflow itself."""
    spellings = {"ws", "os", "weight_stationary", "output_stationary", "weight-stationary", "output-stationary"}
    root = Path(npuc.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path == root / "isa" / "enums.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in spellings:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.value!r}")
    assert not found, "dataflow spelled outside Dataflow:\n" + "\n".join(found)


def test_targets_hold_dataflow_members():
    for name in ("npu-small", "npu-mid", "npu-large"):
        t = load_target(name)
        assert t.array.dataflows and all(isinstance(d, Dataflow) for d in t.array.dataflows)
    assert [d.short for d in Dataflow] == ["ws", "os"]
