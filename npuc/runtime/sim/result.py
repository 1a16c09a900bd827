"""What a simulation returns: cycles, unit occupancy, traffic, energy, final memory, trace."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from npuc.isa.actions import Actions
from npuc.isa.enums import Queue, Unit


class TraceEvent(NamedTuple):
    """One dynamic instruction's run: the index of the encoded instruction it comes from (a
    LOOP body's instructions run once per iteration), mnemonic, queue and unit names, start and
    end cycle."""

    index: int
    op: str
    queue: str
    unit: str
    start: int
    end: int


@dataclass(frozen=True)
class SimResult:
    """The outcome of simulating one program on one target.

    ``unit_busy`` counts the cycles each unit was occupied (``dma``, ``wload``, ``array``,
    ``vector``, ``ctrl``; ``dma`` sums every DMA port, ``port_busy`` has each port apart); ``queue_busy`` the cycles during which each queue (``load``, ``compute``,
    ``store``, ``vector``) had an instruction in flight.  ``instructions`` counts dynamic
    instructions (LOOPs expanded); ``origin`` gives, per dynamic instruction, the index of the
    encoded instruction it comes from (None: the identity, a program without LOOPs).  ``energy_breakdown_pj`` has one entry per action kind plus
    ``static``.  ``dram``, ``spad`` and ``acc`` are the final memory contents (functional tier
    only, else None).
    """

    target: str
    total_cycles: int
    clock_hz: float
    instructions: int
    unit_busy: dict[str, int]
    queue_busy: dict[str, int]
    actions: Actions
    energy_breakdown_pj: dict[str, float]
    peak_macs_per_cycle: int
    schedule: tuple  # (ops, queues, units, starts, ends), per dynamic instruction in program order
    leftover_tokens: dict[str, int]
    origin: tuple[int, ...] | None = None
    port_busy: dict[str, int] | None = None  # per DMA port of the target: cycles its transfers occupied it
    dram: bytes | None = None
    spad: bytes | None = None
    acc: bytes | None = None

    @functools.cached_property
    def trace_events(self) -> tuple[TraceEvent, ...]:
        """When each instruction ran, in program order."""
        ops, queues, units, starts, ends = self.schedule
        qn, un = [q.name for q in Queue], [u.name for u in Unit]
        origin = self.origin or range(len(ops))
        return tuple(
            TraceEvent(i, op, qn[q], un[u], s, e) for i, op, q, u, s, e in zip(origin, ops, queues, units, starts, ends)
        )

    @property
    def energy_pj(self) -> float:
        return sum(self.energy_breakdown_pj.values())

    @property
    def time_s(self) -> float:
        return self.total_cycles / self.clock_hz

    @property
    def macs(self) -> int:
        return self.actions.macs

    @property
    def dram_bytes_read(self) -> int:
        return self.actions.dram_read

    @property
    def dram_bytes_written(self) -> int:
        return self.actions.dram_write

    @property
    def sram_bytes_read(self) -> int:
        return self.actions.spad_read + self.actions.acc_read

    @property
    def sram_bytes_written(self) -> int:
        return self.actions.spad_write + self.actions.acc_write

    def utilization(self, unit: str) -> float:
        """Fraction of the run during which ``unit`` was busy."""
        return self.unit_busy[unit] / self.total_cycles if self.total_cycles else 0.0

    @property
    def mac_utilization(self) -> float:
        """MACs done over MACs the array could have done in the run (rows x cols per cycle)."""
        cap = self.total_cycles * self.peak_macs_per_cycle
        return self.macs / cap if cap else 0.0
