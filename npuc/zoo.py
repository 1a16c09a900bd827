"""The model zoo: named, deterministic models with example inputs, built without downloading.

A zoo entry is a name (``torchvision:resnet18``, ``transformers:bert-tiny``, ...) bound to a
builder that returns ``(model.eval(), example_inputs)`` with seeded random weights, and to an input
generator ``make_inputs(seed)`` that draws fresh inputs of the same shapes and dtypes (calibration
data, test vectors).  Transformers models are built from small configurations (no hub access) and
wrapped so that they return a plain tensor.

:func:`load_model` also accepts a user file: ``path/to/model.py:function``, where the function
returns ``(model, example_inputs)``.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from npuc._quiet import quiet_torchao_import

from npuc.errors import ModelSpecError

ModelAndInputs = tuple[torch.nn.Module, tuple]

_WEIGHT_SEED = 0
TOKEN_SEQ_LEN = 16
TOKEN_VOCAB = 512


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: how to build it and how to draw inputs for it."""

    name: str
    summary: str
    build_model: Callable[[], torch.nn.Module]
    make_inputs: Callable[[int], tuple]

    def load(self) -> ModelAndInputs:
        """The model in eval mode with seeded weights, and its example inputs (seed 0)."""
        torch.manual_seed(_WEIGHT_SEED)
        model = self.build_model().eval()
        randomize_batch_norms(model, _WEIGHT_SEED)
        randomize_zero_weights(model, _WEIGHT_SEED)
        return model, self.make_inputs(0)


