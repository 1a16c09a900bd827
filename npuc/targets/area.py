"""The area model: an estimate of a target's silicon area from per-component figures.

The figures live in the target file's ``[area]`` section, each with its published source in the
preset's comments (docs/targets.md, "Where the area figures come from").  It is an estimate for
comparing designs, not a layout:

* the array: rows x cols processing elements, each ``pe_int8_um2``, plus ``pe_fp16_um2`` when the
  array has fp16, plus ``pe_dataflow_um2`` for each dataflow beyond the first;
* the vector unit: lanes x ``vector_lane_um2`` (plus ``vector_lane_fp_um2`` with fp16);
* each memory by :func:`memory_area_um2` of its size, banks and ports: capacity in bits times
  ``sram_bit_um2``, grown by ``sram_port_factor`` per port beyond the first, plus
  ``sram_bank_um2`` of periphery per bank;
* ``fixed_mm2`` for the DMA engine, instruction fetch and control.

DRAM is off chip and has no area here.
"""

from __future__ import annotations

from dataclasses import dataclass

from npuc.errors import TargetError


@dataclass(frozen=True)
class OnChipMemory:
    """An on-chip SRAM as the area model sees it."""

    name: str
    size_bytes: int
    banks: int
    ports: int


def on_chip_memories(target) -> tuple[OnChipMemory, ...]:
    """The target's on-chip memories: the scratchpad and the accumulator (a single bank)."""
    a = _area(target)
    return (
        OnChipMemory("scratchpad", target.scratchpad.size_bytes, target.scratchpad.banks, a.scratchpad_ports),
        OnChipMemory("accumulator", target.accumulator.size_bytes, 1, a.accumulator_ports),
    )


def memory_area_um2(size_bytes: int, banks: int, ports: int, area) -> float:
    """The area of one SRAM of ``size_bytes`` in ``banks`` banks with ``ports`` ports each."""
    cells = 8 * size_bytes * area.sram_bit_um2 * (1.0 + area.sram_port_factor * (ports - 1))
    return cells + banks * area.sram_bank_um2


def area_breakdown(target) -> dict[str, float]:
    """Area per component in mm^2: array, vector, each on-chip memory by name, fixed."""
    a = _area(target)
    fp16 = target.has_fp16
    pe = a.pe_int8_um2 + (a.pe_fp16_um2 if fp16 else 0.0) + a.pe_dataflow_um2 * (len(target.array.dataflows) - 1)
    lane = a.vector_lane_um2 + (a.vector_lane_fp_um2 if fp16 else 0.0)
    out = {"array": target.peak_macs_per_cycle * pe * 1e-6, "vector": target.vector.lanes * lane * 1e-6}
    for m in on_chip_memories(target):
        out[m.name] = memory_area_um2(m.size_bytes, m.banks, m.ports, a) * 1e-6
    out["fixed"] = a.fixed_mm2
    return out


def area_mm2(target) -> float:
    """The estimated total area in mm^2 (the sum of :func:`area_breakdown`)."""
    return sum(area_breakdown(target).values())


def _area(target):
    if target.area is None:
        raise TargetError(
            f"target '{target.name}' has no [area] section, so its area cannot be estimated "
            "(docs/targets.md lists the keys; the presets have one to copy)"
        )
    return target.area
