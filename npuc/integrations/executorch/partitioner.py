"""The ExecuTorch partitioner: the nodes npuc's own partition puts on the NPU are delegated.

:func:`npu_placement` imports the edge program into npuc's graph IR, runs the graph passes and
npuc's partition for the target, and maps each decision back to the program's nodes: a node runs
on the NPU unless npuc cannot import it or its partition places the node's value on the CPU (the
reason is kept, :attr:`NpucPartitioner.reasons`).  Connected NPU nodes become one delegate each
(TorchFX's capability-based partitioner), with the weights they read.
"""

from __future__ import annotations

import operator
from types import SimpleNamespace
from typing import Any, Callable

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from npuc.errors import UnsupportedOpError
from npuc.integrations.executorch.backend import BACKEND_ID


def npu_placement(ep: torch.export.ExportedProgram, target: Any) -> dict[str, str | None]:
    """For each call node of ``ep``: None when the NPU runs it, else why it stays on the CPU."""
    from npuc.artifact import resolve_target
    from npuc.frontend.importer import _Importer
    from npuc.frontend.quantized import is_quantized, recognize_quantized
    from npuc.lower.partition import partition
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import run_graph_passes

    tgt = resolve_target(target)
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    placement: dict[str, str | None] = {n.name: None for n in calls}
    importer = _Importer(ep.graph, "executorch", ep=_with_real_constants(ep))
    try:
        g = importer.run()
    except UnsupportedOpError:
        for p in importer.problems:
            placement[p.node] = f"npuc cannot import {p.aten}: {p.reason}"
        return _follow_getitems(calls, placement)
    int8 = is_quantized(ep.graph)
    if int8:
        g = recognize_quantized(g)
    g = run_graph_passes(g)
    lowered = partition(g, tgt, choose_precision(tgt, "int8" if int8 else None))
    for op in lowered.cpu_ops:
        node = importer.origins.get(op.value)
        if node is not None:
            placement[node] = op.reason
    surviving = {v.name for n in g.nodes if n.op != "const" for v in n.outputs}
    kept = {importer.origins[v] for v in surviving if v in importer.origins}
    return _follow_getitems(calls, _absorbed_follow_users(calls, placement, kept))


def _absorbed_follow_users(calls: list[torch.fx.Node], placement: dict[str, str | None],
                           kept: set[str]) -> dict[str, str | None]:
    """A node the graph passes folded away (a batch norm into its convolution, a weight
    transpose into the constant) goes where its users go: to the CPU if one of them does."""
    for n in reversed(calls):
        if n.name in kept or placement.get(n.name) is not None:
            continue
        reasons = [placement.get(u.name) for u in n.users if u.op == "call_function"]
        placement[n.name] = next((r for r in reasons if r is not None), None)
    return placement


def _with_real_constants(ep: torch.export.ExportedProgram) -> Any:
    """The parts of ``ep`` the importer reads, with fake constants (ExecuTorch hands partitioners a
    program whose weights are FakeTensors) replaced by zeros: placement depends on shapes only."""
    from torch._subclasses.fake_tensor import FakeTensor

    def real(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros(tuple(t.shape), dtype=t.dtype) if isinstance(t, FakeTensor) else t

    return SimpleNamespace(graph_signature=ep.graph_signature, state_dict={k: real(v) for k, v in ep.state_dict.items()},
                           constants={k: real(v) for k, v in ep.constants.items()})


def _follow_getitems(calls: list[torch.fx.Node], placement: dict[str, str | None]) -> dict[str, str | None]:
    """A ``getitem`` of a multi-output node goes where that node goes."""
    for n in calls:
        if n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node):
            placement[n.name] = placement.get(n.args[0].name)
    return placement


class _OnNpu(OperatorSupportBase):
    def __init__(self, placement: dict[str, str | None]) -> None:
        self.placement = placement

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and node.name in self.placement and self.placement[node.name] is None


class NpucPartitioner(Partitioner):
    """Delegates to npuc what npuc's partition puts on the NPU of ``target`` (a preset name or a
    target file); :attr:`reasons` says why each other node stays with ExecuTorch."""

    def __init__(self, target: str = "npu-mid") -> None:
        self.target = str(target)
        self.delegation_spec = DelegationSpec(BACKEND_ID, [CompileSpec("target", self.target.encode())])
        self.reasons: dict[str, str] = {}
        super().__init__()

    def ops_to_not_decompose(self, ep: torch.export.ExportedProgram) -> tuple[list, Callable | None]:
        """The ops npuc has one graph op for, kept whole through ExecuTorch's decompositions when
        the NPU can take them (ExecuTorch requires every op kept whole to be delegated): none when
        the target has no path for the program's precision, an adaptive average pool only when
        its windows are equal."""
        from npuc.artifact import resolve_target
        from npuc.frontend.export import KEPT_OPS
        from npuc.frontend.quantized import is_quantized
        from npuc.lower.precision import choose_precision

        tgt = resolve_target(self.target)
        if choose_precision(tgt, "int8" if is_quantized(ep.graph) else None).dtype is None:
            return [], None
        return list(KEPT_OPS), _kept_whole



    def partition(self, exported_program: torch.export.ExportedProgram) -> PartitionResult:
        with unset_fake_temporarily():  # ExecuTorch may call partitioners under a fake-tensor mode
            placement = npu_placement(exported_program, self.target)
        self.reasons = {k: v for k, v in placement.items() if v is not None}
        gm = exported_program.graph_module
        parts = CapabilityBasedPartitioner(gm, _OnNpu(placement), allows_single_node_partition=True).propose_partitions()
        tags: dict[str, DelegationSpec] = {}
        for i, part in enumerate(sorted(parts, key=lambda p: min(_order(gm, n) for n in p.nodes))):
            tag = f"npuc_{i}"
            for node in part.nodes:
                node.meta["delegation_tag"] = tag
            tags[tag] = self.delegation_spec
        tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


def _kept_whole(node: torch.fx.Node) -> bool:
    """Whether a node of a KEPT_OPS op stays whole (npuc's NPU takes it as one graph op)."""
    if node.target == torch.ops.aten.adaptive_avg_pool2d.default:
        val, size = node.args[0].meta.get("val"), node.args[1]
        if not isinstance(val, torch.Tensor) or val.dim() != 4:
            return False
        h, w = val.shape[2:]
        return tuple(size) == (1, 1) or (h % size[0] == 0 and w % size[1] == 0)
    return True


def _order(gm: torch.fx.GraphModule, node: torch.fx.Node) -> int:
    return list(gm.graph.nodes).index(node)
