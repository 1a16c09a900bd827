"""Vector unit instructions: elementwise, lookup table, requantization, conversion, reductions,
pooling windows and fills, on 2-D strided operands in the scratchpad or the accumulator."""

from __future__ import annotations

import numpy as np

from npuc.errors import SimulationError
from npuc.isa.defs.common import (
    VECTOR_TIMING_DOC,
    acc_operand_problem,
    float_problem,
    mem_of,
    operand,
    region2d,
    vector_actions,
    vector_timing,
)
from npuc.isa.enums import BinOp, CmpOp, DType, Mem, PoolOp, Queue, ReduceOp, Space, UnOp, Unit
from npuc.isa.fields import Derived, addr, choice, count, f32, flag, sint, uint
from npuc.isa.instr import InstrDef, register
from npuc.isa.numerics import quantized_add, quantized_mul, requantize, saturate_int32, to_dtype, unary, widen
from npuc.isa.region import Region
from npuc.isa.widths import LOCAL_ADDR_BITS


def _es(key: str) -> Derived:
    return Derived(f"{key}.size")


def _counts():
    return (count("n0", "elements per row (inner loop)"), count("n1", "rows (outer loop)", default=1))


def _dtype(name: str = "dtype", doc: str = "element type of every operand"):
    return choice(name, 3, DType, doc)


def _vector(name, opcode, summary, fields, regions, execute, lane_ops, semantics, energy, check=None, validate=None):
    """Register a vector-unit instruction with the shared timing and energy rules."""
    register(
        InstrDef(
            name=name,
            opcode=opcode,
            queue=Queue.vector,
            unit=Unit.vector,
            summary=summary,
            fields=tuple(fields),
            regions=regions,
            execute=execute,
            timing=lambda a, t, r: vector_timing(lane_ops(a), t, r),
            actions=lambda a, t, r: vector_actions(lane_ops(a), t, r),
            check=check or (lambda a, t: None),
            validate=validate or (lambda a: None),
            semantics_doc=semantics,
            timing_doc=VECTOR_TIMING_DOC,
            energy_doc=energy,
        )
    )


_RW_DOC = "Scratchpad/accumulator bytes read and written by the operands"

# ------------------------------------------------------------------------------------ VBIN
_BIN = {
    BinOp.add: np.add,
    BinOp.sub: np.subtract,
    BinOp.mul: np.multiply,
    BinOp.max: np.maximum,
    BinOp.min: np.minimum,
}


def _vbin_dst_dtype(a) -> DType:
    """``mac`` accumulates into a wide destination: int32 for integers, fp32 for floats."""
    if a.op is not BinOp.mac:
        return a.dtype
    return DType.fp32 if a.dtype.is_float else DType.int32


def _vbin_regions(a):
    dst = region2d(a, "dst", _vbin_dst_dtype(a), "rw" if a.op is BinOp.mac else "w")
    return region2d(a, "a", a.dtype, "r"), region2d(a, "b", a.dtype, "r"), dst


def _vbin_exec(st, a, regions) -> None:
    x, y, dst = regions
    if a.op is BinOp.mac:
        acc = widen(st.read(dst))
        st.write(dst, to_dtype(acc + widen(st.read(x)) * widen(st.read(y)), _vbin_dst_dtype(a)))
        return
    st.write(dst, to_dtype(_BIN[a.op](widen(st.read(x)), widen(st.read(y))), a.dtype))


_vector(
    "VBIN",
    0x30,
    "Elementwise binary op (add, sub, mul, max, min, widening multiply-accumulate) with broadcasting by zero strides.",
    [
        choice("op", 3, BinOp, "the operation"),
        _dtype("dtype", "element type of a and b (and of dst, except for mac)"),
        *_counts(),
        *operand("dst", "the result", Derived("4 if op.name == 'mac' else dtype.size")),
        *operand("a", "the first operand", _es("dtype")),
        *operand("b", "the second operand", _es("dtype")),
    ],
    _vbin_regions,
    _vbin_exec,
    lambda a: a.n0 * a.n1,
    "dst[i1][i0] = a[i1][i0] op b[i1][i0] for i1 < n1, i0 < n0, element (i1, i0) of an operand "
    "at `addr + i1*s1 + i0*s0`. Integers: exact, then saturated to `dtype` (int32 included). "
    "Floats: computed in fp32, rounded to nearest even. A per-channel vector is broadcast with "
    "b_s1 = 0; a per-row scalar (a row max, a row sum) with b_s0 = 0. `mac` widens: dst (int32 "
    "for integer dtypes, fp32 for float ones) += a * b, exact for integers then saturated, fp32 "
    "for floats; with a window of the input as a and per-channel weights as b it computes a "
    "depthwise convolution one tap at a time.",
    f"Lane-ops: n0 x n1. {_RW_DOC} (dst also read for mac).",
    check=lambda a, t: float_problem(t, a.dtype),
    validate=lambda a: acc_operand_problem(a, {"dst": _vbin_dst_dtype(a), "a": a.dtype, "b": a.dtype}),
)


