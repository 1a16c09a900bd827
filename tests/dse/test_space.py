"""The design space: dotted keys, typed values, designs and their refusals."""

from __future__ import annotations

import pytest

from npuc.dse.objectives import objective_columns, parse_constraint
from npuc.dse.space import dimensions, make_design, parse_value, sweepable_keys, target_document
from npuc.errors import ExploreError
from npuc.targets import load_target

MID = load_target("npu-mid")


def test_values_take_the_type_of_the_key():
    assert parse_value("scratchpad.size_bytes", "512K", 1) == 512 * 1024
    assert parse_value("scratchpad.size_bytes", "2MiB", 1) == 2 << 20
    assert parse_value("scratchpad.size_bytes", "1_024", 1) == 1024
    assert parse_value("clock.mhz", "800", 1.0) == 800.0
    assert parse_value("array.dataflows", "weight_stationary+output_stationary", ["x"]) == [
        "weight_stationary", "output_stationary"]
    with pytest.raises(ExploreError, match="'12x' is not an integer"):
        parse_value("array.rows", "12x", 1)


def test_dimensions_from_strings_and_mappings():
    dims = dimensions(MID, ["array.rows=8,16", "array.dataflows=weight_stationary,weight_stationary+output_stationary"])
    assert [d.key for d in dims] == ["array.rows", "array.dataflows"]
    assert dims[1].values == (["weight_stationary"], ["weight_stationary", "output_stationary"])
    assert dimensions(MID, {"clock.mhz": [400, 800]})[0].values == (400.0, 800.0)
    assert dimensions(MID, {"array.rows": "8,16,32"})[0].values == (8, 16, 32)


def test_every_numeric_or_enumerated_key_is_sweepable():
    keys = sweepable_keys(target_document(MID))
    for k in ("array.rows", "array.dataflows", "scratchpad.size_bytes", "dma.bytes_per_cycle", "vector.lanes",
              "clock.mhz", "energy.dram_pj_per_byte", "area.sram_port_factor"):
        assert k in keys
    assert "name" not in keys and "description" not in keys


@pytest.mark.parametrize("sweep,message", [
    (["array.rowz=8"], "no key 'array.rowz' to sweep; the keys are: array.rows, "),
    (["name=a,b"], "'name' is not a numeric or enumerated key"),
    (["vector.lanes=8,12"], r"--sweep vector.lanes=12: must be a power of two, got 12"),
    (["array.dataflows=weight_stationry"], "--sweep array.dataflows=weight_stationry: "),
    (["array.rows=8,8"], "lists a value twice"),
    (["array.rows=8", "array.rows=16"], "given twice"),
    (["array.rows"], "is not KEY=V1,V2"),
    ([], "nothing to explore"),
])
def test_bad_sweeps_are_refused_with_a_sentence(sweep, message):
    with pytest.raises(ExploreError, match=message):
        dimensions(MID, sweep)


def test_a_design_the_target_file_refuses_is_infeasible_with_the_reason():
    # 1000 B is not a whole number of 8 x 16 B bank rows: refused only in combination with banks.
    (dim,) = dimensions(MID, ["scratchpad.size_bytes=1000,4096"])
    bad = make_design(MID, [("scratchpad.size_bytes", 1000)])
    assert bad.target is None and "must be a multiple of banks x bank_width_bytes" in bad.invalid
    good = make_design(MID, [("scratchpad.size_bytes", 4096)])
    assert good.target.scratchpad.size_bytes == 4096 and good.target.array == MID.array
    assert good.id == make_design(MID, [("scratchpad.size_bytes", 4096)]).id != bad.id


def test_objectives_and_constraints():
    assert objective_columns("latency,energy,area") == ("latency_s", "energy_j", "area_mm2")
    assert objective_columns(["dram", "cycles"]) == ("dram_bytes", "cycles")
    with pytest.raises(ExploreError, match="unknown objective 'speed'"):
        objective_columns("speed")
    c = parse_constraint("area_mm2<=2.0", [])
    assert c.static and c.check(1.5) == "" and "fails (area_mm2 = 2.5)" in c.check(2.5)
    assert not parse_constraint("latency < 0.01", []).static
    assert parse_constraint("array.rows>=16", ["array.rows"]).check(8)
    with pytest.raises(ExploreError, match="is not COLUMN OP NUMBER"):
        parse_constraint("area_mm2 about 2", [])
    with pytest.raises(ExploreError, match="'banana' is not a figure"):
        parse_constraint("banana<1", [])
