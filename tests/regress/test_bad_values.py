"""Regression tests of hostile binaries and silently accepted values (issue 14)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import npuc
from npuc.errors import AsmError, BinaryFormatError, NpucError, SimulationError, TargetError
from npuc.isa import assemble
from npuc.runtime.npub import BindingRole
from npuc.runtime.sim import simulate
from npuc.targets import load_target

PRESET = Path(npuc.__file__).parent / "targets" / "presets" / "npu-mid.toml"


class WithCpu(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        return torch.sin(y) * 2 + 1  # sin runs on the CPU


@pytest.fixture(scope="module")
def with_cpu():
    x = torch.randn(1, 8)
    art = npuc.compile(WithCpu().eval(), (x,), name="with_cpu")
    assert art.npub.cpu_fallback
    return art.npub, x


def _load_and_run(npub, x):
    art = npuc.load(npub.to_bytes())  # checksums recomputed: only the content is wrong
    art.run(x)


@pytest.mark.parametrize("arena", [2**40, 2**64 - 1])
def test_huge_arena_refused_against_the_named_target(with_cpu, arena):
    npub, x = with_cpu
    bad = dataclasses.replace(npub, memory_plan=dataclasses.replace(npub.memory_plan, dram_arena_size=arena))
    with pytest.raises(BinaryFormatError, match="exceeds the .*DRAM of target 'npu-mid'"):
        _load_and_run(bad, x)


@pytest.mark.parametrize("key,value,match", [
    ("npuc.target", "{not json", "not JSON"),
    ("npuc.target", "[1, 2]", "not a JSON object"),
    ("npuc.cpu", "[[1]]", "malformed"),
    ("npuc.cpu", "nope", "malformed"),
    ("npuc.layers", "[[[\"a\", 1]]]", "malformed"),
])
def test_malformed_metadata_refused(with_cpu, key, value, match):
    npub, x = with_cpu
    extra = dict(npub.metadata.extra)
    extra[key] = value
    bad = dataclasses.replace(npub, metadata=dataclasses.replace(npub.metadata, extra=extra))
    with pytest.raises(BinaryFormatError, match=match):
        _load_and_run(bad, x)


def test_swapped_binding_roles_refused_at_load(with_cpu):
    npub, x = with_cpu
    swap = {BindingRole.INPUT: BindingRole.OUTPUT, BindingRole.OUTPUT: BindingRole.INPUT}
    cf = npub.cpu_fallback[0]
    bindings = tuple(dataclasses.replace(b, role=swap.get(b.role, b.role)) for b in cf.bindings)
    bad = dataclasses.replace(npub, cpu_fallback=(dataclasses.replace(cf, bindings=bindings),) + npub.cpu_fallback[1:])
    with pytest.raises(BinaryFormatError, match="INPUT bindings, not one"):
        _load_and_run(bad, x)


def test_simulator_refuses_an_operand_larger_than_its_memory_before_allocating():
    prog = assemble("VREDUCE op=sum dtype=fp16 out_dtype=fp32 n0=65535 n1=65535 dst=0 dst_s=4 "
                    "src=0x1000 src_s0=0 src_s1=0\nEND\n")
    with pytest.raises(SimulationError, match="more than the .*-byte memory holds"):
        simulate(prog, load_target("npu-mid"), None)


def test_simulator_dram_is_bounded_by_the_targets():
    prog = assemble("DMA_LOAD esize=1 dram_addr=0xFFFFF000 local_addr=0 n0=16\nEND\n")
    tgt = load_target("npu-small")
    if tgt.dram.size_bytes > 0xFFFFF010:
        pytest.skip("the preset's DRAM reaches the address")
    with pytest.raises(SimulationError, match="run past the end"):
        simulate(prog, tgt, None)


@pytest.mark.parametrize("pattern,replacement,match", [
    (r"mhz = [0-9.]+", "mhz = 1e12", "clock.mhz"),
    (r"mhz = [0-9.]+", "mhz = inf", "clock.mhz"),
    (r"read_pj_per_byte = [0-9.]+", "read_pj_per_byte = inf", "finite"),
    (r"mac_fp16_pj = [0-9.]+", "mac_fp16_pj = nan", "finite"),
    (r"static_power_mw = [0-9.]+", "static_power_mw = 1e30", "static_power_mw"),
    (r'name = "npu-mid"', 'name = "' + "a" * 300 + '"', "at most 64 characters"),
])
def test_target_values_out_of_bounds_refused(tmp_path, pattern, replacement, match):
    text, n = re.subn(pattern, replacement, PRESET.read_text(), count=1)
    assert n == 1
    p = tmp_path / "t.toml"
    p.write_text(text)
    with pytest.raises(TargetError, match=match):
        load_target(p)


def test_assembly_immediate_beyond_fp32_refused():
    with pytest.raises(AsmError, match="beyond the range of fp32"):
        assemble("VUN op=adds dtype=fp16 n0=16 dst=0x100 src=0 imm0=1e400\nEND\n")
    with pytest.raises(AsmError, match="beyond the range of fp32"):
        assemble("VUN op=adds dtype=fp16 n0=16 dst=0x100 src=0 imm0=-1e39\nEND\n")
    ok = assemble("VUN op=clamp dtype=fp16 n0=16 dst=0x100 src=0 imm0=-inf imm1=3.4028235e38\nEND\n")
    assert ok[0].args.imm0 == float("-inf")


def test_load_without_target_is_refused_for_an_edited_fingerprint(with_cpu):
    npub, x = with_cpu
    bad = dataclasses.replace(npub, target_fingerprint=bytes(32))
    with pytest.raises(NpucError, match="fingerprint"):
        _load_and_run(bad, x)
