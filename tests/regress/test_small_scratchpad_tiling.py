"""Convolutions whose channel counts leave tails, tiled for small scratchpads: int8 bit-exact
against the integer reference, fp16 against PyTorch eager.

On a 32 KiB scratchpad the array kernels cut the reduction into short blocks with a narrower
last one and keep several weight blocks resident, so a layer's steady state repeats with a tail
that differs from it: MobileNetV2's ``features.4.conv.2`` (144 -> 32, 1x1, 28x28) on
u55-like-256 came out wrong because the LOOP written for its reduction blocks took the
16-channel tail block for one more 32-channel one.  These cases sweep that shape of problem
(1x1 and 3x3 windows, reduction and output-channel tails, strides) over small-scratchpad
targets; every compile also checks that its LOOPs expand to the emitted stream
(``npuc.codegen.reroll.check_expansion``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import npuc
from npuc.artifact import compile_graph, quantized_graph
from npuc.dse.space import set_key, target_document
from npuc.interp import interpret
from npuc.pipeline import import_model, run_graph_passes
from npuc.targets import load_target, target_from_dict

# (in channels, out channels, kernel, stride, input size): each leaves a tail of the reduction
# or of the output channels on a 16-wide array
CONVS = [
    (144, 32, 1, 1, 28),  # MobileNetV2 features.4.conv.2: 32-channel blocks and a 16-channel tail
    (72, 40, 1, 2, 20),
    (40, 24, 3, 1, 14),
    (52, 20, 3, 2, 15),
]


def _small_fp16_target():
    """npu-mid cut to u55-like-256's on-chip sizes (32 KiB scratchpad, 16 KiB accumulator), with
    its fp16 array: the tilings of a small part, in both dtypes."""
    doc = target_document(load_target("npu-mid"))
    set_key(doc, "name", "npu-mid-32k")
    set_key(doc, "scratchpad.size_bytes", 32 * 1024)
    set_key(doc, "accumulator.size_bytes", 16 * 1024)
    return target_from_dict(doc, "npu-mid-32k")


def _conv(cin, cout, k, stride, size, seed=0):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2), nn.ReLU()).eval()
    return m, torch.randn(1, cin, size, size)


@pytest.mark.parametrize("preset", ["u55-like-256", "npu-small"])
@pytest.mark.parametrize("shape", CONVS, ids=[f"{c}-{o}-k{k}-s{s}-{h}" for c, o, k, s, h in CONVS])
def test_int8_conv_with_tails_is_bit_exact_on_a_small_scratchpad(shape, preset):
    m, x = _conv(*shape)
    tgt = load_target(preset)
    calibration = [torch.randn_like(x) for _ in range(2)]
    g = run_graph_passes(quantized_graph(m, (x,), tgt, calibration, "conv"))
    art = compile_graph(g, tgt, quantize="int8")
    assert not art.report.cpu_ops
    got, want = art.run(x)[0], interpret(g, x)[0]
    assert int((got != want).sum()) == 0, f"{int((got != want).sum())} of {want.numel()} values differ"


@pytest.mark.parametrize("shape", CONVS, ids=[f"{c}-{o}-k{k}-s{s}-{h}" for c, o, k, s, h in CONVS])
def test_fp16_conv_with_tails_matches_eager_on_a_small_scratchpad(shape):
    m, x = _conv(*shape)
    art = compile_graph(import_model(m, (x,)), _small_fp16_target())
    assert not art.report.cpu_ops
    with torch.no_grad():
        want = m(x)
    (got,) = art.run(x)
    err = float((got - want).norm() / want.norm())
    assert err < 2e-3, f"relative L2 error {err:.2e} against eager"


def test_a_float_model_on_u55_like_runs_on_the_cpu_with_its_constants_from_flash():
    """u55-like-256 has no fp16 path: a float model runs on the CPU, its constants read from the
    .npub's constants blob, which the memory plan puts in flash (not at address 0): a binding's
    offset is into the blob (the package step used to write the flash address, refused on load)."""
    m, x = _conv(144, 32, 1, 1, 28)
    art = npuc.compile(m, (x,), target="u55-like-256")
    assert art.report.cpu_ops
    with torch.no_grad():
        want = m(x)
    (got,) = art.run(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_int8_conv_with_64_channel_rows_in_128_byte_bursts_on_u65_like():
    """ResNet's 3x3 64 -> 64 layer at 56x56 on u65-like-256: no reduction block of whole 128-byte
    DRAM bursts fits its 32 KiB scratchpad beside a weight block, so the search once fell through
    to single-row tiles of 16-channel blocks (6.07M cycles, 22.8 MB of DRAM for 0.44 MB of
    compulsory bytes), and the model, pricing every 16-byte weight run as a burst where weight
    compression stores the blocks contiguous, estimated 1.6x the simulated cycles.  The layer
    stays bit-exact, the model within 10% of the simulator, the traffic a small multiple of the
    compulsory bytes (3.9 MB today)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1)).eval()
    x = torch.randn(1, 64, 56, 56)
    tgt = load_target("u65-like-256")
    g = run_graph_passes(quantized_graph(m, (x,), tgt, [x], "conv"))
    art = compile_graph(g, tgt, quantize="int8")
    assert not art.report.cpu_ops
    (plan,) = [pl for c in art.compiled.codes for pl in c.plans]
    got, want = art.run(x)[0], interpret(g, x)[0]
    assert int((got != want).sum()) == 0, f"{int((got != want).sum())} of {want.numel()} values differ"
    prof = art.profile(x)
    assert abs(plan.est_cycles - prof.total_cycles) <= 0.1 * prof.total_cycles, (plan.summary, plan.est_cycles, prof.total_cycles)
    compulsory = 2 * 64 * 56 * 56 + 9 * 64 * 64 + 64 * 12
    assert prof.dram_bytes <= 12 * compulsory, (plan.summary, prof.dram_bytes)
