"""The compiler's stages in order, and the runner that checks, prints and dumps them.

A :class:`Stage` is a named pure function from one IR to the next, together with how that IR is
verified, printed and dumped.  The graph passes are stages over :class:`~npuc.ir.graph.Graph`;
later levels (lowering, scheduling, codegen) plug into :func:`run_stages` the same way, each with
its own verifier and text form.

::

    torch.nn.Module, ExportedProgram or converted PT2E module + example inputs
      export       npuc.frontend.export                 torch.export (once), core ATen for float
      quantize     npuc.quant.quantizer                 int8: prepare_pt2e, calibration, convert_pt2e
      import       npuc.frontend.importer               -> graph IR (quantized ops recognized)
      graph passes GRAPH_PASSES, below                   each verified; printable and dumpable
      io_edges     npuc.lower.io_quant                  int8: edge quantize/dequantize to the runtime
      backend      BACKEND_STAGES, below
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import torch

from npuc.errors import CompileError, NpucError, VerifyError
from npuc.ir.graph import Graph
from npuc.ir.text import print_graph
from npuc.ir.verify import verify
from npuc.passes import canonicalize, cse, dce, fold_batchnorm, fold_constants

GRAPH_PASSES: tuple[Callable[[Graph], Graph], ...] = (
    canonicalize,     # drop identities, collapse reshape/permute chains, matmul+bias -> linear
    fold_constants,   # evaluate all-constant nodes (weight transposes, mask arithmetic)
    fold_batchnorm,   # batch norms into conv/linear weights, or a multiply-add
    canonicalize,     # clean up what folding exposed (x * 1, x + 0, ...)
    cse,              # merge repeated computations and bit-identical constants
    dce,              # drop what nothing reads
)


@dataclass(frozen=True)
class Stage:
    """One step of the compiler: ``run`` maps an IR to the next; the rest says how to check and show it.

    ``verify`` raises on a malformed result, ``text`` gives its text form, ``manifest`` (optional)
    describes the data that the text form only references (constants), ``suffix`` names dump files.
    """

    name: str
    run: Callable[[Any], Any]
    verify: Callable[[Any], Any]
    text: Callable[[Any], str]
    manifest: Callable[[Any], str] | None = None
    suffix: str = ".txt"


@dataclass(frozen=True)
class StageRecord:
    """What happened in one stage: its name, its wall time in seconds, the size of its result and
    the CPU seconds this process spent in it (on a loaded machine, what the stage itself cost)."""

    name: str
    seconds: float
    size: int
    cpu_seconds: float = 0.0


@dataclass
class RunOptions:
    """How a pipeline run reports itself (the CLI's --print-after, --print-after-all, --dump-dir)."""

    verify_each: bool = True
    print_after: Sequence[str] = ()
    print_after_all: bool = False
    dump_dir: Path | str | None = None
    out: TextIO = field(default_factory=lambda: sys.stdout)
    records: list[StageRecord] | None = None


def graph_stage(fn: Callable[[Graph], Graph]) -> Stage:
    """A graph pass as a stage: verified by npuc.ir.verify, printed as .npuir text."""
    return Stage(fn.__name__, fn, verify, print_graph, constants_manifest, ".npuir")


def constants_manifest(g: Graph) -> str:
    """JSON list of the graph's constants: name, dtype, shape, bytes and a content hash (no data)."""
    rows = []
    for name in sorted(g.constants):
        t = g.constants[name]
        data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        rows.append({
            "name": name,
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()[:16],
        })
    return json.dumps(rows, indent=1) + "\n"


def run_stages(ir: Any, stages: Sequence[Stage], opts: RunOptions, *, first_index: int = 1) -> Any:
    """Run ``stages`` in order on ``ir``; verify, print and dump after each as ``opts`` asks."""
    check_stage_names(opts.print_after, [s.name for s in stages])
    dump_dir = Path(opts.dump_dir) if opts.dump_dir is not None else None
    verified = None  # the IR the last stage verified: a stage that hands it on unchanged is not re-verified
    for i, stage in enumerate(stages, start=first_index):
        start, cpu = time.perf_counter(), time.process_time()
        ir = stage.run(ir)
        if opts.verify_each and ir is not verified:
            verified = ir
            try:
                stage.verify(ir)
            except VerifyError as e:
                raise VerifyError(f"after stage {i} ({stage.name}): {e}") from e
        seconds = time.perf_counter() - start  # the stage's cost: its run and its verifier
        if opts.records is not None:
            opts.records.append(StageRecord(stage.name, seconds, _size(ir), time.process_time() - cpu))
        if opts.print_after_all or stage.name in opts.print_after:
            opts.out.write(f"// ----- IR after {stage.name} (stage {i}) -----\n{stage.text(ir)}")
        if dump_dir is not None:
            dump_stage(ir, stage, dump_dir, i)
    return ir


def dump_stage(ir: Any, stage: Stage, dump_dir: Path, index: int, name: str | None = None) -> None:
    """Write ``NN-<stage><suffix>`` (and ``NN-<stage>.constants.json``) into ``dump_dir``."""
    from npuc.fileio import make_dir, write_atomic

    make_dir(dump_dir, "the dump folder")
    base = f"{index:02d}-{name or stage.name}"
    write_atomic(dump_dir / f"{base}{stage.suffix}", stage.text(ir), "an IR dump")
    if stage.manifest is not None:
        write_atomic(dump_dir / f"{base}.constants.json", stage.manifest(ir), "an IR dump")


def check_graph_options(print_after: Sequence[str], dump_dir: Path | str | None) -> None:
    """The graph runner's options checked before any work: stage names exist, the dump folder
    can be made."""
    check_stage_names(tuple(print_after), ["import"] + [p.__name__ for p in GRAPH_PASSES])
    if dump_dir is not None:
        from npuc.fileio import make_dir

        make_dir(dump_dir, "the dump folder")


def check_stage_names(names: Sequence[str], known: Sequence[str]) -> None:
    """CompileError naming a --print-after stage that does not exist."""
    unknown = [n for n in names if n not in known]
    if unknown:
        listed = ", ".join(dict.fromkeys(known))
        raise CompileError(f"no stage named {', '.join(map(repr, unknown))} to print after; the stages are: {listed}")


def _size(ir: Any) -> int:
    return len(ir.nodes) if isinstance(ir, Graph) else 0


# ------------------------------------------------------------------------------ graph level


def run_graph_passes(
    g: Graph,
    *,
    verify_each: bool = True,
    print_after: Sequence[str] = (),
    print_after_all: bool = False,
    dump_dir: Path | str | None = None,
    out: TextIO | None = None,
    records: list[StageRecord] | None = None,
    passes: Sequence[Callable[[Graph], Graph]] = GRAPH_PASSES,
) -> Graph:
    """Run the graph passes on ``g``, verifying after each; print/dump stages as asked.

    The imported graph itself is dumped as ``00-import.npuir`` and printed by ``--print-after-all``
    or ``print_after=("import",)``.
    """
    opts = RunOptions(verify_each, tuple(print_after), print_after_all, dump_dir, out or sys.stdout, records)
    stages = [graph_stage(p) for p in passes]
    check_stage_names(opts.print_after, ["import"] + [s.name for s in stages])
    if verify_each:
        verify(g)
    start = Stage("import", lambda x: x, verify, print_graph, constants_manifest, ".npuir")
    if opts.print_after_all or "import" in opts.print_after:
        opts.out.write(f"// ----- IR after import (stage 0) -----\n{print_graph(g)}")
    if dump_dir is not None:
        dump_stage(g, start, Path(dump_dir), 0)
    opts.print_after = tuple(n for n in opts.print_after if n != "import")
    return run_stages(g, stages, opts)


def import_onnx(model: Any, input_shapes=None, *, name: str | None = None, fixed_inputs=None, **runner_opts: Any) -> Graph:
    """An ONNX model (a path, a ModelProto or bytes) imported (npuc.frontend.onnx_import) and run
    through the graph passes; ``input_shapes`` sizes dynamic dimensions (name -> shape),
    ``fixed_inputs`` (name -> array) makes inputs constants, ``runner_opts`` are the runner's."""
    from npuc.frontend.onnx_import import import_onnx_graph

    g = import_onnx_graph(model, input_shapes, name=name, fixed_inputs=fixed_inputs)
    return run_graph_passes(g, **runner_opts)


RUNNER_OPTIONS = ("verify_each", "print_after", "print_after_all", "dump_dir", "out", "records")


def import_model(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: tuple | None = None, *,
                 name: str | None = None, strict: bool = False, dynamic_shapes: Any = None,
                 **runner_opts: Any) -> Graph:
    """The optimized graph of ``model`` (an nn.Module exported here, an ExportedProgram, or a
    model quantized with PT2E): imported, then the graph passes.

    ``strict`` and ``dynamic_shapes`` go to torch.export for a module (a dynamic dimension is
    refused with its name: npuc compiles static shapes); ``runner_opts`` are the runner's
    (RUNNER_OPTIONS)."""
    from npuc.frontend.models import program_inputs

    unknown = sorted(set(runner_opts) - set(RUNNER_OPTIONS))
    if unknown:
        raise NpucError(f"import_model() got unknown options: {', '.join(unknown)}; it takes name, strict, "
                        f"dynamic_shapes and the runner's {', '.join(RUNNER_OPTIONS)}")
    check_graph_options(runner_opts.get("print_after", ()), runner_opts.get("dump_dir"))
    if example_inputs is None:
        if not isinstance(model, torch.export.ExportedProgram):
            raise CompileError("import_model() needs example inputs for a module (only an ExportedProgram carries its own)")
        example_inputs = program_inputs(model)
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    default = "main" if isinstance(model, torch.export.ExportedProgram) else type(model).__name__
    if isinstance(model, torch.nn.Module) and (strict or dynamic_shapes is not None):
        from npuc.frontend import import_graph

        g = import_graph(model, tuple(example_inputs), name=name or default, strict=strict,
                         dynamic_shapes=dynamic_shapes)
    else:
        g = run_frontend(model, tuple(example_inputs), name=name or default)
    return run_graph_passes(g, **runner_opts)


# ================================================================================= frontend
#
#   export     the model captured by torch.export: decomposed to core ATen for a float compile,
#              left in torch.export's training IR for PT2E (an ExportedProgram given is not exported)
#   quantize   int8: NpuQuantizer, calibration, convert (a model already converted skips it)
#   import     the graph IR (timed here; printed and dumped as stage 0 by run_graph_passes)

FRONT_STAGES = ("export", "quantize")


def _program_text(x: Any) -> str:
    gm = x.graph_module if isinstance(x, torch.export.ExportedProgram) else x
    return gm.print_readable(print_output=False)


def _verify_converted(gm: Any) -> None:
    """VerifyError when the converted module is not a graph module.  One with no quantize or
    dequantize op is legal: every op of the model stayed float (float_ops, or ops the NPU has no
    int8 kernel for), and they run as float islands."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise VerifyError(f"the quantize stage returned a {type(gm).__name__}, not a torch.fx.GraphModule")


def run_frontend(
    model: Any,
    example_inputs: tuple,
    *,
    quantize: Any = None,
    calibration: Any = None,
    target: Any = None,
    name: str | None = None,
    records: list[StageRecord] | None = None,
    on_stage: Callable[[str], None] | None = None,
    verify_each: bool = True,
    print_after: Sequence[str] = (),
    print_after_all: bool = False,
    dump_dir: Path | str | None = None,
    out: TextIO | None = None,
    with_origins: bool = False,
) -> Any:
    """The unoptimized graph of ``model``: an nn.Module, an ExportedProgram (core ATen or PT2E
    Q/DQ) or a module converted by ``convert_pt2e``; ``quantize`` (QuantOptions) quantizes a float
    model with the ``calibration`` samples.  Export and quantize are stages (timed, printed and
    dumped as ``00-export.txt``, ``00-quantize.txt``); the import is timed as ``import``.
    ``with_origins``: return ``(graph, origins)``, origins mapping each graph value name to the
    FX node it was imported from (for an ExportedProgram)."""
    from npuc.frontend.models import model_kind

    opts = RunOptions(verify_each, tuple(n for n in print_after if n in FRONT_STAGES), print_after_all,
                      dump_dir, out or sys.stdout, records)
    kind = model_kind(model)
    if kind in ("quantized-program", "quantized-module") and quantize is not None:
        raise CompileError("the model is already quantized (it holds PT2E quantize/dequantize ops): "
                           "compile it without quantize options")
    if quantize is not None and calibration is None:
        raise NpucError(
            "quantize needs calibration samples: pass calibration=[(x1, ...), (x2, ...), ...], inputs like "
            "the example inputs from your data (the example input alone would fit the int8 ranges to that "
            "one input)"
        )

    def stage(name_: str, fn: Callable[[Any], Any], x: Any, verify_fn: Callable[[Any], Any] = lambda _: None) -> Any:
        if on_stage is not None:
            on_stage(name_)
        one = replace(opts, print_after=tuple(n for n in opts.print_after if n == name_))
        return run_stages(x, [Stage(name_, fn, verify_fn, _program_text)], one, first_index=0)

    ir = model
    if kind == "module":
        ir = stage("export", lambda m: _export(m, example_inputs, quantize is not None), model)
        kind = "program"
    elif kind in ("program", "quantized-program") and quantize is None:
        from npuc.frontend.export import decompose_program

        ir = stage("export", decompose_program, model)
    elif kind == "quantized-module":  # converted by the user: its shape metadata may be stale (QAT)
        from npuc.frontend.quantized import refresh_shapes

        refresh_shapes(model, example_inputs)
    if quantize is not None:
        qz = _quantizer()
        samples = [example_inputs] if calibration is None else calibration

        def quantize_program(ep: Any) -> Any:
            from npuc.quant.calibrate import check_calibration

            return qz.quantize_captured(ep, check_calibration(samples, example_inputs), target, quantize)

        ir = stage("quantize", quantize_program, ir, _verify_converted)
        kind = "quantized-module"
    if on_stage is not None:
        on_stage("import")
    start, cpu = time.perf_counter(), time.process_time()
    g, origins = _import(ir, kind, name or "main", quantize)
    if records is not None:
        records.append(StageRecord("import", time.perf_counter() - start, _size(g), time.process_time() - cpu))
    return (g, origins) if with_origins else g


def _quantizer() -> Any:
    """npuc.frontend.pt2e (the PT2E flow), whose import needs torchao (MissingExtraError)."""
    import importlib

    from npuc.extras import quantizer

    quantizer()
    return importlib.import_module("npuc.frontend.pt2e")


def _export(model: Any, example_inputs: tuple, for_pt2e: bool) -> Any:
    from npuc.frontend.export import capture_program, export_program

    if for_pt2e:
        return capture_program(model.eval(), example_inputs)
    return export_program(model, example_inputs)


def _import(ir: Any, kind: str, name: str, quantize: Any) -> tuple[Graph, dict[str, str]]:
    """The graph of ``ir`` and the FX node each value came from (empty for a converted module)."""
    from npuc.frontend.importer import import_with_origins
    from npuc.frontend.quantized import DEFAULT_FLOAT_OPS, import_quantized_module, recognize_quantized

    float_ops = quantize.float_ops if quantize is not None else DEFAULT_FLOAT_OPS
    if kind == "quantized-module":
        return import_quantized_module(ir, name=name, float_ops=float_ops), {}
    g, origins = import_with_origins(ir, name=name)
    if kind == "quantized-program":
        g = recognize_quantized(g, float_ops)
    return g, origins


# ================================================================================== backend
#
#   io_edges     npuc.lower.io_quant       int8: the edge quantize/dequantize left to the runtime
#   partition    npuc.lower.partition      each node -> NPU kernels, or the CPU with a reason
#   fuse         npuc.lower.fusion         elementwise work into its producer's epilogue
#   cascade      npuc.lower.cascade        chains of layers depth-first in stripes (fused_chain kernels)
#   memory_plan  npuc.codegen.memory_plan  DRAM arena: constants, IO, activations by liveness
#   codegen      npuc.codegen.driver       each NPU segment planned and emitted into one program
#   package      npuc.codegen.package      the .npub container
#
# See docs/compiler.md.

BACKEND_STAGES = ("io_edges", "partition", "fuse", "cascade", "memory_plan", "codegen", "package")


@dataclass(frozen=True, eq=False)
class Compiled:
    """After codegen: the memory plan (with the placed, fused model) and one program per NPU segment."""

    plan: Any
    codes: tuple
    weight_compression: Any = None  # npuc.codegen.weight_compression.WeightCompression


@dataclass(frozen=True, eq=False)
class Packaged:
    """After packaging: the container and everything that led to it (for reports)."""

    npub: Any
    compiled: Compiled


def schedule_choice(value: Any, what: str) -> bool | str:
    """``fuse_layers=`` or ``resident=`` checked: False (off, the default), True (wherever the
    cost model finds it saves energy) or ``"not-slower"`` (only where it also takes no cycles)."""
    from npuc.codegen.resident_plan import NOT_SLOWER

    if value is False or value is True or value == NOT_SLOWER:
        return value
    raise NpucError(f"{what}={value!r} is not a choice: give False (off), True (wherever it saves energy) "
                    f"or {NOT_SLOWER!r} (only where it also takes no more cycles)")


def cascade_stage(fuse_layers: bool | str) -> Callable[[Any], Any]:
    """The cascade stage as ``fuse_layers`` asks (see :func:`backend_stages`)."""
    from npuc.codegen.resident_plan import NOT_SLOWER
    from npuc.lower.cascade import cascade

    if not schedule_choice(fuse_layers, "fuse_layers"):
        return lambda m: m
    return lambda m: cascade(m, cycles_not_worse=fuse_layers == NOT_SLOWER)


def backend_stages(target: Any, precision: Any, model_name: str,
                   on_stage: Callable[[str], None] | None = None, fuse_layers: bool | str = False,
                   resident: bool | str = False) -> list[Stage]:
    """The backend as stages over its IRs (graph -> lowered -> planned -> compiled -> packaged).
    ``fuse_layers``: False (the default) leaves every kernel on its own (the cascade stage passes
    the model on); True fuses the chains of least energy, slower or not; ``"not-slower"`` only
    those that take no more cycles than their layers one by one.  ``resident``: False (the
    default) keeps no activation on chip; True keeps them in the scratchpad across kernels
    wherever it saves energy (and stages re-read weights in a faster memory, and prefetches the
    next kernel's weights); ``"not-slower"`` only where that makes no kernel slower."""
    from npuc.codegen.driver import code_text, emit_segment, finish_segment

    schedule_choice(resident, "resident")
    from npuc.codegen.memory_plan import check_no_overlap, memory_plan_text, plan_memory
    from npuc.codegen.package import build_npub
    from npuc.codegen.constant_streams import assign_streams
    from npuc.codegen.weight_compression import compress_weight_loads
    from npuc.isa.enums import DType
    from npuc.kir.program import NpuSegment
    from npuc.kir.text import print_lowered
    from npuc.kir.verify import verify_lowered
    from npuc.lower.fusion import fuse
    from npuc.lower.io_quant import absorb_io_quantization
    from npuc.lower.partition import partition
    from npuc.runtime.npub_validate import validate_npub

    def announce(name: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def run(x: Any) -> Any:
            if on_stage is not None:
                on_stage(name)
            return fn(x)
        return run

    def codegen(plan: Any) -> Compiled:
        segs = [s for s in plan.model.segments if isinstance(s, NpuSegment)]
        emitted = [emit_segment(s, target, plan.kernel_splits(i), prefetch=resident is True) for i, s in enumerate(segs)]
        programs, blob, compression = compress_weight_loads([list(e.instrs) for e in emitted], plan, target,
                                                           [e.labels for e in emitted])
        programs = assign_streams(programs, plan, target)
        if blob != plan.constants:  # compressed, or tile loads reordered into contiguous runs
            plan = replace(plan, constants=blob)
        codes = tuple(finish_segment(e, prog) for e, prog in zip(emitted, programs))
        return Compiled(plan, codes, compression)

    def package(c: Compiled) -> Packaged:
        return Packaged(build_npub(c.plan, c.codes, model_name, compression=c.weight_compression), c)

    def check_plan(p: Any) -> None:
        try:
            check_no_overlap(p)
        except CompileError as e:
            raise VerifyError(str(e)) from None

    def io_edges(g: Graph) -> Graph:
        return absorb_io_quantization(g) if precision.dtype is DType.int8 else g

    return [
        Stage("io_edges", announce("io_edges", io_edges), verify, print_graph, constants_manifest, ".npuir"),
        Stage("partition", announce("partition", lambda g: partition(g, target, precision)), verify_lowered, print_lowered),
        Stage("fuse", announce("fuse", fuse), verify_lowered, print_lowered),
        Stage("cascade", announce("cascade", cascade_stage(fuse_layers)), verify_lowered, print_lowered),
        Stage("memory_plan", announce("memory_plan", lambda m: plan_memory(m, resident)), check_plan, memory_plan_text),
        Stage("codegen", announce("codegen", codegen), lambda c: None, lambda c: code_text(c.codes)),
        Stage("package", announce("package", package), lambda p: validate_npub(p.npub), _package_text),
    ]


def _package_text(p: Packaged) -> str:
    n = p.npub
    return (
        f"npub for {n.target_name}: {len(n.code_segments)} programs "
        f"({sum(len(c) for c in n.code_segments):,} code bytes), {len(n.constants):,} constant bytes, "
        f"arena {n.memory_plan.dram_arena_size:,} bytes, {len(n.segments)} segments "
        f"({len(n.cpu_fallback)} on the CPU)\n"
    )


def split_stage_names(names: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """--print-after names split into (graph-level, backend) ones; CompileError for unknown names."""
    graph_names = ["import"] + [p.__name__ for p in GRAPH_PASSES]
    check_stage_names(names, list(FRONT_STAGES) + graph_names + list(BACKEND_STAGES))
    return (tuple(n for n in names if n in graph_names or n in FRONT_STAGES),
            tuple(n for n in names if n in BACKEND_STAGES))


def run_backend(
    g: Graph,
    target: Any,
    precision: Any,
    *,
    model_name: str | None = None,
    verify_each: bool = True,
    print_after: Sequence[str] = (),
    print_after_all: bool = False,
    dump_dir: Path | str | None = None,
    out: TextIO | None = None,
    records: list[StageRecord] | None = None,
    on_stage: Callable[[str], None] | None = None,
    fuse_layers: bool | str = False,
    resident: bool | str = False,
) -> Packaged:
    """Run the backend stages on an optimized graph; print/dump them as asked (``fuse_layers``,
    ``resident``: see :func:`backend_stages`)."""
    opts = RunOptions(verify_each, tuple(print_after), print_after_all, dump_dir, out or sys.stdout, records)
    stages = backend_stages(target, precision, model_name or g.name, on_stage, fuse_layers, resident)
    return run_stages(g, stages, opts, first_index=len(GRAPH_PASSES) + 1)
