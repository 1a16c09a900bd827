"""What a correct Perfetto trace is: on every track, slices nest or follow one another."""

from __future__ import annotations

from collections import defaultdict


def partial_overlaps(doc: dict) -> list[str]:
    """Every pair of slices of one track that overlap without nesting (empty when the trace is right)."""
    tracks: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    bad = []
    for key, slices in tracks.items():
        slices.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[float, float, str]] = []
        for s in slices:
            while stack and stack[-1][1] <= s[0]:
                stack.pop()
            if stack and s[1] > stack[-1][1]:
                bad.append(f"track {key}: {stack[-1]} and {s}")
            stack.append(s)
    return bad


def track_names(doc: dict) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
