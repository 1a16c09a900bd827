"""Quantizing a model for the NPU: torchao's PT2E flow around :class:`npuc.quant.quantizer.NpuQuantizer`.

:func:`quantize` captures the model with torch.export, runs ``prepare_pt2e`` with the NPU's
quantizer, every calibration sample and ``convert_pt2e``, and re-exports the converted module to
core ATen (as the float path's :func:`npuc.frontend.export.export_program` does) for
:func:`npuc.frontend.quantized.import_quantized_program`.  The flow lives in the frontend, which
calls the quantizer; the quantizer never calls the frontend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from npuc._quiet import quiet_torchao_import
from npuc.errors import NpucError
from npuc.frontend.export import export_error, export_program, quiet_torch_logs
from npuc.quant.calibrate import as_input_tuple, check_calibration, run_calibration
from npuc.quant.quantizer import NpuQuantizer, QuantOptions

quiet_torchao_import()

from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402


@dataclass(frozen=True, eq=False)
class QuantizedModel:
    """A quantized model: PyTorch's converted module (Q/DQ around float ops, the reference
    npuc's int8 results are compared with) and its re-export decomposed to core ATen (as
    :func:`npuc.frontend.export.export_program` does), which the frontend imports."""

    module: torch.nn.Module
    program: torch.export.ExportedProgram


def quantize(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    calibration: Sequence[Any],
    target: Any = None,
    options: QuantOptions | None = None,
) -> QuantizedModel:
    """Export, annotate, calibrate on every sample and convert ``model``; then re-export it."""
    example = as_input_tuple(example_inputs)
    samples = check_calibration(calibration, example)
    if not isinstance(model, torch.nn.Module):
        raise NpucError(f"the model must be a torch.nn.Module, got a {type(model).__name__}")
    with quiet_torch_logs():
        try:
            captured = torch.export.export(model.eval(), example).module()
        except Exception as e:  # torch.export raises many exception types; all mean the same to a user
            raise export_error(e) from e
        prepared = prepare_pt2e(captured, NpuQuantizer(target, options))
        run_calibration(prepared, samples)
        converted = convert_pt2e(prepared)
    program = export_program(converted, example)
    return QuantizedModel(converted, program)


def quantize_model(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    calibration: Sequence[Any],
    target: Any = None,
    options: QuantOptions | None = None,
) -> torch.export.ExportedProgram:
    """The exported program of the quantized ``model`` (Q/DQ pairs around int8 ops)."""
    return quantize(model, example_inputs, calibration, target, options).program


__all__ = ["QuantizedModel", "quantize", "quantize_model"]
