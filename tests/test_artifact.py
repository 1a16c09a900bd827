"""The Artifact API: compile, run, profile, save/load, determinism, targets and input checks."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

import npuc
from npuc.errors import BinaryFormatError

sys.path.insert(0, str(Path(__file__).parent / "lower"))
from lowerlib import SmallCnn, seeded  # noqa: E402


@pytest.fixture(scope="module")
def model_and_input():
    torch.manual_seed(1)
    return seeded(SmallCnn()), torch.randn(1, 3, 32, 32)


@pytest.fixture(scope="module")
def art(model_and_input):
    model, x = model_and_input
    return npuc.compile(model, (x,), target="npu-mid", name="small_cnn")


def test_outputs_match_pytorch_within_fp16_error(art, model_and_input):
    model, x = model_and_input
    (out,) = art.run(x)
    with torch.no_grad():
        ref = model(x)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert float((out - ref).norm() / ref.norm()) < 5e-3


def test_compiling_twice_gives_identical_bytes(art, model_and_input):
    model, x = model_and_input
    again = npuc.compile(model, (x,), target="npu-mid", name="small_cnn")
    assert again.to_bytes() == art.to_bytes()


def test_save_load_round_trip(art, model_and_input, tmp_path):
    _, x = model_and_input
    path = tmp_path / "m.npub"
    art.save(path)
    loaded = npuc.load(path)
    assert loaded.target == art.target and loaded.model_name == "small_cnn"
    assert loaded.to_bytes() == art.to_bytes()
    assert torch.equal(loaded.run(x)[0], art.run(x)[0])


def test_binary_for_another_target_is_refused(art, tmp_path):
    path = tmp_path / "m.npub"
    art.save(path)
    with pytest.raises(BinaryFormatError, match=r"compiled for target 'npu-mid'.*'npu-large'"):
        npuc.load(path, target="npu-large")
    from npuc.runtime.executor import Executor

    with pytest.raises(BinaryFormatError, match=r"'npu-mid'.*'npu-large'"):
        Executor(art.npub, npuc.load_target("npu-large"))


def test_inputs_are_checked(art):
    with pytest.raises(npuc.NpucError, match=r"shape \[1, 3, 32, 32\]"):
        art.run(torch.randn(1, 3, 16, 16))
    with pytest.raises(npuc.NpucError, match="takes 1 inputs"):
        art.run()
    with pytest.raises(npuc.NpucError, match="floating-point"):
        art.run(torch.zeros(1, 3, 32, 32, dtype=torch.int64))


def test_io_signature_is_fp16_channels_last_at_the_edges(art):
    (x,) = art.npub.io_signature.inputs
    assert x.type.layout == "NHWC" and x.type.shape == (1, 32, 32, 3) and x.type.dtype.value == "f16"


def test_profile_layers_sum_to_the_totals(art, model_and_input, tmp_path):
    _, x = model_and_input
    prof = art.profile(x)
    npu_total = sum(r.sim.total_cycles for r in prof.runs if r.kind == "npu")
    assert prof.total_cycles == sum(layer.cycles for layer in prof.layers) == npu_total
    sim_energy = sum(r.sim.energy_pj for r in prof.runs if r.kind == "npu")
    assert prof.energy_pj == pytest.approx(sim_energy, rel=1e-9)
    sim_dram = sum(r.sim.dram_bytes_read + r.sim.dram_bytes_written for r in prof.runs if r.kind == "npu")
    assert prof.dram_bytes == sim_dram
    assert prof.macs == sum(r.sim.macs for r in prof.runs if r.kind == "npu") > 0
    convs = [layer for layer in prof.layers if layer.kind == "conv2d"]
    assert convs and all(0 < layer.utilization <= 1 and layer.source for layer in convs)
    assert {layer.bound for layer in prof.layers} <= {"compute", "memory"}
    assert prof.latency_s == pytest.approx(prof.total_cycles / 600e6)
    assert prof.average_power_w > 0 and prof.inferences_per_s > 0
    functional = art.profile(x, functional=True)
    assert [layer.cycles for layer in functional.layers] == [layer.cycles for layer in prof.layers]
    trace = tmp_path / "t.json"
    prof.write_trace(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X" and "index" in e["args"]]  # one per instruction
    assert len(slices) == sum(r.sim.instructions for r in prof.runs if r.kind == "npu")
    assert {e["name"] for e in slices} >= {layer.name for layer in prof.layers}
    layers = [e for e in events if e["ph"] == "X" and e.get("cat") == "layer"]
    assert {e["name"] for e in layers} == {layer.name for layer in prof.layers}


def test_cpu_segments_are_rows_of_the_profile():
    class Erf(torch.nn.Module):
        def forward(self, x):
            return torch.erf(x * 2.0) + 1.0

    x = torch.randn(4, 8)
    art = npuc.compile(Erf(), (x,))
    (out,) = art.run(x)
    assert torch.allclose(out, Erf()(x), atol=1e-2)
    prof = art.profile(x)
    kinds = [layer.kind for layer in prof.layers]
    assert "cpu" in kinds and prof.cpu_seconds > 0
    assert prof.total_cycles == sum(layer.cycles for layer in prof.layers) > prof.npu_cycles


def test_default_target_and_target_objects():
    tgt = npuc.load_target("npu-large")
    x = torch.randn(2, 8)
    model = torch.nn.Linear(8, 4).eval()
    assert npuc.compile(model, (x,), target=tgt).target is tgt
    assert npuc.compile(model, x).target.name == "npu-mid"


# ------------------------------------------------------------------------------------ CLI

MODEL_FILE = '''
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = torch.relu(self.c(x)).mean((2, 3))
        return self.fc(torch.erf(y))

def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 3, 8, 8),)
'''


def test_cli_compile_run_profile(tmp_path):
    import numpy as np
    from click.testing import CliRunner

    from npuc.cli import main

    src = tmp_path / "net.py"
    src.write_text(MODEL_FILE)
    spec = f"{src}:build"
    out = tmp_path / "net.npub"
    runner = CliRunner()
    r = runner.invoke(main, ["compile", spec, "--target", "npu-mid", "-o", str(out), "--explain",
                             "--print-after", "fuse"])
    assert r.exit_code == 0, r.output
    assert out.exists() and "IR after fuse" in r.output and "erf" in r.output
    assert re.search(r"est\. [\d.]+ (ns|us|ms) on the host", r.output) and "est. 0.0 us" not in r.output
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32))
    r = runner.invoke(main, ["run", str(out), "--input", str(x), "--model", spec])
    assert r.exit_code == 0, r.output
    assert "relative L2 error" in r.output and "ok" in r.output
    trace = tmp_path / "t.json"
    r = runner.invoke(main, ["profile", str(out), "--trace", str(trace)])
    assert r.exit_code == 0, r.output
    assert "total:" in r.output and "cpu0" in r.output and trace.exists()
    r = runner.invoke(main, ["run", str(out), "--input", str(x), "--target", "npu-large"])
    assert r.exit_code == 1 and "npu-large" in r.output
    r = runner.invoke(main, ["compile", spec, "-o", str(out), "--print-after", "nonsense"])
    assert r.exit_code == 1 and "no stage named 'nonsense'" in r.output
