"""The PT2E flow end to end: QuantOptions through npuc.compile and the CLI, models the user
quantized (NpuQuantizer, ExecuTorch's XNNPACK quantizer, QAT), NpuQuantizer.validate, one
torch.export per int8 compile, the quantize and io_edges stages, missing extras."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

import npuc
from npuc.cli import main
from npuc.errors import MissingExtraError, NpucError, UnsupportedOpError
from npuc.interp import interpret
from npuc.pipeline import run_frontend, run_graph_passes
from npuc.quant.quantizer import NpuQuantizer, QuantOptions

from intlib import image, seeded_small_cnn


def integer_reference(model, x, options=None, calibration=None):
    """npuc's integer reference interpreter on the same quantized graph the compile builds."""
    g = run_graph_passes(run_frontend(model, (x,), quantize=options, calibration=calibration))
    return interpret(g, x)[0]


def converted_reference(converted, x) -> torch.Tensor:
    with torch.no_grad():
        return converted(x)


OPTIONS = [
    QuantOptions(),
    QuantOptions(per_channel=False),
    QuantOptions(symmetric_activations=True),
    QuantOptions(observer="histogram"),
    QuantOptions(float_ops=("add",)),
]


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "per-tensor", "symmetric", "histogram", "float-add"])
def test_each_quant_option_compiles_and_runs_bit_exact(small_cnn, calibration, options):
    x = image(0)
    art = npuc.compile(small_cnn, (x,), quantize=options, calibration=calibration)
    (got,) = art.run(x)
    assert torch.equal(got, integer_reference(small_cnn, x, options, calibration))
    # and close to PyTorch's own quantized reference (a few output steps at most)
    assert (got - small_cnn(x)).abs().max() < 0.25 * small_cnn(x).abs().max() + 0.05
    if options.float_ops == ("add",):
        assert any(o.op == "add" for o in art.report.cpu_ops) or "add" in {
            n.op for n in run_graph_passes(run_frontend(small_cnn, (x,), quantize=options,
                                                        calibration=calibration)).nodes}


def test_quant_options_change_the_quantization(small_cnn, calibration):
    x = image(0)
    binaries = {npuc.compile(small_cnn, (x,), quantize=o, calibration=calibration).to_bytes() for o in OPTIONS[:4]}
    assert len(binaries) == 4


def test_quantize_int8_string_is_the_default_options(small_cnn, calibration):
    x = image(0)
    a = npuc.compile(small_cnn, (x,), quantize="int8", calibration=calibration)
    b = npuc.compile(small_cnn, (x,), quantize=QuantOptions(), calibration=calibration)
    assert a.to_bytes() == b.to_bytes()


def _user_quantized(model, quantizer, calibration, qat=False):
    x = calibration[0][0]
    captured = torch.export.export(model, (x,)).module()
    prepared = (prepare_qat_pt2e if qat else prepare_pt2e)(captured, quantizer)
    with torch.no_grad():
        for (s,) in calibration:
            prepared(s)
    return convert_pt2e(prepared)


def test_model_quantized_by_the_user_with_npu_quantizer_compiles_as_it_is(small_cnn, calibration):
    x = image(0)
    converted = _user_quantized(small_cnn, NpuQuantizer(), calibration)
    art = npuc.compile(converted, (x,))
    (got,) = art.run(x)
    ref = integer_reference(converted, x)
    assert torch.equal(got, ref)
    # the same model quantized by npuc itself gives the same bytes
    own = npuc.compile(small_cnn, (x,), quantize="int8", calibration=calibration, name="m")
    assert npuc.compile(converted, (x,), name="m").to_bytes() == own.to_bytes()
    # within one output quantization step of PyTorch's quantized reference
    assert (got - converted_reference(converted, x)).abs().max() <= 0.05 * converted_reference(converted, x).abs().max() + 1e-6


def test_exported_converted_program_compiles_bit_exact(small_cnn, calibration):
    x = image(0)
    converted = _user_quantized(small_cnn, NpuQuantizer(), calibration)
    ep = torch.export.export(converted, (x,))
    (got,) = npuc.compile(ep).run(x)
    assert torch.equal(got, integer_reference(ep, x))


def test_xnnpack_quantizer_scheme_runs_on_the_npu(small_cnn, calibration):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    x = image(0)
    q = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    converted = _user_quantized(small_cnn, q, calibration)
    art = npuc.compile(converted, (x,))
    assert torch.equal(art.run(x)[0], integer_reference(converted, x))


class _Uint8Quantizer(NpuQuantizer):
    """Activations in uint8: a scheme the NPU cannot run."""

    def annotate(self, model):
        from torchao.quantization.pt2e.observer import MinMaxObserver
        from torchao.quantization.pt2e.quantizer import QuantizationSpec

        import npuc.quant.quantizer as qz

        spec = QuantizationSpec(dtype=torch.uint8, quant_min=0, quant_max=255, qscheme=torch.per_tensor_affine,
                                observer_or_fake_quant_ctr=MinMaxObserver)
        saved = qz.activation_spec
        qz.activation_spec = lambda options: spec
        try:
            return super().annotate(model)
        finally:
            qz.activation_spec = saved

    def validate(self, model):
        return None  # let the program through, to see what the import says


