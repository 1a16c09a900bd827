"""npuc's optional dependencies: importing one that is missing is a MissingExtraError that says
what to install (``pip install 'npuc[quant]'``), never a bare ModuleNotFoundError."""

from __future__ import annotations

import importlib
from types import ModuleType

from npuc.errors import MissingExtraError

# module -> (the extra of pyproject.toml that installs it, what npuc needs it for)
EXTRAS: dict[str, tuple[str, str]] = {
    "torchao": ("quant", "int8 quantization (PT2E)"),
    "executorch": ("executorch", "the ExecuTorch partitioner and backend"),
    "torchvision": ("zoo", "the torchvision models of the zoo"),
    "transformers": ("zoo", "the transformers models of the zoo"),
}


def require(module: str) -> ModuleType:
    """Import ``module`` (a top-level package of an extra); MissingExtraError naming the extra."""
    top = module.split(".")[0]
    if top in ("torchao", "executorch"):
        from npuc._quiet import quiet_torchao_import

        quiet_torchao_import()  # both import torchao, which logs deprecations a user can do nothing about
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != top:
            raise
        extra, purpose = EXTRAS[top]
        raise MissingExtraError(
            f"{purpose} needs the '{top}' package, which is not installed: pip install 'npuc[{extra}]'"
        ) from None


def quantizer() -> ModuleType:
    """npuc.quant.quantizer, whose import needs torchao."""
    require("torchao")
    return importlib.import_module("npuc.quant.quantizer")
