"""The target: a frozen, hashable description of one NPU, built from a validated target file.

The sections mirror the TOML file (``target.array.rows``, ``target.memories``, ...); the derived
figures (peak MACs per cycle, peak TOPS, bandwidth in GB/s, the system address map) are
properties.  The
fingerprint hashes every hardware parameter, so two files that describe the same hardware under
different names share it; the ``.npub`` container records it to refuse a binary built for
another target.
"""

from __future__ import annotations

import dataclasses
import functools
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


# What a memory may hold: the model's constants (weights, biases, tables), its activations (the
# tensors between kernels) and its inputs and outputs (written and read by the runtime).
HOLDS = ("weights", "activations", "io")
# Kinds of the memories the DMA reaches: read-only off-chip flash, off-chip DRAM, a shared on-chip
# SRAM.  A flash memory is never written by the NPU.
MEMORY_KINDS = ("flash", "dram", "sram")
# Every window of the system address map starts at a multiple of this (64 KiB).
WINDOW_ALIGN = 1 << 16


@dataclass(frozen=True)
class MemoryConfig:
    """One memory the DMA reaches through the system address map (a ``[memory.NAME]`` table)."""

    name: str
    kind: str                 # one of MEMORY_KINDS
    size_bytes: int
    bytes_per_cycle: float    # bandwidth, NPU clock cycles
    latency_cycles: int       # from issue of a transfer to its data complete
    burst_bytes: int          # every contiguous run moves whole bursts
    read_pj_per_byte: float
    write_pj_per_byte: float
    holds: tuple[str, ...]    # a subset of HOLDS
    port: str                 # the DMA port it sits behind: memories on one port share its bandwidth

    @property
    def writable(self) -> bool:
        return self.kind != "flash"

    @property
    def on_chip(self) -> bool:
        return self.kind == "sram"


@dataclass(frozen=True)
class Window:
    """A memory's window in the system address map: bytes [base, base + size) are that memory."""

    index: int  # the memory's position in Target.memories
    base: int
    memory: MemoryConfig

    @property
    def end(self) -> int:
        return self.base + self.memory.size_bytes


@dataclass(frozen=True)
class DmaConfig:
    """The DMA figures of the memory that holds activations (``Target.dma``: kept for scripts that
    read ``target.dma.bytes_per_cycle``; derived from that memory, not stated in the file)."""

    bytes_per_cycle: float
    latency_cycles: int
    burst_bytes: int


@dataclass(frozen=True)
class DramConfig:
    """The size of the memory that holds activations (``Target.dram``; derived, as DmaConfig)."""

    size_bytes: int


