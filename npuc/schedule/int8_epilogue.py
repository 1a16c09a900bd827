"""A residual ``qadd`` fused into an int8 array kernel's epilogue, as instruction fields: what the
code generator emits (``npuc.codegen.kernels.array_engine``) and what the cost model times
(``npuc.schedule.cost``).

After its own REQUANT the kernel holds its int8 result ``y`` (an ``m x n`` tile in the
scratchpad) and the int8 operand tile ``r``.  The step runs the integer steps of
``npuc.quant.arith.run_qadd`` with the instructions of the ``qbinary`` kernel (so the same bits as
the unfused qadd): VCVT both to int32 (``y`` into the accumulator tile, which its REQUANT has
freed; ``r`` into a scratchpad buffer), VUN adds ``-z`` and muls by the factor on each, VBIN add,
then REQUANT per tensor with the qadd's record, writing the int8 result over ``y``.
"""

from __future__ import annotations

from typing import NamedTuple

from npuc.isa.instr import field_max
from npuc.kir.kernel import QAddStep

Instr = tuple[str, dict]
_MAX_ROWS = field_max("VUN", "n1")


class Block(NamedTuple):
    """A 2-D block on chip: element (r, c) at ``addr + r * s1 + c * s0`` of ``space`` (zero
    strides broadcast)."""

    space: str
    addr: int
    s0: int
    s1: int


def qadd_instrs(q: QAddStep, m: int, n: int, y: Block, acc: Block, r: Block, wide: Block, record: int) -> list[Instr]:
    """The vector instructions of fused qadd step ``q`` on an ``m x n`` tile (see the module
    docstring); ``record`` is the scratchpad address of its REQUANT record."""
    out: list[Instr] = []
    for r0 in range(0, m, _MAX_ROWS):
        rows = min(_MAX_ROWS, m - r0)
        out += _rows(q, rows, n, *(_at(b, r0) for b in (y, acc, r, wide)), record)
    return out


def _at(b: Block, r0: int) -> Block:
    return b._replace(addr=b.addr + r0 * b.s1)


def _rows(q: QAddStep, m: int, n: int, y: Block, acc: Block, r: Block, wide: Block, record: int) -> list[Instr]:
    def s1(b: Block) -> int:
        return b.s1 if m > 1 else 0

    def s0(b: Block) -> int:
        return b.s0 if n > 1 else 0

    def vcvt(src: Block, dst: Block) -> Instr:
        return ("VCVT", dict(src_dtype="int8", dst_dtype="int32", n0=n, n1=m,
                             src_space=src.space, src=src.addr, src_s0=s0(src), src_s1=s1(src),
                             dst_space=dst.space, dst=dst.addr, dst_s0=dst.s0, dst_s1=s1(dst)))

    def vun(b: Block, op: str, imm: float) -> Instr:
        return ("VUN", dict(op=op, dtype="int32", n0=n, n1=m, dst_space=b.space, dst=b.addr, dst_s0=b.s0,
                            dst_s1=s1(b), src_space=b.space, src=b.addr, src_s0=s0(b), src_s1=s1(b), imm0=float(imm)))

    out: list[Instr] = []
    for src, dst, z, f in ((y, acc, q.zero_points[0], q.factors[0]), (r, wide, q.zero_points[1], q.factors[1])):
        out.append(vcvt(src, dst))
        if z:
            out.append(vun(dst, "adds", -z))
        out.append(vun(dst, "muls", f))
    out.append(("VBIN", dict(op="add", dtype="int32", n0=n, n1=m, dst_space=acc.space, dst=acc.addr, dst_s0=acc.s0,
                             dst_s1=s1(acc), a_space=acc.space, a=acc.addr, a_s0=acc.s0, a_s1=s1(acc),
                             b_space=wide.space, b=wide.addr, b_s0=wide.s0, b_s1=s1(wide))))
    out.append(("REQUANT", dict(n0=n, n1=m, per_channel=False, qparams=record, zp=q.out_zero_point, qmin=q.qmin,
                                qmax=q.qmax, src_space=acc.space, src=acc.addr, src_s0=acc.s0, src_s1=s1(acc),
                                dst_space=y.space, dst=y.addr, dst_s0=y.s0, dst_s1=s1(y))))
    return out
