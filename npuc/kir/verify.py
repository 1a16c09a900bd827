"""Verifier of the kernel-level IR: is a lowered model well formed?

Checked after partition and after fusion (the stage runner, npuc/pipeline.py), and by the text
form's tests.  A kernel is well formed when

* its kind is a kernel kind (:data:`npuc.kir.kernel.KERNEL_KINDS`) and ``attrs`` is that kind's
  attribute record (or None where the kind has none); an int8 kernel of a kind that requantizes
  carries a ``quant`` record;
* every tensor it touches names a buffer of the model and lies inside it, with non-negative
  strides; its output is written once per element (no zero stride over a dimension > 1) and
  every tensor is in the kernel's element type (but an int8 kernel's int32 constants);
* every tensor it reads is defined before it: a constant, a model input, a value its segment
  receives, or a buffer an earlier kernel (of this or an earlier NPU segment) wrote;
* every epilogue step is a graph op with the EPILOGUE trait, with the operands its arity asks
  for (a binary step: exactly one of a DRAM operand or a scalar; a unary one: neither), and a
  DRAM operand broadcasts to the kernel output's shape.

Every home lies inside its buffer, and every value an NPU segment hands on was written by it.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from npuc.errors import VerifyError
from npuc.isa.enums import DType
from npuc.kir.kernel import BINARY_EPILOGUE_OPS, KERNEL_KINDS, UNARY_EPILOGUE_OPS, EpilogueOp, Kernel
from npuc.kir.program import CONSTANT, INPUT, LoweredModel, NpuSegment
from npuc.kir.tensor import DramTensor


def verify_lowered(m: LoweredModel) -> LoweredModel:
    """``m`` itself when it is well formed (see the module docstring), else VerifyError."""
    sizes = {b.name: b.nbytes for b in m.buffers}
    homes = {h.value: h for h in m.homes}
    for h in m.homes:
        if h.buffer not in sizes or h.offset < 0 or h.offset + h.nbytes > sizes[h.buffer]:
            raise VerifyError(f"value %{h.value} is stored outside its buffer {h.buffer}")
    defined = {b.name for b in m.buffers if b.kind in (CONSTANT, INPUT)}
    constants = frozenset(b.name for b in m.buffers if b.kind == CONSTANT)
    for seg in m.segments:
        if not isinstance(seg, NpuSegment):
            defined |= {homes[v].buffer for v in seg.outputs if v in homes}
            continue
        available = defined | {homes[v].buffer for v in seg.inputs if v in homes}
        for lk in seg.kernels:
            verify_kernel(lk.kernel, sizes, available, constants)
            available.add(lk.kernel.output.name)
        for v in seg.outputs:
            if v in homes and homes[v].buffer not in available:
                raise VerifyError(f"npu segment {seg.name} hands on %{v}, but none of its kernels writes it")
        defined = available
    return m


def verify_kernel(k: Kernel, sizes: dict[str, int], defined: Iterable[str] | None = None,
                  constants: frozenset[str] = frozenset()) -> None:
    """VerifyError unless ``k`` is well formed over buffers of ``sizes`` (name -> bytes), reading
    only buffers in ``defined`` (None: do not check the order of definitions); ``constants``
    names the constant buffers (an int8 kernel's int32 biases and REQUANT records live there)."""
    where = f"kernel {k.name}"
    if k.kind not in KERNEL_KINDS:
        raise VerifyError(f"{where}: '{k.kind}' is not a kernel kind (known: {', '.join(sorted(KERNEL_KINDS))})")
    kind = KERNEL_KINDS[k.kind]
    want = kind.attrs_type()
    if (want is None) != (k.attrs is None) or (want is not None and not isinstance(k.attrs, want)):
        got = type(k.attrs).__name__ if k.attrs is not None else "none"
        raise VerifyError(f"{where}: a {k.kind} kernel takes {want.__name__ if want else 'no'} attributes, not {got}")
    if k.dtype == DType.int8 and kind.int8_requantizes and k.quant is None:
        raise VerifyError(f"{where}: an int8 {k.kind} kernel needs its quant record")
    for t in k.tensors():
        _check_tensor(where, t, sizes)
    out = k.output
    if out.dtype != k.dtype:
        raise VerifyError(f"{where}: writes {out.dtype.name} into {out.name}, but computes in {k.dtype.name}")
    for i, t in enumerate(k.inputs + tuple(e.operand for e in k.epilogue if e.operand is not None)):
        if i in kind.int32_inputs and i < len(k.inputs):
            if t.dtype != DType.int32:
                raise VerifyError(f"{where}: input {i} ({t.name}) of a {k.kind} kernel holds int32 indices, not {t.dtype.name}")
            continue
        if t.dtype != k.dtype and not (k.dtype == DType.int8 and t.dtype == DType.int32 and t.name in constants):
            raise VerifyError(f"{where}: reads {t.dtype.name} {t.name} but computes in {k.dtype.name} "
                              "(only an int8 kernel's int32 constants may differ)")
    if any(s == 0 and n > 1 for n, s in zip(out.shape, out.strides)):
        raise VerifyError(f"{where}: its output {out} repeats elements (a zero stride): a result would be lost")
    block = getattr(k.attrs, "sram_bytes", 0)
    if block and (not k.inputs or k.inputs[-1].nbytes != block):
        raise VerifyError(f"{where}: keeps its intermediates in {block:,} B of SRAM, but its last input is not a "
                          "block of that size")
    if defined is not None:
        known = set(defined) | ({k.inputs[-1].name} if block else set())  # a chain's SRAM block is its own scratch
        for t in k.inputs + tuple(e.operand for e in k.epilogue if e.operand is not None):
            if t.name not in known:
                raise VerifyError(f"{where}: reads {t.name} before any kernel writes it (not a constant or input)")
    for e in k.epilogue:
        _check_epilogue(where, e, out)
    for m in getattr(k.attrs, "members", ()):  # a fused chain: each member well formed on its own
        if m.kind == k.kind or m.dtype != k.dtype:
            raise VerifyError(f"{where}: member {m.name} is a {m.kind}[{m.dtype.name}] kernel in a {k.kind}[{k.dtype.name}]")
        verify_kernel(m, sizes, None, constants)


def _check_tensor(where: str, t: DramTensor, sizes: dict[str, int]) -> None:
    if t.name not in sizes:
        raise VerifyError(f"{where}: tensor {t} names no buffer")
    if any(s < 0 for s in t.strides) or any(n < 0 for n in t.shape):
        raise VerifyError(f"{where}: tensor {t} has a negative size or stride")
    if t.numel and (t.addr < 0 or t.addr + t.span > sizes[t.name]):
        raise VerifyError(f"{where}: tensor {t} reaches outside its {sizes[t.name]}-byte buffer")


def _check_epilogue(where: str, e: EpilogueOp, out: DramTensor) -> None:
    binary = e.op in BINARY_EPILOGUE_OPS
    if not binary and e.op not in UNARY_EPILOGUE_OPS:
        raise VerifyError(f"{where}: epilogue step '{e.op}' is not an elementwise op that fuses as an epilogue "
                          f"(one of {', '.join(sorted(UNARY_EPILOGUE_OPS | BINARY_EPILOGUE_OPS))})")
    given = (e.operand is not None) + (e.scalar is not None)
    if binary and given != 1:
        raise VerifyError(f"{where}: binary epilogue step '{e.op}' needs exactly one operand or scalar")
    if not binary and given:
        raise VerifyError(f"{where}: unary epilogue step '{e.op}' takes no operand")
    if e.operand is not None:
        try:
            shape = np.broadcast_shapes(e.operand.shape, out.shape)
        except ValueError:
            shape = None
        if shape != tuple(out.shape):
            raise VerifyError(f"{where}: epilogue operand {e.operand} does not broadcast to the output's shape {out.shape}")
