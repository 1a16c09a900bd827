"""The schema of a target file: pydantic models that validate a parsed TOML document.

Validation is strict: every key is required, unknown keys are refused, integers must be TOML
integers (a float or a string is refused), sizes must be positive, and the parameters hardware
indexes by bit slicing (bank counts, bank widths, burst sizes, vector lanes) must be powers of two.
The checked document is turned into the frozen :class:`npuc.targets.target.Target` by the loader.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from npuc.isa.widths import DRAM_ADDR_BITS, LOCAL_ADDR_BITS

PosInt = Annotated[int, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0)]

Dataflow = Literal["weight_stationary", "output_stationary"]
ArrayDType = Literal["int8", "fp16"]


def _power_of_two(v: int) -> int:
    if v & (v - 1) != 0:
        raise ValueError(f"must be a power of two, got {v}")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ArraySchema(_Strict):
    """``[array]``: the systolic compute array."""

    rows: Annotated[int, Field(gt=0, le=256)]
    cols: Annotated[int, Field(gt=0, le=256)]
    dataflows: list[Dataflow]
    dtypes: list[ArrayDType]

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

    size_bytes: Annotated[int, Field(gt=0, le=1 << LOCAL_ADDR_BITS)]
    banks: PosInt
    bank_width_bytes: PosInt

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

    size_bytes: Annotated[int, Field(gt=0, le=1 << LOCAL_ADDR_BITS)]

    @field_validator("size_bytes")
    @classmethod
    def _words(cls, v: int) -> int:
        if v % 4 != 0:
            raise ValueError(f"must be a multiple of 4 (32-bit words), got {v}")
        return v


class VectorSchema(_Strict):
    """``[vector]``: the SIMD unit for elementwise work, requantization, reductions, pooling."""

    lanes: PosInt

    @field_validator("lanes")
    @classmethod
    def _pow2(cls, v: int) -> int:
        return _power_of_two(v)


class DmaSchema(_Strict):
    """``[dma]``: the engine between DRAM and the on-chip memories."""

    bytes_per_cycle: PosInt
    latency_cycles: Annotated[int, Field(ge=0)]
    burst_bytes: PosInt

    @field_validator("burst_bytes")
    @classmethod
    def _pow2(cls, v: int) -> int:
        return _power_of_two(v)


class DramSchema(_Strict):
    """``[dram]``: the off-chip memory."""

    size_bytes: Annotated[int, Field(gt=0, le=1 << DRAM_ADDR_BITS)]


class ClockSchema(_Strict):
    """``[clock]``: the NPU clock."""

    mhz: PosFloat


class EnergySchema(_Strict):
    """``[energy]``: energy per action in picojoules, and static power."""

    mac_int8_pj: NonNegFloat
    mac_fp16_pj: NonNegFloat
    spad_read_pj_per_byte: NonNegFloat
    spad_write_pj_per_byte: NonNegFloat
    acc_read_pj_per_byte: NonNegFloat
    acc_write_pj_per_byte: NonNegFloat
    dram_pj_per_byte: NonNegFloat
    vector_lane_op_pj: NonNegFloat
    instruction_pj: NonNegFloat
    static_power_mw: NonNegFloat


class TargetSchema(_Strict):
    """A whole target file."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str
    array: ArraySchema
    scratchpad: ScratchpadSchema
    accumulator: AccumulatorSchema
    vector: VectorSchema
    dma: DmaSchema
    dram: DramSchema
    clock: ClockSchema
    energy: EnergySchema