# ------------------------------------------------------------------------------------ VUN
def _vun_exec(st, a, regions) -> None:
    src, dst = regions
    st.write(dst, to_dtype(unary(a.op, widen(st.read(src)), a.imm0, a.imm1), a.dtype))


def _vun_validate(a) -> str | None:
    if a.op.float_only and not a.dtype.is_float:
        return f"op {a.op.name} needs a floating-point dtype (int8 activations use LUT), not {a.dtype.name}"
    if a.op is UnOp.clamp and not a.imm0 <= a.imm1:
        return f"clamp needs imm0 <= imm1, got {a.imm0} > {a.imm1}"
    return acc_operand_problem(a, {"dst": a.dtype, "src": a.dtype})


_vector(
    "VUN",
    0x31,
    "Elementwise unary op: copy, relu, clamp, neg, abs, add/mul by an immediate, and fp activations.",
    [
        choice("op", 5, UnOp, "the operation"),
        _dtype(),
        *_counts(),
        *operand("dst", "the result", _es("dtype")),
        *operand("src", "the input", _es("dtype")),
        f32("imm0", "immediate: clamp lower bound, adds/muls operand"),
        f32("imm1", "immediate: clamp upper bound"),
    ],
    lambda a: (region2d(a, "src", a.dtype, "r"), region2d(a, "dst", a.dtype, "w")),
    _vun_exec,
    lambda a: a.n0 * a.n1 * a.op.lane_ops,
    "dst = f(src) elementwise. copy: x; relu: max(x, 0); clamp: min(max(x, imm0), imm1); neg: -x; "
    "abs: |x|; adds: x + imm0; muls: x * imm0; then, floats only: exp, sigmoid 1/(1+e^-x), tanh, "
    "gelu x/2 (1 + erf(x/sqrt 2)) (erf by Abramowitz & Stegun 7.1.26), gelu_tanh, silu x sigmoid(x), "
    "hardswish x relu6(x+3)/6, hardsigmoid relu6(x+3)/6, rsqrt, reciprocal, sqrt, log (natural), "
    "log1p log(1 + x) (accurate near 0). Floats are "
    "computed in fp32 and rounded to `dtype`; integers exactly (immediates as real numbers), then "
    "rounded half to even and saturated.",
    "Lane-ops: n0 x n1 x the op's cost (1 for simple ops; exp 4, sigmoid 6, tanh 6, gelu 8, "
    f"gelu_tanh 8, silu 7, hardswish 3, hardsigmoid 2, rsqrt 4, reciprocal 4, sqrt 4, log 5, log1p 6). {_RW_DOC}.",
    check=lambda a, t: float_problem(t, a.dtype),
    validate=_vun_validate,
)


# ------------------------------------------------------------------------------------ LUT
def _lut_exec(st, a, regions) -> None:
    src, table, dst = regions
    x = st.read(src).astype(np.int16) + 128
    st.write(dst, st.read(table)[x])


