"""Prefetch across kernels: the next kernel's scratchpad beside the current one's.

Every kernel plans its scratchpad from address 0.  Two kernels in a row then share bytes, so the
next kernel's first loads (its weights, its first input tiles) wait, by their dependency tokens,
for the current kernel's last reads of those bytes: a bubble at the start of every layer.  When
both fit, :func:`scratchpad_bases` moves the next kernel's scratchpad to bytes the current one
does not touch (below it when it fits there, else above it), and :class:`ShiftedEmitter` adds
that base to every scratchpad address it emits.  The next kernel's weight loads then run on the
load queue as soon as the current kernel's loads have left it, during its compute; the
emitter's dependency tokens still order every real conflict (a kernel's input is its producer's
output), so the simulator's race detector sees the same accesses, only fewer false waits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from npuc.errors import CompileError
from npuc.isa.enums import Mem
from npuc.isa.instr import build_args, get_def
from npuc.kir.tile_program import LOCAL_ADDRESS_FIELDS

ALIGN = 64


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def scratchpad_bases(footprints: Sequence[int], limits: Sequence[int]) -> list[int]:
    """A scratchpad base per kernel, in program order, from each one's footprint (bytes from 0)
    and the scratchpad bytes it may use: disjoint from the kernel before it where both fit, else
    0."""
    out: list[int] = []
    lo = hi = 0  # the previous kernel's bytes
    for n, size in zip(footprints, limits):
        n = _align(n)
        if n <= lo:
            base = 0
        elif _align(hi) + n <= size:
            base = _align(hi)
        else:
            base = 0
        out.append(base)
        lo, hi = base, base + n
    return out


def accumulator_bases(footprints: Sequence[int], size: int) -> list[int]:
    """An accumulator base per kernel, in program order, from each one's accumulator bytes:
    disjoint from the kernel before it where both fit in ``size`` bytes, else 0 (as
    :func:`scratchpad_bases`).  The next kernel's first matrix products then do not wait for
    the current kernel's last epilogue (on the vector queue) to have read its accumulator
    tiles: only its real inputs order it."""
    return scratchpad_bases(footprints, [size] * len(footprints))


def _local_fields(op: str, fields: dict[str, Any]) -> list[tuple[str, Mem]]:
    """The local address fields of an instruction and the memory each points into (the
    scratchpad, or the accumulator)."""
    out = []
    for name in LOCAL_ADDRESS_FIELDS:
        if name not in fields or not isinstance(fields[name], int):
            continue
        if op in ("MATMUL", "MATMUL_DW", "MATMUL_OS") and name == "out_addr":
            out.append((name, Mem.acc))
            continue
        space = fields.get("local") if name == "local_addr" else fields.get(f"{name}_space")
        out.append((name, Mem.acc if getattr(space, "name", space) == "acc" else Mem.spad))
    return out


class ShiftedEmitter:
    """An emitter that moves a kernel's scratchpad up by ``base`` bytes and its accumulator up
    by ``acc_base`` bytes (module docstring); every instruction's scratchpad and accumulator
    regions are checked to have moved by exactly that much and to end below ``limit`` (the
    kernels' part of the scratchpad) and the accumulator's size, its DRAM regions not to move."""

    def __init__(self, em: Any, target: Any, base: int, limit: int, acc_base: int = 0) -> None:
        self.em, self.target, self.base, self.limit = em, target, base, limit
        self.shift = {Mem.spad: base, Mem.acc: acc_base}
        self.ends = {Mem.spad: limit, Mem.acc: target.accumulator.size_bytes}

    def source(self, label: str):
        return self.em.source(label)

    def __len__(self) -> int:
        return len(self.em)

    @property
    def nests(self) -> bool:
        """Whether the emitter below takes loop nests (then this one does too)."""
        return bool(getattr(self.em, "nests", False)) and hasattr(self.em, "emit_loop")

    def emit(self, op: str, /, **fields: Any) -> int:
        return self.em.emit(op, **self._moved(op, fields))

    def emit_loop(self, nest: Any) -> None:
        """A loop nest with its body moved (the strides do not change)."""
        body = tuple(replace(s, fields=tuple(self._moved(s.op, dict(s.fields)).items())) for s in nest.body)
        self.em.emit_loop(replace(nest, body=body))

    def _moved(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        if not any(self.shift.values()):
            return fields
        moved = dict(fields)
        for name, mem in _local_fields(op, fields):
            moved[name] = fields[name] + self.shift[mem]
        self._check(op, fields, moved)
        return moved

    def _check(self, op: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        d = get_def(op)
        if d is None or op in ("LOOP", "NOP", "END"):
            return
        try:
            ra = d.regions(build_args(d, before))
            rb = d.regions(build_args(d, after))
        except Exception:  # an invalid instruction: the emitter below says why
            return
        for x, y in zip(ra, rb):
            by = self.shift.get(x.mem, 0)
            if not by and y == x:  # a memory this emitter does not move (the kept tensors above the kernels' part)
                continue
            if y.addr != x.addr + by or (x.mem in self.ends and y.end > self.ends[x.mem]):
                raise CompileError(f"internal error: moving a kernel's {x.mem.name} by {by} bytes moved a "
                                   f"{x.mem.name} region of {op} from 0x{x.addr:x} to 0x{y.addr:x}")
