"""An int8 kernel's epilogue as instruction fields: what the code generator emits
(``npuc.codegen.epilogue``, ``npuc.codegen.kernels.array_engine``) and what the cost model times
(``npuc.schedule.cost``).

**Requantization.**  The int32 sums (in ACC or the scratchpad) plus the folded bias become the
int8 tile with one ``REQUANT`` per ``n1``-sized block of rows (:func:`requant_instrs`).  A
per-channel bias that is one int32 row in the scratchpad rides on REQUANT's pre-adder
(``add_bias``): no separate pass over the int32 sums, so the vector queue does 2 lane-ops per
element instead of 3 (and reads and writes no accumulator words for the bias); any other bias
is added first by one ``VBIN add`` of int32 (the same saturated sum, so the same bits).

**Residual add.**  After its own REQUANT the kernel holds its int8 result ``y`` (an ``m x n`` tile in the
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
_MAX_COUNT = field_max("REQUANT", "n1")


class Block(NamedTuple):
    """A 2-D block on chip: element (r, c) at ``addr + r * s1 + c * s0`` of ``space`` (zero
    strides broadcast)."""

    space: str
    addr: int
    s0: int
    s1: int


def requant_instrs(m: int, n: int, src: Block, dst: Block, bias: Block | None, records: int, zero_point: int,
                   qmin: int = -128, qmax: int = 127, per_channel: bool = True) -> list[Instr]:
    """The instructions that turn an ``m x n`` int32 tile ``src`` plus ``bias`` (int32, broadcast
    by its strides; None: none) into the int8 tile ``dst`` with the (multiplier, shift)
    records at scratchpad address ``records`` (one per column when ``per_channel``), the output
    zero point and the clamp (module docstring)."""
    out: list[Instr] = []
    folded = bias is not None and folds_into_requant(bias)
    if bias is not None and not folded:
        out += _rows("VBIN", m, n, dict(op="add", dtype="int32"), dst=src, a=src, b=bias)
    extra = dict(per_channel=per_channel, qparams=records, zp=int(zero_point), qmin=int(qmin), qmax=int(qmax))
    if folded:
        extra.update(add_bias=True, bias=bias.addr)
    return out + _rows("REQUANT", m, n, extra, dst=dst, src=src)


def folds_into_requant(bias: Block) -> bool:
    """Whether REQUANT adds ``bias`` itself: one row of contiguous int32 in the scratchpad."""
    return bias.space == "spad" and bias.s1 == 0 and bias.s0 == 4


def _rows(op: str, m: int, n: int, extra: dict, **operands: Block) -> list[Instr]:
    """``op`` over an ``m x n`` block of each operand, one instruction per ``n1``-sized block of rows."""
    out: list[Instr] = []
    for r0 in range(0, m, _MAX_COUNT):
        rows = min(_MAX_COUNT, m - r0)
        f = dict(n0=n, n1=rows, **extra)
        for name, b in operands.items():
            f.update({f"{name}_space": b.space, name: b.addr + r0 * b.s1, f"{name}_s0": b.s0 if n > 1 else 0,
                      f"{name}_s1": b.s1 if rows > 1 else 0})
        out.append((op, f))
    return out


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
