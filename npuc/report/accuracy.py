"""How close a compiled model's outputs are to PyTorch's, and what "close" means for fp16.

The NPU computes a float model in fp16 (fp32 accumulation), so its outputs differ from PyTorch's
fp32 eager run by about what PyTorch itself loses in fp16.  The tolerance is therefore relative
to that: relative L2 error <= max(1e-2, 3 x the relative L2 error of ``model.half()`` on the same
inputs).  For classifiers the top-1 class must agree wherever PyTorch's own fp16 run keeps it.

A non-finite value is never "close": an output or an fp32 reference holding NaN or infinity
fails the check, and when PyTorch's own fp16 run is not finite (it overflows) its error says
nothing, so the tolerance is the 1e-2 floor and the check's ``note`` says so.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| (the absolute error when the reference is all zeros)."""
    out, ref = out.double(), ref.double()
    err = float((out - ref).norm())
    scale = float(ref.norm())
    return err / scale if scale > 0 else err


def eager_outputs(model: torch.nn.Module, inputs: tuple, half: bool = False) -> list[torch.Tensor]:
    """PyTorch eager outputs (fp32, or the model run in fp16 with ``half``), as fp32 tensors."""
    m = copy.deepcopy(model).half() if half else model
    args = tuple(x.half() if half and x.is_floating_point() else x for x in inputs)
    with torch.no_grad():
        out = m(*args)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    return [o.float() for o in outs]


@dataclass(frozen=True)
class OutputCheck:
    """One output compared with PyTorch: errors, the fp16 tolerance and the verdict."""

    rel_error: float
    fp16_rel_error: float
    tolerance: float
    max_abs_error: float
    argmax_same: bool | None  # None when not a classifier output or fp16 itself loses the top-1
    note: str = ""  # why the verdict is not the plain comparison (non-finite values), or ""

    @property
    def ok(self) -> bool:
        return math.isfinite(self.rel_error) and self.rel_error <= self.tolerance and self.argmax_same is not False


def check_output(out: torch.Tensor, ref: torch.Tensor, ref16: torch.Tensor) -> OutputCheck:
    """Compare one compiled output with the fp32 and fp16 eager outputs."""
    rel = rel_l2(out, ref)
    rel16 = rel_l2(ref16, ref)
    note = ""
    if not bool(torch.isfinite(ref).all()):
        rel, note = math.nan, "PyTorch's fp32 output itself holds NaN or infinity: nothing to compare with"
    elif not bool(torch.isfinite(out).all()):
        rel, note = math.nan, "the compiled output holds NaN or infinity"
    if math.isfinite(rel16):
        tol = max(1e-2, 3 * rel16)
    else:
        tol = 1e-2
        note = note or "PyTorch's own fp16 run is not finite (it overflows): the tolerance is the 1e-2 floor"
    same = None
    if out.dim() == 2 and out.shape[0] == 1 and out.shape[1] > 1 and ref.abs().max() > 0:
        if int(ref16.argmax()) == int(ref.argmax()):
            same = int(out.argmax()) == int(ref.argmax())
    return OutputCheck(rel, rel16, tol, float((out - ref).abs().max()), same, note)


def check_outputs(outs: list[torch.Tensor], model: torch.nn.Module, inputs: tuple) -> list[OutputCheck]:
    """Every output of a compiled model checked against PyTorch eager (see the module docstring)."""
    ref = eager_outputs(model, inputs)
    ref16 = eager_outputs(model, inputs, half=True)
    return [check_output(o, r, r16) for o, r, r16 in zip(outs, ref, ref16)]
