"""npuc: compile PyTorch models to edge NPU binaries and simulate them.

The Python API::

    g = npuc.import_model(model, example_inputs)     # torch.export -> graph IR -> graph passes
    g = npuc.import_onnx("model.onnx")               # an ONNX model (path or ModelProto) -> graph IR
    text = npuc.export_mlir(model, example_inputs)   # the optimized graph as MLIR (TOSA), via xDSL
    outs = npuc.interpret(g, *inputs)                 # reference interpreter, list of tensors
    tgt = npuc.load_target("npu-mid")                 # a preset name or a path to a TOML file
    art = npuc.compile(model, example_inputs, target="npu-mid")   # -> Artifact (.run, .profile, .save)
    art = npuc.load("model.npub")                     # validated; refuses another target's binary
"""

from __future__ import annotations

from npuc.errors import NpucError

__version__ = "0.1.0"

_API = {
    "compile": "npuc.artifact",
    "load": "npuc.artifact",
    "import_model": "npuc.pipeline",
    "import_onnx": "npuc.pipeline",
    "export_mlir": "npuc.mlir.export",
    "interpret": "npuc.interp",
    "load_target": "npuc.targets",
}


def __getattr__(name: str):
    # The API is imported lazily so that `import npuc` stays cheap for the CLI's --help.
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'npuc' has no attribute {name!r}")


__all__ = ["NpucError", "__version__", *_API]
