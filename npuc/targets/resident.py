"""A resident region carved out of the scratchpad: tensors that stay on chip across kernels.

``with_resident(target, nbytes)`` is the target as the compiler sees it when ``nbytes`` of the
scratchpad are set aside as a memory of the system address map: a memory ``resident`` (kind
sram, first in the map, holding activations and model inputs and outputs) whose transfers are
on-chip copies at scratchpad bandwidth and scratchpad energy (a read of the resident bytes, the
write into the kernel's tile is the scratchpad write every load pays), behind a port of its own;
the kernels tile with the scratchpad that remains.  The memory planner then places the
activations that fit there, by liveness, before DRAM.  The result is a target of its own (its own
fingerprint and name, ``NAME.residentNk``): a binary built for it records it.  Not modelled: the
copies share the scratchpad banks with the kernels' own accesses.

This is the architect's fixed split (``bench/memory_bench.py --resident-kib``).  The compiler's
own choice of what stays on chip, for the unchanged target, is ``npuc.compile(...,
resident=True)`` (``npuc.codegen.resident_plan``), where the kernels reach the tensors in the
scratchpad directly (``npuc.codegen.local_memory``).
"""

from __future__ import annotations

import dataclasses

from npuc.errors import TargetError
from npuc.targets.target import MemoryConfig, Target

RESIDENT = "resident"


def with_resident(target: Target, nbytes: int) -> Target:
    """``target`` with ``nbytes`` of its scratchpad carved out as the memory ``resident``."""
    row = target.scratchpad.banks * target.scratchpad.bank_width_bytes
    if nbytes <= 0 or nbytes % row:
        raise TargetError(f"a resident region must be a positive multiple of the scratchpad's {row}-byte bank rows, got {nbytes}")
    if nbytes >= target.scratchpad.size_bytes:
        raise TargetError(f"a resident region of {nbytes:,} bytes leaves nothing of target '{target.name}''s "
                          f"{target.scratchpad.size_bytes:,}-byte scratchpad to the kernels")
    if any(m.name == RESIDENT for m in target.memories):
        raise TargetError(f"target '{target.name}' already has a memory named '{RESIDENT}'")
    e = target.energy
    resident = MemoryConfig(RESIDENT, "sram", nbytes, target.spad_bytes_per_cycle, 1, row, e.spad_read_pj_per_byte,
                            e.spad_write_pj_per_byte, ("activations", "io"), "onchip")
    spad = dataclasses.replace(target.scratchpad, size_bytes=target.scratchpad.size_bytes - nbytes)
    return dataclasses.replace(target, name=f"{target.name}.resident{nbytes // 1024}k", scratchpad=spad,
                               memories=(resident, *target.memories),
                               description=f"{target.description}; {nbytes // 1024} KiB of the scratchpad resident")
