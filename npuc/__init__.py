"""npuc: compile PyTorch models to edge NPU binaries and simulate them.

The Python API::

    g = npuc.import_model(model, example_inputs)     # torch.export -> graph IR -> graph passes
    g = npuc.import_onnx("model.onnx")               # an ONNX model (path or ModelProto) -> graph IR
    text = npuc.export_mlir(model, example_inputs)   # the optimized graph as MLIR (TOSA), via xDSL
    outs = npuc.interpret(g, *inputs)                 # reference interpreter, list of tensors
    tgt = npuc.load_target("npu-mid")                 # a preset name or a path to a TOML file
    art = npuc.compile(model, example_inputs, target="npu-mid")   # -> Artifact (.run, .profile, .save)
    art = npuc.load("model.npub")                     # validated; refuses another target's binary
    res = npuc.explore(model, inputs, base="npu-mid", sweep={"array.rows": [8, 16, 32]}, out="dse/")
    rep = npuc.debug(model, example_inputs, target="npu-mid")   # every NPU value against the reference
    art = npuc.compile(exported_program)              # an ExportedProgram, float or PT2E-quantized
    art = npuc.compile(model, x, quantize=npuc.QuantOptions(per_channel=False), calibration=samples)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npuc.errors import NpucError

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers see; at run time the API is imported on first use
    from npuc.artifact import Artifact, CompileReport, compile, load
    from npuc.interp import interpret
    from npuc.pipeline import import_model
    from npuc.quant.quantizer import NpuQuantizer, QuantOptions
    from npuc.targets import Target, load_target

_API = {
    "compile": "npuc.artifact",
    "load": "npuc.artifact",
    "Artifact": "npuc.artifact",
    "CompileReport": "npuc.artifact",
    "import_model": "npuc.pipeline",
    "import_onnx": "npuc.pipeline",
    "export_mlir": "npuc.mlir.export",
    "interpret": "npuc.interp",
    "load_target": "npuc.targets",
    "explore": "npuc.dse.sweep",
    "debug": "npuc.debugger",
    "Target": "npuc.targets",
    "QuantOptions": "npuc.quant.quantizer",
    "NpuQuantizer": "npuc.quant.quantizer",
}


def __getattr__(name: str) -> Any:
    # The API is imported lazily so that `import npuc` stays cheap for the CLI's --help.
    if name in _API:
        import importlib

        if _API[name] == "npuc.quant.quantizer":
            from npuc.extras import require

            require("torchao")
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'npuc' has no attribute {name!r}")


__all__ = ["NpucError", "__version__", *_API]
