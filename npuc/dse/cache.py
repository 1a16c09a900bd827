"""The content-addressed result cache of a sweep.

An entry's key is the SHA-256 of what determines the result: the model (its optimized graph's
text and every constant's bytes), the design's target (every parameter but its name and
description), the quantization, the tier, and the compiler itself (npuc's version and the hash
of its source files).  An entry is one JSON file ``<dir>/<key[:2]>/<key>.json``, written whole or
not at all (a temporary file beside it, then a rename), so a sweep that is interrupted keeps every
design it finished, and a re-run or an extended sweep computes only the designs it has not seen.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path

from npuc.report.html import write_text_atomic


def default_cache_dir() -> Path:
    """``$NPUC_CACHE_DIR``, else ``$XDG_CACHE_HOME/npuc/explore``, else ``~/.cache/npuc/explore``."""
    if os.environ.get("NPUC_CACHE_DIR"):
        return Path(os.environ["NPUC_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "npuc" / "explore"


def graph_digest(graph_text: str, constants) -> str:
    """The model's identity: its graph text and each constant (name, dtype, shape, bytes)."""
    import torch

    h = hashlib.sha256(graph_text.encode())
    for name in sorted(constants):
        t = constants[name].detach().contiguous().reshape(-1)
        h.update(f"\0{name}\0{t.dtype}\0{tuple(constants[name].shape)}\0".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


@functools.cache
def compiler_digest() -> str:
    """npuc's version and the hash of every source file of the package (a changed compiler
    invalidates every entry)."""
    import npuc

    root = Path(npuc.__file__).parent
    h = hashlib.sha256(npuc.__version__.encode())
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def target_key(target) -> dict:
    d = dataclasses.asdict(target)
    d.pop("name")
    d.pop("description")
    return d


def entry_key(model_digest: str, target, quantize: str | None, tier: str) -> str:
    text = json.dumps({"model": model_digest, "target": target_key(target), "quantize": quantize, "tier": tier,
                       "compiler": compiler_digest()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class ResultCache:
    """Results by key in a folder (None: no cache)."""

    def __init__(self, root: Path | str | None) -> None:
        self.root = Path(root) if root is not None else None

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        if self.root is None:
            return None
        try:
            return json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def put(self, key: str, result: dict) -> None:
        if self.root is not None:
            write_text_atomic(self._path(key), json.dumps(result, sort_keys=True, separators=(",", ":")))
