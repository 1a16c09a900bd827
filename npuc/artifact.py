"""The compiled artifact and the two entry points of the API: ``compile`` and ``load``.

::

    art = npuc.compile(model, example_inputs, target="npu-mid")
    outs = art.run(x)               # fp32 in, fp32 out; NPU segments on the simulator
    prof = art.profile(x)           # per-layer cycles, traffic, energy; prof.write_trace("t.json")
    art.save("model.npub")
    art2 = npuc.load("model.npub")  # validated; refuses a binary built for another target
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from npuc.errors import BinaryFormatError, NpucError, TargetError
from npuc.isa import decode_program
from npuc.isa.instr import Program
from npuc.runtime.npub import Npub, load_npub

if TYPE_CHECKING:
    from npuc.quant.quantizer import QuantOptions
    from npuc.report.profile import Profile
    from npuc.targets import Target


@dataclass(frozen=True)
class CompileReport:
    """What a compilation decided: CPU ops with reasons and costs, segments, memory, code size."""

    cpu_ops: tuple[Any, ...]
    segments: tuple[tuple[str, str, int], ...]  # (name, "npu"|"cpu", kernels or ops)
    kernels: int
    fused_ops: int
    instructions: int
    arena_bytes: int
    constant_bytes: int
    activation_peak: int
    activation_naive: int
    spad_peak: int
    cpu_segment_seconds: tuple[float, ...] = ()  # per CPU segment, hand-over included
    stage_seconds: tuple[tuple[str, float], ...] = ()  # every stage, export and quantization included
    code_bytes: int = 0  # the encoded NPU programs, in bytes

    def explain(self) -> str:
        """The CPU fallbacks in words: each op, why, and the estimated cost."""
        if not self.cpu_ops:
            return "every op runs on the NPU; there is no CPU segment\n"
        lines = [f"{len(self.cpu_ops)} ops run on the CPU:"]
        for o in self.cpu_ops:
            where = f" at {o.loc}" if o.loc else ""
            lines.append(f"  %{o.value} = {o.op}{where}: {o.reason} (est. {format_seconds(o.seconds)} on the host)")
        if self.cpu_segment_seconds:
            n = len(self.cpu_segment_seconds)
            lines.append(f"{n} CPU segment{'s' if n > 1 else ''}: est. {format_seconds(sum(self.cpu_segment_seconds))} "
                         f"in all, each with its hand-over to and from the NPU")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        """What the compilation decided, as JSON-ready values (``npuc compile --json``)."""
        return {
            "segments": [{"name": n, "kind": k, "size": size} for n, k, size in self.segments],
            "kernels": self.kernels, "fused_ops": self.fused_ops, "instructions": self.instructions,
            "arena_bytes": self.arena_bytes, "constant_bytes": self.constant_bytes,
            "activation_peak_bytes": self.activation_peak, "activation_naive_bytes": self.activation_naive,
            "spad_peak_bytes": self.spad_peak,
            "cpu_ops": [{"value": o.value, "op": o.op, "loc": o.loc, "reason": o.reason, "seconds": o.seconds}
                        for o in self.cpu_ops],
            "cpu_segment_seconds": list(self.cpu_segment_seconds),
            "stage_seconds": self.seconds_by_stage(),
            "code_bytes": self.code_bytes,
        }

    def seconds_by_stage(self) -> dict[str, float]:
        """Seconds per stage name, in pipeline order; a stage that runs twice (canonicalize)
        counts both runs."""
        out: dict[str, float] = {}
        for name, seconds in self.stage_seconds:
            out[name] = out.get(name, 0.0) + seconds
        return out

    def summary(self) -> str:
        npu = sum(1 for s in self.segments if s[1] == "npu")
        cpu = len(self.segments) - npu
        return (
            f"{self.kernels} NPU kernels ({self.fused_ops} graph ops fused into them), "
            f"{npu} NPU and {cpu} CPU segments, {self.instructions:,} instructions ({self.code_bytes:,} code bytes); "
            f"DRAM arena "
            f"{self.arena_bytes:,} bytes (constants {self.constant_bytes:,}, activations {self.activation_peak:,} "
            f"of a naive {self.activation_naive:,}); scratchpad peak {self.spad_peak:,} bytes\n"
        )


def format_seconds(seconds: float) -> str:
    """A duration in the unit that shows it: "12 ns", "3.4 us", "1.25 ms", "2.1 s"."""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _report(packaged, records) -> CompileReport:
    from npuc.kir.program import NpuSegment

    plan = packaged.compiled.plan
    m = plan.model
    segs = []
    for s in m.segments:
        if isinstance(s, NpuSegment):
            segs.append((s.name, "npu", len(s.kernels)))
        else:
            segs.append((s.name, "cpu", sum(1 for n in s.graph.nodes if n.op != "const")))
    kernels = m.kernels()
    codes = packaged.compiled.codes
    return CompileReport(
        cpu_ops=m.cpu_ops,
        segments=tuple(segs),
        kernels=len(kernels),
        fused_ops=sum(len(k.ops) - 1 for k in kernels),
        instructions=sum(len(c.program) for c in codes),
        arena_bytes=plan.arena_size,
        constant_bytes=len(plan.constants),
        activation_peak=plan.activation_peak,
        activation_naive=plan.activation_naive,
        spad_peak=max((c.spad_bytes for c in codes), default=0),
        stage_seconds=tuple((r.name, r.seconds) for r in records),
        cpu_segment_seconds=tuple(s.seconds for s in m.segments if not isinstance(s, NpuSegment)),
        code_bytes=sum(len(c) for c in packaged.npub.code_segments),
    )


class Artifact:
    """A compiled model for one target: run it, profile it, save it."""

    def __init__(self, npub: Npub, target, report: CompileReport | None = None, programs=None,
                 compiled=None) -> None:
        from npuc.runtime.executor import Executor

        self.npub = npub
        self.target = target
        self.report = report
        self.compiled = compiled  # the compiler's result (plan, kernels, code) when compiled in this process
        self._executor = Executor(npub, target, programs)

    @property
    def model_name(self) -> str:
        return self.npub.metadata.model_name if self.npub.metadata else ""

    @property
    def programs(self) -> tuple:
        """The NPU programs (decoded instructions), by segment index."""
        return self._executor.programs

    @property
    def cpu_segments(self) -> int:
        return len(self.npub.cpu_fallback)

    def to_bytes(self) -> bytes:
        return self.npub.to_bytes()

    def save(self, path: str | Path) -> None:
        """Write the .npub to ``path`` atomically (a failed write leaves an older file whole)."""
        from npuc.fileio import write_atomic

        write_atomic(path, self.to_bytes(), "the binary")

    def run(self, *inputs: torch.Tensor, observe=None) -> list[torch.Tensor]:
        """Outputs of the model on ``inputs`` (fp32 tensors; shapes and dtypes are checked).
        ``observe(program, instruction, state)`` sees the machine after every NPU instruction
        (the numerical debugger reads kernel outputs so)."""
        outs, _ = self._executor.run(inputs, observe=observe)
        return outs

    def run_profiled(self, *inputs: torch.Tensor):
        """``run`` and ``profile(functional=True)`` from one simulation: (outputs, Profile)."""
        from npuc.report.profile import build_profile

        outs, runs = self._executor.run(inputs)
        return outs, build_profile(self.npub, self.target, self._executor.programs, runs)

    def profile(self, *inputs: torch.Tensor, functional: bool = False):
        """Cycles, traffic and energy per layer and in total (see npuc.report.profile).

        Timing does not depend on the data, so by default the NPU segments are simulated without
        computing values (fast); ``functional=True`` runs them on ``inputs`` as ``run`` does.
        """
        from npuc.report.profile import build_profile

        self._executor.check_inputs(inputs)
        if functional:
            _, runs = self._executor.run(inputs)
        else:
            runs = self._executor.timing()
        return build_profile(self.npub, self.target, self._executor.programs, runs)

    def __repr__(self) -> str:
        return (f"Artifact({self.model_name!r} for {self.target.name}: {len(self.npub.code_segments)} NPU and "
                f"{len(self.npub.cpu_fallback)} CPU segments)")


def zero_inputs(art: Artifact) -> tuple[torch.Tensor, ...]:
    """Zero inputs of the artifact's input shapes and types (timing does not depend on the values)."""
    from npuc.runtime.executor import is_quantized, logical_shape

    out = []
    for io in art.npub.io_signature.inputs:
        dtype = torch.float32 if io.type.dtype.is_float or is_quantized(io.type) else io.type.dtype.torch
        out.append(torch.zeros(logical_shape(io.type), dtype=dtype))
    return tuple(out)


