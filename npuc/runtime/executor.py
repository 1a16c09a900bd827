"""The runtime: load a .npub for a target and run it, segment by segment, over one DRAM image.

NPU segments run on the simulator (functionally for ``run``, timing only for ``profile``); CPU
segments run from the binary's host code when it has code for this machine (HOST_CODE section,
:mod:`npuc.host.aot`), else on the reference interpreter, reading their inputs from DRAM and
writing their outputs back.  The runtime converts at every edge between the host and DRAM: model inputs and CPU
reads/writes are fp32 (or the model's integer type) on the host side and whatever the binding says
in DRAM (fp16, NHWC ...), as the IO signature and the CPU bindings record.  An int8 model's edges
are int8 with a scale and zero point: the runtime quantizes the float inputs and dequantizes the
outputs (``npuc.quant.arith``, the ``quantize``/``dequantize`` ops' semantics).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from npuc.errors import BinaryFormatError, NpucError
from npuc.interp import interpret
from npuc.ir.types import TensorType
from npuc.isa import decode_program
from npuc.isa.instr import Program
from npuc.kir.storage import numpy_dtype, parse_layout
from npuc.runtime.npub import BindingRole, Npub, RegionKind, SegmentKind
from npuc.runtime.npub_meta import profile_metadata
from npuc.runtime.sim import simulate
from npuc.runtime.sim.result import SimResult


def cpu_graph(npub: Npub, index: int):
    """CPU-fallback subgraph ``index`` of ``npub`` as a graph, its constants read from the binary."""
    from npuc.ir.text import parse_graph

    sub = npub.cpu_fallback[index]
    consts = {}
    blob = np.frombuffer(npub.constants, np.uint8)
    for b in sub.bindings:
        if b.role == BindingRole.CONSTANT:
            consts[b.value] = torch.from_numpy(read_tensor(blob, b.offset, b.type).copy())
    return parse_graph(sub.graph_text, consts)


def logical_shape(t: TensorType) -> tuple[int, ...]:
    """The logical (NCHW ...) shape of a stored tensor type whose shape is in storage order."""
    order = parse_layout(t.layout, t.rank)
    shape = [0] * t.rank
    for i, d in enumerate(order):
        shape[d] = t.shape[i]
    return tuple(shape)


def read_tensor(dram: np.ndarray, offset: int, t: TensorType) -> np.ndarray:
    """The tensor stored at ``offset`` as ``t``, in logical order (a copy)."""
    dt = numpy_dtype(t.dtype)
    n = t.numel
    flat = np.frombuffer(dram, dtype=np.uint8, count=n * dt.itemsize, offset=offset).view(dt)
    arr = flat.reshape(t.shape)
    order = parse_layout(t.layout, t.rank)
    return np.ascontiguousarray(arr.transpose(np.argsort(order))) if t.rank else arr.copy()


def write_tensor(dram: np.ndarray, offset: int, t: TensorType, values: np.ndarray) -> None:
    """Store ``values`` (logical order) at ``offset`` as ``t`` (converting the element type)."""
    dt = numpy_dtype(t.dtype)
    order = parse_layout(t.layout, t.rank)
    arr = np.asarray(values).transpose(order) if t.rank else np.asarray(values)
    data = np.ascontiguousarray(arr).astype(dt, copy=False).tobytes()
    dram[offset: offset + len(data)] = np.frombuffer(data, np.uint8)


def is_quantized(t: TensorType) -> bool:
    """An int8 edge tensor with per-tensor parameters: the host side of it is float."""
    q = t.quant
    return t.dtype.value == "i8" and q is not None and q.axis is None and len(q.scale) == 1


def host_to_stored(t: TensorType, x: torch.Tensor) -> torch.Tensor:
    """A host input as stored: quantized to int8 (``quantize`` semantics) for a quantized edge."""
    if is_quantized(t):
        from npuc.quant.arith import quantize_tensor

        return quantize_tensor(x.detach().cpu().float(), t.quant.scale[0], t.quant.zero_point[0])
    return x


def stored_to_host(t: TensorType, x: torch.Tensor) -> torch.Tensor:
    """A stored output as the host sees it: dequantized (``dequantize`` semantics) for a
    quantized edge, fp32 for a float one."""
    if is_quantized(t):
        from npuc.quant.arith import dequantize_tensor

        return dequantize_tensor(x, t.quant.scale[0], t.quant.zero_point[0])
    return x.float() if x.dtype.is_floating_point else x


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


@dataclass(frozen=True)
class SegmentRun:
    """What one segment of a run took: its simulation (NPU) or the CPU model's estimate."""

    name: str
    kind: str  # "npu" or "cpu"
    index: int
    sim: SimResult | None = None
    cpu_seconds: float = 0.0


