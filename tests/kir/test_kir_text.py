"""The kernel-level IR's text form: print -> parse gives the same kernels and segments back."""

from __future__ import annotations

import pytest

from npuc.errors import ParseError
from npuc.isa.enums import DType
from npuc.kir.kernel import EpilogueOp, Kernel, PoolAttrs, QuantAttrs
from npuc.kir.program import NpuSegment
from npuc.kir.tensor import DramTensor
from npuc.kir.kernel import qadd_step
from npuc.kir.text import (
    buffer_data,
    graph_constants,
    lowered_equal,
    parse_kernel,
    parse_lowered,
    parse_segment,
    parse_tensor,
    print_kernel,
    print_lowered,
    print_segment,
)

from kirlib import MODELS


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_segment_round_trips(model):
    m = MODELS[model]()
    segs = [s for s in m.segments if isinstance(s, NpuSegment)]
    assert segs and sum(len(s.kernels) for s in segs) >= (2 if model == "with_cpu_segments" else 5)
    for s in segs:
        text = print_segment(s)
        assert parse_segment(text) == s
        assert print_segment(parse_segment(text)) == text
        for lk in s.kernels:
            assert parse_kernel(print_kernel(lk.kernel)) == lk.kernel
            assert parse_kernel(print_kernel(lk)) == lk


def test_the_kinds_the_models_cover():
    kinds = {lk.kernel.kind for f in MODELS.values() for lk in f().kernels()}
    assert {"conv2d", "gemm", "pool2d", "reduce", "softmax", "layernorm"} <= kinds
    assert any(lk.kernel.quant is not None for lk in MODELS["cnn_int8"]().kernels())
    # the int8 CNN's residual qadd runs in its conv's epilogue (a QAddStep record in the text)
    assert any(qadd_step(e) is not None for lk in MODELS["cnn_int8"]().kernels() for e in lk.kernel.epilogue)
    assert any(e.operand is not None for f in MODELS.values() for lk in f().kernels() for e in lk.kernel.epilogue)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_whole_model_round_trips(model):
    m = MODELS[model]()
    text = print_lowered(m)
    back = parse_lowered(text, buffer_data(m), graph_constants(m), m.target)
    assert lowered_equal(back, m)
    assert print_lowered(back) == text
    assert back.homes == m.homes and back.placement == m.placement and back.cpu_ops == m.cpu_ops


def test_a_round_tripped_model_compiles_to_the_same_bytes():
    from npuc.codegen.driver import compile_segment
    from npuc.codegen.memory_plan import plan_memory
    from npuc.codegen.package import build_npub

    def npub(m):
        plan = plan_memory(m)
        codes = tuple(compile_segment(s, m.target) for s in plan.model.segments if isinstance(s, NpuSegment))
        return build_npub(plan, codes, m.name).to_bytes()

    m = MODELS["with_cpu_segments"]()
    back = parse_lowered(print_lowered(m), buffer_data(m), graph_constants(m), m.target)
    assert npub(back) == npub(m)


def test_model_parse_errors():
    m = MODELS["cnn_fp16"]()
    text = print_lowered(m)
    with pytest.raises(ParseError, match="no data given for constant buffer"):
        parse_lowered(text, {}, {}, m.target)
    from npuc.targets import load_target

    with pytest.raises(ParseError, match="lowered for 'npu-mid', not for 'npu-small'"):
        parse_lowered(text, buffer_data(m), {}, load_target("npu-small"))
    with pytest.raises(ParseError, match="unknown line 'colour'"):
        parse_lowered(text + "colour blue\n", buffer_data(m), {}, m.target)


def test_model_text_names_every_buffer_and_kernel():
    m = MODELS["cnn_fp16"]()
    text = print_lowered(m)
    assert text.startswith(f'lowered "{m.name}" for "npu-mid"') and "precision fp16 reason none" in text
    for b in m.buffers:
        assert f'buffer "{b.name}" {b.kind} {b.nbytes}' in text
    for lk in m.kernels():
        assert f'kernel "{lk.name}" = {lk.kernel.kind}[fp16]' in text


def test_a_hand_written_kernel_round_trips():
    x = DramTensor.dense("odd name<1>", (1, 8, 4, 4), DType.int8, 64, (0, 2, 3, 1))
    r = DramTensor("res", (1, 8, 1, 1), DType.int8, 0, (0, 1, 0, 0))
    k = Kernel(
        "pool.0", "pool2d", (x,), DramTensor.dense("y", (1, 8, 2, 2), DType.int8),
        PoolAttrs("avg", (2, 2), (2, 2), divisor_override=None),
        (EpilogueOp("clamp", params=(("min", 0.0), ("max", 6.0))), EpilogueOp("sub", scalar=1.5, operand_first=True),
         EpilogueOp("add", operand=r)),
        DType.int8, ("a", "b"), QuantAttrs(3, -2, 0, 127, (1, 2), (7,)),
    )
    text = print_kernel(k)
    assert '"odd name<1>"<1x8x4x4xint8 @0x40 strides=[128, 1, 32, 8]>' in text
    assert parse_kernel(text) == k


def test_a_rank0_tensor_and_special_floats():
    t = DramTensor("s", (), DType.fp16, 2)
    assert parse_tensor("s<fp16 @0x2 strides=[]>") == t
    k = Kernel("f", "fill", (), t, None, (EpilogueOp("maximum", scalar=float("-inf")),))
    assert parse_kernel(print_kernel(k)) == k


@pytest.mark.parametrize("text, message", [
    ('kernel "k" = eltwise[fp99] {\n  out y<4xfp16 @0x0 strides=[2]>\n}', "line 1: unknown element type 'fp99'"),
    ('kernel "k" = eltwise[fp16] {\n  in x<4xfp16 @0x0 strides=[2]>\n}', "has no 'out' line"),
    ('kernel "k" = pool2d[fp16] {\n  out y<4xfp16 @0x0 strides=[2]>\n  attrs Nope{a = 1}\n}', "line 3: 'Nope' is neither"),
    ('kernel "k" = pool2d[fp16] {\n  out y<4xfp16 @0x0 strides=[2]>\n  attrs PoolAttrs{colour = 1}\n}', "has no field(s) ['colour']"),
    ('kernel "k" = eltwise[fp16] {\n  out y<4x4xfp16 @0x0 strides=[2]>\n}', "has 2 dims but 1 strides"),
    ('kernel "k" = eltwise[fp16] {\n  out y<4xfp16 @0x0 strides=[2]> $\n}', "line 2: unexpected character '$'"),
    ('kernel "k" = eltwise[fp16] {\n  colour y<4xfp16 @0x0 strides=[2]>\n}', "line 2: unknown kernel line 'colour'"),
])
def test_malformed_text_says_where_and_what(text, message):
    with pytest.raises(ParseError) as e:
        parse_kernel(text)
    assert message in str(e.value)