# ------------------------------------------------------------------------------------ targets


def resolve_target(target) -> Any:
    """A Target from a preset name, a TOML path, a Target, or None (the default preset)."""
    from npuc.targets import DEFAULT_TARGET, Target, load_target

    if target is None:
        return load_target(DEFAULT_TARGET)
    if isinstance(target, Target):
        return target
    if isinstance(target, (str, Path)):
        return load_target(target)
    raise TargetError(f"target must be a preset name, a path to a target file or a Target, got {type(target).__name__}")


def target_of(npub: Npub):
    """The Target a container was compiled for, rebuilt from its metadata (checked by fingerprint)."""
    from npuc.targets import target_from_dict

    meta = dict(npub.metadata.extra) if npub.metadata else {}
    doc = meta.get("npuc.target")
    if doc is None:
        raise BinaryFormatError(
            f"the binary does not describe its target '{npub.target_name}'; pass target= to load it"
        )
    try:
        desc = json.loads(doc)
    except ValueError as e:
        raise BinaryFormatError(f"the target description in the binary's metadata is not JSON: {e}") from None
    if not isinstance(desc, dict):
        raise BinaryFormatError("the target description in the binary's metadata is not a JSON object")
    t = target_from_dict(desc, source="the binary's metadata")
    if t.fingerprint() != npub.target_fingerprint:
        raise BinaryFormatError("the target description in the binary's metadata does not match its fingerprint")
    return t