class Executor:
    """A validated container bound to a target, ready to run."""

    def __init__(self, npub: Npub, target, programs: tuple[Program, ...] | None = None) -> None:
        if npub.target_fingerprint != target.fingerprint():
            same = npub.target_name == target.name
            other = f"a different configuration of target '{target.name}'" if same else f"target '{target.name}'"
            raise BinaryFormatError(
                f"the binary was compiled for target '{npub.target_name}', not for {other}; "
                f"recompile the model for '{target.name}'"
            )
        self.npub = npub
        self.target = target
        if programs is None:  # decode (a compiler hands over the programs it made)
            programs = tuple(Program(tuple(decode_program(p))) for p in npub.code_segments)
        self.programs = tuple(programs)
        self._cpu_graphs: dict[int, object] = {}
        self._host_modules: dict[int, object] = {}
        self.use_host_code = True  # False: interpret every CPU segment, even with host code present
        self.cpu_estimates = [row[1] for row in profile_metadata(npub).cpu]
        for i in range(len(npub.cpu_fallback)):
            self._check_bindings(i)
        self.const_offset = next(
            (r.offset for r in npub.memory_plan.regions if r.kind == RegionKind.CONSTANTS), 0
        )

    # ------------------------------------------------------------------ inputs and outputs

    def check_inputs(self, inputs: tuple) -> None:
        sig = self.npub.io_signature.inputs
        if len(inputs) != len(sig):
            raise NpucError(f"the model takes {len(sig)} inputs ({', '.join(t.name for t in sig)}), got {len(inputs)}")
        for io, x in zip(sig, inputs):
            if not isinstance(x, torch.Tensor):
                raise NpucError(f"input '{io.name}' must be a torch.Tensor, got {type(x).__name__}")
            want = logical_shape(io.type)
            if tuple(x.shape) != want:
                raise NpucError(f"input '{io.name}' must have shape {list(want)}, got {list(x.shape)}")
            host_float = io.type.dtype.is_float or is_quantized(io.type)
            if host_float != x.dtype.is_floating_point or (not host_float and x.dtype != io.type.dtype.torch):
                kind = "a floating-point tensor" if host_float else f"a {io.type.dtype.torch} tensor"
                raise NpucError(f"input '{io.name}' must be {kind}, got {x.dtype}")

    def new_dram(self) -> np.ndarray:
        dram = np.zeros(self.npub.memory_plan.dram_arena_size, np.uint8)
        blob = np.frombuffer(self.npub.constants, np.uint8)
        dram[self.const_offset: self.const_offset + len(blob)] = blob
        return dram

    # ------------------------------------------------------------------ running

    def run(self, inputs: tuple, observe=None) -> tuple[list[torch.Tensor], list[SegmentRun]]:
        """Run the model on ``inputs`` (host tensors); the outputs and each segment's run.
        ``observe(program index, instruction index, state)`` sees every NPU instruction's effect."""
        self.check_inputs(inputs)
        dram = self.new_dram()
        for io, x in zip(self.npub.io_signature.inputs, inputs):
            write_tensor(dram, io.dram_offset, io.type, to_numpy(host_to_stored(io.type, x)))
        runs = []
        for seg in self.npub.segments:
            if seg.kind == SegmentKind.NPU:
                hook = None if observe is None else functools.partial(observe, seg.index)
                res = simulate(self.programs[seg.index], self.target, dram, functional=True, observe=hook)
                dram = np.frombuffer(res.dram, np.uint8).copy()
                runs.append(SegmentRun(seg.name, "npu", seg.index, res))
            else:
                self._run_cpu(seg.index, dram)
                runs.append(SegmentRun(seg.name, "cpu", seg.index, cpu_seconds=self._cpu_estimate(seg.index)))
        outs = []
        for io in self.npub.io_signature.outputs:
            arr = read_tensor(dram, io.dram_offset, io.type)
            outs.append(stored_to_host(io.type, torch.from_numpy(arr)))
        return outs, runs

    def timing(self) -> list[SegmentRun]:
        """Every segment's timing and energy (NPU: simulated without data; CPU: the model)."""
        runs = []
        size = self.npub.memory_plan.dram_arena_size
        for seg in self.npub.segments:
            if seg.kind == SegmentKind.NPU:
                res = simulate(self.programs[seg.index], self.target, None, functional=False, dram_size=size)
                runs.append(SegmentRun(seg.name, "npu", seg.index, res))
            else:
                runs.append(SegmentRun(seg.name, "cpu", seg.index, cpu_seconds=self._cpu_estimate(seg.index)))
        return runs

    def _cpu_estimate(self, index: int) -> float:
        return float(self.cpu_estimates[index]) if index < len(self.cpu_estimates) else 0.0

    def _cpu_graph(self, index: int):
        if index not in self._cpu_graphs:
            self._cpu_graphs[index] = cpu_graph(self.npub, index)
        return self._cpu_graphs[index]

    def host_module(self, index: int):
        """The compiled host code of CPU subgraph ``index`` when the binary has code for this
        machine and IREE's runtime is installed, else None (the segment is interpreted)."""
        if index not in self._host_modules:
            self._host_modules[index] = None
            if self.use_host_code:
                from npuc.runtime.host_code import IreeModule, runs_here

                for m in self.npub.host_code:
                    if m.subgraph == index and runs_here(m.triple):
                        try:
                            self._host_modules[index] = IreeModule(m.code)
                        except NpucError:
                            pass
                        break
        return self._host_modules[index]

    def _check_bindings(self, index: int) -> None:
        """Every input, output and constant of CPU subgraph ``index`` bound once, with its role
        and its shape (BinaryFormatError otherwise): a run never meets a missing binding."""
        sub = self.npub.cpu_fallback[index]
        g = self._cpu_graph(index)
        where = f"CPU subgraph '{sub.name}'"
        roles: dict[str, list] = {}
        for b in sub.bindings:
            roles.setdefault(b.value, []).append(b)
        for values, role in ((g.inputs, BindingRole.INPUT), (g.outputs, BindingRole.OUTPUT)):
            for v in values:
                bound = [b for b in roles.get(v.name, []) if b.role == role]
                if len(bound) != 1:
                    raise BinaryFormatError(f"{where}: its {role.name.lower()} %{v.name} has {len(bound)} "
                                            f"{role.name} bindings, not one")
                b = bound[0]
                if logical_shape(b.type) != tuple(v.type.shape):
                    raise BinaryFormatError(f"{where}: %{v.name} is {list(v.type.shape)} in the graph but bound as "
                                            f"{list(logical_shape(b.type))}")

    def _run_cpu(self, index: int, dram: np.ndarray) -> None:
        sub = self.npub.cpu_fallback[index]
        g = self._cpu_graph(index)
        where = {b.value: b for b in sub.bindings if b.role == BindingRole.INPUT}
        args = []
        for v in g.inputs:
            b = where[v.name]
            arr = read_tensor(dram, b.offset, b.type)
            args.append(torch.from_numpy(arr).to(v.type.dtype.torch))
        native = self.host_module(index)
        outs = native.run(*args) if native is not None else interpret(g, *args)
        targets = {b.value: b for b in sub.bindings if b.role == BindingRole.OUTPUT}
        for v, t in zip(g.outputs, outs):
            b = targets[v.name]
            write_tensor(dram, b.offset, b.type, to_numpy(t))
