"""What the npuc commands share: the consoles, MODEL's help, JSON output, user errors as one
line, the --input-shape option and calibration samples.  npuc.cli and npuc.cli_analysis import
it (neither imports the other's helpers)."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from pathlib import Path

import click
from rich.console import Console

from npuc.errors import NpucError

# Wide enough for the per-layer tables when the output is a file or a pipe (rich assumes 80).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, highlight=False)

MODEL_HELP = (
    "MODEL is a zoo entry (e.g. torchvision:resnet18, transformers:bert-tiny; see `npuc zoo`), "
    "a user file path/to/file.py:function whose function returns (model, example_inputs), "
    "a .pt2 file saved by torch.export.save (float, or already quantized with PT2E), "
    "or an ONNX file path/to/model.onnx (shapes from the file; size dynamic dimensions with --input-shape)."
)


def echo_json(doc) -> None:
    """Print ``doc`` as JSON on stdout (raw: never wrapped or cut)."""
    click.echo(json.dumps(doc, indent=1))


def _status(message: str, quiet: bool):
    """A rich status line, or nothing when the output is JSON."""
    return contextlib.nullcontext() if quiet else console.status(message)


def input_shape_option(fn):
    """The --input-shape NAME=D0,D1,... option of commands taking an ONNX MODEL."""
    return click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=D0,D1,...",
                        help="The shape of an ONNX model's input with dynamic dimensions (repeatable).")(fn)


def _shapes(input_shape):
    from npuc.frontend.onnx_model import parse_input_shapes

    return parse_input_shapes(input_shape) if input_shape else None


def user_errors(fn):
    """Turn an NpucError into a one-line message and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NpucError as e:
            err_console.print(f"[bold red]error:[/] {e}", soft_wrap=True)
            sys.exit(1)

    return wrapper


DEFAULT_CALIBRATION = 8


def _calibration_samples(model: str, inputs, quantize, count, data_file):
    """The calibration samples of an int8 compile: from a .npz, or ``count`` draws of the zoo
    model's input generator (seeds 1..count); None without --quantize."""
    if quantize is None:
        if count is not None or data_file is not None:
            raise click.UsageError("--calibration and --calibration-data need --quantize int8")
        return None
    if count is not None and data_file is not None:
        raise click.UsageError("give either --calibration N or --calibration-data FILE, not both")
    if data_file is not None:
        return load_calibration_npz(data_file, len(inputs))
    from npuc.zoo import ZOO

    n = DEFAULT_CALIBRATION if count is None else count
    if model not in ZOO:
        raise click.UsageError(f"{model} is not a zoo model: give its calibration samples with --calibration-data FILE.npz")
    return [ZOO[model].make_inputs(seed) for seed in range(1, n + 1)]


def load_calibration_npz(path: Path, n_inputs: int) -> list[tuple]:
    """Samples from a .npz holding one array per model input (in file order), each with a leading
    sample dimension: sample k is (arr_0[k], arr_1[k], ...)."""
    import numpy as np
    import torch

    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise NpucError(f"cannot read calibration data '{path}': {e}") from None
    arrays = [data[k] for k in data.files]
    if len(arrays) != n_inputs:
        raise NpucError(f"calibration data '{path}' holds {len(arrays)} arrays; the model takes {n_inputs} inputs")
    counts = {a.shape[0] if a.ndim else 0 for a in arrays}
    if len(counts) != 1 or 0 in counts:
        raise NpucError(f"calibration arrays in '{path}' must share a leading sample dimension (got shapes "
                        f"{[list(a.shape) for a in arrays]})")
    return [tuple(torch.from_numpy(np.ascontiguousarray(a[k])) for a in arrays) for k in range(counts.pop())]


def _zero_inputs(art):
    """Inputs of the right shapes and types (timing does not depend on the values)."""
    from npuc.artifact import zero_inputs

    return zero_inputs(art)