# ------------------------------------------------------------------------------------ API


def compile(  # noqa: A001 (the API's name)
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor | None = None,
    target: str | Path | Target | None = None,
    quantize: str | QuantOptions | None = None,
    calibration: Sequence[Any] | None = None,
    *,
    name: str | None = None,
    on_stage: Callable[[str], None] | None = None,
    host_code: bool = False,
    fuse_layers: bool | str = False,
    resident: bool | str = False,
    **runner_opts: Any,
) -> Artifact:
    """Compile ``model`` for ``target`` (a preset name, a TOML path or a Target; None: the default).

    ``model`` is an nn.Module, a ``torch.export.ExportedProgram`` (its own example inputs are used
    when ``example_inputs`` is None) or a model the user quantized with PT2E (converted by
    ``convert_pt2e``, or its export), which compiles to int8 as it is.
    ``quantize="int8"`` or ``quantize=QuantOptions(...)`` quantizes the model for the target first
    (docs/quantization.md): the NpuQuantizer's ranges come from running ``calibration``, a list of
    samples (each a tuple of input tensors like ``example_inputs``; required: ranges from the
    example input alone would fit that one input and nothing else, so None is refused as the CLI
    refuses it), and the int8 graph runs on the NPU bit for bit as npuc's integer reference interpreter
    computes it; ``art.run`` still takes and returns float tensors (quantized and dequantized at
    the edges).  ``runner_opts`` are the pipeline runner's: ``verify_each``, ``print_after``
    (stage names), ``print_after_all``, ``dump_dir``, ``out``.

    ``model`` may also be an ONNX model: a ``.onnx`` path, a ``onnx.ModelProto`` or an
    ``OnnxModel``; its shapes come from the file, or from ``example_inputs`` when given
    (``runner_opts["input_shapes"]``, name -> shape, sizes the dynamic dimensions).

    ``host_code=True`` compiles the CPU segments ahead of time for the target's host CPU (IREE,
    llvm-cpu; the HOST_CODE section, docs/binary-format.md); the runtime then runs them natively.
    ``fuse_layers`` chooses the cascade stage (docs/compiler.md): chains of layers run depth-first
    in stripes as ``fused_chain`` kernels, their intermediates on chip.  ``False`` (the default)
    compiles every layer as its own kernel; ``True`` fuses every chain that saves energy, slower
    or not (fewer off-chip bytes, today more cycles and a slower compile); ``"not-slower"`` only
    the chains the checked cost model finds take no more cycles than their layers one by one.
    ``resident`` chooses the network-level on-chip plan (docs/compiler.md, "Tensors kept on
    chip"): ``False`` (the default) keeps every activation in its memory; ``True`` keeps
    activations in the scratchpad across kernels wherever that saves energy, stages re-read
    weights in a faster memory and prefetches the next kernel's weights; ``"not-slower"`` keeps
    only the activations whose kernels get no slower (each walked with its scratchpad copies).
    Neither is the default because both make a compile several times slower for a few per cent
    of energy on today's chains (docs/design-notes.md).
    """
    from npuc.frontend.models import model_kind, program_inputs
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import FRONT_STAGES, run_backend, run_frontend, run_graph_passes, schedule_choice, split_stage_names

    tgt = resolve_target(target)
    options = quant_options(quantize)
    schedule_choice(fuse_layers, "fuse_layers")
    schedule_choice(resident, "resident")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    onnx_model = _onnx_model(model, example_inputs, runner_opts.pop("input_shapes", None), options)
    if onnx_model is None:
        kind = model_kind(model)
        int8 = options is not None or kind in ("quantized-program", "quantized-module")
        if example_inputs is None:
            if not isinstance(model, torch.export.ExportedProgram):
                raise NpucError("compile() needs example inputs for a PyTorch module (an ExportedProgram carries "
                                "its own, an ONNX model has its shapes in the file)")
            example_inputs = program_inputs(model)
    else:
        int8 = False
    precision = choose_precision(tgt, "int8" if int8 else None)
    print_after = tuple(runner_opts.pop("print_after", ()))
    graph_names, backend_names = split_stage_names(print_after)
    records = runner_opts.pop("records", None)
    records = [] if records is None else records
    unknown = set(runner_opts) - {"verify_each", "print_after_all", "dump_dir", "out"}
    if unknown:
        raise NpucError(f"compile() got unknown options: {', '.join(sorted(unknown))}")
    if runner_opts.get("dump_dir") is not None:  # checked before the work, not after it
        from npuc.fileio import make_dir

        make_dir(runner_opts["dump_dir"], "the dump folder")
    if onnx_model is not None:
        from npuc.frontend import import_graph

        if on_stage is not None:
            on_stage("import")
        g = import_graph(onnx_model, onnx_model.example_inputs(), name=name)
    else:
        g = run_frontend(model, tuple(example_inputs), quantize=options, calibration=calibration, target=tgt,
                         name=name or _default_name(model), records=records, on_stage=on_stage,
                         print_after=[n for n in graph_names if n in FRONT_STAGES], **runner_opts)
    if on_stage is not None:
        on_stage("graph passes")
    g = run_graph_passes(g, print_after=[n for n in graph_names if n not in FRONT_STAGES], records=records,
                         **runner_opts)
    packaged = run_backend(g, tgt, precision, model_name=name or g.name, print_after=backend_names,
                           records=records, on_stage=on_stage, fuse_layers=fuse_layers, resident=resident,
                           **runner_opts)
    if host_code and on_stage is not None:
        on_stage("host code")
    return _artifact(packaged, tgt, records, host_code)


