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


def _spad_fields(op: str, fields: dict[str, Any]) -> list[str]:
    """The scratchpad address fields of an instruction (its local address fields that do not
    point into the accumulator)."""
    out = []
    for name in LOCAL_ADDRESS_FIELDS:
        if name not in fields or not isinstance(fields[name], int):
            continue
        if op in ("MATMUL", "MATMUL_DW", "MATMUL_OS") and name == "out_addr":
            continue
        space = fields.get("local") if name == "local_addr" else fields.get(f"{name}_space")
        if getattr(space, "name", space) == "acc":
            continue
        out.append(name)
    return out


class ShiftedEmitter:
    """An emitter that moves a kernel's scratchpad up by ``base`` bytes (module docstring);
    every instruction's scratchpad regions are checked to have moved by exactly ``base`` and to
    end below ``limit`` (the kernels' part of the scratchpad), its other regions not to move."""

    def __init__(self, em: Any, target: Any, base: int, limit: int) -> None:
        self.em, self.target, self.base, self.limit = em, target, base, limit

    def source(self, label: str):
        return self.em.source(label)

    def __len__(self) -> int:
        return len(self.em)

    def emit(self, op: str, /, **fields: Any) -> int:
        if not self.base:
            return self.em.emit(op, **fields)
        moved = dict(fields)
        for name in _spad_fields(op, fields):
            moved[name] = fields[name] + self.base
        self._check(op, fields, moved)
        return self.em.emit(op, **moved)

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
            want = x.addr + self.base if x.mem is Mem.spad else x.addr
            if y.addr != want or (y.mem is Mem.spad and y.end > self.limit):
                raise CompileError(f"internal error: moving a kernel's scratchpad by {self.base} bytes moved a "
                                   f"{x.mem.name} region of {op} from 0x{x.addr:x} to 0x{y.addr:x}")
