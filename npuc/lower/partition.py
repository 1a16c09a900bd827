"""Partition: which graph nodes the NPU runs and which fall back to the CPU, and why.

Every node is checked against the target, in program order:

1. the precision (a float graph on a target without fp16 runs on the CPU);
2. a lowering rule exists for the op (else a sentence from ``CPU_REASONS``), and its values are
   float or bool (the NPU holds a float model in fp16 only, booleans as 0/1 masks), or it is
   integer arithmetic proven to fit int32 (``npuc.lower.rules_int``, ``npuc.lower.int_range``);
3. the rule's kernels are implemented and each implementation's ``supports`` accepts them.

A node that fails any check runs on the CPU with that reason.  NPU nodes form NPU segments
(maximal runs in program order); the others form CPU segments, run by the reference interpreter
on a subgraph.  A value that crosses segments is stored densely in DRAM: NPU-side values in the
NPU's dtype and layout (the runtime converts what the CPU reads and writes), values only the CPU
touches in their own dtype, row-major.  A strided view the CPU must read is first copied to a
dense buffer by a ``copy`` kernel.
"""

from __future__ import annotations

from dataclasses import replace

from npuc.codegen.kernel import constant_layout, get_kernel
from npuc.errors import CompileError, NpucError
from npuc.frontend.summary import node_macs
from npuc.ir.graph import Graph, Node, Value
from npuc.ir.types import DType as IRType
from npuc.isa.enums import DType
from npuc.kir.kernel import KERNEL_KINDS, Kernel
from npuc.kir.program import (
    ACTIVATION,
    CONSTANT,
    INPUT,
    OUTPUT,
    Buffer,
    ConstData,
    CpuOp,
    CpuSegment,
    Home,
    LKernel,
    LoweredModel,
    NpuSegment,
    Precision,
)
from npuc.kir.storage import IR_OF_ISA, layout_name, storage_dtype
from npuc.kir.tensor import DramTensor
from npuc.lower.context import LowerContext, Lowered
from npuc.lower.cpu_cost import node_flops, node_seconds, segment_seconds
from npuc.lower.layout import dense_order, image_values, order_of
from npuc.lower.int_range import range_note
from npuc.lower.precision import int8_value_reason
from npuc.lower.rules import CPU_REASONS, RULES, VIEW_OPS
from npuc.lower.rules_gather import index_operand
from npuc.lower.rules_int import is_integer_node, lower_int
from npuc.lower.rules_int8 import quant_macs

NPU, CPU = "npu", "cpu"


class _Restart(Exception):
    """A node must move to the CPU after later nodes were lowered; lower again."""

    def __init__(self, node: Node, reason: str) -> None:
        self.node, self.reason = node, reason


def partition(g: Graph, target, precision: Precision) -> LoweredModel:
    """Lower ``g`` for ``target``: segments of kernels and CPU subgraphs (unfused)."""
    forced: dict[Node, str] = {}
    while True:
        try:
            return _Pass(g, target, precision, forced).run()
        except _Restart as r:
            if r.node in forced:
                raise CompileError(f"internal error: partition does not settle at node {r.node.op}") from None
            forced[r.node] = r.reason


def static_reason(node: Node, precision: Precision, const_values: set[Value]) -> str | None:
    """Why ``node`` cannot run on the NPU whatever its kernels say, or None."""
    if precision.dtype is None:
        return precision.reason
    if node.op in CPU_REASONS:
        return CPU_REASONS[node.op]
    if precision.dtype is DType.int8:
        reason = int8_value_reason(node, const_values)
        if reason is not None:
            return reason
    if node.op not in RULES:
        return f"{node.op}: no NPU lowering exists for this op"
    if precision.dtype is DType.int8:
        return None
    if is_integer_node(node):  # proven to fit int32 or not: npuc.lower.rules_int decides
        return None
    indices = index_operand(node)  # a gather's integer indices are read, not computed
    for v in list(node.inputs) + list(node.outputs):
        if v is indices:
            continue
        if v not in const_values and not (v.type.dtype.is_float or v.type.dtype is IRType.bool):
            return f"{node.op} on {v.type.dtype.value} values: the NPU computes a float model in fp16 only"
    return None


