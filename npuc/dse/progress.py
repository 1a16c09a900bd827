"""The sweep's progress bar (rich): designs done per tier and the best design so far."""

from __future__ import annotations

from npuc.dse.space import format_value

_UNIT = {"latency_s": (1e3, "ms"), "energy_j": (1e3, "mJ"), "area_mm2": (1.0, "mm^2"), "dram_bytes": (1e-6, "MB"),
         "cycles": (1e-6, "M cycles")}


class SweepProgress:
    """A rich progress bar: one task per tier, its description the best design so far by the
    first objective (among feasible designs of that tier)."""

    def __init__(self, console=None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.objective = "latency_s"
        self._progress = Progress(TextColumn("{task.fields[tier]:>10}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("{task.description}"), console=console,
                                  transient=False)
        self._tasks: dict[str, int] = {}
        self._best: dict[str, tuple[float, str]] = {}

    def __enter__(self) -> "SweepProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def begin(self, tier: str, total: int) -> None:
        if tier in self._tasks:
            t = self._tasks[tier]
            self._progress.update(t, total=self._progress.tasks[t].total + total)
        else:
            self._tasks[tier] = self._progress.add_task("", total=total, tier=tier)

    def advance(self, tier: str, design, result: dict) -> None:
        t = self._tasks[tier]
        value = result.get(self.objective) if self.objective != "area_mm2" else (
            design.target.area_mm2 if design.target is not None and design.target.area is not None else None)
        if result.get("feasible") and value is not None and (tier not in self._best or value < self._best[tier][0]):
            scale, unit = _UNIT[self.objective]
            keys = ", ".join(f"{k}={format_value(v)}" for k, v in design.assignment)
            self._best[tier] = (value, f"best {value * scale:.4g} {unit}: {keys}")
        self._progress.update(t, advance=1, description=self._best.get(tier, (0, ""))[1])

    def end(self, tier: str) -> None:
        pass
