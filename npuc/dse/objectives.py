"""Objectives (minimized) and constraints of a sweep, over the columns of results.csv."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any, Sequence

from npuc.errors import ExploreError

# Objective names and the result column each minimizes.
OBJECTIVES = {"latency": "latency_s", "energy": "energy_j", "area": "area_mm2", "dram": "dram_bytes",
              "cycles": "cycles"}
# Figures of a design that a constraint or an objective may name.
FIGURES = ("latency_s", "energy_j", "area_mm2", "dram_bytes", "cycles")
DEFAULT_OBJECTIVES = ("latency", "energy", "area")

_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq}
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|==|<|>)\s*([-+]?[0-9][0-9_.eE+-]*)\s*$")


def objective_columns(names: Sequence[str] | str) -> tuple[str, ...]:
    """Objective names (``latency,energy,area`` or the columns themselves) -> result columns."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    cols = []
    for n in names:
        col = OBJECTIVES.get(n, n)
        if col not in FIGURES:
            raise ExploreError(f"unknown objective '{n}': choose from {', '.join(OBJECTIVES)}")
        if col in cols:
            raise ExploreError(f"objective '{n}' is given twice")
        cols.append(col)
    if not cols:
        raise ExploreError("give at least one objective (latency, energy, area, dram, cycles)")
    return tuple(cols)


@dataclass(frozen=True)
class Constraint:
    """``column op bound``: a design whose figure fails it is infeasible."""

    column: str
    op: str
    bound: float
    text: str

    @property
    def static(self) -> bool:
        """Decidable before compiling: the area, or a swept key."""
        return self.column not in FIGURES or self.column == "area_mm2"

    def check(self, value: Any) -> str:
        """"" when ``value`` passes, else the reason."""
        if value is None:
            return ""
        if _OPS[self.op](value, self.bound):
            return ""
        return f"constraint {self.text} fails ({self.column} = {value:.6g})"


def parse_constraint(text: str, swept: Sequence[str]) -> Constraint:
    m = _CONSTRAINT.match(text)
    if not m:
        raise ExploreError(f"--constraint '{text}' is not COLUMN OP NUMBER (for instance area_mm2<=2.0)")
    col, op, num = m.groups()
    col = OBJECTIVES.get(col, col)
    if col not in FIGURES and col not in swept:
        raise ExploreError(f"--constraint '{text}': '{col}' is not a figure ({', '.join(FIGURES)}) or a swept key")
    try:
        bound = float(num)
    except ValueError:
        raise ExploreError(f"--constraint '{text}': '{num}' is not a number") from None
    return Constraint(col, op, bound, text.replace(" ", ""))
