"""Energy actions: what an instruction does that costs energy, counted per kind.

The simulator sums these over a program and multiplies them by the target's energy table
(:func:`energy_breakdown`); the cost model reads the same counts.  Off-chip bytes (the DMA side of
a transfer, in whole bursts of the memory its address falls in) are counted twice over: in
``dram_read`` / ``dram_write`` (every memory the DMA reaches together: flash, DRAM, shared SRAM)
and per memory in ``memory_read`` / ``memory_write`` (one entry per memory of the target, in its
order; empty when no DMA ran).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from npuc.isa.enums import Mem
from npuc.isa.region import Region


@dataclass(frozen=True)
class Actions:
    """Counts of energy-relevant actions (bytes are bytes, MACs are multiply-accumulates)."""

    macs_int8: int = 0
    macs_fp16: int = 0
    spad_read: int = 0
    spad_write: int = 0
    acc_read: int = 0
    acc_write: int = 0
    dram_read: int = 0
    dram_write: int = 0
    vector_lane_ops: int = 0
    instructions: int = 0
    decoded_bytes: int = 0  # bytes the weight decoder wrote (DMA_LOAD_DECODE)
    memory_read: tuple[int, ...] = ()   # bytes read per memory of the target (DMA side)
    memory_write: tuple[int, ...] = ()  # bytes written per memory of the target (DMA side)

    def __add__(self, other: "Actions") -> "Actions":
        scalars = (a + b for a, b in zip(self.scalars(), other.scalars()))
        return Actions(*scalars, _add(self.memory_read, other.memory_read), _add(self.memory_write, other.memory_write))

    def scalars(self) -> tuple[int, ...]:
        """The counts before the per-memory ones, in field order."""
        return dataclasses.astuple(self)[:_N_SCALARS]

    def flat(self, memories: int) -> tuple[int, ...]:
        """Every count as one flat tuple (per-memory counts padded to ``memories``), for summing
        many instructions at once; :meth:`from_flat` reads it back."""
        pad = (0,) * memories
        return (*self.scalars(), *(self.memory_read + pad)[:memories], *(self.memory_write + pad)[:memories])

    @classmethod
    def from_flat(cls, values, memories: int) -> "Actions":
        v = [int(x) for x in values]
        n = _N_SCALARS
        return cls(*v[:n], tuple(v[n:n + memories]), tuple(v[n + memories:n + 2 * memories]))

    @property
    def macs(self) -> int:
        return self.macs_int8 + self.macs_fp16


def _add(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if len(a) < len(b):
        a, b = b, a
    return tuple(x + (b[i] if i < len(b) else 0) for i, x in enumerate(a))


_N_SCALARS = 11  # the fields before memory_read

_KEY = {
    (Mem.spad, False): "spad_read",
    (Mem.spad, True): "spad_write",
    (Mem.acc, False): "acc_read",
    (Mem.acc, True): "acc_write",
    (Mem.dram, False): "dram_read",
    (Mem.dram, True): "dram_write",
}


def memory_actions(regions: Iterable[Region], target_or_burst, **extra: int) -> Actions:
    """Bytes read and written per memory by ``regions``, plus ``extra`` counts, for one
    instruction.  Given a Target, a DMA-side (``Mem.dram``) region is counted in whole bursts of
    the memory of the system address map it falls in, and per memory; given a burst size (the
    older call, for instructions without a DMA side) every DMA-side region uses that burst."""
    counts = dict(extra)
    counts["instructions"] = 1
    windows = getattr(target_or_burst, "windows", None)
    n = len(windows) if windows is not None else 0
    per = {False: [0] * n, True: [0] * n}
    for r in regions:
        if r.mem is Mem.dram and windows is not None:
            w = target_or_burst.window_at(r.addr, r.end)
            if w is None:
                raise ValueError(f"{r.name or 'DMA'} region 0x{r.addr:x}..0x{r.end - 1:x} is not inside one memory of the system address map")
            nbytes = r.burst_bytes(w.memory.burst_bytes)
        elif r.mem is Mem.dram:
            w, nbytes = None, r.burst_bytes(target_or_burst)
        else:
            w, nbytes = None, r.nbytes
        for writes in (False, True):
            if (r.writes if writes else r.reads):
                key = _KEY[(r.mem, writes)]
                counts[key] = counts.get(key, 0) + nbytes
                if w is not None:
                    per[writes][w.index] += nbytes
    if n and (any(per[False]) or any(per[True])):
        counts["memory_read"], counts["memory_write"] = tuple(per[False]), tuple(per[True])
    return Actions(**counts)


def memory_energy_pj(a: Actions, target) -> dict[str, float]:
    """Energy of the DMA-side bytes per memory of ``target`` (by name), in pJ.  Bytes counted
    without a memory (an instruction given only a burst size) go to the memory that holds
    activations."""
    out = {m.name: 0.0 for m in target.memories}
    for m, rd, wr in zip(target.memories, a.memory_read or (0,) * len(target.memories),
                         a.memory_write or (0,) * len(target.memories)):
        out[m.name] += rd * m.read_pj_per_byte + wr * m.write_pj_per_byte
    loose_r, loose_w = a.dram_read - sum(a.memory_read), a.dram_write - sum(a.memory_write)
    if loose_r or loose_w:
        m = target.activation_memory
        out[m.name] += loose_r * m.read_pj_per_byte + loose_w * m.write_pj_per_byte
    return out


def energy_breakdown(a: Actions, target) -> dict[str, float]:
    """Dynamic energy in pJ per action kind (each memory the DMA reaches by its name), from the
    target's energy table and memories."""
    energy = target.energy
    return {
        "mac_int8": a.macs_int8 * energy.mac_int8_pj,
        "mac_fp16": a.macs_fp16 * energy.mac_fp16_pj,
        "spad_read": a.spad_read * energy.spad_read_pj_per_byte,
        "spad_write": a.spad_write * energy.spad_write_pj_per_byte,
        "acc_read": a.acc_read * energy.acc_read_pj_per_byte,
        "acc_write": a.acc_write * energy.acc_write_pj_per_byte,
        **memory_energy_pj(a, target),
        "vector": a.vector_lane_ops * energy.vector_lane_op_pj,
        "instruction": a.instructions * energy.instruction_pj,
        **({"weight_decoder": a.decoded_bytes * target.weight_decoder.pj_per_byte}
           if getattr(target, "weight_decoder", None) is not None else {}),
    }
