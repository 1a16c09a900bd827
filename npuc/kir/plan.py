"""A kernel's chosen schedule, as scheduling hands it to code generation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    """A kernel's chosen schedule.

    ``summary`` says it in one line (tile sizes, loop order, dataflow, buffering);
    ``spad_bytes``/``acc_bytes`` the on-chip memory it uses; ``est_cycles`` the cost model's
    estimate; ``details`` the kind-specific choices the emitter reads.
    """

    summary: str
    spad_bytes: int
    acc_bytes: int
    est_cycles: int
    details: Any = None

    def __str__(self) -> str:
        return (
            f"{self.summary}  [spad {self.spad_bytes} B, acc {self.acc_bytes} B, "
            f"est {self.est_cycles} cycles]"
        )
