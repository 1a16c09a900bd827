"""Calibration samples: checked against the example inputs before anything runs, then fed to a
prepared (observed) model so that its observers record the ranges of every quantized tensor."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from npuc.errors import NpucError


def as_input_tuple(sample: Any) -> tuple:
    """One sample as a tuple of model inputs (a lone tensor is a one-input sample)."""
    if isinstance(sample, torch.Tensor):
        return (sample,)
    if isinstance(sample, (tuple, list)):
        return tuple(sample)
    return (sample,)


def check_calibration(calibration: Any, example_inputs: Sequence[torch.Tensor]) -> list[tuple]:
    """The calibration samples as input tuples; NpucError when there are none or when one does not
    match the example inputs in count, shape or dtype."""
    example = as_input_tuple(example_inputs)
    if isinstance(calibration, torch.Tensor) or not isinstance(calibration, Sequence) or isinstance(calibration, str):
        raise NpucError(
            "calibration must be a list of samples, each a tuple of input tensors like the example "
            f"inputs; got a {type(calibration).__name__}"
        )
    if len(calibration) == 0:
        raise NpucError("calibration needs at least one sample to measure activation ranges; got none")
    samples = [as_input_tuple(s) for s in calibration]
    for i, sample in enumerate(samples):
        _check_sample(i, sample, example)
    return samples


def _check_sample(index: int, sample: tuple, example: tuple) -> None:
    if len(sample) != len(example):
        raise NpucError(
            f"calibration sample {index} has {len(sample)} inputs; the model takes {len(example)} "
            "(as many as the example inputs)"
        )
    for j, (got, want) in enumerate(zip(sample, example)):
        if not isinstance(got, torch.Tensor):
            raise NpucError(f"input {j} of calibration sample {index} is a {type(got).__name__}, not a tensor")
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise NpucError(
                f"input {j} of calibration sample {index} holds NaN or infinity: calibration measures "
                "activation ranges and needs finite values"
            )
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            raise NpucError(
                f"input {j} of calibration sample {index} is a {got.dtype} tensor of shape {list(got.shape)}; "
                f"the model was exported for {want.dtype} of shape {list(want.shape)} (the example input's)"
            )


def run_calibration(prepared: torch.nn.Module, samples: Sequence[tuple]) -> None:
    """Run every sample through the observed model (no gradients); NpucError when an observed
    range is not finite (the model computes NaN or infinity on a sample)."""
    with torch.no_grad():
        for sample in samples:
            prepared(*sample)
    for name, module in prepared.named_modules():
        lo, hi = getattr(module, "min_val", None), getattr(module, "max_val", None)
        if isinstance(lo, torch.Tensor) and isinstance(hi, torch.Tensor) and lo.numel() and hi.numel():
            if not (bool(torch.isfinite(lo).all()) and bool(torch.isfinite(hi).all())):
                raise NpucError(
                    f"calibration measured a range that is not finite at {name} (the model computes NaN or "
                    "infinity on the calibration samples): int8 scales need finite activations"
                )