def address_map(memories: tuple[MemoryConfig, ...]) -> tuple[Window, ...]:
    """The windows of ``memories`` in file order, each base the previous end rounded up to
    WINDOW_ALIGN (the first at 0)."""
    out, top = [], 0
    for i, m in enumerate(memories):
        base = -(-top // WINDOW_ALIGN) * WINDOW_ALIGN
        out.append(Window(i, base, m))
        top = base + m.size_bytes
    return tuple(out)


# Preference when several memories may hold a tensor: on-chip SRAM first, then DRAM, then flash.
_SPEED_RANK = {"sram": 0, "dram": 1, "flash": 2}


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
    vector_lane_op_pj: float
    instruction_pj: float
    static_power_mw: float


@dataclass(frozen=True)
class AreaConfig:
    """Area per component (um^2 unless named otherwise): an estimate, see npuc.targets.area."""

    pe_int8_um2: float
    pe_fp16_um2: float
    pe_dataflow_um2: float
    vector_lane_um2: float
    vector_lane_fp_um2: float
    sram_bit_um2: float
    sram_port_factor: float
    sram_bank_um2: float
    scratchpad_ports: int
    accumulator_ports: int
    fixed_mm2: float


@dataclass(frozen=True)
class WeightDecoderConfig:
    """A lossless weight decoder in the DMA path (``[weight_decoder]``): DMA_LOAD_DECODE streams a
    compressed weight stream through it into the scratchpad."""

    bytes_per_cycle: float   # decoded bytes written per cycle
    latency_cycles: int      # pipeline latency, added to the transfer's
    pj_per_byte: float       # energy per decoded byte
    stream_buffers: int = 0  # constant streams whose last burst the DMA keeps (DMA_LOAD's ``stream``)


# Parameters that name or describe a target rather than what its binaries do: not in the
# fingerprint (the area estimate and the host triple change no instruction, no timing and no
# energy figure).
_NOT_HARDWARE = ("name", "description", "area", "host_triple")


@dataclass(frozen=True)
class Target:
    """One NPU: its array, on-chip buffers, the memories its DMA reaches, clock and energy table."""

    name: str
    description: str
    array: ArrayConfig
    scratchpad: ScratchpadConfig
    accumulator: AccumulatorConfig
    vector: VectorConfig
    memories: tuple[MemoryConfig, ...]
    clock: ClockConfig
    energy: EnergyConfig
    area: AreaConfig | None = None
    weight_decoder: WeightDecoderConfig | None = None  # [weight_decoder]; None: weights load raw
    host_triple: str | None = None  # [host] triple: what CPU segments are compiled for (None: this machine)

    # ------------------------------------------------------------------ derived figures
    @property
    def peak_macs_per_cycle(self) -> int:
        """MACs the array completes per cycle at full occupancy (rows x cols)."""
        return self.array.rows * self.array.cols

    @property
    def stream_buffers(self) -> int:
        """Stream buffers of the DMA (``weight_decoder.stream_buffers``; 0 without a decoder)."""
        return self.weight_decoder.stream_buffers if self.weight_decoder is not None else 0

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

    # ------------------------------------------------------------------ memories
    @functools.cached_property
    def windows(self) -> tuple[Window, ...]:
        """The system address map: one window per memory, in file order."""
        return address_map(self.memories)

    @property
    def address_space_bytes(self) -> int:
        """One past the last byte of the system address map."""
        return max(w.end for w in self.windows)

    def memory(self, name: str) -> MemoryConfig:
        for m in self.memories:
            if m.name == name:
                return m
        raise TargetError(f"target '{self.name}' has no memory named '{name}' (it has {', '.join(m.name for m in self.memories)})")

    def window_of(self, name: str) -> Window:
        return self.windows[self.memories.index(self.memory(name))]

    def window_at(self, addr: int, end: int | None = None) -> Window | None:
        """The window holding bytes [addr, end) (end: addr + 1), or None when they are not all
        in one window."""
        end = addr + 1 if end is None else end
        for w in self.windows:
            if w.base <= addr < w.end:
                return w if end <= w.end else None
        return None

    def memories_holding(self, what: str) -> tuple[MemoryConfig, ...]:
        """The memories that may hold ``what`` (one of HOLDS), fastest first (on-chip SRAM, then
        DRAM, then flash; file order among equals)."""
        return tuple(sorted((m for m in self.memories if what in m.holds), key=lambda m: _SPEED_RANK[m.kind]))

    @property
    def activation_memory(self) -> MemoryConfig:
        """The off-chip memory that holds activations (the backing store a spill goes to): the
        slowest memory that may hold them."""
        return self.memories_holding("activations")[-1]

    @property
    def weight_memory(self) -> MemoryConfig:
        """The memory the constants are placed in: the fastest that may hold weights."""
        return self.memories_holding("weights")[0]

    @property
    def ports(self) -> tuple[str, ...]:
        """The DMA ports, in order of first appearance; port 0 is the DMA unit of the simulator."""
        return tuple(dict.fromkeys(m.port for m in self.memories))

    @property
    def dma(self) -> DmaConfig:
        """Bandwidth, latency and burst of the memory that holds activations (derived)."""
        m = self.activation_memory
        return DmaConfig(m.bytes_per_cycle, m.latency_cycles, m.burst_bytes)

    @property
    def dram(self) -> DramConfig:
        """The size of the memory that holds activations (derived)."""
        return DramConfig(self.activation_memory.size_bytes)

    @property
    def dram_bytes_per_cycle(self) -> float:
        """Bandwidth of the off-chip memory that holds activations, bytes per cycle."""
        return self.activation_memory.bytes_per_cycle

    @property
    def dram_gb_per_s(self) -> float:
        """That bandwidth in GB/s (10^9 bytes per second)."""
        return self.dram_bytes_per_cycle * self.clock_hz / 1e9

    @property
    def spad_bytes_per_cycle(self) -> int:
        """Scratchpad bandwidth: one bank-width word from every bank per cycle."""
        return self.scratchpad.banks * self.scratchpad.bank_width_bytes

    @property
    def area_mm2(self) -> float:
        """The estimated silicon area (npuc.targets.area); TargetError without an [area] section."""
        from npuc.targets.area import area_mm2

        return area_mm2(self)

    def static_energy_pj(self, cycles: int) -> float:
        """Static (leakage) energy over ``cycles`` clock cycles, in pJ."""
        return self.energy.static_power_mw * 1e-3 * (cycles / self.clock_hz) * 1e12

    # ------------------------------------------------------------------ identity
    def document(self) -> dict:
        """The target as the document its TOML file parses to: tables of scalars and lists, the
        memories as ``memory.NAME`` tables in order, the host triple as ``[host]``
        (``target_from_dict(t.document())`` gives ``t`` back)."""
        d = json.loads(json.dumps(dataclasses.asdict(self)))
        d["memory"] = {m.pop("name"): m for m in d.pop("memories")}
        triple = d.pop("host_triple", None)
        if triple is not None:
            d["host"] = {"triple": triple}
        for optional in ("area", "weight_decoder"):
            if d.get(optional) is None:
                d.pop(optional, None)
        return d

    def hardware_params(self) -> dict:
        """Every hardware parameter as a nested dict (name and description left out).  A target
        with one DRAM that holds everything (the older file form) gives the older form's
        parameters, so its fingerprint, and the binaries that record it, stay as they were."""
        d = dataclasses.asdict(self)
        for key in _NOT_HARDWARE:
            d.pop(key)
        if d["weight_decoder"] is None:  # a target without one keeps the fingerprint it had before
            d.pop("weight_decoder")
        elif not d["weight_decoder"]["stream_buffers"]:  # nor does one without stream buffers
            d["weight_decoder"].pop("stream_buffers")
        (m, *more) = self.memories
        if not more and m == MemoryConfig("dram", "dram", m.size_bytes, m.bytes_per_cycle, m.latency_cycles,
                                          m.burst_bytes, m.read_pj_per_byte, m.read_pj_per_byte, HOLDS, "axi0"):
            d.pop("memories")
            d["dma"] = {"bytes_per_cycle": m.bytes_per_cycle, "latency_cycles": m.latency_cycles, "burst_bytes": m.burst_bytes}
            d["dram"] = {"size_bytes": m.size_bytes}
            d["energy"]["dram_pj_per_byte"] = m.read_pj_per_byte
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
            ("memories", "; ".join(_memory_summary(m, self.clock_hz) for m in self.memories)),
            ("DRAM bandwidth", f"{self.dram_gb_per_s:.3g} GB/s ({self.dram_bytes_per_cycle:g} B/cycle)"),
            ("DMA latency", f"{self.dma.latency_cycles} cycles"),
            ("weight decoder", f"{self.weight_decoder.bytes_per_cycle:g} B/cycle decoded" if self.weight_decoder else "none"),
            ("DRAM", _size_text(self.dram.size_bytes)),
            ("static power", f"{self.energy.static_power_mw:g} mW"),
            ("area (estimate)", f"{self.area_mm2:.3g} mm^2" if self.area is not None else "-"),
        )


def _size_text(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1 << 20 else f"{n // 1024} KiB"


def _memory_summary(m: MemoryConfig, clock_hz: float) -> str:
    gb = m.bytes_per_cycle * clock_hz / 1e9
    return f"{m.name} ({m.kind}, {_size_text(m.size_bytes)}, {gb:.3g} GB/s, {'+'.join(m.holds)})"
