"""Running host code: IREE modules of a binary's HOST_CODE section, and which triples run here.

The modules are compiled by :mod:`npuc.host.aot`; the executor runs a CPU segment from its module
when :func:`runs_here` says the module's triple is this machine's.
"""

from __future__ import annotations

import platform

import numpy as np
import torch

from npuc.errors import NpucError

_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def native_triple() -> str:
    """The LLVM triple of the machine npuc runs on (Linux and macOS on x86-64 and arm64)."""
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    system = platform.system().lower()
    if system == "darwin":
        return f"{'arm64' if arch == 'aarch64' else arch}-apple-darwin"
    return f"{arch}-unknown-linux-gnu"


def runs_here(triple: str) -> bool:
    """Whether code for ``triple`` runs on this machine (same architecture and system)."""

    def key(t: str) -> tuple[str, str]:
        parts = t.split("-")
        arch = _ARCH.get(parts[0], parts[0])
        system = "darwin" if "darwin" in t else ("linux" if "linux" in t else t)
        return arch, system

    return key(triple) == key(native_triple())


class IreeModule:
    """A compiled IREE module loaded in a runtime context; call ``run(*tensors)``."""

    def __init__(self, vmfb: bytes, function: str = "main", driver: str = "local-sync") -> None:
        try:
            import iree.runtime as rt
        except ImportError:
            raise NpucError("running IREE modules needs iree-base-runtime: pip install 'npuc[iree]'") from None
        self._ctx = rt.SystemContext(config=rt.Config(driver))
        self._ctx.add_vm_module(rt.VmModule.copy_buffer(self._ctx.instance, vmfb))
        self._fn = self._ctx.modules.module[function]

    def run(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        out = self._fn(*[np.ascontiguousarray(x.detach().cpu().numpy()) for x in inputs])
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        return [torch.from_numpy(np.array(o.to_host() if hasattr(o, "to_host") else o)) for o in outs]


