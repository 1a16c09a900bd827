"""Resampling ops: bilinear resizing and sampling at given coordinates (optical flow, spatial
transformers)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from npuc.ir.opdef import OpDef, fail, register
from npuc.ir.ops.common import require_float, require_ints_at_least, require_rank, require_same_dtype

# --------------------------------------------------------------------------- upsample_bilinear2d


@dataclass(frozen=True)
class UpsampleBilinear2dAttrs:
    """``upsample_bilinear2d``: the (h, w) output size; with ``align_corners`` the corner pixels
    of input and output coincide, without it their edges do (PyTorch's two conventions).
    ``scales`` (h, w), when given, map output to input coordinates instead of the size ratio
    (PyTorch's ``scale_factor`` without ``recompute_scale_factor``); 0 means "from the sizes"."""

    output_size: tuple[int, int] = (1, 1)
    align_corners: bool = False
    scales: tuple[float, float] = (0.0, 0.0)


def linear_weights(n_in: int, n_out: int, align_corners: bool, scale: float = 0.0) -> torch.Tensor:
    """The [n_out, n_in] matrix of PyTorch's 1-D linear interpolation (bilinear is separable:
    rows by one of these, columns by another)."""
    eye = torch.eye(n_in, dtype=torch.float64).unsqueeze(0)  # [1, n_in (as channels), n_in]
    out = torch.ops.aten.upsample_linear1d.default(eye, [n_out], align_corners, scale or None)
    return out[0].T.contiguous()  # out[0][c, j] = weight of input c in output j


def _bilinear_ref(ins, a: UpsampleBilinear2dAttrs):
    sh, sw = a.scales
    return (torch.ops.aten.upsample_bilinear2d.default(ins[0], list(a.output_size), a.align_corners,
                                                        sh or None, sw or None),)


def _bilinear_infer(ins, a: UpsampleBilinear2dAttrs):
    x = ins[0]
    require_rank("upsample_bilinear2d", x, 4, "input (NCHW)")
    require_float("upsample_bilinear2d", x)
    return (x.with_shape(x.shape[:2] + tuple(a.output_size)),)


register(
    OpDef(
        name="upsample_bilinear2d",
        summary="bilinear resize of an NCHW tensor to output_size (align_corners as PyTorch)",
        attrs=UpsampleBilinear2dAttrs,
        infer=_bilinear_infer,
        verify=lambda ins, a: require_ints_at_least("upsample_bilinear2d", "output_size", a.output_size, 1, count=2),
        reference=_bilinear_ref,
        category="resample",
        operands=("x",),
    )
)

# ---------------------------------------------------------------------------------- grid_sample

MODES = ("bilinear", "nearest", "bicubic")
PADDING_MODES = ("zeros", "border", "reflection")


@dataclass(frozen=True)
class GridSampleAttrs:
    """``grid_sample``: interpolation ``mode``, ``padding_mode`` outside the input, ``align_corners``."""

    mode: str = "bilinear"
    padding_mode: str = "zeros"
    align_corners: bool = False


def _grid_verify(ins, a: GridSampleAttrs) -> None:
    if a.mode not in MODES:
        raise fail("grid_sample", f"mode {a.mode!r} must be one of {', '.join(MODES)}")
    if a.padding_mode not in PADDING_MODES:
        raise fail("grid_sample", f"padding_mode {a.padding_mode!r} must be one of {', '.join(PADDING_MODES)}")


def _grid_infer(ins, a: GridSampleAttrs):
    x, grid = ins
    require_rank("grid_sample", x, 4, "input (NCHW)")
    require_rank("grid_sample", grid, 4, "grid [N, H_out, W_out, 2]")
    require_float("grid_sample", x)
    require_same_dtype("grid_sample", ins)
    if grid.shape[0] != x.shape[0] or grid.shape[3] != 2:
        raise fail("grid_sample", f"grid must be [{x.shape[0]}, H_out, W_out, 2] (x, y in [-1, 1]), got {grid}")
    return (x.with_shape((x.shape[0], x.shape[1], grid.shape[1], grid.shape[2])),)


register(
    OpDef(
        name="grid_sample",
        summary="out[n, c, i, j] = x[n, c] sampled at grid[n, i, j] = (x, y) in [-1, 1] (PyTorch's grid_sample)",
        attrs=GridSampleAttrs,
        infer=_grid_infer,
        verify=_grid_verify,
        reference=lambda ins, a: (F.grid_sample(ins[0], ins[1], mode=a.mode, padding_mode=a.padding_mode,
                                                align_corners=a.align_corners),),
        min_inputs=2,
        max_inputs=2,
        category="resample",
        operands=("x", "grid"),
    )
)