def test_model_quantized_in_a_scheme_the_npu_cannot_run_names_the_node(small_cnn, calibration):
    converted = _user_quantized(small_cnn, _Uint8Quantizer(), calibration)
    with pytest.raises(UnsupportedOpError, match=r"quantize_per_tensor.*FX node %.*uint8.*int8 in \[-128, 127\]"):
        npuc.compile(converted, (image(0),))


def test_validate_refuses_what_the_npu_cannot_run(small_cnn, calibration):
    class Checked(_Uint8Quantizer):
        validate = NpuQuantizer.validate

    x = image(0)
    with pytest.raises(NpucError, match=r"node .*activation quantized to torch.uint8 in \[0, 255\]"):
        prepare_pt2e(torch.export.export(small_cnn, (x,)).module(), Checked())
    # the NPU's own annotation passes
    annotated = NpuQuantizer().annotate(torch.export.export(small_cnn, (x,)).module())
    NpuQuantizer().validate(annotated)


@pytest.mark.zoo  # torchao's convert_pt2e folds QAT batch norms by tracing its patterns: ~45 s
def test_quantization_aware_training_with_the_npu_quantizer(calibration):
    model = seeded_small_cnn().train()
    x = image(0)
    captured = torch.export.export(model, (x,)).module()
    prepared = prepare_qat_pt2e(captured, NpuQuantizer(options=QuantOptions(qat=True)))
    fake_quants = [m for m in prepared.modules() if type(m).__name__ == "FakeQuantize"]
    assert fake_quants  # QAT inserts fake-quantize modules, not observers
    opt = torch.optim.SGD(prepared.parameters(), lr=0.01)
    target = torch.randn(1, 5)
    losses = []
    for (s,) in calibration * 2:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(prepared(s), target)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    from torchao.quantization.pt2e import move_exported_model_to_eval

    move_exported_model_to_eval(prepared)
    converted = convert_pt2e(prepared)
    art = npuc.compile(converted, (x,))
    assert art.cpu_segments == 0, art.report.explain()
    assert torch.equal(art.run(x)[0], integer_reference(converted, x))


def test_already_quantized_model_refuses_quantize_options(small_cnn, calibration):
    converted = _user_quantized(small_cnn, NpuQuantizer(), calibration)
    with pytest.raises(NpucError, match="already quantized"):
        npuc.compile(converted, (image(0),), quantize="int8")


def test_int8_compile_exports_once_and_reports_its_stages(small_cnn, calibration, monkeypatch):
    calls = []
    real = torch.export.export
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: calls.append(1) or real(*a, **k))
    art = npuc.compile(small_cnn, (image(0),), quantize="int8", calibration=calibration)
    assert len(calls) == 1
    names = [n for n, _ in art.report.stage_seconds]
    assert names[:3] == ["export", "quantize", "import"] and "io_edges" in names and names[-1] == "package"
    assert all(s >= 0 for _, s in art.report.stage_seconds)
    assert art.report.code_bytes == sum(len(c) for c in art.npub.code_segments) > 0


def test_quantize_and_io_edges_print_and_dump(small_cnn, calibration, tmp_path):
    import io

    out = io.StringIO()
    npuc.compile(small_cnn, (image(0),), quantize="int8", calibration=calibration,
                 print_after=["quantize", "io_edges"], dump_dir=tmp_path, out=out)
    text = out.getvalue()
    assert "IR after quantize" in text and "quantize_per_tensor" in text
    assert "IR after io_edges" in text and "qconv2d" in text
    names = {p.name for p in tmp_path.iterdir()}
    assert {"00-export.txt", "00-quantize.txt", "00-import.npuir"} <= names
    assert any(n.endswith("-io_edges.npuir") for n in names)


def test_missing_torchao_is_an_error_naming_the_extra(small_cnn, monkeypatch):
    import npuc.extras

    monkeypatch.setitem(sys.modules, "torchao", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'npuc\[quant\]'"):
        npuc.extras.require("torchao")
    with pytest.raises(MissingExtraError, match=r"npuc\[quant\]"):
        npuc.compile(small_cnn, (image(0),), quantize="int8")


def test_cli_quant_flags(tmp_path, small_cnn, calibration):
    x = image(0)
    torch.export.save(torch.export.export(small_cnn, (x,)), tmp_path / "m.pt2")
    np.savez(tmp_path / "cal.npz", np.stack([s[0].numpy() for s in calibration]))
    runner = CliRunner()
    base = ["compile", str(tmp_path / "m.pt2"), "--quantize", "int8", "--calibration-data", str(tmp_path / "cal.npz")]
    r = runner.invoke(main, base + ["-o", str(tmp_path / "a.npub"), "--per-tensor", "--symmetric-activations",
                                    "--observer", "histogram", "--float-ops", "softmax,add"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "stage times: quantize " in flat, flat  # a .pt2 is exported already: no export stage
    opts = QuantOptions(per_channel=False, symmetric_activations=True, observer="histogram", float_ops=("softmax", "add"))
    cal = [(s[0].squeeze(0).unsqueeze(0),) for s in calibration]
    want = npuc.compile(torch.export.load(tmp_path / "m.pt2"), quantize=opts, calibration=cal, name=str(tmp_path / "m.pt2"))
    assert (tmp_path / "a.npub").read_bytes() == want.to_bytes()
    r = runner.invoke(main, ["compile", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "b.npub"), "--per-tensor"])
    assert r.exit_code != 0 and "need --quantize int8" in r.output
