"""Chrome/Perfetto trace of a simulation: one track per queue and unit, one slice per instruction.

The JSON "trace event" format (``{"traceEvents": [...]}``) opens in ui.perfetto.dev and
chrome://tracing.  Times are microseconds of the target's clock; each slice carries its
instruction index and its start and end cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from npuc.runtime.sim.result import SimResult

_TRACKS = ("load", "store", "wload", "array", "vector", "ctrl")
_TRACK_NAMES = {
    "load": "load queue (DMA)",
    "store": "store queue (DMA)",
    "wload": "compute: weight loader",
    "array": "compute: array",
    "vector": "compute: vector unit",
    "ctrl": "compute: control",
}


def _track(queue: str, unit: str) -> str:
    return queue if queue in ("load", "store") else unit


def perfetto_events(result: SimResult, debug_map: Mapping[int, str] | None = None) -> list[dict]:
    """Trace events of ``result``; ``debug_map`` names slices by source op (instr index -> name)."""
    us_per_cycle = 1e6 / result.clock_hz
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"npuc {result.target}"}}]
    for tid, track in enumerate(_TRACKS):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": _TRACK_NAMES[track]}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": {"sort_index": tid}})
    for ev in result.trace_events:
        name = debug_map.get(ev.index, ev.op) if debug_map else ev.op
        events.append(
            {
                "name": name,
                "cat": ev.op,
                "ph": "X",
                "pid": 0,
                "tid": _TRACKS.index(_track(ev.queue, ev.unit)),
                "ts": ev.start * us_per_cycle,
                "dur": (ev.end - ev.start) * us_per_cycle,
                "args": {"index": ev.index, "op": ev.op, "start_cycle": ev.start, "end_cycle": ev.end},
            }
        )
    return events


def write_perfetto_trace(result: SimResult, path: str | Path, debug_map: Mapping[int, str] | None = None) -> None:
    """Write the Chrome/Perfetto JSON trace of ``result`` to ``path``."""
    doc = {"traceEvents": perfetto_events(result, debug_map), "displayTimeUnit": "ns"}
    from npuc.fileio import write_atomic

    write_atomic(path, json.dumps(doc, indent=None, separators=(",", ":")), "the trace")