class _Pass:
    """One lowering pass over the graph with a fixed set of nodes forced to the CPU."""

    def __init__(self, g: Graph, target, precision: Precision, forced: dict[Node, str]) -> None:
        self.g, self.target, self.precision, self.forced = g, target, precision, forced
        self.ctx = LowerContext(g, target, precision, image_values(g))
        self.producer = g.producers()
        self.users = g.users()
        self.side: dict[Node, str] = {}
        self.reason: dict[Node, str] = {}
        self.kernels: dict[Node, list[Kernel]] = {}
        self.dense: dict[Value, DramTensor] = {}  # dense copies of strided views the CPU reads

    # ------------------------------------------------------------------ placement

    def run(self) -> LoweredModel:
        for i, v in enumerate(self.g.outputs):
            if v in self.ctx.const_of:  # found by the random graphs: it has no home to be stored in
                raise CompileError(
                    f"model output {i} (%{v.name}) is a constant that does not depend on the inputs: npuc "
                    "compiles outputs computed from the inputs (return the constant from your own code)"
                )
        for node in self.g.nodes:
            if node.op != "const":
                self._place(node)
        self._materialize()
        return self._build()

    def _with_range_note(self, node: Node, reason: str) -> str:
        """``reason`` and what the integer range analysis proves about the node's values."""
        if self.precision.dtype is not DType.fp16 or is_integer_node(node):
            return reason  # no integer question on this path, or its reason came from the analysis
        note = range_note(node, self.ctx.int_ranges)
        return reason if note is None or note in reason else f"{reason}; {note}"

    def _int32_reader(self, node: Node) -> str | None:
        """Why a non-integer op cannot read an int32 value the NPU computed, or None."""
        indices = index_operand(node)  # a gather reads int32 indices as they are
        for v in node.inputs:
            if v is not indices and self.ctx.is_npu_int32(v):
                return (f"{node.op} reads %{v.name}, which the NPU holds as int32 (an integer or the mask of an "
                        "integer comparison); only integer ops and gathers read it there")
        return None

    def _place(self, node: Node) -> None:
        consts = set(self.ctx.const_of)
        reason = self.forced.get(node) or static_reason(node, self.precision, consts)
        if reason is None and node.op in VIEW_OPS:
            src = self.producer.get(node.inputs[0])
            if src is not None and self.side.get(src) == CPU:
                reason = f"a {node.op} of a CPU result stays on the CPU (it costs nothing there)"
        if reason is None and not is_integer_node(node):
            reason = self._int32_reader(node)
        chosen = None
        if reason is None:
            candidates = (lower_int if is_integer_node(node) else RULES[node.op])(self.ctx, node)
            if isinstance(candidates, str):
                reason = candidates
            else:
                chosen, reason = self._first_accepted(candidates)
        if chosen is None:
            self.side[node] = CPU
            self.reason[node] = self._with_range_note(node, reason or "no lowering was accepted")
            return
        self.side[node] = NPU
        self.kernels[node] = list(chosen.kernels)
        for v, t in chosen.views:
            self.ctx.set_view(v, t)

    def _first_accepted(self, candidates: list[Lowered]) -> tuple[Lowered | None, str | None]:
        first_reason = None
        for cand in candidates:
            kernels, reason = self.check(cand.kernels)
            if reason is None:
                return replace(cand, kernels=tuple(kernels)), None
            first_reason = first_reason or reason
        return None, first_reason

    def check(self, kernels) -> tuple[list[Kernel], str | None]:
        """The kernels with constants in the order their implementations ask, or why not."""
        out = []
        for k in kernels:
            try:
                impl = get_kernel(k.kind)
            except CompileError:
                return [], f"no NPU kernel implements '{k.kind}' yet"
            inputs = tuple(
                self._relayout(impl, k, i, t) if self.ctx.is_constant(t) else t for i, t in enumerate(k.inputs)
            )
            k = replace(k, inputs=inputs)
            try:
                why = impl.supports(k, self.target)
            except NpucError as e:
                why = str(e)
            if why:
                return [], f"the {k.kind} kernel cannot run it: {why}"
            out.append(k)
        return out, None

    def _relayout(self, impl, k: Kernel, i: int, t: DramTensor) -> DramTensor:
        order = constant_layout(impl, k, i)
        return self.ctx.relayout_constant(t, tuple(order)) if order is not None else t

    # ------------------------------------------------------------------ crossing values

    def _escapes(self, v: Value) -> bool:
        """Read outside the NPU: by a CPU node or as a model output."""
        return v in self.g.outputs or any(self.side.get(u) == CPU for u in self.users.get(v, []))

    def _materialize(self) -> None:
        """Give every strided NPU view the CPU (or the caller) reads a dense copy."""
        for node in self.g.nodes:
            if self.side.get(node) != NPU:
                continue
            for v in node.outputs:
                t = self.ctx.homes.get(v)
                if t is None or not self._escapes(v) or dense_order(t) is not None:
                    continue
                dst = self.ctx.temp(f"{v.name}.dense", v.type.shape, order_of(v, self.ctx.images), t.dtype)
                copy = self.ctx.kernel(node, "copy", (t,), dst, suffix=".dense", dtype=t.dtype)
                kernels, reason = self.check([copy])
                if reason:
                    raise _Restart(node, f"its result is a strided view the CPU reads, and {reason}")
                self.kernels[node].extend(kernels)
                self.dense[v] = dst

    # ------------------------------------------------------------------ segments

    def _segments(self) -> list[tuple[str, list[Node]]]:
        runs: list[tuple[str, list[Node]]] = []
        for node in self.g.nodes:
            if node.op == "const":
                continue
            side = self.side[node]
            if runs and runs[-1][0] == side:
                runs[-1][1].append(node)
            else:
                runs.append((side, [node]))
        return runs

    def _build(self) -> LoweredModel:
        runs = self._segments()
        consts = set(self.ctx.const_of)
        defined_in: dict[Value, int] = {v: -1 for v in self.g.inputs}
        for i, (_, nodes) in enumerate(runs):
            for n in nodes:
                for v in n.outputs:
                    defined_in[v] = i
        used_in: dict[Value, set[int]] = {}
        for i, (_, nodes) in enumerate(runs):
            for n in nodes:
                for v in n.inputs:
                    if v not in consts:
                        used_in.setdefault(v, set()).add(i)
        homes: dict[Value, Home] = {}
        buffers = dict(self.ctx.buffers)
        crossing = [v for v in defined_in if v in self.g.outputs or v in self.g.inputs
                    or any(j != defined_in[v] for j in used_in.get(v, ()))]
        crossing_set = set(crossing)
        for v in crossing:
            npu_only = (v not in self.g.inputs and not self._escapes(v)
                        and self.side.get(self.producer.get(v)) == NPU)
            if not npu_only:  # NPU-to-NPU values need no home: kernels address their buffer
                homes[v] = self._home(v, buffers)
        segments = []
        counts = {NPU: 0, CPU: 0}
        for i, (side, nodes) in enumerate(runs):
            ins = _unique(v for n in nodes for v in n.inputs if v not in consts and defined_in.get(v) != i)
            outs = _unique(v for n in nodes for v in n.outputs if v in crossing_set)
            name = f"{side}{counts[side]}"
            counts[side] += 1
            if side == NPU:
                ks = tuple(self._lkernel(n, k) for n in nodes for k in self.kernels[n])
                segments.append(NpuSegment(name, ks, tuple(v.name for v in ins), tuple(v.name for v in outs)))
            else:
                segments.append(self._cpu_segment(name, nodes, ins, outs, homes, buffers))
        inputs = tuple((v.name, v.name) for v in self.g.inputs)
        outputs = _output_names(self.g)
        return LoweredModel(
            name=self.g.name,
            target=self.target,
            precision=self.precision,
            segments=tuple(segments),
            buffers=_final_buffers(buffers, homes, self.g, segments),
            homes=tuple(homes.values()),
            inputs=inputs,
            outputs=outputs,
            cpu_ops=tuple(
                CpuOp(n.outputs[0].name, n.op, n.loc, self.reason[n], node_seconds(n, consts))
                for n in self.g.nodes if self.side.get(n) == CPU
            ),
            placement=tuple(
                (n.outputs[0].name, n.op, self.side[n], self.reason.get(n, ""))
                for n in self.g.nodes if n.op != "const"
            ),
        )

    def _lkernel(self, node: Node, k: Kernel) -> LKernel:
        macs = (node_macs(node) or quant_macs(node)) if KERNEL_KINDS[k.kind].counts_macs else 0
        return LKernel(k, (node.op,), node.loc, macs)

    def _home(self, v: Value, buffers: dict[str, Buffer]) -> Home:
        t = self.dense.get(v) or self.ctx.homes.get(v)
        if t is not None:
            order = dense_order(t)
            if order is None:
                raise CompileError(f"internal error: value %{v.name} crosses segments as a strided view")
            shape = tuple(t.shape[d] for d in order)
            quant = v.type.quant if self.precision.dtype is DType.int8 else None
            dtype = IR_OF_ISA[t.dtype] if t.dtype is DType.int32 else self.precision.ir_dtype  # int32: rules_int
            return Home(v.name, t.name, t.addr, shape, dtype, layout_name(order), quant)
        dtype = storage_dtype(v.type.dtype)
        name = v.name
        nbytes = max(v.type.numel, 1) * dtype.itemsize
        buffers[name] = Buffer(name, nbytes, ACTIVATION)
        return Home(v.name, name, 0, v.type.shape, dtype, None, v.type.quant if dtype == IRType.i8 else None)

    def _cpu_segment(self, name, nodes, ins, outs, homes, buffers) -> CpuSegment:
        const_nodes = []
        seen = set()
        for n in nodes:
            for v in n.inputs:
                if v in self.ctx.const_of and v not in seen:
                    seen.add(v)
                    const_nodes.append(self.producer[v])
        constants = {c.attrs.name: self.g.constants[c.attrs.name] for c in const_nodes}
        for cname, data in constants.items():
            bname = f"#{cname}"
            dtype = storage_dtype(ir_type_of(data))
            buffers.setdefault(bname, Buffer(bname, max(data.numel(), 1) * dtype.itemsize, CONSTANT,
                                             ConstData(cname, data, dtype, None)))
        sub = Graph(name, tuple(ins), tuple(const_nodes) + tuple(nodes), tuple(outs), constants)
        flops = sum(node_flops(n) for n in nodes)
        moved = sum(homes[v].nbytes for v in list(ins) + list(outs))
        return CpuSegment(name, sub, tuple(v.name for v in ins), tuple(v.name for v in outs),
                          segment_seconds(flops, moved), flops, moved)


