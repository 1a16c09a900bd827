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
from typing import Any, Callable, Sequence

import torch

from npuc.errors import BinaryFormatError, NpucError, TargetError
from npuc.isa import decode_program
from npuc.isa.instr import Program
from npuc.runtime.npub import Npub, load_npub


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
    stage_seconds: tuple[tuple[str, float], ...] = ()

    def explain(self) -> str:
        """The CPU fallbacks in words: each op, why, and the estimated cost."""
        if not self.cpu_ops:
            return "every op runs on the NPU; there is no CPU segment\n"
        lines = [f"{len(self.cpu_ops)} ops run on the CPU:"]
        for o in self.cpu_ops:
            where = f" at {o.loc}" if o.loc else ""
            lines.append(f"  %{o.value} = {o.op}{where}: {o.reason} (est. {o.seconds * 1e6:.1f} us on the host)")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        npu = sum(1 for s in self.segments if s[1] == "npu")
        cpu = len(self.segments) - npu
        return (
            f"{self.kernels} NPU kernels ({self.fused_ops} graph ops fused into them), "
            f"{npu} NPU and {cpu} CPU segments, {self.instructions:,} instructions; DRAM arena "
            f"{self.arena_bytes:,} bytes (constants {self.constant_bytes:,}, activations {self.activation_peak:,} "
            f"of a naive {self.activation_naive:,}); scratchpad peak {self.spad_peak:,} bytes\n"
        )


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
    )


class Artifact:
    """A compiled model for one target: run it, profile it, save it."""

    def __init__(self, npub: Npub, target, report: CompileReport | None = None, programs=None) -> None:
        from npuc.runtime.executor import Executor

        self.npub = npub
        self.target = target
        self.report = report
        self._executor = Executor(npub, target, programs)

    @property
    def model_name(self) -> str:
        return self.npub.metadata.model_name if self.npub.metadata else ""

    @property
    def cpu_segments(self) -> int:
        return len(self.npub.cpu_fallback)

    def to_bytes(self) -> bytes:
        return self.npub.to_bytes()

    def save(self, path: str | Path) -> None:
        """Write the .npub to ``path`` atomically (a failed write leaves an older file whole)."""
        from npuc.fileio import write_atomic

        write_atomic(path, self.to_bytes(), "the binary")

    def run(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """Outputs of the model on ``inputs`` (fp32 tensors; shapes and dtypes are checked)."""
        outs, _ = self._executor.run(inputs)
        return outs

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
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    target=None,
    quantize: str | None = None,
    calibration=None,
    *,
    name: str | None = None,
    on_stage: Callable[[str], None] | None = None,
    **runner_opts: Any,
) -> Artifact:
    """Compile ``model`` for ``target`` (a preset name, a TOML path or a Target; None: the default).

    ``quantize="int8"`` quantizes the model for the target first (docs/quantization.md): the
    NpuQuantizer's ranges come from running ``calibration``, a list of samples (each a tuple of
    input tensors like ``example_inputs``; required: ranges from the example input alone would
    fit that one input and nothing else, so None is refused as the CLI refuses it), and the int8 graph
    runs on the NPU bit for bit as npuc's integer reference interpreter computes it; ``art.run``
    still takes and returns float tensors (quantized and dequantized at the edges).
    ``runner_opts`` are the pipeline runner's: ``verify_each``, ``print_after`` (graph-pass or
    backend stage names), ``print_after_all``, ``dump_dir``, ``out``.
    """
    from npuc.frontend import import_graph
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import run_backend, run_graph_passes, split_stage_names

    tgt = resolve_target(target)
    precision = choose_precision(tgt, quantize)
    if quantize is not None and calibration is None:
        raise NpucError(
            f"quantize='{quantize}' needs calibration samples: pass calibration=[(x1, ...), (x2, ...), ...], "
            "inputs like the example inputs from your data (the example input alone would fit the int8 "
            "ranges to that one input)"
        )
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
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
    if on_stage is not None:
        on_stage("import" if quantize is None else "quantize")
    if quantize is None:
        g = import_graph(model, tuple(example_inputs), name=name)
    else:
        g = quantized_graph(model, tuple(example_inputs), tgt, calibration, name)
    if on_stage is not None:
        on_stage("graph passes")
    g = run_graph_passes(g, print_after=graph_names, records=records, **runner_opts)
    packaged = run_backend(io_edges(g, precision), tgt, precision, model_name=name or g.name,
                           print_after=backend_names, records=records, on_stage=on_stage, **runner_opts)
    return _artifact(packaged, tgt, records)


def quantized_graph(model: torch.nn.Module, example_inputs: tuple, target, calibration, name: str | None):
    """The int8 graph of ``model``: quantized for ``target`` with the calibration samples and
    imported (npuc.frontend.quantized.import_quantized)."""
    try:
        from npuc.frontend.quantized import import_quantized
    except ImportError:
        raise NpucError("this npuc cannot import quantized models (npuc.frontend.quantized is missing)") from None
    return import_quantized(model, example_inputs, calibration, target=target, name=name)


def io_edges(g, precision):
    """An int8 graph with the quantize of its inputs and the dequantize of its outputs left to
    the runtime (npuc.lower.io_quant); a float graph unchanged."""
    from npuc.isa.enums import DType
    from npuc.lower.io_quant import absorb_io_quantization

    return absorb_io_quantization(g) if precision.dtype is DType.int8 else g


def _artifact(packaged, tgt, records) -> Artifact:
    programs = tuple(c.program for c in packaged.compiled.codes)
    return Artifact(packaged.npub, tgt, _report(packaged, records), programs)


def compile_graph(g, target=None, quantize: str | None = None, **runner_opts: Any) -> Artifact:
    """Compile an already imported (and optimized) graph; ``quantize="int8"`` for a graph of
    quantized ops (its edge quantize/dequantize move to the runtime)."""
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import run_backend

    tgt = resolve_target(target)
    records: list = []
    precision = choose_precision(tgt, quantize)
    packaged = run_backend(io_edges(g, precision), tgt, precision, records=records, **runner_opts)
    return _artifact(packaged, tgt, records)


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
