"""The kernel-level IR's verifier: lowered models pass; each kind of malformed kernel is named."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
import torch

import npuc
from npuc.errors import VerifyError
from npuc.isa.enums import DType
from npuc.kir.kernel import KERNEL_KINDS, EpilogueOp, SoftmaxAttrs
from npuc.kir.program import NpuSegment
from npuc.kir.verify import verify_lowered

from kirlib import MODELS
from lowerlib import SmallCnn, seeded


@pytest.mark.parametrize("model", sorted(MODELS))
def test_lowered_models_are_well_formed(model):
    m = MODELS[model]()
    assert verify_lowered(m) is m


def _with_kernel(m, index, **changes):
    """``m`` with field changes to its ``index``-th kernel (in program order)."""
    segs, n = [], 0
    for s in m.segments:
        if isinstance(s, NpuSegment):
            ks = list(s.kernels)
            for i, lk in enumerate(ks):
                if n == index:
                    ks[i] = replace(lk, kernel=replace(lk.kernel, **changes))
                n += 1
            s = replace(s, kernels=tuple(ks))
        segs.append(s)
    return replace(m, segments=tuple(segs))


def _first(m, pred):
    return next(i for i, lk in enumerate(m.kernels()) if pred(lk.kernel))


def _fails(m, message):
    with pytest.raises(VerifyError) as e:
        verify_lowered(m)
    assert message in str(e.value)


def test_unknown_kind_and_wrong_attributes():
    m = MODELS["cnn_fp16"]()
    _fails(_with_kernel(m, 0, kind="warp"), "'warp' is not a kernel kind")
    pool = _first(m, lambda k: k.kind == "pool2d")
    _fails(_with_kernel(m, pool, attrs=SoftmaxAttrs(1)), "a pool2d kernel takes PoolAttrs attributes, not SoftmaxAttrs")
    _fails(_with_kernel(m, pool, attrs=None), "takes PoolAttrs attributes, not none")


def test_reading_before_writing():
    m = MODELS["cnn_fp16"]()
    (seg,) = [s for s in m.segments if isinstance(s, NpuSegment)]
    swapped = replace(seg, kernels=(seg.kernels[1], seg.kernels[0]) + seg.kernels[2:])
    _fails(replace(m, segments=(swapped,)), "before any kernel writes it")


def test_tensors_outside_their_buffer_or_nameless():
    m = MODELS["cnn_fp16"]()
    out = m.kernels()[0].kernel.output
    _fails(_with_kernel(m, 0, output=out.at(out.addr + 64)), "reaches outside its")
    _fails(_with_kernel(m, 0, output=replace(out, name="nowhere")), "names no buffer")


def test_outputs_written_once_in_the_kernel_type():
    m = MODELS["cnn_fp16"]()
    out = m.kernels()[0].kernel.output
    _fails(_with_kernel(m, 0, output=replace(out, strides=out.strides[:1] + (0,) + out.strides[2:])), "repeats elements")
    _fails(_with_kernel(m, 0, dtype=DType.fp32), "writes fp16 into")
    x = m.kernels()[0].kernel.inputs[0]
    _fails(_with_kernel(m, 0, inputs=(replace(x, dtype=DType.int8),) + m.kernels()[0].kernel.inputs[1:]),
           "reads int8 x but computes in fp16")


def test_epilogue_steps():
    m = MODELS["cnn_fp16"]()
    i = _first(m, lambda k: any(e.operand is not None for e in k.epilogue))
    k = m.kernels()[i].kernel
    bias = next(e.operand for e in k.epilogue if e.operand is not None)
    _fails(_with_kernel(m, i, epilogue=(EpilogueOp("relu", operand=bias),)), "unary epilogue step 'relu' takes no operand")
    _fails(_with_kernel(m, i, epilogue=(EpilogueOp("add"),)), "needs exactly one operand or scalar")
    _fails(_with_kernel(m, i, epilogue=(EpilogueOp("conv2d", scalar=1.0),)), "is not an elementwise op that fuses")
    _fails(_with_kernel(m, i, epilogue=(EpilogueOp("frobnicate"),)), "'frobnicate' is not an elementwise op that fuses")
    wide = replace(bias, shape=(1, 3, 1, 1))
    _fails(_with_kernel(m, i, epilogue=(EpilogueOp("add", operand=wide),)), "does not broadcast")


def test_int8_kernels_carry_their_quant_record():
    m = MODELS["cnn_int8"]()
    i = _first(m, lambda k: k.quant is not None)
    _fails(_with_kernel(m, i, quant=None), "needs its quant record")


def test_every_registered_implementation_is_a_known_kind():
    from npuc.codegen.kernel import kernel_kinds

    assert sorted(KERNEL_KINDS) == kernel_kinds()


def test_the_stage_runner_prints_and_verifies_the_kernel_ir():
    out = io.StringIO()
    npuc.compile(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),), "npu-mid", print_after=["fuse"], out=out)
    text = out.getvalue()
    assert "IR after fuse" in text and "npu segment" in text and 'kernel "stem" = conv2d[fp16]' in text
    seg_text = text[text.index("npu segment"):]
    from npuc.kir.text import parse_segment

    assert parse_segment(seg_text[: seg_text.index("\n}\n") + 3]).kernels
