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

from npuc.errors import NpucError
from npuc.runtime.host_code import native_triple, runs_here  # noqa: F401  (re-exported)
from npuc.runtime.executor import cpu_graph  # noqa: F401  (re-exported)
from npuc.runtime.npub import HostModule, Npub

def host_triple(target) -> str:
    """The triple CPU segments are compiled for: the target file's ``[host] triple``, else this machine's."""
    return getattr(target, "host_triple", None) or native_triple()


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
