"""Chrome/Perfetto traces of simulations: tracks whose slices nest, and counters.

The JSON "trace event" format (``{"traceEvents": [...]}``) opens in ui.perfetto.dev and
chrome://tracing.  Perfetto requires the slices of one track to nest (or follow one another); an
instruction queue has several instructions in flight at once (pipelined transfers, an array
instruction beside the previous one), so each (queue, unit) pair gets one track per in-flight
slot: an instruction goes on the first slot whose previous instruction has ended.  Tracks are
derived from the :class:`~npuc.isa.enums.Queue` and :class:`~npuc.isa.enums.Unit` enums, sorted
by them.  Times are microseconds of the target's clock rounded to 1/1024 us (binary fractions, so
that ``ts + dur`` is exact in floating point and slices that touch share their boundary exactly;
rounding is monotonic, so slices that nest in cycles nest in the trace).  Each instruction slice carries its index and its
start and end cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

from npuc.isa.enums import Queue, Unit
from npuc.runtime.sim.result import SimResult, TraceEvent


class TraceBuilder:
    """Collects tracks, slices and counters in cycles; ``document()`` is the trace JSON."""

    def __init__(self, clock_hz: float, process: str) -> None:
        self.us_per_cycle = 1e6 / clock_hz
        self.process = process
        self._tracks: dict[tuple, tuple[int, str]] = {}  # sort key -> (tid, name)
        self._slots: dict[tuple, list[int]] = {}  # slotted track key -> end cycle of each slot
        self._events: list[dict] = []

    def us(self, cycle: int) -> float:
        """Cycle ``cycle`` in microseconds, rounded to a multiple of 1/1024 us."""
        return round(cycle * self.us_per_cycle * 1024) / 1024

    def track(self, key: tuple, name: str) -> int:
        """The thread id of the track ``key`` (created, named ``name``, on first use)."""
        if key not in self._tracks:
            self._tracks[key] = (len(self._tracks), name)
        return self._tracks[key][0]

    def add_slice(self, key: tuple, track_name: str, name: str, start: int, end: int, cat: str, args: dict) -> None:
        self._events.append({
            "name": name, "cat": cat, "ph": "X", "pid": 0, "tid": self.track(key, track_name),
            "ts": self.us(start), "dur": self.us(end) - self.us(start), "args": args,
        })

    def add_slotted_slice(self, key: tuple, track_name: str, name: str, start: int, end: int, cat: str,
                          args: dict) -> None:
        """A slice on the first slot of ``key`` free at ``start`` (slices must come in start order)."""
        ends = self._slots.setdefault(key, [])
        slot = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if slot == len(ends):
            ends.append(end)
        else:
            ends[slot] = end
        label = track_name if slot == 0 else f"{track_name} (in flight #{slot + 1})"
        self.add_slice((*key, slot), label, name, start, end, cat, args)

    def add_counter(self, name: str, series: str, steps: Sequence[tuple[int, float]]) -> None:
        """A counter track ``name`` holding ``series`` as (cycle, value) steps."""
        for cycle, value in steps:
            self._events.append({"name": name, "ph": "C", "pid": 0, "ts": self.us(cycle),
                                 "args": {series: value}})

    def document(self) -> dict:
        meta: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": self.process}}]
        for rank, key in enumerate(sorted(self._tracks)):
            tid, name = self._tracks[key]
            meta.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": {"sort_index": rank}})
        return {"traceEvents": meta + self._events, "displayTimeUnit": "ns"}


QUEUE_TRACKS = 1  # sort-key group of the instruction tracks (other groups: npuc.report.trace)


def queue_track(ev: TraceEvent) -> tuple[tuple, str]:
    """The slotted track key and name of an instruction: its queue and the unit it occupies."""
    q, u = Queue[ev.queue], Unit[ev.unit]
    return (QUEUE_TRACKS, int(q), int(u)), f"{q.name} queue: {u.name}"


def add_instructions(b: TraceBuilder, events: Sequence[TraceEvent], labels: Mapping[int, str] | None = None,
                     offset: int = 0, extra_args: Mapping[str, object] | None = None) -> None:
    """Every instruction of one program as a slice on its queue/unit track, starting at cycle ``offset``;
    ``labels`` names slices by layer (instruction index -> name)."""
    for ev in sorted(events, key=lambda e: (e.start, e.index)):
        key, track_name = queue_track(ev)
        name = labels.get(ev.index, ev.op) if labels else ev.op
        args = {"index": ev.index, "op": ev.op, "start_cycle": ev.start, "end_cycle": ev.end, **(extra_args or {})}
        b.add_slotted_slice(key, track_name, name, offset + ev.start, offset + ev.end, ev.op, args)


def perfetto_events(result: SimResult, debug_map: Mapping[int, str] | None = None) -> list[dict]:
    """Trace events of ``result``; ``debug_map`` names slices by source op (instr index -> name)."""
    b = TraceBuilder(result.clock_hz, f"npuc {result.target}")
    add_instructions(b, result.trace_events, debug_map)
    return b.document()["traceEvents"]


def write_perfetto_trace(result: SimResult, path: str | Path, debug_map: Mapping[int, str] | None = None) -> None:
    """Write the Chrome/Perfetto JSON trace of ``result`` to ``path``."""
    from npuc.fileio import write_atomic

    doc = {"traceEvents": perfetto_events(result, debug_map), "displayTimeUnit": "ns"}
    write_atomic(path, json.dumps(doc, indent=None, separators=(",", ":")), "the trace")