def _onnx_model(model, example_inputs, input_shapes, quantize):
    """The OnnxModel ``model`` names, with shapes from ``example_inputs``; None for a PyTorch model."""
    from npuc.frontend.onnx_model import is_onnx_spec, load_onnx_model

    if not is_onnx_spec(model):
        return None
    if quantize is not None:
        raise NpucError("int8 quantization of ONNX models is not supported (npuc quantizes PyTorch models with PT2E)")
    m = load_onnx_model(model, input_shapes)
    if example_inputs is not None:
        if len(example_inputs) != len(m.specs):
            raise NpucError(f"the ONNX model takes {len(m.specs)} inputs, {len(example_inputs)} example inputs were given")
        m = load_onnx_model(m, {n: tuple(x.shape) for (n, _, _), x in zip(m.specs, example_inputs)})
    return m


def quant_options(quantize: str | QuantOptions | None) -> QuantOptions | None:
    """QuantOptions from compile()'s ``quantize`` argument: None, "int8" (the defaults) or QuantOptions."""
    if quantize is None:
        return None
    if isinstance(quantize, str):
        if quantize != "int8":
            raise NpucError(f"quantize={quantize!r} is not a quantization npuc knows; use None, 'int8' or a QuantOptions")
        from npuc.extras import quantizer

        return quantizer().QuantOptions()
    if type(quantize).__name__ == "QuantOptions" and hasattr(quantize, "float_ops"):
        return quantize
    raise NpucError(f"quantize must be 'int8' or a QuantOptions, got a {type(quantize).__name__}")


