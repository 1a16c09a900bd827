"""Tensors that live in the scratchpad: the one hook that lets a kernel read and write them there.

A kernel implementation addresses its tensors as DRAM (``DMA_LOAD``/``DMA_STORE`` between a
tensor's address and a tile).  When a tensor lives in the scratchpad instead (an intermediate of a
fused chain, a constant a chain holds, an activation the memory plan keeps on chip across kernels)
its DRAM-side address is a *window*: a range that no memory of the system address map holds,
mapped onto scratchpad bytes.  :class:`LocalEmitter` is the emitter such a kernel is given: a DMA
whose DRAM side lies in a window becomes a scratchpad-to-scratchpad ``VUN`` copy of the same
elements (the window's strides are the scratchpad strides), so those bytes never travel off chip;
every other instruction passes through to the emitter below it, which orders the accesses
(dependency tokens) as for any kernel, across kernels too.  Emitters nest: a fused chain's
emitter sits on the memory plan's one when the chain reads a tensor kept on chip.

``RESIDENT_BASE`` is where the memory plan's on-chip tensors are addressed: address
``RESIDENT_BASE + a`` is scratchpad byte ``a``, in the top 64 MiB of the DMA's 32-bit address
field (above every memory of the system address map, and above the virtual addresses of fused
chains' intermediates, which follow the map).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from npuc.codegen.epilogue import vector_nd
from npuc.errors import CompileError
from npuc.isa.enums import DType, Space
from npuc.isa.instr import build_args, get_def
from npuc.isa.widths import DRAM_ADDR_BITS

RESIDENT_BASE = (1 << DRAM_ADDR_BITS) - (1 << 26)

_COPY_DTYPE = {1: DType.int8, 2: DType.fp16, 4: DType.int32}


def is_resident_address(addr: int) -> bool:
    """Whether a DRAM-side address names scratchpad bytes kept by the memory plan."""
    return RESIDENT_BASE <= addr < 1 << DRAM_ADDR_BITS


class Move(NamedTuple):
    """The DRAM side of a DMA_LOAD/DMA_STORE."""

    addr: int      # first byte
    end: int       # one past the last
    nbytes: int    # bytes moved
    esize: int
    on_spad: bool  # the other side is the scratchpad (not the accumulator)


def dma_bytes(op: str, fields: dict[str, Any]) -> Move:
    """What a DMA_LOAD/DMA_STORE with ``fields`` moves on its DRAM side."""
    a = build_args(get_def(op), {**fields, "dram_addr": 0})
    es = a.esize
    shape = (a.n2, a.n1, a.n0)
    strides = (a.dram_s2, a.dram_s1, a.dram_s0)
    addr = fields["dram_addr"]
    end = addr + sum((n - 1) * s for n, s in zip(shape, strides)) + es
    return Move(addr, end, a.n0 * a.n1 * a.n2 * es, es, a.local is Space.spad)


class LocalEmitter:
    """The emitter a kernel sees when some of its tensors live in the scratchpad (module
    docstring).  ``windows``: DRAM-side [lo, hi) -> (scratchpad address - lo, what);
    ``moves``: DRAM-side [lo, hi) -> (real address - lo, what): a DMA there stays a DMA, at the
    real address (a fused chain's intermediates kept in SRAM, ``ChainAttrs.sram_bytes``);
    ``strict``: a DRAM-side range in which every DMA must fall in a window or a move (a fused
    chain's virtual intermediates), else it is an internal error; ``target``: the target the
    kernels plan on (their part of the scratchpad)."""

    def __init__(self, em: Any, target: Any, windows: list[tuple[int, int, int, str]] | None = None,
                 strict: tuple[int, int] | None = None) -> None:
        self.em, self.target = em, target
        self.windows: list[tuple[int, int, int, str]] = list(windows or [])
        self.moves: list[tuple[int, int, int, str]] = []
        self.strict = strict

    def source(self, label: str):
        return self.em.source(label)

    def __len__(self) -> int:
        return len(self.em)

    def emit(self, op: str, /, **fields: Any) -> int:
        if op == "DMA_COPY":
            return self._copy(fields["src_addr"], fields["dst_addr"], fields["nbytes"])
        if op not in ("DMA_LOAD", "DMA_STORE"):
            return self.em.emit(op, **fields)
        addr = fields["dram_addr"]
        moved = [w for w in self.moves if w[0] <= addr < w[1]]
        if moved:
            lo, hi, delta, what = moved[0]
            if dma_bytes(op, fields).end > hi:
                raise CompileError(f"internal error: a kernel moves DRAM-side 0x{addr:x} across the end of the rows "
                                   f"of {what} its chain holds")
            return self.em.emit(op, **{**fields, "dram_addr": addr + delta})
        hit = [w for w in self.windows if w[0] <= addr < w[1]]
        if not hit:
            if self.strict is not None and self.strict[0] <= addr < self.strict[1]:
                raise CompileError(f"internal error: a fused chain member moves DRAM 0x{addr:x} outside the rows "
                                   "its chain holds")
            return self.em.emit(op, **fields)
        end = dma_bytes(op, fields).end
        spad = next((addr + d for lo, hi, d, _ in hit if end <= hi), None)
        if spad is None:
            raise CompileError(f"internal error: a kernel moves DRAM-side [0x{addr:x}, 0x{end:x}) across the end of "
                               f"the scratchpad window of {hit[0][3]}")
        a = build_args(get_def(op), {**fields, "dram_addr": 0})
        if a.local is not Space.spad:
            raise CompileError(f"internal error: a kernel moves {hit[0][3]}, which lives in the scratchpad, to the "
                               "accumulator")
        es = a.esize
        shape = (a.n2, a.n1, a.n0)
        local = (a.local_addr, (a.local_s2, a.local_s1, es))
        other = (spad, (a.dram_s2, a.dram_s1, a.dram_s0))
        src, dst = (other, local) if op == "DMA_LOAD" else (local, other)
        vector_nd(self.em, "VUN", shape, {"dst": dst, "src": src}, op="copy", dtype=_COPY_DTYPE[es].name)
        return len(self.em) - 1

    def _side(self, addr: int, n: int) -> tuple[bool, int]:
        """(whether it is in the scratchpad, its address there or in the system address map) of
        one side of a memory-to-memory copy of ``n`` bytes at DRAM-side ``addr``."""
        for lo, hi, delta, what in self.moves:
            if lo <= addr < hi:
                if addr + n > hi:
                    raise CompileError(f"internal error: a copy crosses the end of the rows of {what} its chain holds")
                return False, addr + delta
        for lo, hi, delta, what in self.windows:
            if lo <= addr < hi:
                if addr + n > hi:
                    raise CompileError(f"internal error: a copy crosses the end of the scratchpad window of {what}")
                return True, addr + delta
        if self.strict is not None and self.strict[0] <= addr < self.strict[1]:
            raise CompileError(f"internal error: a fused chain member copies DRAM 0x{addr:x} outside the rows its "
                               "chain holds")
        return False, addr

    def _copy(self, src: int, dst: int, n: int) -> int:
        """A ``DMA_COPY`` of ``n`` bytes whose sides may live in the scratchpad: a copy between
        two memories of the system address map stays one; one side on chip makes it a load or a
        store; both, a vector copy."""
        (s_local, s), (d_local, d) = self._side(src, n), self._side(dst, n)
        if not s_local and not d_local:
            return self.em.emit("DMA_COPY", src_addr=s, dst_addr=d, nbytes=n)
        if s_local and d_local:
            vector_nd(self.em, "VUN", (1, 1, n), {"dst": (d, (n, n, 1)), "src": (s, (n, n, 1))}, op="copy",
                      dtype=_COPY_DTYPE[1].name)
            return len(self.em) - 1
        if d_local:
            return self.em.emit("DMA_LOAD", esize=1, dram_addr=s, local_addr=d, n0=n)
        return self.em.emit("DMA_STORE", esize=1, dram_addr=d, local_addr=s, n0=n)