def ir_type_of(t):
    from npuc.ir.types import DType

    return DType.from_torch(t.dtype)


def _unique(values) -> list[Value]:
    out, seen = [], set()
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def _output_names(g: Graph) -> tuple[tuple[str, str], ...]:
    names, seen = [], {}
    for v in g.outputs:
        k = seen.get(v.name, 0)
        seen[v.name] = k + 1
        names.append((v.name if k == 0 else f"{v.name}#{k}", v.name))
    return tuple(names)


def _final_buffers(buffers: dict[str, Buffer], homes: dict[Value, Home], g: Graph, segments) -> tuple[Buffer, ...]:
    """The buffers something uses, with model inputs and outputs marked as such."""
    used = {h.buffer for h in homes.values()}
    for s in segments:
        if isinstance(s, NpuSegment):
            for k in s.kernels:
                used.update(t.name for t in k.kernel.tensors())
        else:
            used.update(f"#{c}" for c in s.graph.constants)
    kind = {}
    for v in g.outputs:
        kind[homes[v].buffer] = OUTPUT
    for v in g.inputs:
        kind[homes[v].buffer] = INPUT
    out = []
    for name, b in buffers.items():
        if name in used:
            k = b.kind if b.kind == CONSTANT else kind.get(name, b.kind)
            out.append(replace(b, kind=k))
    return tuple(out)
