"""The area model: per-component estimate from the [area] section, validated like the rest."""

from __future__ import annotations

import copy
import tomllib
from importlib import resources

import pytest

from npuc.errors import TargetError
from npuc.targets import load_target, target_from_dict
from npuc.targets.area import area_breakdown, area_mm2, memory_area_um2, on_chip_memories


def doc(name: str = "npu-mid") -> dict:
    return tomllib.loads((resources.files("npuc.targets") / "presets" / f"{name}.toml").read_text())


def edited(**changes) -> dict:
    d = copy.deepcopy(doc())
    for dotted, v in changes.items():
        section, key = dotted.split("__")
        if v is ...:
            del d[section][key]
        else:
            d[section][key] = v
    return d


def test_presets_have_an_area_that_grows_with_the_preset():
    small, mid, large = (load_target(n).area_mm2 for n in ("npu-small", "npu-mid", "npu-large"))
    assert 0 < small < mid < large
    t = load_target("npu-mid")
    parts = area_breakdown(t)
    assert set(parts) == {"array", "vector", "scratchpad", "accumulator", "fixed"}
    assert sum(parts.values()) == pytest.approx(area_mm2(t))


def test_npu_mid_by_hand():
    t = load_target("npu-mid")
    a = t.area
    pe = a.pe_int8_um2 + a.pe_fp16_um2 + a.pe_dataflow_um2  # fp16, two dataflows
    assert area_breakdown(t)["array"] == pytest.approx(256 * pe * 1e-6)
    assert area_breakdown(t)["vector"] == pytest.approx(16 * (a.vector_lane_um2 + a.vector_lane_fp_um2) * 1e-6)
    spad = 8 * 512 * 1024 * a.sram_bit_um2 + 8 * a.sram_bank_um2
    assert area_breakdown(t)["scratchpad"] == pytest.approx(spad * 1e-6)
    acc = 8 * 65536 * a.sram_bit_um2 * (1 + a.sram_port_factor) + a.sram_bank_um2
    assert area_breakdown(t)["accumulator"] == pytest.approx(acc * 1e-6)


def test_a_memory_is_a_function_of_its_size_and_ports():
    a = load_target("npu-mid").area
    one = memory_area_um2(1 << 20, 4, 1, a)
    assert memory_area_um2(2 << 20, 4, 1, a) - 4 * a.sram_bank_um2 == pytest.approx(2 * (one - 4 * a.sram_bank_um2))
    assert memory_area_um2(1 << 20, 4, 2, a) > one
    assert [m.name for m in on_chip_memories(load_target("npu-mid"))] == ["scratchpad", "accumulator"]


def test_array_and_dtype_and_dataflows_change_the_area():
    base = target_from_dict(doc()).area_mm2
    bigger = target_from_dict(edited(array__rows=32)).area_mm2
    int8_only = target_from_dict(edited(array__dtypes=["int8"])).area_mm2
    one_flow = target_from_dict(edited(array__dataflows=["weight_stationary"])).area_mm2
    assert bigger > base > one_flow and base > int8_only


def test_target_without_area_loads_and_says_so():
    d = doc()
    del d["area"]
    t = target_from_dict(d, "mine.toml")
    assert t.area is None and t.fingerprint() == load_target("npu-mid").fingerprint()
    assert dict(t.summary_rows())["area (estimate)"] == "-"
    with pytest.raises(TargetError, match=r"target 'npu-mid' has no \[area\] section"):
        t.area_mm2


def test_area_is_not_in_the_fingerprint():
    assert target_from_dict(edited(area__pe_int8_um2=99.0)).fingerprint() == load_target("npu-mid").fingerprint()


@pytest.mark.parametrize("change,message", [
    ({"area__pe_int8_um2": -1.0}, "key 'area.pe_int8_um2': Input should be greater than 0"),
    ({"area__scratchpad_ports": 0}, "key 'area.scratchpad_ports': Input should be greater than 0"),
    ({"area__scratchpad_ports": 1.5}, "key 'area.scratchpad_ports'"),
    ({"area__fixed_mm2": ...}, "key 'area.fixed_mm2': missing key"),
    ({"area__banana": 1.0}, "key 'area.banana': unknown key"),
])
def test_invalid_area_refused(change, message):
    with pytest.raises(TargetError, match=message):
        target_from_dict(edited(**change), "t.toml")


def test_area_travels_in_the_binary_metadata():
    from npuc.artifact import target_of
    from npuc.codegen.package import target_json

    t = load_target("npu-mid")

    class _Meta:
        extra = (("npuc.target", target_json(t)),)

    class _Npub:
        metadata = _Meta()
        target_fingerprint = t.fingerprint()
        target_name = t.name

    assert target_of(_Npub()).area == t.area
