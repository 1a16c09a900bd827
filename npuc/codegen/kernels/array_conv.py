"""``conv2d`` on the systolic array: an implicit GEMM over windows (no im2col in DRAM).

Per image and group, output pixels are the GEMM rows, output channels its columns and the window
(ky, kx, c) its reduction.  Input tiles are loaded channels-last into the scratchpad with a zero
border for the padding, and one MATMUL walks a whole output tile (two-level row loop: pixels of
a row at the horizontal stride, rows at the vertical stride); stride and dilation are only
strides.  The weights are asked for in (kh, kw, C, O) order, so a weight block is a plain
strided DMA and a window row (kx, c) is one contiguous reduction run.  Tiling, loop order and
buffering come from ``npuc.schedule``; the emission is ``array_engine``'s.
"""

from __future__ import annotations

from npuc.codegen.emitter import Emitter
from npuc.codegen.epilogue import epilogue_supports
from npuc.codegen.kernel import register_kernel
from npuc.kir.kernel import Kernel
from npuc.kir.plan import Plan
from npuc.codegen.kernels.array_engine import ArrayEngine
from npuc.codegen.kernels.array_plan import (
    array_plan, array_quant, input_count, int8_inputs_problem, operand_names, operand_strides,
)
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.schedule.problem import ArrayProblem, Axis, OperandLayout
from npuc.targets import Target

# Physical order of the weight [O, C/g, kh, kw]: kh, kw, C/g, O (outermost first).
WEIGHT_ORDER = (2, 3, 1, 0)


def _strides(t, es: int) -> tuple[int, ...]:
    """``t``'s strides, a single channel's stride read as the element size: a dim of size 1 is
    never stepped, so a one-channel tensor is channels-last whatever its strides say (the raw
    audio of a 1-D convolution, a grey image)."""
    st = t.strides
    return (st[0], es, st[2], st[3]) if t.shape[1] == 1 else st


def conv_problem(k: Kernel) -> ArrayProblem:
    """The array problem of a conv2d kernel: one batch per (group, image)."""
    x, w = k.inputs[:2]
    out = k.output
    a: Conv2dAttrs = k.attrs
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = a.groups
    og = o // g
    oh, ow = out.shape[2], out.shape[3]
    batches = [(gi, ni) for gi in range(g) for ni in range(n)]
    es = k.dtype.size
    xs, ws, os_ = _strides(x, es), w.strides, _strides(out, es)
    operands = []
    for e in k.epilogue:
        if e.operand is None:
            operands.append(None)
            continue
        st = operand_strides(e.operand, out.shape, k.name)
        addrs = tuple(e.operand.addr + ni * st[0] + gi * og * st[1] for gi, ni in batches)
        operands.append(OperandLayout(addrs, (st[2], st[3], st[1])))
    return ArrayProblem(
        name=k.name,
        dtype=k.dtype,
        y=Axis(h, kh, a.stride[0], a.padding[0], a.dilation[0], oh),
        x=Axis(wd, kw, a.stride[1], a.padding[1], a.dilation[1], ow),
        c=cg,
        n=og,
        x_addrs=tuple(x.addr + ni * xs[0] + gi * cg * xs[1] for gi, ni in batches),
        w_addrs=tuple(w.addr + gi * og * ws[0] for gi, ni in batches),
        out_addrs=tuple(out.addr + ni * os_[0] + gi * og * os_[1] for gi, ni in batches),
        x_strides=(xs[2], xs[3], xs[1]),
        w_strides=(ws[2], ws[3], ws[1], ws[0]),
        out_strides=(os_[2], os_[3], os_[1]),
        epilogue=k.epilogue,
        operands=tuple(operands),
        quant=array_quant(k, [gi * og for gi, _ in batches]),
    )


class Conv2dOnArray:
    """The ``conv2d`` kernel (docs/kernels.md) on the weight-stationary array."""

    kind = "conv2d"

    def supports(self, k: Kernel, target: Target) -> str | None:
        if k.dtype.name not in target.array.dtypes:
            return f"target '{target.name}' has no {k.dtype.name} array (array.dtypes = {list(target.array.dtypes)})"
        problem = int8_inputs_problem(k)
        if problem:
            return problem
        if len(k.inputs) != input_count(k) or not isinstance(k.attrs, Conv2dAttrs):
            return "conv2d takes x and w and Conv2dAttrs (a bias is an epilogue add)"
        x, w = k.inputs[:2]
        if x.rank != 4 or w.rank != 4 or k.output.rank != 4:
            return "conv2d needs a 4-D input, weight and output"
        groups = k.attrs.groups
        if groups > 1 and w.shape[1] == 1 and w.shape[0] == groups:
            return "a depthwise convolution runs on the vector unit (kind depthwise_conv2d)"
        es = k.dtype.size
        if _strides(x, es)[1] != es or _strides(k.output, es)[1] != es:
            return "conv2d needs its input and output channels-last (channel stride = element size)"
        return epilogue_supports(k.epilogue, k.dtype, target, int8_adds=True)

    def constant_layout(self, k: Kernel, index: int) -> tuple[int, ...] | None:
        return WEIGHT_ORDER if index == 1 else None

    def plan(self, k: Kernel, target: Target) -> Plan:
        return array_plan(conv_problem(k), target)

    def emit(self, k: Kernel, plan: Plan, em: Emitter) -> None:
        ArrayEngine(conv_problem(k), plan.details, em, operand_names(k)).run()


register_kernel(Conv2dOnArray())
