"""The schedule that costs no cycles (``fuse_layers="not-slower"``, ``resident="not-slower"``,
CLI ``--fuse-layers --resident --not-slower``): fused chains and tensors kept on chip only where
the checked cost model finds they take no cycles.  Against the same model with both turned off
(``False``, the default): no more cycles, no more energy, fewer off-chip bytes where something
was fused or kept; the result against PyTorch eager (fp16) and the integer reference (int8, bit
for bit; the race detector runs on every ``art.run``)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

import npuc
from npuc.artifact import compile_graph
from npuc.cli import main as cli_main
from npuc.frontend.quantized import import_quantized
from npuc.interp import interpret
from npuc.pipeline import run_graph_passes
from tests.schedule.test_chain_cost import _ChainBesideKept

FP16_TOL = 2e-2
NOT_SLOWER = {"fuse_layers": "not-slower", "resident": "not-slower"}


def kinds(art) -> list[str]:
    return [lk.kernel.kind for c in art.compiled.codes for lk in c.segment.kernels]


def test_not_slower_fuses_and_keeps_on_chip_only_without_costing_cycles():
    torch.manual_seed(2)
    m = _ChainBesideKept().eval()
    x = torch.randn(1, 8, 33, 27)
    off = npuc.compile(m, (x,), target="npu-mid", fuse_layers=False, resident=False)
    auto = npuc.compile(m, (x,), target="npu-mid", **NOT_SLOWER)
    po, pa = off.profile(x), auto.profile(x)
    assert "fused_chain" in kinds(auto) and "fused_chain" not in kinds(off)
    assert auto.compiled.plan.on_chip is not None and auto.compiled.plan.on_chip.offsets
    # The choice is made on the cost model's walks, which run on the simulator's own scheduler
    # (the DRAM port to the transfer that asks first): 33,984 cycles against 35,652.
    assert pa.total_cycles <= po.total_cycles
    assert pa.energy_pj < po.energy_pj and pa.dram_bytes < po.dram_bytes
    (got,) = auto.run(x)
    want = m(x)
    assert (got - want).abs().max().item() / max(1.0, want.abs().max().item()) < FP16_TOL
    assert npuc.compile(m, (x,), target="npu-mid", **NOT_SLOWER).to_bytes() == auto.to_bytes()


def test_not_slower_int8_is_bit_exact_and_not_slower():
    torch.manual_seed(4)
    m = _ChainBesideKept().eval()
    x = torch.randn(1, 8, 33, 27)
    g = run_graph_passes(import_quantized(m, (x,), [(torch.randn(1, 8, 33, 27),) for _ in range(2)], name="kept"))
    off = compile_graph(g, "npu-mid", quantize="int8", fuse_layers=False, resident=False)
    auto = compile_graph(g, "npu-mid", quantize="int8", **NOT_SLOWER)
    # The choice is made on the cost model's walk of each chain and kept tensor, which gives the
    # DRAM port to the transfer that asks first, as the simulator does: 28,850 cycles against 30,374.
    assert auto.profile(x).total_cycles <= off.profile(x).total_cycles
    (want,) = interpret(g, x)
    (got,) = auto.run(x)
    assert torch.equal(got, want)


@pytest.mark.parametrize("flags,want", [((), False), (("--no-fuse-layers", "--no-resident"), False),
                                        (("--fuse-layers", "--resident"), True),
                                        (("--fuse-layers", "--resident", "--not-slower"), "not-slower")])
def test_cli_flags_choose_fusion_and_the_on_chip_plan(tmp_path, monkeypatch, flags, want):
    seen = {}

    def spy(*args, **kw):  # what the command asks of npuc.compile, without compiling
        seen.update(fuse_layers=kw.get("fuse_layers"), resident=kw.get("resident"))
        raise npuc.NpucError("stopped after the arguments")

    monkeypatch.setattr(npuc, "compile", spy)
    r = CliRunner().invoke(cli_main, ["compile", "torchvision:mobilenet_v2", "-o", str(tmp_path / "m.npub"), *flags])
    assert "stopped after the arguments" in r.output
    assert seen == {"fuse_layers": want, "resident": want}


def test_a_schedule_choice_that_is_not_one_is_refused_before_any_work():
    with pytest.raises(npuc.NpucError, match="fuse_layers='sometimes' is not a choice"):
        npuc.compile(torch.nn.ReLU(), (torch.randn(2),), fuse_layers="sometimes")
    with pytest.raises(npuc.NpucError, match="resident=None is not a choice"):
        npuc.compile(torch.nn.ReLU(), (torch.randn(2),), resident=None)


def test_not_slower_alone_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(cli_main, ["compile", "torchvision:mobilenet_v2", "-o", str(tmp_path / "m.npub"), "--not-slower"])
    assert r.exit_code != 0 and "--not-slower qualifies" in r.output
