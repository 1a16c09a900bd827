"""A residual ``qadd`` fused into an int8 array kernel's epilogue, as instruction fields: what the
code generator emits (``npuc.codegen.kernels.array_engine``) and what the cost model times
(``npuc.schedule.cost``).

After its own REQUANT the kernel holds its int8 result ``y`` (an ``m x n`` tile in the
scratchpad) and the int8 operand tile ``r``.  The step is the ``QADD`` instruction of the
``qbinary`` kernel (so the same bits as the unfused qadd, ``npuc.quant.arith.run_qadd``): ``y``
less its zero point times its factor plus ``r`` less its zero point times its factor,
requantized per tensor with the qadd's record, written over ``y`` -- one instruction per
``n1``-sized block of rows, no int32 buffer.
"""

from __future__ import annotations

from typing import NamedTuple

from npuc.isa.instr import field_max
from npuc.kir.kernel import QAddStep

Instr = tuple[str, dict]
_MAX_ROWS = field_max("QADD", "n1")


class Block(NamedTuple):
    """A 2-D block on chip: element (r, c) at ``addr + r * s1 + c * s0`` of ``space`` (zero
    strides broadcast)."""

    space: str
    addr: int
    s0: int
    s1: int


def qadd_instrs(q: QAddStep, m: int, n: int, y: Block, r: Block, record: int) -> list[Instr]:
    """The QADD instructions of fused qadd step ``q`` on an ``m x n`` tile: ``y`` (the kernel's
    int8 result, also the destination) plus the operand ``r``; ``record`` is the scratchpad
    address of its REQUANT record."""
    out: list[Instr] = []
    for r0 in range(0, m, _MAX_ROWS):
        rows = min(_MAX_ROWS, m - r0)
        out.append(_qadd(q, rows, n, _at(y, r0), _at(r, r0), record))
    return out


def _at(b: Block, r0: int) -> Block:
    return b._replace(addr=b.addr + r0 * b.s1)


def _qadd(q: QAddStep, m: int, n: int, y: Block, r: Block, record: int) -> Instr:
    def strides(prefix: str, b: Block) -> dict:
        return {f"{prefix}_space": b.space, prefix: b.addr, f"{prefix}_s0": b.s0 if n > 1 else 0,
                f"{prefix}_s1": b.s1 if m > 1 else 0}

    (zy, zr), (fy, fr) = q.zero_points, q.factors
    return ("QADD", dict(n0=n, n1=m, **strides("dst", y), **strides("a", y), **strides("b", r),
                         za=zy, fa=fy, zb=zr, fb=fr, qparams=record, zp=q.out_zero_point, qmin=q.qmin, qmax=q.qmax))
