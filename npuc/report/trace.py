"""Perfetto (Chrome JSON) trace of a profile: the segments one after the other on one timeline.

NPU segments show every instruction on its queue/unit track (named by its layer); CPU segments
are one slice each on a "host CPU" track, as long as the CPU model's estimate.  Times are
microseconds at the target's clock.
"""

from __future__ import annotations

from npuc.runtime.sim import perfetto_events

HOST_TID = 16


def profile_trace(p) -> dict:
    """The trace document (``{"traceEvents": [...]}``) of a :class:`~npuc.report.profile.Profile`."""
    us_per_cycle = 1e6 / p.clock_hz
    events: list[dict] = []
    offset_us = 0.0
    npu_index = 0
    header_done = False
    for r in p.runs:
        if r.kind == "npu":
            labels = p.labels[npu_index]
            npu_index += 1
            evs = perfetto_events(r.sim, {i: lab for i, lab in enumerate(labels) if lab})
            for e in evs:
                if e["ph"] == "M":
                    if not header_done:
                        events.append(e)
                    continue
                e = dict(e)
                e["ts"] = e["ts"] + offset_us
                e["args"] = dict(e["args"], segment=r.name)
                events.append(e)
            header_done = True
            offset_us += r.sim.total_cycles * us_per_cycle
        else:
            dur = r.cpu_seconds * 1e6
            events.append({"name": r.name, "cat": "cpu", "ph": "X", "pid": 0, "tid": HOST_TID,
                           "ts": offset_us, "dur": dur, "args": {"segment": r.name, "estimated": True}})
            offset_us += dur
    events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": HOST_TID, "args": {"name": "host CPU (fallback)"}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}
