"""Memories as data: [memory.NAME] tables, the older [dma]/[dram] form, the system address map,
the two Ethos-U-like presets (figures from Vela 5.2's vela.ini)."""

from __future__ import annotations

import copy

import pytest

from npuc.errors import TargetError
from npuc.isa.region import Region
from npuc.isa.enums import Mem
from npuc.isa.defs.dma import transfer_cycles, transfer_problem
from npuc.targets import load_target, target_from_dict
from npuc.targets.target import WINDOW_ALIGN
import numpy as np

from tests.targets.test_targets import _edit, preset_doc


def _legacy(doc: dict) -> dict:
    d = copy.deepcopy(doc)
    m = d.pop("memory")["dram"]
    d["dma"] = {"bytes_per_cycle": m["bytes_per_cycle"], "latency_cycles": m["latency_cycles"], "burst_bytes": m["burst_bytes"]}
    d["dram"] = {"size_bytes": m["size_bytes"]}
    d["energy"]["dram_pj_per_byte"] = m["read_pj_per_byte"]
    return d


@pytest.mark.parametrize("name", ["npu-small", "npu-mid", "npu-large"])
def test_the_older_form_is_the_same_target(name):
    t = load_target(name)
    old = target_from_dict(_legacy(preset_doc(name)))
    assert old == t and old.fingerprint() == t.fingerprint()
    (m,) = t.memories
    assert (m.name, m.kind, m.holds, m.port) == ("dram", "dram", ("weights", "activations", "io"), "axi0")
    assert t.dma.bytes_per_cycle == m.bytes_per_cycle and t.dram.size_bytes == m.size_bytes
    assert target_from_dict(t.document()) == t


def _refused(doc: dict, *fragments: str) -> str:
    with pytest.raises(TargetError) as info:
        target_from_dict(doc, "t.toml")
    msg = str(info.value)
    for f in fragments:
        assert f in msg, msg
    return msg


def test_both_forms_or_half_the_older_one_are_refused():
    doc = preset_doc("npu-mid")
    both = _legacy(doc)
    both["memory"] = doc["memory"]
    _refused(both, "not both", "dma")
    half = _legacy(doc)
    del half["dram"]
    _refused(half, "misses dram")
    none = copy.deepcopy(doc)
    del none["memory"]
    _refused(none, "no [memory.NAME] tables")


def test_memory_rules():
    doc = preset_doc("u55-like-256")
    _refused(_edit(doc, "memory.flash.holds", ["weights", "activations"]), "key 'memory.flash'", "read-only")
    _refused(_edit(doc, "memory.sram.holds", ["activations"]), "key 'memory'", "no memory holds io")
    bad = copy.deepcopy(doc)
    bad["memory"]["Flash2"] = bad["memory"]["flash"]
    _refused(bad, "key 'memory'", "'Flash2' must be lower-case")
    bad = copy.deepcopy(doc)
    bad["memory"]["spad"] = bad["memory"].pop("flash")
    _refused(bad, "'spad' is reserved")
    huge = _edit(doc, "memory.flash.size_bytes", 1 << 32)
    _refused(huge, "key 'memory'", "past the 4 GiB")


def test_address_map_windows_in_order_aligned():
    t = load_target("u55-like-256")
    sram, flash = t.windows
    assert (sram.memory.name, sram.base) == ("sram", 0)
    assert flash.memory.name == "flash" and flash.base % WINDOW_ALIGN == 0 and flash.base >= sram.end
    assert t.address_space_bytes == flash.end
    assert t.window_at(flash.base + 10).memory.name == "flash"
    assert t.window_at(sram.end - 4, sram.end + 4) is None  # spans two memories
    assert t.window_at(t.address_space_bytes) is None
    assert t.ports == ("axi0", "axi1")
    assert t.weight_memory.name == "flash" and t.activation_memory.name == "sram"
    assert [m.name for m in t.memories_holding("activations")] == ["sram"]
    u65 = load_target("u65-like-256")
    assert [m.name for m in u65.memories_holding("activations")] == ["sram", "dram"]
    assert u65.activation_memory.name == "dram" and u65.weight_memory.name == "dram"


def test_transfers_are_checked_and_timed_by_the_memory_they_fall_in():
    t = load_target("u55-like-256")
    sram, flash = t.windows

    def region(addr, n, access="r"):
        return Region(Mem.dram, addr, (1, 1, n), (n, n, 1), np.dtype(np.uint8), access, "dram")

    assert transfer_problem(region(flash.base, 4096), t) is None
    assert "read-only flash" in transfer_problem(region(flash.base, 4096, "w"), t)
    assert "runs past its end" in transfer_problem(region(sram.end - 64, 128), t)
    assert "falls in no memory" in transfer_problem(region(t.address_space_bytes + 16, 16), t)
    # 4096 bytes: SRAM 8 B/cycle, 32 cycles; flash 1 B/cycle, 64 cycles (Vela's figures).
    assert transfer_cycles(region(0, 4096), t) == (512, 32)
    assert transfer_cycles(region(flash.base, 4096), t) == (4096, 64)


def test_ethos_like_presets_follow_vela():
    u55, u65 = load_target("u55-like-256"), load_target("u65-like-256")
    for t in (u55, u65):
        assert t.peak_macs_per_cycle == 256 and t.array.dtypes == ("int8",)
        assert t.scratchpad.size_bytes + t.accumulator.size_bytes == 48 * 1024  # the SHRAM
    assert u55.clock_hz == 500e6 and u65.clock_hz == 1e9
    assert u55.memory("flash").bytes_per_cycle * u55.clock_hz == 0.5e9
    assert u55.memory("sram").bytes_per_cycle * u55.clock_hz == 4e9
    assert u55.dram_bytes_per_cycle == 8
    assert u65.memory("dram").bytes_per_cycle * u65.clock_hz == 3.75e9
    assert u65.dram_bytes_per_cycle == 3.75 and u65.memory("sram").size_bytes == 384 * 1024


def test_explore_sweeps_memory_keys_and_the_older_names():
    from npuc.dse.space import dimensions, make_design, sweepable_keys, target_document

    t = load_target("u55-like-256")
    keys = sweepable_keys(target_document(t))
    assert {"memory.sram.size_bytes", "memory.flash.bytes_per_cycle", "dma.bytes_per_cycle"} <= set(keys)
    dimensions(t, ["memory.flash.bytes_per_cycle=1,2", "dma.latency_cycles=16,32"])
    d = make_design(t, [("dma.bytes_per_cycle", 4), ("energy.dram_pj_per_byte", 3.0)])
    sram = d.target.memory("sram")  # the memory that holds activations
    assert (sram.bytes_per_cycle, sram.read_pj_per_byte, sram.write_pj_per_byte) == (4, 3.0, 3.0)
    assert d.target.memory("flash") == t.memory("flash")
    bad = make_design(t, [("memory.flash.burst_bytes", 96)])
    assert bad.target is None and "power of two" in bad.invalid
