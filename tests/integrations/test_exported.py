"""Exported programs in: npuc.compile / npuc.import_model of an ExportedProgram, and the CLI on a
.pt2 file saved by torch.export.save, give what the module gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import npuc
from npuc.cli import main
from npuc.errors import ExportError
from npuc.ir.text import print_graph

from intlib import image


def test_exported_program_gives_the_same_bytes_as_the_module(small_cnn):
    x = image(0)
    ep = torch.export.export(small_cnn, (x,))
    a = npuc.compile(small_cnn, (x,), name="m")
    b = npuc.compile(ep, name="m")  # its own example inputs
    c = npuc.compile(ep, (x,), name="m")
    assert a.to_bytes() == b.to_bytes() == c.to_bytes()
    assert torch.allclose(b.run(x)[0], small_cnn(x), atol=2e-2, rtol=2e-2)
    assert [n for n, _ in b.report.stage_seconds][:2] == ["export", "import"]


def test_import_model_takes_an_exported_program(small_cnn):
    x = image(0)
    ep = torch.export.export(small_cnn, (x,))
    assert print_graph(npuc.import_model(ep, name="m")) == print_graph(npuc.import_model(small_cnn, (x,), name="m"))
    assert not any(n.op == "batch_norm" for n in npuc.import_model(ep).nodes)  # the graph passes ran


def test_pt2_file_on_the_cli_gives_the_same_bytes(tmp_path, small_cnn):
    x = image(0)
    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(small_cnn, (x,)), path)
    np.save(tmp_path / "x.npy", x.numpy())
    runner = CliRunner()
    r = runner.invoke(main, ["compile", str(path), "-o", str(tmp_path / "a.npub")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["compile", str(path), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "b.npub")])
    assert r.exit_code == 0, r.output
    want = npuc.compile(small_cnn, (x,), name=str(path)).to_bytes()
    assert (tmp_path / "a.npub").read_bytes() == want == (tmp_path / "b.npub").read_bytes()
    r = runner.invoke(main, ["run", str(tmp_path / "a.npub"), "--input", str(tmp_path / "x.npy")])
    assert r.exit_code == 0, r.output


def test_bad_pt2_file_is_a_sentence(tmp_path):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    r = CliRunner().invoke(main, ["compile", str(bad), "-o", str(tmp_path / "x.npub")])
    assert r.exit_code == 1 and "cannot load" in r.output and "torch.export.save" in r.output
    with pytest.raises(ExportError, match="does not exist"):
        from npuc.frontend.models import load_pt2

        load_pt2(tmp_path / "missing.pt2")


def test_compile_of_a_module_needs_example_inputs(small_cnn):
    with pytest.raises(npuc.NpucError, match="needs example inputs"):
        npuc.compile(small_cnn)
    with pytest.raises(npuc.NpucError, match="ExportedProgram"):
        npuc.compile("model.pt2", (image(0),))


@pytest.mark.zoo
def test_zoo_model_exported_program_gives_the_same_bytes():
    from npuc.zoo import load_model

    model, inputs = load_model("torchvision:mobilenet_v3_small")
    ep = torch.export.export(model, inputs)
    assert npuc.compile(ep, name="mv3").to_bytes() == npuc.compile(model, inputs, name="mv3").to_bytes()
