"""Compiling npuc's MLIR with IREE (llvm-cpu) and running it with IREE's runtime.

This is the independent check of :mod:`npuc.mlir.export` (another compiler reads the file and its
outputs are compared with PyTorch's), and the code generator of the host back-end.
"""

from __future__ import annotations

from typing import Sequence

import torch

from npuc.errors import NpucError


def _compiler():
    try:
        import iree.compiler as compiler
    except ImportError:
        raise NpucError("compiling MLIR with IREE needs iree-base-compiler: pip install 'npuc[iree]'") from None
    return compiler


def compile_mlir(text: str, target_triple: str | None = None, cpu: str = "host") -> bytes:
    """An IREE module (``.vmfb`` bytes) for the local llvm-cpu device from MLIR text.

    ``target_triple`` (e.g. ``x86_64-unknown-linux-gnu``, ``aarch64-none-linux-android34``) selects
    a cross target; None compiles for this machine (``cpu="host"``)."""
    compiler = _compiler()
    args = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu"]
    if target_triple is None:
        args.append(f"--iree-llvmcpu-target-cpu={cpu}")
    else:
        args.append(f"--iree-llvmcpu-target-triple={target_triple}")
        args.append("--iree-llvmcpu-target-cpu=generic")
    try:
        return compiler.compile_str(text, extra_args=args)
    except compiler.CompilerToolError as e:
        lines = [ln for ln in str(e).splitlines() if "error" in ln][:3]
        raise NpucError("IREE could not compile the MLIR: " + (" | ".join(lines) or str(e)[:500])) from None


def run_mlir(text: str, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Compile ``text`` for this machine and run it on ``inputs``."""
    from npuc.runtime.host_code import IreeModule

    return IreeModule(compile_mlir(text)).run(*inputs)
