"""Energy actions: what an instruction does that costs energy, counted per kind.

The simulator sums these over a program and multiplies them by the target's energy table
(:func:`energy_breakdown`); the cost model reads the same counts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from npuc.isa.enums import Mem
from npuc.isa.region import Region


@dataclass(frozen=True)
class Actions:
    """Counts of energy-relevant actions (bytes are bytes, MACs are multiply-accumulates)."""

    macs_int8: int = 0
    macs_fp16: int = 0
    spad_read: int = 0
    spad_write: int = 0
    acc_read: int = 0
    acc_write: int = 0
    dram_read: int = 0
    dram_write: int = 0
    vector_lane_ops: int = 0
    instructions: int = 0

    def __add__(self, other: "Actions") -> "Actions":
        return Actions(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    @property
    def macs(self) -> int:
        return self.macs_int8 + self.macs_fp16


_KEY = {
    (Mem.spad, False): "spad_read",
    (Mem.spad, True): "spad_write",
    (Mem.acc, False): "acc_read",
    (Mem.acc, True): "acc_write",
    (Mem.dram, False): "dram_read",
    (Mem.dram, True): "dram_write",
}


def memory_actions(regions: Iterable[Region], dram_burst: int, **extra: int) -> Actions:
    """Bytes read and written per memory by ``regions`` (DRAM in whole bursts), plus ``extra``
    counts, for one instruction."""
    counts = dict(extra)
    counts["instructions"] = 1
    for r in regions:
        nbytes = r.burst_bytes(dram_burst) if r.mem is Mem.dram else r.nbytes
        for writes in (False, True):
            if (r.writes if writes else r.reads):
                key = _KEY[(r.mem, writes)]
                counts[key] = counts.get(key, 0) + nbytes
    return Actions(**counts)


def energy_breakdown(a: Actions, energy) -> dict[str, float]:
    """Dynamic energy in pJ per action kind, from an :class:`EnergyConfig`."""
    return {
        "mac_int8": a.macs_int8 * energy.mac_int8_pj,
        "mac_fp16": a.macs_fp16 * energy.mac_fp16_pj,
        "spad_read": a.spad_read * energy.spad_read_pj_per_byte,
        "spad_write": a.spad_write * energy.spad_write_pj_per_byte,
        "acc_read": a.acc_read * energy.acc_read_pj_per_byte,
        "acc_write": a.acc_write * energy.acc_write_pj_per_byte,
        "dram": (a.dram_read + a.dram_write) * energy.dram_pj_per_byte,
        "vector": a.vector_lane_ops * energy.vector_lane_op_pj,
        "instruction": a.instructions * energy.instruction_pj,
    }
