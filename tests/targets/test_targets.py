"""Target files: the presets load, derived figures are right, invalid files are refused with the
file, the dotted key and the reason."""

from __future__ import annotations

import copy
import dataclasses
import tomllib
from importlib import resources

import pytest

import npuc
import npuc.targets
from npuc.errors import TargetError
from npuc.targets import DEFAULT_TARGET, Target, list_presets, load_target, target_from_dict

PRESETS = ["npu-large", "npu-mid", "npu-small", "u55-like-256", "u65-like-256"]


def preset_doc(name: str = "npu-mid") -> dict:
    return tomllib.loads((resources.files("npuc.targets") / "presets" / f"{name}.toml").read_text())


def write_toml(path, doc: dict) -> None:
    """A minimal TOML writer for the shapes a target file has (tables of scalars and lists)."""

    def scalar(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        return repr(v)

    def table(name: str, tbl: dict) -> list[str]:
        out = [f"\n[{name}]"] + [f"{k} = {scalar(v)}" for k, v in tbl.items() if not isinstance(v, dict)]
        for k, v in tbl.items():
            if isinstance(v, dict):
                out += table(f"{name}.{k}", v)
        return out

    lines = [f"{k} = {scalar(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += table(k, v)
    path.write_text("\n".join(lines) + "\n")


def test_presets_listed_and_load():
    assert list_presets() == PRESETS
    for name in PRESETS:
        t = load_target(name)
        assert isinstance(t, Target) and t.name == name
    assert DEFAULT_TARGET == "npu-mid"
    assert load_target() == load_target("npu-mid")
    assert npuc.load_target("npu-small").array.rows == 8


@pytest.mark.parametrize(
    "name,rows,spad_kib,fp16,dataflows",
    [
        ("npu-small", 8, 128, False, ("weight_stationary",)),
        ("npu-mid", 16, 512, True, ("weight_stationary", "output_stationary")),
        ("npu-large", 32, 2048, True, ("weight_stationary", "output_stationary")),
    ],
)
def test_preset_parameters(name, rows, spad_kib, fp16, dataflows):
    t = load_target(name)
    assert t.array.rows == t.array.cols == rows
    assert t.scratchpad.size_bytes == spad_kib * 1024
    assert t.has_fp16 is fp16
    assert t.array.dataflows == dataflows
    assert t.peak_macs_per_cycle == rows * rows
    assert t.peak_ops_per_s("int8") == pytest.approx(2 * rows * rows * t.clock.mhz * 1e6)
    assert t.peak_tops("int8") == pytest.approx(t.peak_ops_per_s("int8") / 1e12)
    assert t.dram_bytes_per_cycle == t.dma.bytes_per_cycle
    assert t.dram_gb_per_s == pytest.approx(t.dma.bytes_per_cycle * t.clock.mhz / 1e3)


def test_presets_grow_in_size_bandwidth_and_clock():
    s, m, l = (load_target(n) for n in ("npu-small", "npu-mid", "npu-large"))
    for key in (lambda t: t.peak_macs_per_cycle, lambda t: t.scratchpad.size_bytes, lambda t: t.dram_gb_per_s, lambda t: t.clock.mhz):
        assert key(s) < key(m) < key(l)


def test_no_fp16_on_small():
    with pytest.raises(TargetError, match="'npu-small' has no fp16"):
        load_target("npu-small").peak_tops("fp16")


def test_target_is_frozen_and_hashable():
    t = load_target("npu-mid")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.array.rows = 4  # type: ignore[misc]
    assert hash(t) == hash(load_target("npu-mid"))
    assert len({load_target(n) for n in PRESETS}) == len(PRESETS)


def test_fingerprint_depends_on_hardware_only():
    doc = preset_doc()
    base = target_from_dict(doc)
    assert len(base.fingerprint()) == 32
    renamed = target_from_dict({**doc, "name": "my-copy", "description": "same hardware"})
    assert renamed.fingerprint() == base.fingerprint()
    for key, value in [("array.rows", 12), ("memory.dram.latency_cycles", 81), ("energy.mac_int8_pj", 0.05),
                       ("memory.dram.write_pj_per_byte", 40.0), ("memory.dram.port", "axi1")]:
        changed = target_from_dict(_edit(doc, key, value))
        assert changed.fingerprint() != base.fingerprint(), key
    assert len({load_target(n).fingerprint() for n in PRESETS}) == len(PRESETS)


def test_summary_rows():
    rows = dict(load_target("npu-mid").summary_rows())
    assert rows["array"] == "16 x 16"
    assert rows["peak MAC/cycle"] == "256"
    assert "int8" in rows["peak TOPS"] and "fp16" in rows["peak TOPS"]
    assert "GB/s" in rows["DRAM bandwidth"]


def test_targets_table():
    names, rows = npuc.targets.targets_table()
    assert names[0] == "npu-small" and names[-1] == "npu-large" and sorted(names) == PRESETS
    table = dict(rows)
    assert table["peak MAC/cycle"] == ["64", "256", "256", "256", "1024"]
    assert all(len(v) == len(PRESETS) for v in table.values())
    assert "flash" in table["memories"][names.index("u55-like-256")]


def test_load_from_path(tmp_path):
    doc = preset_doc("npu-small")
    doc["name"] = "custom"
    p = tmp_path / "custom.toml"
    write_toml(p, doc)
    t = load_target(str(p))
    assert t.name == "custom" and t.fingerprint() == load_target("npu-small").fingerprint()
    assert load_target(p) == t


def _edit(doc: dict, dotted: str, value) -> dict:
    """A copy of doc with the dotted key set to value (or removed when value is ...)."""
    doc = copy.deepcopy(doc)
    *path, last = dotted.split(".")
    tbl = doc
    for p in path:
        tbl = tbl[p]
    if value is ...:
        del tbl[last]
    else:
        tbl[last] = value
    return doc


@pytest.mark.parametrize(
    "key,value,reason",
    [
        ("array.rows", ..., "missing key"),
        ("scratchpad.banks", ..., "missing key"),
        ("energy.static_power_mw", ..., "missing key"),
        ("array.rows", "16", "valid integer"),
        ("array.rows", 16.0, "valid integer"),
        ("clock.mhz", "fast", "valid number"),
        ("array.rows", 0, "greater than 0"),
        ("scratchpad.size_bytes", -4096, "greater than 0"),
        ("memory.dram.size_bytes", 0, "greater than 0"),
        ("clock.mhz", 0, "greater than 0"),
        ("memory.dram.read_pj_per_byte", -1.0, "greater than or equal to 0"),
        ("memory.dram.write_pj_per_byte", float("inf"), "finite"),
        ("memory.dram.bytes_per_cycle", 0, "greater than 0"),
        ("memory.dram.latency_cycles", 1.5, "valid integer"),
        ("memory.dram.kind", "tape", "'flash', 'dram' or 'sram'"),
        ("memory.dram.holds", [], "at least one of weights"),
        ("memory.dram.holds", ["weights", "weights"], "twice"),
        ("memory.dram.holds", ["weights", "cache"], "'weights', 'activations' or 'io'"),
        ("memory.dram.port", "AXI 0", "should match pattern"),
        ("memory.dram.extra", 1, "unknown key"),
        ("scratchpad.banks", 6, "power of two"),
        ("scratchpad.bank_width_bytes", 12, "power of two"),
        ("vector.lanes", 24, "power of two"),
        ("memory.dram.burst_bytes", 48, "power of two"),
        ("array.dataflows", ["row_stationary"], "weight_stationary"),
        ("array.dataflows", [], "at least one"),
        ("array.dtypes", ["fp16"], "must include 'int8'"),
        ("accumulator.size_bytes", 1022, "multiple of 4"),
        ("memory.dram.size_bytes", 1 << 33, "less than or equal to"),
        ("array.extra", 1, "unknown key"),
        ("bogus", 1, "unknown key"),
    ],
)
def test_invalid_file_names_file_key_reason(tmp_path, key, value, reason):
    p = tmp_path / "bad.toml"
    write_toml(p, _edit(preset_doc(), key, value))
    with pytest.raises(TargetError) as info:
        load_target(str(p))
    msg = str(info.value)
    assert str(p) in msg
    assert f"key '{key}" in msg
    assert reason in msg


def test_spad_size_must_hold_whole_bank_rows(tmp_path):
    p = tmp_path / "bad.toml"
    write_toml(p, _edit(preset_doc(), "scratchpad.size_bytes", 524288 + 16))
    with pytest.raises(TargetError, match=r"key 'scratchpad'.*multiple of banks x bank_width_bytes"):
        load_target(str(p))


def test_bad_toml_and_unknown_name(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("name = \n")
    with pytest.raises(TargetError, match=r"broken.toml: not valid TOML"):
        load_target(str(p))
    with pytest.raises(TargetError, match=r"no target named 'npu-huge'.*npu-mid"):
        load_target("npu-huge")
