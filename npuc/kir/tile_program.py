"""A vector or data-movement kernel's schedule as data: named on-chip buffers and a loop of steps.

A :class:`TileProgram` is what such a kernel's plan *is*: the scratchpad buffers it allocates
(each named, with its address and size) and, in program order, every DMA and vector step it
issues, each tagged with the iteration of the tile loop it belongs to (``-1``: before the loop,
e.g. a table or weights loaded once).  Iterations are software-pipelined, so the loads of tile
``i+1`` may appear between the steps of tile ``i``.

Three walkers read this one description and nothing else:

* code generation emits its steps, in order, through the emitter (which adds the tokens);
* the cost model (:mod:`npuc.schedule.vector_cost`) times them with the instructions' own
  timing functions on a four-queue timeline;
* :meth:`TileProgram.text` prints it as a loop nest for ``--print-after codegen``: runs of
  iterations with the same steps print once, addresses as buffer or tensor names plus offsets.

The footprint a plan reports (:attr:`TileProgram.spad_bytes`) is read off the buffers, so a plan
and its emission cannot disagree.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Iterator

from npuc.isa.widths import DRAM_ADDR_BITS, LOCAL_ADDR_BITS
from npuc.memo import Memo



def _address_fields(bits: int) -> frozenset[str]:
    """The instruction fields that hold an address ``bits`` wide, read off the instruction
    definitions (``npuc.isa.fields.addr``: hex fields of the address widths)."""
    import npuc.isa.defs  # noqa: F401  (registers every instruction)
    from npuc.isa.instr import all_defs

    return frozenset(f.name for d in all_defs() for f in d.fields if f.hex and f.bits == bits)


# instruction fields that hold an address of the scratchpad/accumulator, or of the system address map
LOCAL_ADDRESS_FIELDS = _address_fields(LOCAL_ADDR_BITS)
DRAM_ADDRESS_FIELDS = _address_fields(DRAM_ADDR_BITS)


@dataclass(frozen=True)
class Buffer:
    """One named on-chip buffer: ``nbytes`` at byte address ``addr`` of ``mem`` (``spad``, or
    ``acc`` for the array's accumulator)."""

    name: str
    addr: int
    nbytes: int
    mem: str = "spad"

    @property
    def end(self) -> int:
        return self.addr + self.nbytes


@dataclass(frozen=True, slots=True)
class Step:
    """One instruction of the schedule: its op, its fields (as docs/isa.md names them) and the
    tile-loop iteration it belongs to (-1 before the loop)."""

    op: str
    fields: tuple[tuple[str, Any], ...]
    tile: int

    def kwargs(self) -> dict[str, Any]:
        return dict(self.fields)

    def shape_key(self) -> tuple:
        """The step without its addresses: equal for two iterations that do the same work."""
        return (self.op,) + tuple(kv for kv in self.fields if kv[0] not in LOCAL_ADDRESS_FIELDS
                                  and kv[0] not in DRAM_ADDRESS_FIELDS)


@dataclass(frozen=True)
class DramName:
    """A DRAM tensor the steps address, for printing (``x+4096``)."""

    name: str
    addr: int
    span: int


@dataclass(frozen=True)
class TileProgram:
    """A kernel's buffers and steps (see the module docstring).  ``loop`` says what one
    iteration covers; ``choice`` is the kind-specific tiling the steps were built from."""

    kernel: str
    kind: str
    loop: str
    buffers: tuple[Buffer, ...]
    steps: tuple[Step, ...]
    tensors: tuple[DramName, ...] = ()
    choice: Any = None
    built_for: Any = field(default=None, compare=False, repr=False)  # the Kernel record, to check reuse

    @property
    def spad_bytes(self) -> int:
        return max((b.end for b in self.buffers if b.mem == "spad"), default=0)

    @property
    def acc_bytes(self) -> int:
        return max((b.end for b in self.buffers if b.mem == "acc"), default=0)

    @property
    def tiles(self) -> int:
        return 1 + max((s.tile for s in self.steps), default=-1)

    def by_tile(self) -> Iterator[tuple[int, tuple[Step, ...]]]:
        """(iteration, its steps in program order), the prologue (-1) first."""
        groups: dict[int, list[Step]] = {}
        for s in self.steps:
            groups.setdefault(s.tile, []).append(s)
        for t in sorted(groups):
            yield t, tuple(groups[t])

    # ------------------------------------------------------------------ text

    def text(self, indent: str = "") -> str:
        """The loop nest: buffers, the prologue, then runs of iterations with the same steps."""
        names = _Namer(self.buffers, self.tensors)
        lines = [f"{indent}tile program '{self.kernel}' ({self.kind}): {self.tiles} iterations of {self.loop}, "
                 f"{len(self.steps)} steps, {self.spad_bytes} B of scratchpad"
                 + (f", {self.acc_bytes} B of accumulator" if self.acc_bytes else "")]
        for b in self.buffers:
            lines.append(f"{indent}  buffer {b.name!r} {b.mem}[{b.addr}, {b.end})")
        groups = list(self.by_tile())
        i = 0
        while i < len(groups):
            t, body = groups[i]
            key = tuple(s.shape_key() for s in body)
            j = i + 1
            while j < len(groups) and groups[j][0] >= 0 and t >= 0 and tuple(s.shape_key() for s in groups[j][1]) == key:
                j += 1
            if t < 0:
                head = "before the loop:"
            elif j - i == 1:
                head = f"iteration {t}:"
            else:
                head = f"iterations {t}..{groups[j - 1][0]} ({j - i}x, as iteration {t}):"
            lines.append(f"{indent}  {head}")
            lines.extend(f"{indent}    {names.step(s)}" for s in body)
            i = j
        return "\n".join(lines)


class _Namer:
    """Addresses as ``buffer+offset`` (scratchpad, accumulator) or ``tensor+offset`` (DRAM)."""

    def __init__(self, buffers: tuple[Buffer, ...], tensors: tuple[DramName, ...]) -> None:
        ordered = sorted(buffers, key=lambda b: b.addr)
        self.spad = _Lookup([b for b in ordered if b.mem == "spad"])
        self.acc = _Lookup([b for b in ordered if b.mem == "acc"])
        self.tensors = sorted(tensors, key=lambda t: t.addr)
        self.tstarts = [t.addr for t in self.tensors]

    def _local(self, a: int, acc: bool) -> str:
        return (self.acc if acc else self.spad).name(a)

    def _dram(self, a: int) -> str:
        i = bisect_right(self.tstarts, a) - 1
        if i >= 0 and a < self.tensors[i].addr + max(self.tensors[i].span, 1):
            t = self.tensors[i]
            return f"{t.name}+{a - t.addr}" if a != t.addr else t.name
        return f"dram+{a}"

    def step(self, s: Step) -> str:
        from npuc.isa.enums import Mem

        parts = []
        mems = address_memories(s)
        for k, v in s.fields:
            if k in DRAM_ADDRESS_FIELDS:
                v = self._dram(v)
            elif k in LOCAL_ADDRESS_FIELDS and isinstance(v, int):
                v = self._local(v, mems.get(k) is Mem.acc)
            elif hasattr(v, "name") and not isinstance(v, (int, float)):
                v = v.name
            parts.append(f"{k}={v}")
        return f"{s.op} " + " ".join(parts)


_MEMORIES: Memo[tuple, tuple[tuple[str, Any], ...]] = Memo(1 << 14, "address field memories")


def address_memories(s: Step) -> dict[str, Any]:
    """Each scratchpad/accumulator address field of ``s`` and the memory (``Mem.spad`` or
    ``Mem.acc``) it places a region in, read off the instruction's own regions: the field moved
    by one byte, the region that moves with it.  A field that places no region (an empty
    operand) is left out.  What a field addresses depends on the step's other fields (an
    operand's ``_space``), never on its addresses, so the answer is kept per ``shape_key``."""
    key = s.shape_key()
    hit = _MEMORIES.get(key)
    if hit is None:
        from npuc.isa.instr import build_args, get_def

        d = get_def(s.op)
        f = s.kwargs()
        before = d.regions(build_args(d, f))
        out = []
        for name, v in s.fields:
            if name not in LOCAL_ADDRESS_FIELDS or not isinstance(v, int):
                continue
            after = d.regions(build_args(d, {**f, name: v + 1}))
            mems = {r.mem for r, t in zip(before, after) if r is not None and t is not None and r.addr != t.addr}
            if len(mems) == 1:
                out.append((name, mems.pop()))
        hit = _MEMORIES.put(key, tuple(out))
    return dict(hit)


class _Lookup:
    """The buffer holding an address."""

    def __init__(self, buffers: list[Buffer]) -> None:
        self.buffers = buffers
        self.starts = [b.addr for b in buffers]

    def name(self, a: int) -> str:
        i = bisect_right(self.starts, a) - 1
        if i >= 0 and a < self.buffers[i].end:
            b = self.buffers[i]
            return f"{b.name}+{a - b.addr}" if a != b.addr else b.name
        return str(a)