def quantized_graph(model: Any, example_inputs: tuple, target, calibration, name: str | None, options=None):
    """The unoptimized int8 graph of a float ``model``: quantized for ``target`` with the
    calibration samples (through the front-end stages: one export, quantize, import)."""
    from npuc.pipeline import run_frontend

    return run_frontend(model, tuple(example_inputs), quantize=options or quant_options("int8"),
                        calibration=calibration, target=target, name=name)


def _default_name(model: Any) -> str:
    if isinstance(model, torch.export.ExportedProgram):
        return "main"
    return type(model).__name__


def _artifact(packaged, tgt, records, host_code: bool = False) -> Artifact:
    programs = tuple(c.program for c in packaged.compiled.codes)
    npub = packaged.npub
    if host_code and npub.cpu_fallback:
        import time

        from npuc.host.aot import compile_host_code
        from npuc.pipeline import StageRecord

        start, cpu = time.perf_counter(), time.process_time()
        npub = compile_host_code(npub, tgt)
        records.append(StageRecord("host_code", time.perf_counter() - start, len(npub.host_code), time.process_time() - cpu))
    return Artifact(npub, tgt, _report(packaged, records), programs, packaged.compiled)


def compile_graph(g, target=None, quantize: str | None = None, host_code: bool = False,
                  fuse_layers: bool | str = False, resident: bool | str = False, **runner_opts: Any) -> Artifact:
    """Compile an already imported (and optimized) graph; ``quantize="int8"`` for a graph of
    quantized ops (its edge quantize/dequantize move to the runtime)."""
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import run_backend

    tgt = resolve_target(target)
    records: list = []
    precision = choose_precision(tgt, quantize)
    packaged = run_backend(g, tgt, precision, records=records, fuse_layers=fuse_layers, resident=resident,
                           **runner_opts)
    return _artifact(packaged, tgt, records, host_code)


def load(path: str | Path | bytes, target=None) -> Artifact:
    """Load and validate a .npub; with ``target``, refuse a binary built for another target.
    Without it, the binary runs on the target its metadata describes, checked the same way
    (fingerprint, memories); its CPU segments' bindings are checked against their graphs."""
    if isinstance(path, (bytes, bytearray)):
        data, source = bytes(path), None
    else:
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise BinaryFormatError(f"cannot read '{p}': {e.strerror}") from None
        source = str(p)
    expected = resolve_target(target) if target is not None else None
    decoded: list = []

    def decode(code: bytes):
        instrs = decode_program(code)
        decoded.append(Program(tuple(instrs)))
        return instrs

    npub = load_npub(data, expected_target=expected, source=source, decode_code=decode)
    tgt = expected
    if tgt is None:  # the target the binary names is checked as a given one would be
        from npuc.runtime.npub_validate import check_fits_target

        tgt = target_of(npub)
        check_fits_target(npub, tgt, source)
    return Artifact(npub, tgt, None, tuple(decoded))
