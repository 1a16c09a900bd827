"""Quantizing a model for the NPU: torchao's PT2E flow around :class:`npuc.quant.quantizer.NpuQuantizer`.

:func:`quantize` captures the model with torch.export (once; an ExportedProgram is used as it
is), runs ``prepare_pt2e`` with the NPU's quantizer, every calibration sample and
``convert_pt2e`` (:func:`quantize_captured`).  The converted module is what the frontend imports,
as it is (:func:`npuc.frontend.quantized.import_quantized_module`): no second export.  The flow
lives in the frontend, which calls the quantizer; the quantizer never calls the frontend.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from npuc._quiet import quiet_torchao_import
from npuc.errors import NpucError
from npuc.frontend.export import capture_program, export_program, quiet_torch_logs
from npuc.quant.calibrate import as_input_tuple, check_calibration, run_calibration
from npuc.quant.quantizer import NpuQuantizer, QuantOptions

quiet_torchao_import()

from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402


@dataclass(frozen=True, eq=False)
class QuantizedModel:
    """A quantized model: PyTorch's converted module (Q/DQ around float ops in torch.export's
    training IR), the reference npuc's int8 results are compared with, and which the frontend
    imports as it is (:func:`npuc.frontend.quantized.import_quantized_module`)."""

    module: torch.fx.GraphModule
    example_inputs: tuple

    @functools.cached_property
    def program(self) -> torch.export.ExportedProgram:
        """The converted module exported again and decomposed to core ATen, for tools that want an
        ExportedProgram (npuc's own compile imports :attr:`module` without this second export)."""
        return export_program(self.module, self.example_inputs)


def quantize(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    calibration: Sequence[Any],
    target: Any = None,
    options: QuantOptions | None = None,
) -> QuantizedModel:
    """Export ``model`` (once; an ExportedProgram is used as it is), annotate it for the NPU,
    calibrate on every sample and convert it."""
    example = as_input_tuple(example_inputs)
    samples = check_calibration(calibration, example)
    if isinstance(model, torch.export.ExportedProgram):
        captured = model
    elif isinstance(model, torch.nn.Module):
        captured = capture_program(model.eval(), example)
    else:
        raise NpucError(f"the model must be a torch.nn.Module or an ExportedProgram, got a {type(model).__name__}")
    return QuantizedModel(quantize_captured(captured, samples, target, options), example)


def quantize_captured(
    captured: torch.export.ExportedProgram, samples: Sequence[tuple], target: Any = None,
    options: QuantOptions | None = None,
) -> torch.fx.GraphModule:
    """prepare_pt2e with the NpuQuantizer, every calibration sample, convert_pt2e."""
    with quiet_torch_logs():
        prepared = prepare_pt2e(captured.module(), NpuQuantizer(target, options))
        run_calibration(prepared, samples)
        return convert_pt2e(prepared)


def quantize_model(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    calibration: Sequence[Any],
    target: Any = None,
    options: QuantOptions | None = None,
) -> torch.export.ExportedProgram:
    """The exported program of the quantized ``model`` (Q/DQ pairs around int8 ops)."""
    return quantize(model, example_inputs, calibration, target, options).program


__all__ = ["QuantizedModel", "quantize", "quantize_captured", "quantize_model"]