_vector(
    "LUT",
    0x32,
    "int8 -> int8 through a 256-entry table in the scratchpad (int8 activations).",
    [
        *_counts(),
        *operand("dst", "the result (int8)", Derived("1")),
        *operand("src", "the input (int8)", Derived("1")),
        addr("table", LOCAL_ADDR_BITS, "scratchpad byte address of the 256-byte table"),
    ],
    lambda a: (
        region2d(a, "src", DType.int8, "r"),
        Region(Mem.spad, a.table, (256,), (1,), DType.int8.np, "r", "table"),
        region2d(a, "dst", DType.int8, "w"),
    ),
    _lut_exec,
    lambda a: a.n0 * a.n1,
    "dst = table[src + 128]: entry j of the table (SPAD[table + j], int8) is the output for the "
    "input value j - 128. The compiler fills the table with any int8 -> int8 function (a "
    "quantized sigmoid, tanh, gelu, ...).",
    f"Lane-ops: n0 x n1. {_RW_DOC} (the whole 256-byte table counts as read).",
    validate=lambda a: acc_operand_problem(a, {"dst": DType.int8, "src": DType.int8}),
)


# ------------------------------------------------------------------------------------ REQUANT
def _rq_regions(a):
    q_rows = a.n0 if a.per_channel else 1
    bias = (Region(Mem.spad, a.bias, (a.n1, a.n0), (0, 4), DType.int32.np, "r", "bias"),) if a.add_bias else ()
    return (
        region2d(a, "src", DType.int32, "r"),
        Region(Mem.spad, a.qparams, (q_rows, 2), (8, 4), DType.int32.np, "r", "qparams"),
        region2d(a, "dst", DType.int8, "w"),
    ) + bias


def _records(st, q: Region, op: str) -> tuple[np.ndarray, np.ndarray]:
    """The (multiplier, shift) records read through ``q``, checked: multipliers >= 0, shifts
    in [-31, 31]."""
    qp = st.read(q).astype(np.int64)
    mult, shift = qp[:, 0], qp[:, 1]
    if (mult < 0).any() or (np.abs(shift) > 31).any():
        bad = int(np.flatnonzero((mult < 0) | (np.abs(shift) > 31))[0])
        raise SimulationError(
            f"{op} parameters of channel {bad} are invalid: multiplier {mult[bad]} must be "
            f">= 0 and shift {shift[bad]} in [-31, 31]"
        )
    return mult, shift


def _rq_exec(st, a, regions) -> None:
    src, q, dst = regions[:3]
    mult, shift = _records(st, q, "REQUANT")
    x = st.read(src)
    if a.add_bias:
        x = saturate_int32(x.astype(np.int64) + st.read(regions[3]))
    st.write(dst, requantize(x, mult[None, :], shift[None, :], a.zp, a.qmin, a.qmax))


def _rq_validate(a) -> str | None:
    if a.qmin > a.qmax:
        return f"qmin ({a.qmin}) must not exceed qmax ({a.qmax})"
    return acc_operand_problem(a, {"dst": DType.int8, "src": DType.int32})


_vector(
    "REQUANT",
    0x33,
    "int32 -> int8 by a fixed-point multiplier and shift, per tensor or per channel.",
    [
        *_counts(),
        *operand("dst", "the result (int8)", Derived("1")),
        *operand("src", "the input (int32)", Derived("4")),
        flag("per_channel", "1: one (multiplier, shift) record per element of a row (channel i0)"),
        addr("qparams", LOCAL_ADDR_BITS, "scratchpad byte address of the (int32 multiplier, int32 shift) records"),
        sint("zp", 8, "output zero point", default=0),
        sint("qmin", 8, "lowest output value (a fused ReLU raises it to the zero point)", default=-128),
        sint("qmax", 8, "highest output value", default=127),
        flag("add_bias", "1: add the int32 bias of channel i0 (at bias + 4*i0) to src[i1][i0] first"),
        addr("bias", LOCAL_ADDR_BITS, "scratchpad byte address of the per-channel int32 biases (with `add_bias`)",
             default=0),
    ],
    _rq_regions,
    _rq_exec,
    lambda a: 2 * a.n0 * a.n1,
    "With `add_bias`, src[i1][i0] plus the int32 at bias + 4*i0 (saturated to int32, as VBIN add "
    "of int32) is requantized instead of src[i1][i0] (a folded convolution bias, added on the "
    "lane's pre-adder). Record c (8 bytes at qparams + 8c: int32 multiplier, then int32 shift; c = i0 when "
    "`per_channel`, else 0) requantizes src[i1][i0]: the gemmlowp/TFLite scheme "
    "SaturatingRoundingDoublingHighMul then RoundingDivideByPOT (see *Numerics*), plus `zp`, "
    "clamped to [qmin, qmax]. Multipliers must be >= 0 and shifts in [-31, 31] (positive: right "
    "shift), else the simulator stops with an error.",
    f"Lane-ops: 2 x n0 x n1 (multiply-high with the bias on its pre-adder, shift-round-add). {_RW_DOC}.",
    validate=_rq_validate,
)