def randomize_batch_norms(model: torch.nn.Module, seed: int) -> None:
    """Give every batch norm seeded, non-trivial statistics and affine parameters.

    Freshly built batch norms are identities (mean 0, variance 1, weight 1, bias 0), which would
    let a wrong batch-norm fold go unnoticed; trained-looking values keep the activations' scale.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(c, generator=g) * 0.1)


def randomize_zero_weights(model: torch.nn.Module, seed: int) -> None:
    """Give seeded random values to linear/conv weights that their initializer left all zero.

    Some models zero-initialize a layer (ViT's classification head): with random weights
    elsewhere its output would be exactly zero and a comparison against PyTorch would check
    nothing.
    """
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and not m.weight.any():
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / fan_in**0.5)


# ------------------------------------------------------------------------------------ inputs


def image_inputs(size: int = 224) -> Callable[[int], tuple]:
    """An input generator of one ``1x3xSxS`` float32 image drawn from N(0, 1)."""

    def make(seed: int) -> tuple:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(1, 3, size, size, generator=g),)

    return make


def token_inputs(seq_len: int = TOKEN_SEQ_LEN, vocab: int = TOKEN_VOCAB) -> Callable[[int], tuple]:
    """An input generator of one ``1xL`` int64 sequence of token ids in ``[0, vocab)``."""

    def make(seed: int) -> tuple:
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(0, vocab, (1, seq_len), generator=g, dtype=torch.int64),)

    return make


# ------------------------------------------------------------------------------- torchvision


def _torchvision(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        from npuc.extras import require

        tvm = require("torchvision.models")
        return getattr(tvm, name)(weights=None)

    return build


# ------------------------------------------------------------------------------ transformers


class LogitsOnly(torch.nn.Module):
    """Wraps a transformers model so that ``forward(ids)`` returns one plain tensor."""

    def __init__(self, inner: torch.nn.Module, field: str) -> None:
        super().__init__()
        self.inner = inner
        self.field = field

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.inner(input_ids=input_ids, use_cache=False, return_dict=True)
        return getattr(out, self.field)


def _common_config() -> dict:
    return dict(vocab_size=TOKEN_VOCAB, num_hidden_layers=2, num_attention_heads=2)


def _bert_tiny() -> torch.nn.Module:
    quiet_torchao_import()
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        **_common_config(),
        hidden_size=128,
        intermediate_size=512,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return LogitsOnly(BertModel(cfg, add_pooling_layer=False), "last_hidden_state")


def _gpt2_tiny() -> torch.nn.Module:
    quiet_torchao_import()
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=TOKEN_VOCAB,
        n_layer=2,
        n_head=2,
        n_embd=128,
        n_positions=64,
        attn_implementation="eager",
    )
    return LogitsOnly(GPT2LMHeadModel(cfg), "logits")


def _llama_tiny() -> torch.nn.Module:
    quiet_torchao_import()
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        **_common_config(),
        hidden_size=128,
        intermediate_size=256,
        num_key_value_heads=1,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return LogitsOnly(LlamaForCausalLM(cfg), "logits")


# ----------------------------------------------------------------------------------- registry

_ENTRIES: tuple[ZooEntry, ...] = (
    ZooEntry("torchvision:resnet18", "ResNet-18, 1x3x224x224", _torchvision("resnet18"), image_inputs()),
    ZooEntry("torchvision:resnet50", "ResNet-50, 1x3x224x224", _torchvision("resnet50"), image_inputs()),
    ZooEntry(
        "torchvision:mobilenet_v2", "MobileNetV2, 1x3x224x224", _torchvision("mobilenet_v2"), image_inputs()
    ),
    ZooEntry(
        "torchvision:mobilenet_v3_small",
        "MobileNetV3-Small, 1x3x224x224",
        _torchvision("mobilenet_v3_small"),
        image_inputs(),
    ),
    ZooEntry(
        "torchvision:efficientnet_b0", "EfficientNet-B0, 1x3x224x224", _torchvision("efficientnet_b0"), image_inputs()
    ),
    ZooEntry("torchvision:vit_b_16", "ViT-B/16, 1x3x224x224", _torchvision("vit_b_16"), image_inputs()),
    ZooEntry(
        "transformers:bert-tiny",
        f"BERT encoder, 2 layers, hidden 128, 1x{TOKEN_SEQ_LEN} token ids -> last hidden state",
        _bert_tiny,
        token_inputs(),
    ),
    ZooEntry(
        "transformers:gpt2-tiny",
        f"GPT-2, 2 layers, hidden 128, 1x{TOKEN_SEQ_LEN} token ids -> logits",
        _gpt2_tiny,
        token_inputs(),
    ),
    ZooEntry(
        "transformers:llama-tiny",
        f"Llama-style decoder, 2 layers, hidden 128, 1x{TOKEN_SEQ_LEN} token ids -> logits",
        _llama_tiny,
        token_inputs(),
    ),
)
ZOO: dict[str, ZooEntry] = {e.name: e for e in _ENTRIES}


def zoo_names() -> list[str]:
    """Every zoo model name, in a fixed order."""
    return [e.name for e in _ENTRIES]


def zoo_entry(name: str) -> ZooEntry:
    """The zoo entry called ``name``; ModelSpecError listing the names if there is none."""
    try:
        return ZOO[name]
    except KeyError:
        raise ModelSpecError(
            f"'{name}' is not a zoo model; the zoo has: {', '.join(zoo_names())} "
            "(or give a file as path/to/model.py:function)"
        ) from None


# ---------------------------------------------------------------------------------- load_model


def load_model(spec: str, input_shapes=None) -> ModelAndInputs:
    """Load a zoo model by name, call ``function`` of a user file ``path/to/file.py:function``, or
    read an ONNX file ``path/to/model.onnx`` (``input_shapes`` sizes its dynamic dimensions).

    The user function takes no arguments and returns ``(model, example_inputs)``; the model is put
    in eval mode and a single tensor input is accepted in place of a tuple.
    """
    if spec.endswith(".onnx"):
        from npuc.frontend.onnx_model import load_onnx_model

        m = load_onnx_model(spec, input_shapes)
        return m, m.example_inputs()
    if input_shapes:
        raise ModelSpecError("--input-shape applies to ONNX models only (a .onnx MODEL)")
    if spec in ZOO:
        return ZOO[spec].load()
    if ":" in spec and _looks_like_file(spec):
        return _load_user_file(spec)
    if spec.endswith(".py"):
        raise ModelSpecError(
            f"MODEL '{spec}' names a file but no function: write {spec}:function, where function() "
            "returns (model, example_inputs)"
        )
    return zoo_entry(spec).load()


def _looks_like_file(spec: str) -> bool:
    path, _, _ = spec.rpartition(":")
    return path.endswith(".py") or "/" in path or Path(path).exists()


def _load_user_file(spec: str) -> ModelAndInputs:
    path_text, _, func_name = spec.rpartition(":")
    path = Path(path_text)
    if not path.is_file():
        raise ModelSpecError(f"model file '{path}' does not exist (MODEL was '{spec}')")
    if not func_name.isidentifier():
        raise ModelSpecError(f"'{func_name}' in MODEL '{spec}' is not a Python function name")
    module = _import_file(path)
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise ModelSpecError(f"model file '{path}' defines no function '{func_name}'")
    try:
        result = fn()
    except Exception as e:  # the user's function failed; say where, without npuc's traceback
        raise ModelSpecError(
            f"{func_name}() of model file '{path}' raised {type(e).__name__}: {e}{_user_line(e, path)}"
        ) from e
    return _check_user_result(result, spec)


def _user_line(e: BaseException, path: Path) -> str:
    """' (at file.py:LINE: code)' for the deepest frame of ``e`` in the user's file, or ''."""
    import traceback

    target = str(path.resolve())
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename and Path(f.filename).resolve() == Path(target)]
    if not frames:
        return ""
    f = frames[-1]
    code = f": {f.line.strip()}" if f.line else ""
    return f" (at {path.name}:{f.lineno}{code})"


def _import_file(path: Path):
    mod_name = f"npuc_user_model_{abs(hash(str(path.resolve()))):x}"
    loaded = importlib.util.spec_from_file_location(mod_name, path)
    if loaded is None or loaded.loader is None:
        raise ModelSpecError(f"model file '{path}' cannot be imported as Python")
    module = importlib.util.module_from_spec(loaded)
    sys.modules[mod_name] = module
    try:
        loaded.loader.exec_module(module)
    except Exception as e:  # the user's module failed; say so plainly
        del sys.modules[mod_name]
        raise ModelSpecError(f"importing model file '{path}' failed: {type(e).__name__}: {e}") from e
    return module


def _check_user_result(result, spec: str) -> ModelAndInputs:
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ModelSpecError(f"the function of MODEL '{spec}' must return (model, example_inputs)")
    model, inputs = result
    if not isinstance(model, torch.nn.Module):
        raise ModelSpecError(
            f"the function of MODEL '{spec}' returned a {type(model).__name__} as model, not a torch.nn.Module"
        )
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise ModelSpecError(f"the example inputs of MODEL '{spec}' must be a tuple of tensors")
    return model.eval(), tuple(inputs)
