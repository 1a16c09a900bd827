"""The schema of a target file: pydantic models that validate a parsed TOML document.

Validation is strict: every key is required, unknown keys are refused, integers must be TOML
integers (a float or a string is refused), sizes must be positive, and the parameters hardware
indexes by bit slicing (bank counts, bank widths, burst sizes, vector lanes) must be powers of two.
The checked document is turned into the frozen :class:`npuc.targets.target.Target` by the loader.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from npuc.isa.enums import Dataflow
from npuc.isa.widths import DRAM_ADDR_BITS, LOCAL_ADDR_BITS
from npuc.targets.target import WINDOW_ALIGN



def key(unit: str, meaning: str, **constraints):
    """A required key of a target file, with its unit and meaning (docs/targets.md prints them)."""
    return Field(..., description=meaning, json_schema_extra={"unit": unit}, **constraints)

# The spellings of npuc.isa.enums.Dataflow (a target file is strict JSON-like data: plain strings).
DataflowName = Literal[tuple(d.value for d in Dataflow)]  # type: ignore[valid-type]
ArrayDType = Literal["int8", "fp16"]


def _power_of_two(v: int) -> int:
    if v & (v - 1) != 0:
        raise ValueError(f"must be a power of two, got {v}")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ArraySchema(_Strict):
    """``[array]``: the systolic compute array."""

    rows: int = key("PEs", "processing-element rows: the K (weight-stationary) or M (output-stationary) extent of a tile", gt=0, le=256)
    cols: int = key("PEs", "processing-element columns: the N extent of a tile", gt=0, le=256)
    dataflows: list[DataflowName] = key("list", f"dataflows the array supports: {', '.join(Dataflow)}")
    dtypes: list[ArrayDType] = key("list", "MAC types: int8 (int8 x int8 -> int32, required), fp16 (fp16 x fp16 -> fp32; also enables floating-point vector work)")

    @field_validator("dataflows", "dtypes")
    @classmethod
    def _unique_nonempty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must list at least one entry")
        if len(set(v)) != len(v):
            raise ValueError(f"lists an entry twice: {list(v)}")
        return v

    @field_validator("dtypes")
    @classmethod
    def _int8_always(cls, v: list[str]) -> list[str]:
        if "int8" not in v:
            raise ValueError("must include 'int8' (every target multiplies int8 x int8 -> int32)")
        return v


class ScratchpadSchema(_Strict):
    """``[scratchpad]``: the banked SRAM holding inputs, weights and vector operands."""

    size_bytes: int = key("bytes", "scratchpad capacity (inputs, weights, vector operands)", gt=0, le=1 << LOCAL_ADDR_BITS)
    banks: int = key("count", "banks, a power of two; the scratchpad serves one word per bank per cycle", gt=0)
    bank_width_bytes: int = key("bytes", "width of a bank word, a power of two", gt=0)

    @field_validator("banks", "bank_width_bytes")
    @classmethod
    def _pow2(cls, v: int) -> int:
        return _power_of_two(v)

    @model_validator(mode="after")
    def _whole_rows(self) -> "ScratchpadSchema":
        row = self.banks * self.bank_width_bytes
        if self.size_bytes % row != 0:
            raise ValueError(
                f"size_bytes ({self.size_bytes}) must be a multiple of banks x bank_width_bytes ({row})"
            )
        return self


class AccumulatorSchema(_Strict):
    """``[accumulator]``: the SRAM of 32-bit words beside the array."""

    size_bytes: int = key("bytes", "accumulator capacity, a multiple of 4 (int32/fp32 words)", gt=0, le=1 << LOCAL_ADDR_BITS)

    @field_validator("size_bytes")
    @classmethod
    def _words(cls, v: int) -> int:
        if v % 4 != 0:
            raise ValueError(f"must be a multiple of 4 (32-bit words), got {v}")
        return v


class VectorSchema(_Strict):
    """``[vector]``: the SIMD unit for elementwise work, requantization, reductions, pooling."""

    lanes: int = key("lanes", "vector lanes, a power of two: lane-operations per cycle", gt=0)

    @field_validator("lanes")
    @classmethod
    def _pow2(cls, v: int) -> int:
        return _power_of_two(v)


MemoryKind = Literal["flash", "dram", "sram"]
Holds = Literal["weights", "activations", "io"]
_NAME = r"^[a-z][a-z0-9_]*$"
# Names a memory may not take: the NPU's own buffers and the other entries of an energy breakdown.
RESERVED_MEMORY_NAMES = ("scratchpad", "spad", "accumulator", "acc", "mac_int8", "mac_fp16", "spad_read",
                         "spad_write", "acc_read", "acc_write", "vector", "instruction", "static")


class MemorySchema(_Strict):
    """``[memory.NAME]``: a memory the DMA reaches (off-chip flash or DRAM, a shared on-chip SRAM).

    The tables' order is the order of the windows in the system address map.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    kind: MemoryKind = key("text", "flash (off-chip, read-only: weights), dram (off-chip) or sram (shared on-chip SRAM, reached by DMA)")
    size_bytes: int = key("bytes", "capacity; its window in the system address map has this size", gt=0, le=1 << DRAM_ADDR_BITS)
    bytes_per_cycle: float = key("B/cycle", "bandwidth at the NPU clock, shared by the loads and stores of every memory behind the same port", gt=0, le=4096)
    latency_cycles: int = key("cycles", "latency of one transfer, from issue to data complete (overlaps other transfers)", ge=0, le=1 << 20)
    burst_bytes: int = key("bytes", "burst, a power of two: every contiguous run moves whole bursts", gt=0, le=1 << 16)
    read_pj_per_byte: float = key("pJ/B", "read, per byte of whole bursts", ge=0, le=1e6)
    write_pj_per_byte: float = key("pJ/B", "write, per byte of whole bursts", ge=0, le=1e6)
    holds: list[Holds] = key("list", "what the memory planner may place in it: weights (constants), activations, io (model inputs and outputs)")
    port: str = key("text", "the DMA port it sits behind: memories behind different ports stream in parallel, behind one port they share it", min_length=1, max_length=32, pattern=_NAME)

    @field_validator("burst_bytes")
    @classmethod
    def _pow2(cls, v: int) -> int:
        return _power_of_two(v)

    @field_validator("holds")
    @classmethod
    def _holds(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must list at least one of weights, activations, io")
        if len(set(v)) != len(v):
            raise ValueError(f"lists an entry twice: {list(v)}")
        return v

    @model_validator(mode="after")
    def _flash_is_read_only(self) -> "MemorySchema":
        if self.kind == "flash" and set(self.holds) - {"weights"}:
            raise ValueError(f"a flash memory is read-only: it may hold weights only, not {', '.join(h for h in self.holds if h != 'weights')}")
        return self


class DmaSchema(_Strict):
    """``[dma]``: the engine between DRAM and the on-chip memories (the older form of a target
    file with one off-chip memory; read as ``[memory.dram]``)."""

    bytes_per_cycle: int = key("B/cycle", "DRAM bandwidth of the DMA port, shared by loads and stores", gt=0)
    latency_cycles: int = key("cycles", "latency of one transfer, from issue to data complete (overlaps other transfers)", ge=0)
    burst_bytes: int = key("bytes", "DRAM burst, a power of two: every contiguous run moves whole bursts", gt=0)

    @field_validator("burst_bytes")
    @classmethod
    def _pow2(cls, v: int) -> int:
        return _power_of_two(v)


class DramSchema(_Strict):
    """``[dram]``: the off-chip memory (the older form, with ``[dma]``)."""

    size_bytes: int = key("bytes", "DRAM capacity (at most 4 GiB: 32-bit addresses)", gt=0, le=1 << DRAM_ADDR_BITS)


class ClockSchema(_Strict):
    """``[clock]``: the NPU clock."""

    mhz: float = key("MHz", "clock frequency, at most 10,000 MHz", gt=0, le=10_000, allow_inf_nan=False)


MAX_ENERGY_PJ = 1e6  # 1 uJ per action or byte: far above any real part, below nonsense
MAX_STATIC_MW = 1e6  # 1 kW


class EnergySchema(_Strict):
    """``[energy]``: energy per action in picojoules, and static power (finite, bounded)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    mac_int8_pj: float = key("pJ", "one int8 x int8 multiply with int32 accumulate", ge=0, le=MAX_ENERGY_PJ)
    mac_fp16_pj: float = key("pJ", "one fp16 x fp16 multiply with fp32 accumulate", ge=0, le=MAX_ENERGY_PJ)
    spad_read_pj_per_byte: float = key("pJ/B", "scratchpad read, per byte", ge=0, le=MAX_ENERGY_PJ)
    spad_write_pj_per_byte: float = key("pJ/B", "scratchpad write, per byte", ge=0, le=MAX_ENERGY_PJ)
    acc_read_pj_per_byte: float = key("pJ/B", "accumulator read, per byte", ge=0, le=MAX_ENERGY_PJ)
    acc_write_pj_per_byte: float = key("pJ/B", "accumulator write, per byte", ge=0, le=MAX_ENERGY_PJ)
    dram_pj_per_byte: float | None = Field(None, description="DRAM access (read or write), per byte of whole bursts: only in the older form with [dma] and [dram]", json_schema_extra={"unit": "pJ/B"}, ge=0, le=MAX_ENERGY_PJ)
    vector_lane_op_pj: float = key("pJ", "one vector lane-operation", ge=0, le=MAX_ENERGY_PJ)
    instruction_pj: float = key("pJ", "fetch and issue of one instruction", ge=0, le=MAX_ENERGY_PJ)
    static_power_mw: float = key("mW", "static (leakage) power, charged over the whole run", ge=0, le=MAX_STATIC_MW)


class AreaSchema(_Strict):
    """``[area]``: silicon area per component, an estimate from published figures (optional; see npuc.targets.area)."""

    # A target without it compiles as before; only the area objective of `npuc explore` needs it.
    # A memory's area is a function of its size, banks and ports (each memory alike).

    pe_int8_um2: float = key("um^2", "one processing element: int8 multiplier, int32 accumulate adder, operand and partial-sum registers", gt=0)
    pe_fp16_um2: float = key("um^2", "added to each processing element when array.dtypes has fp16: fp16 multiplier and fp32 adder", ge=0)
    pe_dataflow_um2: float = key("um^2", "added to each processing element for each supported dataflow beyond the first (muxes, a stationary register)", ge=0)
    vector_lane_um2: float = key("um^2", "one vector lane: int32 ALU and multiplier with its registers", gt=0)
    vector_lane_fp_um2: float = key("um^2", "added to each vector lane when array.dtypes has fp16: fp32 adder and multiplier", ge=0)
    sram_bit_um2: float = key("um^2/bit", "SRAM area per bit of capacity with one port, bitcell and array overhead", gt=0)
    sram_port_factor: float = key("ratio", "area added per port beyond the first, as a fraction of the one-port array", ge=0)
    sram_bank_um2: float = key("um^2", "periphery of one SRAM bank: decoders, sense amplifiers, I/O", ge=0)
    scratchpad_ports: int = key("count", "ports of each scratchpad bank", gt=0, le=4)
    accumulator_ports: int = key("count", "ports of the accumulator (read-modify-write: 2)", gt=0, le=4)
    fixed_mm2: float = key("mm^2", "DMA engine, instruction fetch and decode, control: independent of the sizes above", ge=0)


class WeightDecoderSchema(_Strict):
    """``[weight_decoder]``: a lossless weight decoder in the DMA path (optional): DMA_LOAD_DECODE reads a compressed weight stream and writes the decoded bytes to the scratchpad (npuc.isa.weight_codec)."""

    # Without it the compiler loads every weight raw; with it, it compresses a weight load whose
    # stream saves at least one burst of the memory the weights live in.
    bytes_per_cycle: float = key("B/cycle", "decoded bytes the decoder writes per cycle", gt=0, le=4096)
    latency_cycles: int = key("cycles", "pipeline latency of the decoder, added to the transfer's", ge=0, le=1 << 16)
    pj_per_byte: float = key("pJ/B", "decoding, per decoded byte", ge=0, le=MAX_ENERGY_PJ)
    stream_buffers: int = Field(0, description="constant streams whose last burst the DMA keeps: a load of a constant that starts in the burst where the last load of its stream ended does not fetch that burst again (DMA_LOAD's `stream`; 0: none)", json_schema_extra={"unit": "count"}, ge=0, le=7)


class HostSchema(_Strict):
    """``[host]``: the CPU beside the NPU, which runs the CPU segments (optional)."""

    triple: str = key("text", "LLVM target triple the host back-end compiles CPU segments for (e.g. aarch64-unknown-linux-gnu); not part of the fingerprint", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")


class TargetSchema(_Strict):
    """A whole target file."""

    name: str = key("text", "the target's name (letters, digits, '.', '_', '-'); not part of the fingerprint", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = key("text", "one line for people (at most 200 characters); not part of the fingerprint", max_length=200, pattern=r"^[^\n\r]*$")
    array: ArraySchema
    scratchpad: ScratchpadSchema
    accumulator: AccumulatorSchema
    vector: VectorSchema
    memory: dict[str, MemorySchema] | None = Field(None, description="the memories the DMA reaches, one [memory.NAME] table each (or, in the older form, [dma] and [dram])")
    dma: DmaSchema | None = Field(None, description="the older form: the DMA port of the one DRAM")
    dram: DramSchema | None = Field(None, description="the older form: the one DRAM")
    clock: ClockSchema
    energy: EnergySchema
    area: AreaSchema | None = Field(None, description="the area estimate (optional)")
    weight_decoder: WeightDecoderSchema | None = Field(None, description="a weight decoder in the DMA path (optional; absent: none)")
    host: HostSchema | None = Field(None, description="the host CPU (optional; default: the machine npuc runs on)")

    @field_validator("memory")
    @classmethod
    def _memories(cls, v: dict[str, MemorySchema] | None) -> dict[str, MemorySchema] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must describe at least one memory")
        for name in v:
            if not re.match(_NAME, name) or len(name) > 32:
                raise ValueError(f"memory name '{name}' must be lower-case letters, digits and '_', starting with a letter (at most 32)")
            if name in RESERVED_MEMORY_NAMES:
                raise ValueError(f"memory name '{name}' is reserved (the NPU's own buffers and energy entries: {', '.join(RESERVED_MEMORY_NAMES)})")
        for what in ("weights", "activations", "io"):
            if not any(what in m.holds for m in v.values()):
                raise ValueError(f"no memory holds {what}: list it in the holds of one memory")
        top = 0
        for m in v.values():
            top = -(-top // WINDOW_ALIGN) * WINDOW_ALIGN + m.size_bytes
        if top > 1 << DRAM_ADDR_BITS:
            raise ValueError(f"the memories' windows end at byte {top:,}, past the 4 GiB the DMA addresses (32-bit)")
        return v

    @model_validator(mode="after")
    def _one_form(self) -> "TargetSchema":
        legacy = {"dma": self.dma, "dram": self.dram, "energy.dram_pj_per_byte": self.energy.dram_pj_per_byte}
        given = [k for k, v in legacy.items() if v is not None]
        if self.memory is not None and given:
            raise ValueError(f"give the memories as [memory.NAME] tables or as [dma] and [dram] with energy.dram_pj_per_byte, not both (found {', '.join(given)} beside [memory])")
        if self.memory is None and len(given) != len(legacy):
            missing = [k for k in legacy if legacy[k] is None]
            raise ValueError(f"no [memory.NAME] tables, and the older form misses {', '.join(missing)}")
        return self