# ------------------------------------------------------------------------------------ VCVT
def _cvt_exec(st, a, regions) -> None:
    src, dst = regions
    st.write(dst, to_dtype(st.read(src), a.dst_dtype))


_vector(
    "VCVT",
    0x34,
    "Convert between int8, int16, int32, fp16 and fp32.",
    [
        _dtype("src_dtype", "element type of the input"),
        _dtype("dst_dtype", "element type of the result"),
        *_counts(),
        *operand("dst", "the result", _es("dst_dtype")),
        *operand("src", "the input", _es("src_dtype")),
    ],
    lambda a: (region2d(a, "src", a.src_dtype, "r"), region2d(a, "dst", a.dst_dtype, "w")),
    _cvt_exec,
    lambda a: a.n0 * a.n1,
    "dst = convert(src). Integer to integer: saturate. Integer to float: round to nearest even "
    "(large int32 to fp16 may become infinity). Float to integer: round half to even, saturate, "
    "NaN -> 0. fp32 -> fp16: round to nearest even; fp16 -> fp32: exact.",
    f"Lane-ops: n0 x n1. {_RW_DOC}.",
    check=lambda a, t: float_problem(t, a.src_dtype, a.dst_dtype),
    validate=lambda a: acc_operand_problem(a, {"dst": a.dst_dtype, "src": a.src_dtype}),
)


# ------------------------------------------------------------------------------------ VREDUCE
def _reduce(op: ReduceOp, x: np.ndarray, axes) -> np.ndarray:
    if op is ReduceOp.sum:
        return x.sum(axis=axes, dtype=x.dtype)
    return x.max(axis=axes) if op is ReduceOp.max else x.min(axis=axes)


