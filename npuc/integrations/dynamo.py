"""``torch.compile(model, backend="npuc")``: each graph TorchDynamo captures runs on the simulator.

The backend is registered through the ``torch_dynamo_backends`` entry point of npuc's package
metadata, so ``backend="npuc"`` works once npuc is installed.  ``options`` of ``torch.compile``
are npuc's::

    f = torch.compile(model, backend="npuc", options={"target": "npu-mid"})
    f = torch.compile(model, backend="npuc", options={"target": "npu-small", "quantize": "int8"})

For every graph (a graph break gives several), the backend

- freezes the module's parameters and buffers, which TorchDynamo passes as graph inputs, into
  constants of the piece, so that the graph passes see them (batch norms fold into convolutions);
- compiles the piece with :func:`npuc.compile` for the target (CPU fallbacks as usual) and runs it
  with :meth:`npuc.artifact.Artifact.run`; int8 pieces calibrate on the inputs they are first
  called with unless ``options["calibration"]`` gives samples of the piece's inputs;
- compiles once per input shape: when TorchDynamo marks a dimension dynamic after a shape change,
  the piece is compiled again for each new concrete shape, and reused for shapes seen before.

``options["on_compile"]``, a function of ``(piece name, Artifact)``, is told of every compilation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from npuc.errors import NpucError

OPTION_NAMES = ("target", "quantize", "calibration", "on_compile")


def npuc_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict | None = None,
                 **kwargs: Any) -> Callable[..., Any]:
    """The TorchDynamo backend: a callable that runs ``gm`` on npuc's simulator (see the module
    docstring); ``options`` are those given to ``torch.compile``."""
    opts = dict(options or {})
    opts.update(kwargs)
    unknown = sorted(set(opts) - set(OPTION_NAMES))
    if unknown:
        raise NpucError(f"torch.compile(backend='npuc') got unknown options {unknown}; npuc's are {list(OPTION_NAMES)}")
    piece = CompiledPiece(gm, _arg_kinds(gm, example_inputs), opts)
    if piece.static:
        piece.compile_for(example_inputs)
    return piece


@dataclass(frozen=True)
class ArgKind:
    """A graph input as TorchDynamo passes it: the model's input, its state, or a symbolic size."""

    name: str
    kind: str  # "input" | "state" | "size"


def _arg_kinds(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[ArgKind, ...]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    kinds = []
    for node, value in zip(placeholders, example_inputs):
        if not isinstance(value, torch.Tensor):
            kinds.append(ArgKind(node.name, "size"))
        elif isinstance(value, torch.nn.Parameter) or _is_module_state(node):
            kinds.append(ArgKind(node.name, "state"))
        else:
            kinds.append(ArgKind(node.name, "input"))
    return tuple(kinds)


def _is_module_state(node: torch.fx.Node) -> bool:
    """Whether TorchDynamo lifted this graph input from a module's parameters or buffers."""
    arg = node.meta.get("grapharg")
    source = getattr(arg, "source", None)
    while source is not None:
        if type(source).__name__ in ("UnspecializedParamBufferSource", "ParamBufferSource"):
            return True
        if getattr(source, "member", None) in ("_parameters", "_buffers"):
            return True
        source = getattr(source, "base", None)
    return False


def freeze(gm: torch.fx.GraphModule, kinds: tuple[ArgKind, ...], args: Sequence[Any]) -> torch.fx.GraphModule:
    """A copy of the captured graph whose module state is constant: each state input becomes an
    attribute read (``get_attr``) of a buffer, each symbolic size its value; the remaining
    placeholders are the user's inputs."""
    graph = copy.deepcopy(gm.graph)
    root = torch.nn.Module()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for node, kind, value in zip(placeholders, kinds, args):
        if kind.kind == "state":
            name = _state_name(kind.name)
            if isinstance(value, torch.nn.Parameter):  # stays a parameter: PT2E folds batch norms into those
                root.register_parameter(name, torch.nn.Parameter(value.detach(), requires_grad=False))
            else:
                root.register_buffer(name, value.detach())
            with graph.inserting_before(node):
                node.replace_all_uses_with(graph.get_attr(name))
            graph.erase_node(node)
        elif kind.kind == "size":
            for user in list(node.users):
                user.args = torch.utils._pytree.tree_map(lambda v: int(value) if v is node else v, user.args)
                user.kwargs = torch.utils._pytree.tree_map(lambda v: int(value) if v is node else v, user.kwargs)
            graph.erase_node(node)
    return torch.fx.GraphModule(root, graph, class_name=type(gm).__name__)


def _state_name(placeholder: str) -> str:
    """``conv.weight`` from TorchDynamo's ``l_self_modules_conv_parameters_weight_`` (a readable
    constant name; dots become underscores, as buffer names allow no dots)."""
    name = placeholder.removeprefix("l_self_").removeprefix("l_").rstrip("_")
    for part in ("modules_", "parameters_", "buffers_"):
        name = name.replace(part, "")
    return f"state_{name}"


@dataclass(eq=False)
class CompiledPiece:
    """One captured graph compiled by npuc, once per input shape."""

    gm: torch.fx.GraphModule
    kinds: tuple[ArgKind, ...]
    options: dict
    artifacts: dict[tuple, Any] = field(default_factory=dict)

    @property
    def static(self) -> bool:
        return all(k.kind != "size" for k in self.kinds)

    def user_inputs(self, args: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        return tuple(a for k, a in zip(self.kinds, args) if k.kind == "input")

    def compile_for(self, args: Sequence[Any]) -> Any:
        """The artifact for the shapes of ``args`` (all graph inputs), compiled on first use."""
        import npuc

        user = self.user_inputs(args)
        key = tuple((tuple(x.shape), x.dtype) for x in user)
        art = self.artifacts.get(key)
        if art is None:
            frozen = freeze(self.gm, self.kinds, args).eval()
            quantize = self.options.get("quantize")
            calibration = None
            if quantize is not None:  # the documented default: the inputs of the first call
                calibration = self.options.get("calibration") or [tuple(x.detach() for x in user)]
            with torch.no_grad():
                art = npuc.compile(frozen, tuple(x.detach() for x in user), target=self.options.get("target"),
                                   quantize=quantize, calibration=calibration, name=self.gm.__class__.__name__)
            self.artifacts[key] = art
            hook = self.options.get("on_compile")
            if hook is not None:
                hook(self.gm.__class__.__name__, art)
        return art

    def __call__(self, *args: Any) -> tuple[torch.Tensor, ...]:
        art = self.compile_for(args)
        outs = art.run(*(x.detach() for x in self.user_inputs(args)))
        return tuple(outs)
