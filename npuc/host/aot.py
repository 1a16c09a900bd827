"""Compile the CPU segments of a binary ahead of time for the host CPU.

Each CPU-fallback subgraph of a ``.npub`` is exported as TOSA (:mod:`npuc.mlir.export`, the same
path as ``npuc export-mlir``) and compiled by IREE's llvm-cpu back-end for the target file's host
triple (``[host] triple``; this machine when the target has none), for a generic CPU of that
architecture so that the code runs on any host of the triple and the same binary compiles to the
same bytes.  The modules go into the binary's HOST_CODE section; the runtime
(:mod:`npuc.runtime.executor`) runs a CPU segment from its module when the module's triple is
this machine's, and on the reference interpreter otherwise.
"""

from __future__ import annotations

import dataclasses
import platform

import numpy as np
import torch

from npuc.errors import NpucError
from npuc.ir.graph import Graph
from npuc.runtime.npub import BindingRole, HostModule, Npub

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


def host_triple(target) -> str:
    """The triple CPU segments are compiled for: the target file's ``[host] triple``, else this machine's."""
    return getattr(target, "host_triple", None) or native_triple()


def cpu_graph(npub: Npub, index: int) -> Graph:
    """CPU-fallback subgraph ``index`` of ``npub`` as a graph, its constants read from the binary."""
    from npuc.ir.text import parse_graph
    from npuc.runtime.executor import read_tensor

    sub = npub.cpu_fallback[index]
    consts = {}
    blob = np.frombuffer(npub.constants, np.uint8)
    for b in sub.bindings:
        if b.role == BindingRole.CONSTANT:
            consts[b.value] = torch.from_numpy(read_tensor(blob, b.offset, b.type).copy())
    return parse_graph(sub.graph_text, consts)


def compile_host_code(npub: Npub, target) -> Npub:
    """``npub`` with a host module for every CPU-fallback subgraph (HOST_CODE section)."""
    from npuc.mlir.export import graph_to_mlir
    from npuc.mlir.iree import compile_mlir

    triple = host_triple(target)
    modules = []
    for i, sub in enumerate(npub.cpu_fallback):
        try:
            text = graph_to_mlir(cpu_graph(npub, i))
        except NpucError as e:
            raise NpucError(f"the host back-end cannot compile CPU segment '{sub.name}': {e}") from None
        modules.append(HostModule(i, triple, compile_mlir(text, target_triple=triple)))
    return dataclasses.replace(npub, host_code=tuple(modules))