def _combine(op: ReduceOp, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    if op is ReduceOp.sum:
        return old + new
    return np.maximum(old, new) if op is ReduceOp.max else np.minimum(old, new)


def _red_regions(a):
    dst = Region(mem_of(a.dst_space), a.dst, (a.n1,), (a.dst_s,), a.out_dtype.np, "rw" if a.acc else "w", "dst")
    return region2d(a, "src", a.dtype, "r"), dst


def _red_exec(st, a, regions) -> None:
    src, dst = regions
    x = widen(st.read(src))
    r = _reduce(a.op, x, 1)
    if a.acc:
        r = _combine(a.op, widen(st.read(dst)).astype(r.dtype), r)
    st.write(dst, to_dtype(r, a.out_dtype))


def _red_validate(a) -> str | None:
    if a.dst_space is Space.acc and a.out_dtype.size != 4:
        return f"operand 'dst' is in ACC, which holds 32-bit words, but its type is {a.out_dtype.name}"
    if a.dtype.is_float != a.out_dtype.is_float:
        return f"a reduction keeps integer or float: {a.dtype.name} -> {a.out_dtype.name} (use VCVT)"
    return acc_operand_problem(a, {"src": a.dtype})


_vector(
    "VREDUCE",
    0x35,
    "Reduce each row (sum, max, min), optionally combining with the previous result.",
    [
        choice("op", 2, ReduceOp, "the reduction"),
        _dtype("dtype", "element type of the input"),
        _dtype("out_dtype", "element type of the result"),
        flag("acc", "1: combine with the value already in dst (sum: add, max/min: max/min)"),
        *_counts(),
        *operand("dst", "the results (one per row)", _es("out_dtype"), inner=False),
        *operand("src", "the input", _es("dtype")),
    ],
    _red_regions,
    _red_exec,
    lambda a: a.n0 * a.n1 + (a.n1 if a.acc else 0),
    "dst[i1] = reduce over i0 < n0 of src[i1][i0] (combined with the old dst[i1] when `acc`), "
    "written at dst + i1*dst_s. Sums are exact for integers (then saturated to `out_dtype`) "
    "and fp32 for floats (then rounded to `out_dtype`): int8 -> int32 and fp16 -> fp32 sums "
    "keep full precision. Swapping src_s0 and src_s1 reduces along columns instead of rows.",
    f"Lane-ops: n0 x n1 (+ n1 when `acc`). {_RW_DOC}.",
    check=lambda a, t: float_problem(t, a.dtype, a.out_dtype),
    validate=_red_validate,
)


# ------------------------------------------------------------------------------------ VPOOL
def _pool_regions(a):
    es, oes = a.dtype.size, a.out_dtype.size
    src = Region(
        mem_of(a.src_space),
        a.src,
        (a.oh, a.ow, a.kh, a.kw, a.c),
        (a.sy * a.src_sy, a.sx * a.src_sx, a.src_sy, a.src_sx, es),
        a.dtype.np,
        "r",
        "src",
    )
    dst = Region(mem_of(a.dst_space), a.dst, (a.oh, a.ow, a.c), (a.dst_sy, a.dst_sx, oes), a.out_dtype.np, "w", "dst")
    return src, dst


def _pool_exec(st, a, regions) -> None:
    src, dst = regions
    x = widen(st.read(src))
    r = x.sum(axis=(2, 3), dtype=x.dtype) if a.op is PoolOp.sum else x.max(axis=(2, 3))
    st.write(dst, to_dtype(r, a.out_dtype))


def _pool_validate(a) -> str | None:
    if a.dtype.is_float != a.out_dtype.is_float:
        return f"pooling keeps integer or float: {a.dtype.name} -> {a.out_dtype.name} (use VCVT)"
    for prefix, dt in (("src", a.dtype), ("dst", a.out_dtype)):
        if getattr(a, f"{prefix}_space") is Space.acc and dt.size != 4:
            return f"operand '{prefix}' is in ACC, which holds 32-bit words, but its type is {dt.name}"
    return None


_vector(
    "VPOOL",
    0x36,
    "Max or sum over kh x kw windows with a stride, channels innermost (max/avg pooling).",
    [
        choice("op", 1, PoolOp, "max or sum"),
        _dtype("dtype", "element type of the input"),
        _dtype("out_dtype", "element type of the result"),
        count("c", "channels (contiguous elements of a pixel)"),
        count("ow", "output width"),
        count("oh", "output height"),
        uint("kh", 4, "window height", lo=1),
        uint("kw", 4, "window width", lo=1),
        uint("sy", 4, "vertical stride", lo=1),
        uint("sx", 4, "horizontal stride", lo=1),
        choice("src_space", 1, Space, "memory space of the input", default=Space.spad),
        addr("src", LOCAL_ADDR_BITS, "byte address of input pixel (0, 0)"),
        uint("src_sx", 16, "byte stride between input pixels of a row", default=Derived("c * dtype.size")),
        uint("src_sy", 24, "byte stride between input rows", default=Derived("((ow - 1) * sx + kw) * src_sx")),
        choice("dst_space", 1, Space, "memory space of the result", default=Space.spad),
        addr("dst", LOCAL_ADDR_BITS, "byte address of output pixel (0, 0)"),
        uint("dst_sx", 16, "byte stride between output pixels of a row", default=Derived("c * out_dtype.size")),
        uint("dst_sy", 24, "byte stride between output rows", default=Derived("ow * dst_sx")),
    ],
    _pool_regions,
    _pool_exec,
    lambda a: a.oh * a.ow * a.c * a.kh * a.kw,
    "dst[oy][ox][c] = max (or sum) over dy < kh, dx < kw of src[oy*sy + dy][ox*sx + dx][c], "
    "input pixel (y, x) channel c at src + y*src_sy + x*src_sx + c*esize. Sums are exact "
    "(integers) or fp32 (floats), then converted to `out_dtype`: an int8 average pool sums to "
    "int32 and divides with REQUANT. Padding is the compiler's: it fills a border in the "
    "scratchpad (VFILL with 0 or the lowest value) and points src at it.",
    f"Lane-ops: oh x ow x c x kh x kw. {_RW_DOC} (each window element counts as read).",
    check=lambda a, t: float_problem(t, a.dtype, a.out_dtype),
    validate=_pool_validate,
)


# ------------------------------------------------------------------------------------ VFILL
def _fill_exec(st, a, regions) -> None:
    (dst,) = regions
    st.write(dst, to_dtype(np.full(dst.shape, a.value, dtype=np.float64), a.dtype))


_vector(
    "VFILL",
    0x37,
    "Fill a 2-D block with one value (zero padding, -inf borders, accumulator init).",
    [
        _dtype(),
        *_counts(),
        *operand("dst", "the block", _es("dtype")),
        f32("value", "the value, converted to dtype (rounded half to even, saturated)"),
    ],
    lambda a: (region2d(a, "dst", a.dtype, "w"),),
    _fill_exec,
    lambda a: a.n0 * a.n1,
    "dst[i1][i0] = convert(value, dtype) for i1 < n1, i0 < n0.",
    f"Lane-ops: n0 x n1. {_RW_DOC}.",
    check=lambda a, t: float_problem(t, a.dtype),
    validate=lambda a: acc_operand_problem(a, {"dst": a.dtype}),
)


# ------------------------------------------------------------------------------------ VCMP
_CMP = {
    CmpOp.eq: np.equal,
    CmpOp.ne: np.not_equal,
    CmpOp.lt: np.less,
    CmpOp.le: np.less_equal,
    CmpOp.gt: np.greater,
    CmpOp.ge: np.greater_equal,
}


def _vcmp_exec(st, a, regions) -> None:
    x, y, dst = regions
    with np.errstate(invalid="ignore"):
        mask = _CMP[a.op](widen(st.read(x)), widen(st.read(y)))
    st.write(dst, mask.astype(a.dtype.np))


_vector(
    "VCMP",
    0x38,
    "Elementwise comparison (eq, ne, lt, le, gt, ge) giving a 0/1 mask per lane, with broadcasting by zero strides.",
    [
        choice("op", 3, CmpOp, "the comparison"),
        _dtype("dtype", "element type of a, b and the mask dst"),
        *_counts(),
        *operand("dst", "the mask (1 where the comparison holds, else 0)", _es("dtype")),
        *operand("a", "the first operand", _es("dtype")),
        *operand("b", "the second operand", _es("dtype")),
    ],
    lambda a: (region2d(a, "a", a.dtype, "r"), region2d(a, "b", a.dtype, "r"), region2d(a, "dst", a.dtype, "w")),
    _vcmp_exec,
    lambda a: a.n0 * a.n1,
    "dst[i1][i0] = 1 if a[i1][i0] op b[i1][i0] else 0, written in `dtype` (1.0 / 0.0 for floats). "
    "Values are compared exactly (integers) or as they are stored (floats; IEEE: a NaN operand makes "
    "every comparison false except ne). A boolean of the graph lives on the NPU as such a mask: "
    "logical and / or of masks are VBIN mul / max, logical not is 1 - mask; VSEL selects by it. "
    "A threshold is a one-element operand broadcast with b_s0 = b_s1 = 0.",
    f"Lane-ops: n0 x n1. {_RW_DOC}.",
    check=lambda a, t: float_problem(t, a.dtype),
    validate=lambda a: acc_operand_problem(a, {"dst": a.dtype, "a": a.dtype, "b": a.dtype}),
)


# ------------------------------------------------------------------------------------ VSEL
def _vsel_exec(st, a, regions) -> None:
    mask, x, dst = regions
    st.write(dst, np.where(st.read(mask) != 0, st.read(x), st.read(dst)))


_vector(
    "VSEL",
    0x39,
    "Masked move: dst takes a where the mask is nonzero and keeps its value elsewhere (where, masked_fill).",
    [
        _dtype("dtype", "element type of the mask, a and dst"),
        *_counts(),
        *operand("dst", "the result (read: the value where the mask is zero)", _es("dtype")),
        *operand("mask", "the mask", _es("dtype")),
        *operand("a", "the value where the mask is nonzero", _es("dtype")),
    ],
    lambda a: (region2d(a, "mask", a.dtype, "r"), region2d(a, "a", a.dtype, "r"), region2d(a, "dst", a.dtype, "rw")),
    _vsel_exec,
    lambda a: a.n0 * a.n1,
    "dst[i1][i0] = a[i1][i0] if mask[i1][i0] != 0 else dst[i1][i0]: the chosen value is copied bit for "
    "bit (infinities and NaNs included; -0.0 counts as zero in the mask). where(m, a, b) is b "
    "loaded into dst, then VSEL with a. The mask is the 0/1 result of VCMP (or any tensor: nonzero "
    "selects a). A constant a is a one-element operand broadcast with a_s0 = a_s1 = 0.",
    f"Lane-ops: n0 x n1. {_RW_DOC} (dst is read and written).",
    check=lambda a, t: float_problem(t, a.dtype),
    validate=lambda a: acc_operand_problem(a, {"dst": a.dtype, "mask": a.dtype, "a": a.dtype}),
)


# ------------------------------------------------------------------------------------ VGATHER
def _vgather_regions(a):
    es = a.dtype.size
    return (
        Region(Mem.spad, a.idx, (a.n1,), (a.idx_s,), DType.int32.np, "r", "idx"),
        Region(Mem.spad, a.table, (a.table_rows, a.n0), (a.table_s1, es), a.dtype.np, "r", "table"),
        region2d(a, "dst", a.dtype, "w"),
    )


def _vgather_exec(st, a, regions) -> None:
    idx_r, table_r, dst = regions
    idx = st.read(idx_r).astype(np.int64)
    bad = np.flatnonzero((idx < 0) | (idx >= a.table_rows))
    if bad.size:
        i = int(bad[0])
        raise SimulationError(f"VGATHER row index {int(idx[i])} (index {i}) is outside the table's {a.table_rows} rows "
                              "(a gather index out of range)")
    st.write(dst, st.read(table_r)[idx])


_vector(
    "VGATHER",
    0x3A,
    "Gather rows of a table in the scratchpad by computed int32 row indices (grid sampling, gathers).",
    [
        _dtype("dtype", "element type of the table and dst"),
        *_counts(),
        *operand("dst", "the gathered rows", _es("dtype")),
        addr("idx", LOCAL_ADDR_BITS, "scratchpad byte address of the n1 int32 row indices"),
        uint("idx_s", 16, "byte stride between row indices", default=Derived("4")),
        addr("table", LOCAL_ADDR_BITS, "scratchpad byte address of table row 0"),
        count("table_rows", "rows of the table (an index must be below it)"),
        uint("table_s1", 24, "byte stride between table rows", default=Derived("n0 * dtype.size")),
    ],
    _vgather_regions,
    _vgather_exec,
    lambda a: a.n0 * a.n1 + a.n1,
    "dst[i1][i0] = table[idx[i1]][i0] for i1 < n1, i0 < n0: row idx[i1] (int32 at idx + i1*idx_s) of "
    "the table, element i0 at table + idx[i1]*table_s1 + i0*esize. An index outside [0, table_rows) "
    "stops the simulator with an error (grid sampling clamps its indices and zeroes the weights of "
    "samples outside the input; a gather sends an index out of its dim's range to row table_rows, "
    "so the run stops instead of reading another row). The whole table counts as read.",
    f"Lane-ops: n0 x n1 + n1 (one address computation per row). {_RW_DOC} (the whole table counts as read).",
    check=lambda a, t: float_problem(t, a.dtype),
    validate=lambda a: acc_operand_problem(a, {"dst": a.dtype}),
)


# ------------------------------------------------------------------------------------ QADD, QMUL
# The lane of QADD and QMUL: one multiplier with a pre-adder in front and an accumulator behind
# it, the (x - z) * f + acc of a DSP slice.  QADD makes two passes per element for the operands,
# (a - za) * fa then (b - zb) * fb + that, and REQUANT's two on the sum (multiply-high; shift,
# round, add the zero point, clamp): 4 lane-ops, against 9 for the same steps as VCVT, VUN, VBIN,
# REQUANT, with no int32 intermediate in the scratchpad.  QMUL: b - zb on the adder, (a - za) x
# that through the pre-adder, REQUANT's two: 4, against 7.
QADD_LANE_OPS = 4
QMUL_LANE_OPS = 4


def _q2_regions(a):
    return (
        region2d(a, "a", DType.int8, "r"),
        region2d(a, "b", DType.int8, "r"),
        Region(Mem.spad, a.qparams, (1, 2), (8, 4), DType.int32.np, "r", "qparams"),
        region2d(a, "dst", DType.int8, "w"),
    )


def _qadd_exec(st, a, regions) -> None:
    x, y, q, dst = regions
    (mult,), (shift,) = _records(st, q, "QADD")
    st.write(dst, quantized_add(st.read(x), st.read(y), a.za, a.fa, a.zb, a.fb, int(mult), int(shift),
                                a.zp, a.qmin, a.qmax))


def _qmul_exec(st, a, regions) -> None:
    x, y, q, dst = regions
    (mult,), (shift,) = _records(st, q, "QMUL")
    st.write(dst, quantized_mul(st.read(x), st.read(y), a.za, a.zb, int(mult), int(shift), a.zp, a.qmin, a.qmax))


def _q2_validate(a) -> str | None:
    if a.qmin > a.qmax:
        return f"qmin ({a.qmin}) must not exceed qmax ({a.qmax})"
    return acc_operand_problem(a, {"dst": DType.int8, "a": DType.int8, "b": DType.int8})


def _q2_fields(factors: bool):
    """The fields of QADD (``factors``) and QMUL: int8 operands, zero points, the record, the
    output's zero point and clamp."""
    def operand_fields(x: str):
        fs = [sint(f"z{x}", 8, f"zero point of {x}", default=0)]
        return fs + [uint(f"f{x}", 24, f"integer factor of {x}")] if factors else fs

    return [
        *_counts(),
        *operand("dst", "the result (int8)", Derived("1")),
        *operand("a", "the first operand (int8)", Derived("1")),
        *operand("b", "the second operand (int8)", Derived("1")),
        *operand_fields("a"),
        *operand_fields("b"),
        addr("qparams", LOCAL_ADDR_BITS, "scratchpad byte address of the (int32 multiplier, int32 shift) record"),
        sint("zp", 8, "output zero point", default=0),
        sint("qmin", 8, "lowest output value (a fused ReLU raises it to the zero point)", default=-128),
        sint("qmax", 8, "highest output value", default=127),
    ]


_Q2_DOC = (
    "each step saturated to int32, then requantized like REQUANT with the one record at qparams "
    "(8 bytes: int32 multiplier, then int32 shift; the same checks): plus `zp`, clamped to [qmin, "
    "qmax], written as int8. Zero strides broadcast an operand; dst may be a (in place)."
)

_vector(
    "QADD",
    0x3B,
    "Requantizing add of two int8 operands with their own zero points and integer factors (a quantized add).",
    _q2_fields(factors=True),
    _q2_regions,
    _qadd_exec,
    lambda a: QADD_LANE_OPS * a.n0 * a.n1,
    "s[i1][i0] = sat32(sat32((a[i1][i0] - za) * fa) + sat32((b[i1][i0] - zb) * fb)) in exact integers, "
    f"{_Q2_DOC} With real(q) = scale x (q - z), factors fa, fb proportional to the operands' scales "
    "and the record for (unit of the factors) / (output scale), dst is the quantized sum of the "
    "two real values: the int8 add of TFLite/gemmlowp in one instruction, dequantize-free.",
    f"Lane-ops: {QADD_LANE_OPS} x n0 x n1: the lane's multiplier with a pre-adder and an accumulator "
    "((x - z) x f + acc, as in a DSP slice) makes one pass per operand, then REQUANT's two "
    f"(multiply-high; shift, round, add the zero point, clamp). {_RW_DOC} (the 8-byte record counts as read).",
    validate=_q2_validate,
)

_vector(
    "QMUL",
    0x3C,
    "Requantizing multiply of two int8 operands with their own zero points (a quantized multiply).",
    _q2_fields(factors=False),
    _q2_regions,
    _qmul_exec,
    lambda a: QMUL_LANE_OPS * a.n0 * a.n1,
    f"p[i1][i0] = sat32((a[i1][i0] - za) * (b[i1][i0] - zb)) in exact integers, {_Q2_DOC} With the "
    "record for (scale of a) x (scale of b) / (output scale), dst is the quantized product of the "
    "two real values.",
    f"Lane-ops: {QMUL_LANE_OPS} x n0 x n1: b - zb on the lane's adder, (a - za) x that through the "
    "multiplier's pre-adder, then REQUANT's two (multiply-high; shift, round, add the zero point, "
    f"clamp). {_RW_DOC} (the 8-byte record counts as read).",
    validate=_q2_validate,
)
