"""Regression tests of crashes found from outside (issue 14): each bad input must give an
NpucError that reads as a sentence, never a bare exception from deep inside."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import npuc
from npuc.errors import NpucError
from npuc.report.accuracy import rel_l2


def test_linear_with_a_reduction_longer_than_a_dma_count_compiles_and_matches():
    torch.manual_seed(0)
    m = nn.Linear(65536, 1).eval()
    x = torch.randn(1, 65536)
    art = npuc.compile(m, (x,), target="npu-mid")
    (y,) = art.run(x)
    with torch.no_grad():
        assert rel_l2(y, m(x)) < 1e-2


def test_batch_of_zero_is_refused_at_import():
    with pytest.raises(NpucError, match=r"shape \[0, 3, 8, 8\].*no element"):
        npuc.compile(nn.Conv2d(3, 4, 3).eval(), (torch.randn(0, 3, 8, 8),))


def test_import_model_refuses_unknown_options_and_dynamic_shapes():
    m, x = nn.Linear(4, 4).eval(), torch.randn(2, 4)
    with pytest.raises(NpucError, match="unknown options: frobnicate"):
        npuc.import_model(m, (x,), frobnicate=1)
    batch = torch.export.Dim("batch")
    with pytest.raises(NpucError, match="static shapes"):
        npuc.import_model(m, (x,), dynamic_shapes=({0: batch},))
    assert npuc.import_model(m, x, verify_each=True).inputs  # a bare tensor is one input


def _linear():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()


def test_nan_calibration_data_is_refused():
    x = torch.randn(1, 4)
    with pytest.raises(NpucError, match="NaN or infinity"):
        npuc.compile(_linear(), (x,), quantize="int8", calibration=[(torch.full((1, 4), math.nan),)])


def test_calibration_producing_nan_inside_the_model_is_refused():
    class Log(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(torch.log(x))

    x = torch.rand(1, 4) + 0.5
    with pytest.raises(NpucError, match="not finite"):
        npuc.compile(Log().eval(), (x,), quantize="int8", calibration=[(-torch.ones(1, 4),)])


def test_int8_without_calibration_is_refused_like_the_cli():
    with pytest.raises(NpucError, match="needs calibration samples"):
        npuc.compile(_linear(), (torch.randn(1, 4),), quantize="int8")


def test_exception_in_a_users_build_is_a_sentence(tmp_path):
    from click.testing import CliRunner

    from npuc.cli import main

    f = tmp_path / "m.py"
    f.write_text("import torch\n\ndef build():\n    return torch.nn.Linear(3, 2), (torch.zeros(1, 2) @ torch.zeros(3, 3),)\n")
    for cmd in (["import", f"{f}:build"], ["compile", f"{f}:build", "-o", str(tmp_path / "m.npub")]):
        out = CliRunner().invoke(main, cmd)
        assert out.exit_code == 1, out.output
        assert "Traceback" not in out.output and out.exception is None or isinstance(out.exception, SystemExit)
        assert "build() of model file" in out.output and "RuntimeError" in out.output and "m.py:4" in out.output


def test_int8_mean_over_every_dim_is_a_scalar():
    # found by the random graphs: qmean's reference gave [1] for a 0-d result
    class Mean(nn.Module):
        def forward(self, x):
            return torch.mean(x, dim=[0, 1], keepdim=False)

    x = torch.round(torch.randn(2, 11, generator=torch.Generator().manual_seed(44)) * 8) / 8
    art = npuc.compile(Mean().eval(), (x,), quantize="int8", calibration=[(x,)])
    (y,) = art.run(x)
    assert y.shape == () and abs(float(y) - float(x.mean())) < 0.02


def test_a_constant_output_is_refused_with_a_sentence():
    # found by the random graphs: a KeyError in the partition
    class ConstOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.randn(1, 3))

        def forward(self, x):
            return torch.mean(self.c, dim=[0, 1])

    with pytest.raises(NpucError, match="is a constant that does not depend on the inputs"):
        npuc.compile(ConstOut().eval(), (torch.randn(3, 1),))


def test_an_int8_model_that_returns_its_input_compiles():
    # found by the random graphs: the input's quantize was moved to the runtime's edge, leaving
    # the returned float input undefined (a VerifyError after io_edges)
    class ReturnsInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.randn(2, 2, generator=torch.Generator().manual_seed(284)))

        def forward(self, x):
            return x, torch.matmul(x, self.c)

    x = torch.round(torch.randn(3, 2, generator=torch.Generator().manual_seed(285)) * 8) / 8
    art = npuc.compile(ReturnsInput().eval(), (x,), quantize="int8", calibration=[(x,)])
    same, y = art.run(x)
    assert torch.equal(same, x) and rel_l2(y, x @ ReturnsInput().c) < 0.1
