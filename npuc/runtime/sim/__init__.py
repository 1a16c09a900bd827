"""The NPU simulator: functional (bit-exact numpy), timing (event-driven queues and units) and
energy (action counts x the target's energy table + static power) over one program."""

from __future__ import annotations

from npuc.runtime.sim.result import SimResult, TraceEvent
from npuc.runtime.sim.simulate import simulate
from npuc.runtime.sim.trace import perfetto_events, write_perfetto_trace

__all__ = ["SimResult", "TraceEvent", "perfetto_events", "simulate", "write_perfetto_trace"]
