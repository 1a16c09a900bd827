"""The numerical debugger: it names a planted fault, and int8 is bit-exact value by value."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

import npuc
from npuc.cli import main
from tests.report.analysislib import tiny_model, write_model_file

RECORD_FIELDS = ("name", "op", "rel_l2", "max_abs", "sqnr_db", "within_tolerance", "loc")


def test_a_float_model_matches_value_by_value():
    model, inputs = tiny_model()
    rep = npuc.debug(model, inputs, target="npu-mid")
    assert rep.first_divergent is None
    names = [r.name for r in rep.layers]
    assert names[:4] == ["stem", "block.expand", "block.dw", "block.project"]  # model order
    assert all(r.compared and r.rel_l2 < 1e-2 for r in rep.layers if r.kind != "copy")
    assert all(getattr(r, f) is not None for r in rep.layers for f in RECORD_FIELDS)
    assert rep.layers[0].loc.startswith("tinynet.py:")


def test_the_debugger_names_the_layer_whose_fp16_output_overflows():
    model, inputs = tiny_model(scale=1e6)
    rep = npuc.debug(model, inputs, target="npu-mid")
    first = rep.first_divergent
    assert first is not None and first.name == "head" and first.op.startswith("conv2d")
    assert math.isinf(first.max_abs) and first.sqnr_db == -math.inf and not first.within_tolerance
    before = [r for r in rep.layers if r.index < first.index]
    assert before and all(r.within_tolerance for r in before)


@pytest.fixture(scope="module")
def int8():
    model, inputs = tiny_model()
    torch.manual_seed(1)
    calib = [(torch.randn(1, 3, 32, 32),) for _ in range(4)]
    return calib, npuc.debug(model, inputs, target="npu-mid", quantize="int8", calibration=calib)


def test_int8_is_bit_exact_value_by_value_and_reports_the_quantization_cost(int8):
    _, rep = int8
    assert rep.first_divergent is None and rep.layers
    compared = [r for r in rep.layers if r.compared]
    assert compared and all(r.max_abs == 0 and r.reference == "integer reference" for r in compared)
    named = {r.name for r in rep.layers}
    assert {"stem", "block.expand", "block.dw", "block.project", "head", "fc"} <= named  # module names, not qconv2d_N
    with_float = [r for r in compared if r.float_sqnr_db is not None]
    assert len(with_float) >= 5 and all(5 < r.float_sqnr_db < 80 for r in with_float)
    alone = [r for r in rep.layers if r.alone_sqnr_db is not None]
    assert len(alone) >= 5 and all(r.alone_sqnr_db > 10 for r in alone)
    assert math.isclose(sum(s for _, _, s, _ in rep.op_noise_share), 1.0)
    assert math.isclose(sum(m for _, _, _, m in rep.op_noise_share), 1.0)
    shares = {op: (s, m) for op, _, s, m in rep.op_noise_share}
    assert all(shares[op][0] >= 0.1 and shares[op][1] <= 0.5 for op in rep.suggested_float_ops)
    worst = rep.costliest_layers(2)
    assert worst[0].alone_sqnr_db == min(r.alone_sqnr_db for r in alone)
    assert rep.outputs[0][1] == 0  # the outputs too: bit-exact
    json.dumps(rep.to_dict(), allow_nan=False)


def test_debug_from_the_cli_prints_the_first_divergent_layer(tmp_path):
    model = write_model_file(tmp_path) + ":build_overflowing"
    out = CliRunner().invoke(main, ["debug", model])
    assert out.exit_code == 0, out.output
    assert "first divergent value:" in out.output and " head (conv2d" in out.output
    d = json.loads(CliRunner().invoke(main, ["debug", model, "--json"]).stdout)
    assert d["first_divergent"]["name"] == "head" and d["first_divergent"]["max_abs"] == "inf"


def test_debug_refuses_an_unknown_quantization():
    model, inputs = tiny_model()
    with pytest.raises(npuc.NpucError, match="quantize must be None or 'int8'"):
        npuc.debug(model, inputs, quantize="int4")


def test_the_suggested_float_ops_recover_accuracy(int8):
    from npuc.debugger.metrics import compare
    from npuc.frontend.quantized import import_quantized
    from npuc.interp import interpret
    from npuc.quant.quantizer import QuantOptions
    from npuc.targets import load_target

    model, inputs = tiny_model()
    calib, rep = int8
    (ref,) = [o.float().numpy() for o in interpret(npuc.import_model(model, inputs), *inputs)]

    def sqnr(float_ops):
        options = QuantOptions(float_ops=QuantOptions().float_ops + tuple(float_ops))
        g = import_quantized(model, inputs, calib, target=load_target("npu-mid"), options=options)
        (out,) = interpret(g, *inputs)
        return compare(out.float().numpy(), ref)[2]

    assert rep.suggested_float_ops
    assert sqnr(rep.suggested_float_ops) > sqnr(()) + 3  # dB
