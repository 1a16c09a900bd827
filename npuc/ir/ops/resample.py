"""Resampling ops: bilinear resizing and sampling at given coordinates (optical flow, spatial
transformers)."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from npuc.ir.opdef import OpDef, fail, register
from npuc.ir.ops.common import require_float, require_ints_at_least, require_rank, require_same_dtype

# --------------------------------------------------------------------------- upsample_bilinear2d


@dataclass(frozen=True)
class UpsampleBilinear2dAttrs:
    """``upsample_bilinear2d``: the (h, w) output size; with ``align_corners`` the corner pixels
    of input and output coincide, without it their edges do (PyTorch's two conventions)."""

    output_size: tuple[int, int] = (1, 1)
    align_corners: bool = False


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
        reference=lambda ins, a: (F.interpolate(ins[0], size=a.output_size, mode="bilinear",
                                                align_corners=a.align_corners),),
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
