"""The target: a frozen, hashable description of one NPU, built from a validated target file.

The sections mirror the TOML file (``target.array.rows``, ``target.dma.bytes_per_cycle``, ...);
the derived figures (peak MACs per cycle, peak TOPS, bandwidth in GB/s) are properties.  The
fingerprint hashes every hardware parameter, so two files that describe the same hardware under
different names share it; the ``.npub`` container records it to refuse a binary built for
another target.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from npuc.errors import TargetError
from npuc.isa.enums import Dataflow


@dataclass(frozen=True)
class ArrayConfig:
    """The systolic array: ``rows`` x ``cols`` processing elements."""

    rows: int
    cols: int
    dataflows: tuple[Dataflow, ...]
    dtypes: tuple[str, ...]


@dataclass(frozen=True)
class ScratchpadConfig:
    """The banked scratchpad SRAM."""

    size_bytes: int
    banks: int
    bank_width_bytes: int


@dataclass(frozen=True)
class AccumulatorConfig:
    """The accumulator SRAM of 32-bit words."""

    size_bytes: int


@dataclass(frozen=True)
class VectorConfig:
    """The vector unit."""

    lanes: int


@dataclass(frozen=True)
class DmaConfig:
    """The DMA engine: bandwidth, latency of one transfer, DRAM burst size."""

    bytes_per_cycle: int
    latency_cycles: int
    burst_bytes: int


@dataclass(frozen=True)
class DramConfig:
    """Off-chip DRAM."""

    size_bytes: int


@dataclass(frozen=True)
class ClockConfig:
    """The clock."""

    mhz: float


@dataclass(frozen=True)
class EnergyConfig:
    """Energy per action (pJ) and static power (mW)."""

    mac_int8_pj: float
    mac_fp16_pj: float
    spad_read_pj_per_byte: float
    spad_write_pj_per_byte: float
    acc_read_pj_per_byte: float
    acc_write_pj_per_byte: float
    dram_pj_per_byte: float
    vector_lane_op_pj: float
    instruction_pj: float
    static_power_mw: float


# Parameters that name or describe a target rather than its hardware: not in the fingerprint.
_NOT_HARDWARE = ("name", "description")


@dataclass(frozen=True)
class Target:
    """One NPU: its array, memories, DMA, clock and energy table."""

    name: str
    description: str
    array: ArrayConfig
    scratchpad: ScratchpadConfig
    accumulator: AccumulatorConfig
    vector: VectorConfig
    dma: DmaConfig
    dram: DramConfig
    clock: ClockConfig
    energy: EnergyConfig

    # ------------------------------------------------------------------ derived figures
    @property
    def peak_macs_per_cycle(self) -> int:
        """MACs the array completes per cycle at full occupancy (rows x cols)."""
        return self.array.rows * self.array.cols

    @property
    def clock_hz(self) -> float:
        return self.clock.mhz * 1e6

    @property
    def has_fp16(self) -> bool:
        """Whether the array multiplies fp16 (and the vector unit computes in fp16/fp32)."""
        return "fp16" in self.array.dtypes

    def supports_dataflow(self, dataflow: Dataflow) -> bool:
        return dataflow in self.array.dataflows

    def peak_ops_per_s(self, dtype: str = "int8") -> float:
        """Peak arithmetic rate in operations per second (a MAC counts as two operations)."""
        if dtype not in self.array.dtypes:
            raise TargetError(f"target '{self.name}' has no {dtype} MACs (array.dtypes = {list(self.array.dtypes)})")
        return 2.0 * self.peak_macs_per_cycle * self.clock_hz

    def peak_tops(self, dtype: str = "int8") -> float:
        """Peak arithmetic rate in tera-operations per second."""
        return self.peak_ops_per_s(dtype) / 1e12

    @property
    def dram_bytes_per_cycle(self) -> int:
        return self.dma.bytes_per_cycle

    @property
    def dram_gb_per_s(self) -> float:
        """DMA bandwidth in GB/s (10^9 bytes per second)."""
        return self.dma.bytes_per_cycle * self.clock_hz / 1e9

    @property
    def spad_bytes_per_cycle(self) -> int:
        """Scratchpad bandwidth: one bank-width word from every bank per cycle."""
        return self.scratchpad.banks * self.scratchpad.bank_width_bytes

    def static_energy_pj(self, cycles: int) -> float:
        """Static (leakage) energy over ``cycles`` clock cycles, in pJ."""
        return self.energy.static_power_mw * 1e-3 * (cycles / self.clock_hz) * 1e12

    # ------------------------------------------------------------------ identity
    def hardware_params(self) -> dict:
        """Every hardware parameter as a nested dict (name and description left out)."""
        d = dataclasses.asdict(self)
        for key in _NOT_HARDWARE:
            d.pop(key)
        return d

    def fingerprint(self) -> bytes:
        """32-byte SHA-256 of the canonical JSON of :meth:`hardware_params`."""
        text = json.dumps(self.hardware_params(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).digest()

    def summary_rows(self) -> tuple[tuple[str, str], ...]:
        """(label, value) rows for a side-by-side table of targets (``npuc targets``)."""
        tops = ", ".join(f"{d} {self.peak_tops(d):.3g}" for d in self.array.dtypes)
        return (
            ("array", f"{self.array.rows} x {self.array.cols}"),
            ("dataflows", ", ".join(self.array.dataflows)),
            ("dtypes", ", ".join(self.array.dtypes)),
            ("clock", f"{self.clock.mhz:g} MHz"),
            ("peak MAC/cycle", str(self.peak_macs_per_cycle)),
            ("peak TOPS", tops),
            ("scratchpad", f"{self.scratchpad.size_bytes // 1024} KiB, {self.scratchpad.banks} banks x {self.scratchpad.bank_width_bytes} B"),
            ("accumulator", f"{self.accumulator.size_bytes // 1024} KiB"),
            ("vector lanes", str(self.vector.lanes)),
            ("DRAM bandwidth", f"{self.dram_gb_per_s:.3g} GB/s ({self.dma.bytes_per_cycle} B/cycle)"),
            ("DMA latency", f"{self.dma.latency_cycles} cycles"),
            ("DRAM", f"{self.dram.size_bytes // (1024 * 1024)} MiB"),
            ("static power", f"{self.energy.static_power_mw:g} mW"),
        )
