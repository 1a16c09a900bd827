"""Pieces shared by instruction definitions: operand fields, regions, vector timing, checks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from npuc.isa.actions import Actions, memory_actions
from npuc.isa.enums import DType, Mem, Space
from npuc.isa.fields import Derived, Field, addr, choice, uint
from npuc.isa.region import Region
from npuc.isa.widths import LOCAL_ADDR_BITS

if TYPE_CHECKING:
    from npuc.targets import Target

# Cycles from a vector instruction's first read to its last write (read, compute, write stages).
VECTOR_PIPELINE_DEPTH = 4

def operand(prefix: str, doc: str, es: Derived, *, inner: bool = True) -> list[Field]:
    """Fields of a 2-D vector operand: memory space, byte address, inner and outer byte strides.

    ``es`` gives the element size from the fields before it (for the stride defaults: elements
    contiguous, rows back to back).  With ``inner=False`` the operand has one stride (one element
    per row: the result of a reduction).
    """
    fs = [
        choice(f"{prefix}_space", 1, Space, f"memory space of {doc}", default=Space.spad),
        addr(prefix, LOCAL_ADDR_BITS, f"byte address of {doc}"),
    ]
    if inner:
        fs.append(uint(f"{prefix}_s0", 16, f"byte stride between elements of a row of {doc}", default=es))
        fs.append(
            uint(f"{prefix}_s1", 24, f"byte stride between rows of {doc}", default=Derived(f"n0 * {prefix}_s0"))
        )
    else:
        fs.append(uint(f"{prefix}_s", 24, f"byte stride between the results of {doc}", default=es))
    return fs


def mem_of(space: Space) -> Mem:
    return Mem.spad if space is Space.spad else Mem.acc


def region2d(a: Any, prefix: str, dt: DType, access: str) -> Region:
    """The (n1, n0) region of a 2-D operand named ``prefix``."""
    return Region(
        mem_of(getattr(a, f"{prefix}_space")),
        getattr(a, prefix),
        (a.n1, a.n0),
        (getattr(a, f"{prefix}_s1"), getattr(a, f"{prefix}_s0")),
        dt.np,
        access,
        prefix,
    )


def acc_operand_problem(a: Any, operands: Mapping[str, DType]) -> str | None:
    """ACC holds 32-bit words: an operand placed in ACC must have a 4-byte element type."""
    for prefix, dt in operands.items():
        if getattr(a, f"{prefix}_space") is Space.acc and dt.size != 4:
            return f"operand '{prefix}' is in ACC, which holds 32-bit words, but its type is {dt.name}"
    return None


def float_problem(target: "Target", *dtypes: DType) -> str | None:
    """Floating-point storage and arithmetic need a target with fp16 support."""
    if any(dt.is_float for dt in dtypes) and not target.has_fp16:
        return f"target '{target.name}' has no floating-point support (array.dtypes has no fp16)"
    return None


def vector_timing(lane_ops: int, target: "Target", regions: tuple[Region, ...]) -> tuple[int, int]:
    """Vector unit: lane-operations spread over the lanes, or scratchpad bandwidth if that is
    slower, plus the pipeline depth as latency."""
    sram_bytes = sum(r.nbytes for r in regions if r.mem is not Mem.dram)
    busy = max(-(-lane_ops // target.vector.lanes), -(-sram_bytes // target.spad_bytes_per_cycle), 1)
    return busy, VECTOR_PIPELINE_DEPTH


def vector_actions(lane_ops: int, target: "Target", regions: tuple[Region, ...]) -> Actions:
    return memory_actions(regions, target.dma.burst_bytes, vector_lane_ops=lane_ops)


VECTOR_TIMING_DOC = (
    "busy = max(ceil(lane_ops / vector.lanes), ceil(SRAM bytes read and written / "
    "(scratchpad.banks x scratchpad.bank_width_bytes)), 1) cycles on the vector unit, then "
    f"{VECTOR_PIPELINE_DEPTH} cycles of pipeline latency."
)
