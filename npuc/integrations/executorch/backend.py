"""The ExecuTorch backend: ``preprocess`` compiles a delegated edge-dialect subgraph with npuc and
returns its ``.npub``; the debug handle map says which nodes of the program each kernel covers."""

from __future__ import annotations

from typing import Any

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch._subclasses.fake_tensor import unset_fake_temporarily

from npuc.errors import NpucError

BACKEND_ID = "NpucBackend"


def spec_value(compile_specs: list[CompileSpec], key: str, default: str | None = None) -> str | None:
    """The value of compile spec ``key`` as text (None or ``default`` when absent)."""
    for spec in compile_specs:
        if spec.key == key:
            return bytes(spec.value).decode()
    return default


class NpucBackend(BackendDetails):
    """Compiles a delegated subgraph for the target named by the ``target`` compile spec."""

    @staticmethod
    def preprocess(edge_program: torch.export.ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
        """The ``.npub`` of ``edge_program`` for the ``target`` compile spec, and its debug handles."""
        with unset_fake_temporarily():  # ExecuTorch may lower under a fake-tensor mode
            return _preprocess(edge_program, compile_specs)


def _preprocess(edge_program: torch.export.ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
    from npuc.artifact import resolve_target
    from npuc.frontend.models import program_inputs
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import run_backend, run_frontend, run_graph_passes

    target = resolve_target(spec_value(compile_specs, "target"))
    records: list = []
    g, origins = run_frontend(edge_program, program_inputs(edge_program), records=records, with_origins=True)
    int8 = any(n.op == "dequantize" for n in g.nodes)
    g = run_graph_passes(g, records=records)
    packaged = run_backend(g, target, choose_precision(target, "int8" if int8 else None),
                           model_name="executorch", records=records)
    if packaged.npub.cpu_fallback:
        raise NpucError(
            f"the delegated subgraph has {len(packaged.npub.cpu_fallback)} CPU segments on {target.name}: "
            "the partitioner should have left those nodes to ExecuTorch"
        )
    return PreprocessResult(processed_bytes=packaged.npub.to_bytes(),
                            debug_handle_map=debug_handles(packaged, origins, edge_program))


def debug_handles(packaged: Any, origins: dict[str, str], ep: torch.export.ExportedProgram) -> dict[int, tuple[int, ...]]:
    """Kernel index (in program order) -> the debug handles of the program nodes whose values it
    reads or writes (what a profiler maps the kernel's cycles back to)."""
    handles = {n.name: n.meta["debug_handle"] for n in ep.graph.nodes if "debug_handle" in n.meta}
    out: dict[int, tuple[int, ...]] = {}
    for i, k in enumerate(packaged.compiled.plan.model.kernels()):
        names = {t.name for t in k.kernel.tensors()}
        found = sorted({handles[origins[v]] for v in names if v in origins and origins[v] in handles})
        if found:
            out[i] = tuple(int(h) for h in found)
    return out
