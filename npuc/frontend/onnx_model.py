"""An ONNX file as a model npuc's commands can take: its inputs, and a reference to compare with.

:class:`OnnxModel` is a ``torch.nn.Module`` so that it goes wherever a PyTorch model goes in the
CLI (``npuc import/compile/run/demo model.onnx``): calling it runs the model with onnxruntime
(ONNX's reference implementation when onnxruntime is not installed), which is what npuc's results
are checked against; :func:`npuc.frontend.import_graph` imports it through the ONNX frontend
instead of torch.export.  Shapes come from the file; dynamic dimensions need ``input_shapes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from npuc.errors import NpucError

_SESSIONS: dict[int, Any] = {}


class OnnxModel(torch.nn.Module):
    """An ONNX model with static input shapes; calling it runs onnxruntime on torch tensors."""

    def __init__(self, proto, name: str, input_shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        super().__init__()
        from npuc.frontend.onnx_import import graph_input_specs, normalized

        self.proto = normalized(proto)
        self.model_name = name
        self.input_shapes = dict(input_shapes or {})
        self.specs = tuple(graph_input_specs(self.proto, self.input_shapes))

    def example_inputs(self, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Inputs of the model's shapes and types: standard normal floats, small non-negative
        integers (valid token ids and indices for any table of 2 or more rows), False booleans."""
        gen = torch.Generator().manual_seed(seed)
        out = []
        for _, shape, dtype in self.specs:
            if dtype.is_floating_point:
                out.append(torch.randn(shape, generator=gen).to(dtype))
            elif dtype == torch.bool:
                out.append(torch.zeros(shape, dtype=torch.bool))
            else:
                out.append(torch.randint(0, 2, shape, generator=gen).to(dtype))
        return tuple(out)

    def forward(self, *inputs: torch.Tensor):
        half = any(x.dtype == torch.float16 for x in inputs) and not any(d == torch.float16 for _, _, d in self.specs)
        feeds = {}
        for (name, _, dtype), x in zip(self.specs, inputs):
            feeds[name] = x.detach().to(dtype).cpu().numpy()
        outs = [torch.from_numpy(np.asarray(o).copy()) for o in self._run(feeds)]
        if half:
            outs = [o.half() if o.is_floating_point() else o for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        session = _SESSIONS.get(id(self))
        if session is None:
            session = _session(self.proto)
            _SESSIONS[id(self)] = session
        return session(feeds)


def _session(proto):
    """onnxruntime on the model; ONNX's reference implementation when onnxruntime is missing or
    cannot load it (a newer IR version or opset than it reads)."""
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, feeds)
    except Exception:
        from onnx.reference import ReferenceEvaluator

        ev = ReferenceEvaluator(proto)
        return lambda feeds: ev.run(None, feeds)


def is_onnx_spec(model: Any) -> bool:
    """Whether ``model`` names an ONNX model: a ``.onnx`` path, a ModelProto or an OnnxModel."""
    if isinstance(model, OnnxModel):
        return True
    if isinstance(model, (str, Path)):
        return str(model).endswith(".onnx")
    try:
        import onnx
    except ImportError:
        return False
    return isinstance(model, onnx.ModelProto)


def load_onnx_model(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None) -> OnnxModel:
    """An :class:`OnnxModel` from a path, a ModelProto or an OnnxModel (shapes applied)."""
    from npuc.frontend.onnx_import import load_proto

    if isinstance(model, OnnxModel):
        if input_shapes:
            return OnnxModel(model.proto, model.model_name, {**model.input_shapes, **input_shapes})
        return model
    proto = load_proto(model)
    name = Path(model).stem if isinstance(model, (str, Path)) else (proto.graph.name or "onnx")
    return OnnxModel(proto, name, input_shapes)


def parse_input_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``--input-shape NAME=D0,D1,...`` options -> {name: shape}."""
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, eq, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            shape = ()
        if not eq or not name or not shape or any(d < 0 for d in shape):
            raise NpucError(f"--input-shape '{item}' is not NAME=D0,D1,... (e.g. input=1,3,224,224)")
        out[name] = shape
    return out
