"""The `npuc` command line.

Each subcommand is a thin layer over the Python API: it parses options, calls the library and
prints.  Errors meant for users (:class:`npuc.NpucError`) are printed as one sentence and exit with
status 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click
from rich.table import Table

from npuc.cli_base import (  # noqa: F401 (the shared helpers, also npuc.cli's own names)
    console,
    err_console,
    MODEL_HELP,
    echo_json,
    _status,
    input_shape_option,
    _shapes,
    user_errors,
    DEFAULT_CALIBRATION,
    _calibration_samples,
    load_calibration_npz,
    _zero_inputs,
)
from npuc.errors import NpucError
from npuc.fileio import check_output_path, read_bytes, read_text, write_atomic

@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="npuc")
def main() -> None:
    """npuc compiles PyTorch models for edge NPUs and simulates them.

    \b
    Typical use:
      npuc import torchvision:mobilenet_v2      import, optimize and check a model
      npuc ops                                  the graph ops and the ATen ops they come from
      npuc targets                              the NPU presets and their key figures
      npuc asm prog.s -o prog.bin               assemble NPU code; `npuc sim` runs it
      npuc compile torchvision:resnet18 -o r.npub   compile for the default NPU
      npuc run r.npub                           run it on the simulator, check against PyTorch
      npuc profile r.npub --trace t.json        per-layer cycles, traffic, energy
      npuc explore torchvision:resnet18 --sweep array.rows=8,16,32 --out dse/
                                                sweep the hardware, Pareto front and report
      npuc profile r.npub --trace t.json        per-layer cycles, traffic, energy (--json, --csv DIR)
      npuc report r.npub -o r.html              an HTML report: roofline, cycles, energy, traffic, CPU ops
      npuc debug torchvision:resnet18           every NPU value against the reference; the first divergent
      npuc demo                                 all of it on MobileNetV2
    """


# ------------------------------------------------------------------------------------ import


@main.command("import", epilog=MODEL_HELP)
@click.argument("model")
@click.option("--emit-ir", is_flag=True, help="Print the optimized graph IR.")
@click.option("--print-after", "print_after", multiple=True, metavar="PASS",
              help="Print the IR after this pass (repeatable).")
@click.option("--print-after-all", is_flag=True, help="Print the IR after every stage.")
@click.option("--dump-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write the IR of every stage to this folder.")
@click.option("--no-passes", is_flag=True, help="Stop after the import; run no graph pass.")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Run the graph on the reference interpreter and compare with PyTorch eager (onnxruntime for ONNX).")
@input_shape_option
@user_errors
def import_cmd(model, emit_ir, print_after, print_after_all, dump_dir, no_passes, check, input_shape):
    """Import MODEL through torch.export, run the graph passes and summarize it."""
    import torch

    from npuc.frontend import import_graph
    from npuc.interp import interpret
    from npuc.pipeline import check_graph_options, run_graph_passes
    from npuc.zoo import load_model

    if not no_passes:
        check_graph_options(print_after, dump_dir)
    module, inputs = load_model(model, _shapes(input_shape))
    with console.status(f"importing {model}"):
        raw = import_graph(module, inputs, name=model)
    g = raw
    if not no_passes:
        g = run_graph_passes(raw, print_after=print_after, print_after_all=print_after_all,
                             dump_dir=dump_dir)
    if emit_ir:
        click.echo(str(g), nl=False)  # raw text form, never wrapped
    _print_summary(g, model)
    if check:
        with torch.no_grad():
            expected = module(*inputs)
        expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        got = interpret(g, *inputs)
        _print_match(expected, got)


def _print_summary(g, model: str) -> None:
    from npuc.frontend.summary import graph_summary

    rows, totals = graph_summary(g)
    t = Table(title=f"{model}: {len(g.nodes)} nodes after the graph passes", show_lines=False)
    for col, just in (("#", "right"), ("op", "left"), ("output", "left"), ("params", "right"),
                      ("MACs", "right"), ("source", "left")):
        t.add_column(col, justify=just, no_wrap=col != "source")
    for i, r in enumerate(rows):
        t.add_row(str(i), r.op, r.shape, f"{r.params:,}" if r.params else "",
                  f"{r.macs:,}" if r.macs else "", Path(r.source).name if r.source else "")
    console.print(t)
    console.print(
        f"total: {totals.nodes} compute nodes, {totals.params:,} parameters, "
        f"{totals.macs:,} MACs ({totals.macs / 1e9:.3f} GMACs)"
    )
    ops = ", ".join(f"{k} x{v}" for k, v in sorted(totals.op_counts.items()))
    console.print(f"ops: {ops}", soft_wrap=True)


def _print_match(expected, got) -> None:
    worst = 0.0
    for e, o in zip(expected, got):
        scale = max(1.0, float(e.abs().max()))
        worst = max(worst, float((e.float() - o.float()).abs().max()) / scale)
    ok = worst <= 1e-4 and len(expected) == len(got)
    verdict = "[green]matches[/]" if ok else "[red]DOES NOT MATCH[/]"
    console.print(
        f"reference interpreter vs PyTorch eager (fp32): max error {worst:.2e} of the output "
        f"scale (tolerance 1e-4): {verdict}"
    )
    if not ok:
        sys.exit(1)


# ------------------------------------------------------------------------------------ ops


@main.command("ops")
@click.option("--write", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the table as Markdown to this file (docs/ops.md, or docs/onnx-ops.md with --onnx).")
@click.option("--onnx", "onnx_ops", is_flag=True, help="List the ONNX operators npuc imports instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the ops as JSON (name, category, summary, imported_from).")
@user_errors
def ops_cmd(write, onnx_ops, as_json):
    """List the graph ops npuc supports and the ATen ops they are imported from."""
    if onnx_ops:
        return _onnx_ops(write)
    from npuc.frontend import supported_aten_ops
    from npuc.ir.opdef import all_ops

    by_graph_op: dict[str, list[str]] = {}
    for aten, graph_op in supported_aten_ops().items():
        for name in graph_op.replace(" ", "").split(","):
            by_graph_op.setdefault(name, []).append(aten)
    if as_json:
        echo_json({"ops": [{"name": op.name, "category": op.category, "summary": op.summary,
                            "imported_from": sorted(by_graph_op.get(op.name, []))} for op in all_ops()],
                   "aten_ops": len(supported_aten_ops())})
        return
    t = Table(title="graph ops")
    t.add_column("op")
    t.add_column("category")
    t.add_column("summary")
    t.add_column("imported from")
    for op in all_ops():
        t.add_row(op.name, op.category, op.summary, ", ".join(sorted(by_graph_op.get(op.name, []))))
    console.print(t)
    console.print(f"{len(all_ops())} graph ops; {len(supported_aten_ops())} ATen ops imported.")
    if write is not None:
        from npuc.ir.opdoc import ops_markdown

        write_atomic(write, ops_markdown(), "the ops table")
        console.print(f"wrote {write}")


def _onnx_ops(write) -> None:
    from npuc.frontend.onnx_import import require_onnx

    require_onnx()
    from npuc.frontend.onnx_table import supported_onnx_ops

    t = Table(title="ONNX operators")
    t.add_column("ONNX operator")
    t.add_column("graph ops")
    ops = supported_onnx_ops()
    for op, graph_ops in ops.items():
        t.add_row(op, graph_ops)
    console.print(t)
    console.print(f"{len(ops)} ONNX operators imported; others fold when their operands are known at import time.")
    if write is not None:
        from npuc.conformance.onnx_doc import onnx_ops_markdown

        write_atomic(write, onnx_ops_markdown(), "the ONNX operators table")
        console.print(f"wrote {write}")


@main.command("export-mlir", epilog=MODEL_HELP)
@click.argument("model")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the MLIR text.")
@click.option("--dialect", type=click.Choice(["tosa"]), default="tosa", show_default=True,
              help="The upstream MLIR dialect to write.")
@input_shape_option
@user_errors
def export_mlir_cmd(model, output, dialect, input_shape):
    """Write MODEL's optimized graph as MLIR (TOSA), for IREE and other MLIR tools."""
    from npuc.frontend import import_graph
    from npuc.mlir.export import export_mlir
    from npuc.pipeline import run_graph_passes
    from npuc.zoo import load_model

    check_output_path(output, "the MLIR text")
    module, inputs = load_model(model, _shapes(input_shape))
    with console.status(f"importing {model}"):
        g = run_graph_passes(import_graph(module, inputs, name=model))
    with console.status(f"writing {output}"):
        export_mlir(g, dialect=dialect, path=output)
    console.print(f"{model} -> {output}: {dialect} MLIR, {output.stat().st_size:,} bytes; compile it with "
                  f"iree-compile {output} --iree-hal-target-device=local "
                  "--iree-hal-local-target-device-backends=llvm-cpu -o model.vmfb", soft_wrap=True)


# ------------------------------------------------------------------------------------ zoo


@main.command("zoo")
def zoo_cmd():
    """List the built-in model zoo."""
    from npuc.zoo import zoo_names

    for name in zoo_names():
        console.print(name)


# ------------------------------------------------------------------------------------ targets


@main.command("targets")
@click.argument("targets", nargs=-1)
@click.option("--json", "as_json", is_flag=True,
              help="Print every parameter of each target and its derived figures as JSON.")
@user_errors
def targets_cmd(targets, as_json):
    """Show NPU targets side by side: the presets, or the given preset names / .toml files."""
    from npuc.targets import DEFAULT_TARGET, targets_table

    if as_json:
        from npuc.report.jsonforms import targets_json

        echo_json(targets_json(list(targets) or None))
        return
    names, rows = targets_table(list(targets) or None)
    t = Table(title="NPU targets")
    t.add_column("")
    for name in names:
        t.add_column(f"{name} (default)" if name == DEFAULT_TARGET else name, justify="right")
    for label, values in rows:
        t.add_row(label, *values)
    console.print(t)
    console.print("A target file of your own is accepted wherever a preset name is: --target path/to/npu.toml")


# ------------------------------------------------------------------------------------ isa


@main.command("asm")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the encoded instructions.")
@user_errors
def asm_cmd(source, output):
    """Assemble NPU assembly text into encoded instructions."""
    from npuc.isa import assemble, encode_program

    check_output_path(output, "the code")
    program = assemble(read_text(source, "the assembly"))
    data = encode_program(program)
    write_atomic(output, data, "the code")
    console.print(f"{len(program)} instructions, {len(data)} bytes -> {output}")


@main.command("disasm")
@click.argument("binary", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@user_errors
def disasm_cmd(binary):
    """Disassemble a .npub (every program, with the layer of each instruction) or encoded NPU
    instructions (what `npuc asm` writes) to assembly text."""
    from npuc.isa import decode_program, disassemble
    from npuc.runtime.npub import MAGIC

    data = read_bytes(binary, "the code")
    if data.startswith(MAGIC[:4]):
        import npuc
        from npuc.report.inspect import disassemble_npub

        click.echo(disassemble_npub(npuc.load(data)), nl=False)  # raw: valid assembly
        return
    click.echo(disassemble(decode_program(data)), nl=False)  # raw: valid assembly


# ------------------------------------------------------------------------------------ compile


def _stage_progress(status):
    """An on_stage callback that shows the running stage in a rich status line."""

    def on_stage(name: str) -> None:
        status.update(f"compiling: {name}")

    return on_stage


@main.command("compile", epilog=MODEL_HELP)
@click.argument("model")
@click.option("--target", "target", default=None, metavar="NAME|FILE",
              help="A target preset name or a target .toml file (default: the default preset).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the .npub binary.")
@click.option("--quantize", type=click.Choice(["int8"]), default=None,
              help="Quantize the model to int8 for the target (PT2E, calibrated), bit-exact on the NPU.")
@click.option("--calibration", "calibration", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --quantize: calibrate on N samples from the zoo model's input generator (seeds 1..N; "
                   "default 8).")
@click.option("--calibration-data", "calibration_data", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="FILE.npz",
              help="With --quantize: calibration samples from a .npz holding one array per model input "
                   "(in order), each with a leading sample dimension.")
@click.option("--per-tensor", "per_tensor", is_flag=True,
              help="With --quantize: one weight scale per tensor (default: one per output channel).")
@click.option("--symmetric-activations", is_flag=True,
              help="With --quantize: activations with zero point 0 (default: asymmetric).")
@click.option("--observer", type=click.Choice(["minmax", "histogram"]), default=None,
              help="With --quantize: how calibration measures ranges (default: minmax).")
@click.option("--float-ops", "float_ops", default=None, metavar="OP,OP",
              help="With --quantize: graph ops left in float, comma-separated (default: softmax,layer_norm).")
@click.option("--input", "input_files", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="For a .pt2 MODEL: a .npy file per model input, in order (default: the program's example inputs).")
@click.option("--print-after", "print_after", multiple=True, metavar="STAGE",
              help="Print the IR after this stage: export, quantize, a graph pass, or io_edges, partition, fuse, "
                   "cascade, memory_plan, codegen, package.")
@click.option("--print-after-all", is_flag=True, help="Print the IR after every stage.")
@click.option("--dump-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write the IR of every stage to this folder.")
@click.option("--explain", is_flag=True, help="List every op that runs on the CPU, why, and its estimated cost.")
@click.option("--json", "as_json", is_flag=True,
              help="Print what the compilation decided as JSON (segments, sizes, CPU ops with reasons and costs).")
@click.option("--host-code", is_flag=True,
              help="Compile the CPU segments ahead of time for the target's host CPU (IREE llvm-cpu, [host] triple).")
@click.option("--fuse-layers/--no-fuse-layers", "fuse_layers", default=False,
              help="Run chains of layers depth-first in stripes with their intermediates on chip (the cascade "
                   "stage): every chain that saves energy, today often with more cycles. Off by default.")
@click.option("--resident/--no-resident", "resident", default=False,
              help="Let the memory plan keep activations in the scratchpad across kernels wherever that saves "
                   "energy (re-read weights staged, the next kernel's weights prefetched). Off by default.")
@click.option("--not-slower", is_flag=True,
              help="With --fuse-layers or --resident: only the chains and kept tensors the checked cost model "
                   "finds take no more cycles.")
@input_shape_option
@user_errors
def compile_cmd(model, target, output, quantize, calibration, calibration_data, per_tensor, symmetric_activations,
                observer, float_ops, input_files, print_after, print_after_all, dump_dir, explain, as_json, host_code,
                fuse_layers, resident, not_slower, input_shape):
    """Compile MODEL for an NPU target into a .npub binary."""
    import npuc
    from npuc.codegen.resident_plan import NOT_SLOWER

    if not_slower and not (fuse_layers or resident):
        raise click.UsageError("--not-slower qualifies --fuse-layers or --resident; give one of them")
    if not_slower:
        fuse_layers, resident = (NOT_SLOWER if fuse_layers else False), (NOT_SLOWER if resident else False)

    check_output_path(output, "the binary")
    module, inputs = _load_compile_model(model, input_files, _shapes(input_shape))
    options = _quant_options(quantize, per_tensor, symmetric_activations, observer, float_ops)
    samples = _calibration_samples(model, inputs, quantize, calibration, calibration_data)
    with (contextlib.nullcontext() if as_json else console.status(f"compiling {model}")) as status:
        art = npuc.compile(module, inputs, target=target, quantize=options, calibration=samples, name=model,
                           on_stage=None if status is None else _stage_progress(status), print_after=print_after,
                           print_after_all=print_after_all, dump_dir=dump_dir, host_code=host_code,
                           fuse_layers=fuse_layers, resident=resident)
        art.save(output)
    report = art.report
    if as_json:
        echo_json(dict(report.to_dict(), model=model, target=art.target.name, output=str(output),
                       binary_bytes=output.stat().st_size))
        return
    console.print(f"{model} -> {output} for {art.target.name}: {output.stat().st_size:,} bytes", soft_wrap=True)
    console.print(report.summary(), end="", soft_wrap=True, markup=False, emoji=False)
    if explain:
        console.print(report.explain(), end="", soft_wrap=True, markup=False, emoji=False)
    elif report.cpu_ops:
        console.print(f"{len(report.cpu_ops)} ops run on the CPU (--explain says which and why)")
    times = ", ".join(f"{n} {s:.2f}s" for n, s in report.stage_seconds)
    console.print(f"stage times: {times}", soft_wrap=True, markup=False)


def _load_compile_model(model: str, input_files, input_shapes=None):
    """(model, example inputs) of MODEL: a .pt2 program (inputs from --input files or its own
    example inputs) or what npuc.zoo.load_model gives (an ONNX file sized by ``input_shapes``)."""
    if model.endswith(".pt2"):
        import numpy as np
        import torch

        from npuc.frontend.models import load_pt2, program_inputs

        ep = load_pt2(model)
        if input_files:
            return ep, tuple(torch.from_numpy(np.load(f)) for f in input_files)
        return ep, program_inputs(ep)
    if input_files:
        raise click.UsageError("--input is for a .pt2 MODEL (other models bring their example inputs)")
    from npuc.zoo import load_model

    return load_model(model, input_shapes)


def _quant_options(quantize, per_tensor, symmetric_activations, observer, float_ops):
    """QuantOptions from the --quantize flags; None without --quantize (UsageError if a flag was given)."""
    given = per_tensor or symmetric_activations or observer is not None or float_ops is not None
    if quantize is None:
        if given:
            raise click.UsageError("--per-tensor, --symmetric-activations, --observer and --float-ops need --quantize int8")
        return None
    from npuc.extras import quantizer

    QuantOptions = quantizer().QuantOptions
    kwargs = {}
    if float_ops is not None:
        kwargs["float_ops"] = tuple(o.strip() for o in float_ops.split(",") if o.strip())
    return QuantOptions(per_channel=not per_tensor, symmetric_activations=symmetric_activations,
                        observer=observer or "minmax", **kwargs)


# ------------------------------------------------------------------------------------ run


def _inputs_for(art, input_files, model, input_shapes=None):
    """Inputs from .npy files, else the zoo model's (or the ONNX model's) example inputs (seed 0)."""
    import torch

    if input_files:
        return tuple(torch.from_numpy(a) for f in input_files for a in load_input_arrays(Path(f)))
    name = model or art.model_name
    from npuc.zoo import ZOO

    if name in ZOO:
        return ZOO[name].make_inputs(0)
    if name.endswith(".onnx"):
        from npuc.zoo import load_model

        return load_model(name, input_shapes)[1]
    raise click.UsageError("give the inputs with --input file.npy (one per model input) or name a zoo model with --model")


def load_input_arrays(path: Path) -> list:
    """The arrays of an input file: a .npy holds one model input, a .npz one per model input (in
    the file's order); NpucError naming the file when it cannot be read as such."""
    import numpy as np

    try:
        with open(path, "rb") as f:
            data = np.load(f, allow_pickle=False)
            arrays = [data[k] for k in data.files] if isinstance(data, np.lib.npyio.NpzFile) else [data]
    except OSError as e:
        raise NpucError(f"cannot read the input file '{path}': {e.strerror or e}") from None
    except (ValueError, EOFError, KeyError) as e:
        raise NpucError(f"cannot read the input file '{path}' as .npy or .npz: {e}") from None
    for a in arrays:
        if a.dtype.hasobject or a.dtype.kind not in "biuf":
            raise NpucError(f"the input file '{path}' holds a {a.dtype} array; inputs are numeric tensors")
    return [np.ascontiguousarray(a) for a in arrays]


@main.command("run")
@click.argument("binary", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--input", "input_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A .npy file per model input, in order, or a .npz holding one array per model input.")
@click.option("--model", default=None, help="The model the binary was compiled from, to check the outputs against "
              "PyTorch eager (default: the zoo model named in the binary, if any).")
@click.option("--target", "target", default=None, metavar="NAME|FILE", help="Run on this target (checked).")
@click.option("--json", "as_json", is_flag=True, help="Print the outputs' statistics and the checks as JSON.")
@input_shape_option
@user_errors
def run_cmd(binary, input_files, model, target, as_json, input_shape):
    """Run a .npub on the simulator; compare with PyTorch when the model is known."""
    import npuc
    from npuc.zoo import ZOO, load_model

    art = npuc.load(binary, target=target)
    inputs = _inputs_for(art, input_files, model, _shapes(input_shape))
    if as_json:
        from npuc.report.jsonforms import run_json

        doc = run_json(art, inputs, model)
        echo_json(doc)
        if doc["ok"] is False:
            sys.exit(1)
        return
    with console.status("running on the simulator"):
        outs = art.run(*inputs)
    for i, o in enumerate(outs):
        console.print(f"output {i}: shape {list(o.shape)}, mean {float(o.float().mean()):.4g}, "
                      f"std {float(o.float().std()) if o.numel() > 1 else 0.0:.4g}")
    name = model or (art.model_name if art.model_name in ZOO else None)
    if name is None:
        return
    from npuc.report.accuracy import check_outputs

    module, _ = load_model(name, _shapes(input_shape))
    if _precision(art) == "int8":
        _print_int8_check(outs, module, inputs)
        return
    ok = True
    for i, c in enumerate(check_outputs(outs, module, inputs)):
        top1 = "" if c.argmax_same is None else f", same top-1: {'yes' if c.argmax_same else 'NO'}"
        verdict = "[green]ok[/]" if c.ok else "[red]TOO FAR[/]"
        console.print(f"output {i} vs PyTorch eager fp32: relative L2 error {c.rel_error:.2e} (PyTorch fp16 itself: "
                      f"{c.fp16_rel_error:.2e}; tolerance {c.tolerance:.2e}), max abs error {c.max_abs_error:.3g}"
                      f"{top1}: {verdict}" + (f" ({c.note})" if c.note else ""), soft_wrap=True)
        ok = ok and c.ok
    if not ok:
        sys.exit(1)


def _precision(art) -> str:
    meta = dict(art.npub.metadata.extra) if art.npub.metadata else {}
    return meta.get("precision", "")


def _print_int8_check(outs, module, inputs) -> None:
    """An int8 binary against the float model: the quantization error, shown, not judged (the
    binary equals npuc's integer reference bit for bit; its distance to fp32 is the model's)."""
    from npuc.report.accuracy import eager_outputs, rel_l2

    for i, (o, r) in enumerate(zip(outs, eager_outputs(module, inputs))):
        top1 = ""
        if o.dim() == 2 and o.shape[0] == 1 and o.shape[1] > 1:
            top1 = f", same top-1: {'yes' if int(o.argmax()) == int(r.argmax()) else 'no'}"
        console.print(f"output {i} (int8) vs PyTorch eager fp32: relative L2 error {rel_l2(o, r):.2e}, "
                      f"max abs error {float((o - r).abs().max()):.3g}{top1} (quantization error)")


# ------------------------------------------------------------------------------------ profile


def _print_profile(prof, title: str) -> None:
    from npuc.report.profile import PROFILE_COLUMNS, profile_rows, totals_text

    t = Table(title=title)
    for col in PROFILE_COLUMNS:
        t.add_column(col, justify="left" if col in ("layer", "op", "bound") else "right")
    for row in profile_rows(prof):
        t.add_row(*row)
    console.print(t, width=max(console.width, 200))
    console.print(totals_text(prof), soft_wrap=True, markup=False)


@main.command("profile")
@click.argument("binary", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), help="Write a Perfetto trace (JSON).")
@click.option("--target", "target", default=None, metavar="NAME|FILE", help="Profile on this target (checked).")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON (Profile.to_dict()) instead of the table.")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Write BINARY_per-layer.csv and BINARY_summary.csv into DIR.")
@user_errors
def profile_cmd(binary, trace, target, as_json, csv_dir):
    """Per-layer cycles, utilization, traffic and energy of a .npub, and the totals."""
    import npuc

    if trace is not None:
        check_output_path(trace, "the trace")
    art = npuc.load(binary, target=target)
    with _status("simulating", as_json):
        prof = art.profile(*_zero_inputs(art))
    if as_json:
        echo_json(prof.to_dict())
    else:
        _print_profile(prof, f"{art.model_name or binary.name} on {art.target.name}")
    notes = []
    if trace is not None:
        prof.write_trace(trace)
        notes.append(f"trace -> {trace} (open in ui.perfetto.dev)")
    if csv_dir is not None:
        from npuc.report.csv import write_profile_csv

        paths = write_profile_csv(prof, csv_dir, binary.stem)
        notes.append(f"csv -> {paths[0]}, {paths[1]}")
    for note in notes:
        (err_console if as_json else console).print(note, soft_wrap=True)


# ------------------------------------------------------------------------------------ explore


@main.command("explore", epilog=MODEL_HELP)
@click.argument("model")
@click.option("--base", default="npu-mid", show_default=True, metavar="NAME|FILE",
              help="The target the sweep starts from (a preset or a target file).")
@click.option("--sweep", "sweeps", multiple=True, required=True, metavar="KEY=V1,V2,...",
              help="A dotted target key and its values (repeatable); sizes may end in K or M, lists join "
                   "entries with '+' (array.dataflows=weight_stationary+output_stationary).")
@click.option("--quantize", type=click.Choice(["int8"]), default=None, help="Explore the int8 model.")
@click.option("--calibration", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --quantize: calibrate on N samples of the zoo model's inputs (default 8).")
@click.option("--calibration-data", "calibration_data", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="FILE.npz",
              help="With --quantize: calibration samples from a .npz holding one array per model input "
                   "(in order), each with a leading sample dimension (needed for a model not in the zoo).")
@click.option("--objectives", default="latency,energy,area", show_default=True,
              help="Objectives to minimize: latency, energy, area, dram, cycles (comma-separated).")
@click.option("--constraint", "constraints", multiple=True, metavar="COLUMN<=X",
              help="A design failing it is infeasible (repeatable), e.g. area_mm2<=2.0 or latency_s<0.005.")
@click.option("--search", type=click.Choice(["grid", "random", "nsga2"]), default="grid", show_default=True)
@click.option("--budget", type=click.IntRange(min=1), default=None, metavar="N",
              help="Designs to draw (random, default 32) or trials to run (nsga2, default 64).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Local worker processes, or a Ray cluster (--ray-address; a local one when omitted).")
@click.option("--ray-address", default=None, metavar="ADDR", help="The address of a running Ray cluster.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes (default: one per CPU).")
@click.option("--confirm", type=click.Choice(["front", "all", "none"]), default="front", show_default=True,
              help="Which designs the simulator confirms after the analytical screen.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Result cache folder (default $NPUC_CACHE_DIR or ~/.cache/npuc/explore).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the result cache.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random and nsga2 searches.")
@click.option("--chosen", default=None, metavar="DESIGN", help="The design whose layers the report details.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for results.csv, results.json and report.html.")
@user_errors
def explore_cmd(model, base, sweeps, quantize, calibration, calibration_data, objectives, constraints, search,
                budget, backend, ray_address, jobs, confirm, cache_dir, no_cache, seed, chosen, out):
    """Sweep target parameters around --base with the compiler and the simulator in the loop."""
    import npuc
    from npuc.dse.progress import SweepProgress
    from npuc.zoo import load_model

    module, inputs = load_model(model)
    samples = _calibration_samples(model, inputs, quantize, calibration, calibration_data)
    cache = False if no_cache else (cache_dir if cache_dir is not None else True)
    with SweepProgress(err_console) as progress:
        res = npuc.explore(module, inputs, base=base, sweep=list(sweeps), quantize=quantize, calibration=samples,
                           objectives=objectives, constraints=list(constraints), search=search, budget=budget,
                           backend=backend, jobs=jobs, ray_address=ray_address, out=out, cache_dir=cache,
                           seed=seed, confirm=confirm, chosen=chosen, name=model, progress=progress)
    _print_front(res)


def _print_front(res) -> None:
    st = res.stats
    feasible = sum(1 for r in res.rows if r["feasible"])
    console.print(f"{res.model} around {res.base}: {st['designs']} designs ({feasible} feasible), "
                  f"{len(res.front)} on the Pareto front; computed {st['computed']['analytical']} screens and "
                  f"{st['computed']['simulated']} simulations, {st['cached']['analytical'] + st['cached']['simulated']} "
                  f"from the cache, in {st['wall_s']:.1f} s", soft_wrap=True)
    keys = [d.key for d in res.dimensions]
    table = Table(title="Pareto front", title_justify="left")
    for c in [*keys, "latency ms", "energy mJ", "area mm^2", "DRAM MB", "design"]:
        table.add_column(c, justify="left" if c in ("design",) else "right")
    from npuc.dse.space import format_value

    for r in sorted(res.front, key=lambda r: r[res.objectives[0]]):
        table.add_row(*[format_value(r[k]) for k in keys], f"{r['latency_s'] * 1e3:.4g}", f"{r['energy_j'] * 1e3:.4g}",
                      f"{r['area_mm2']:.4g}" if r["area_mm2"] is not None else "", f"{r['dram_bytes'] / 1e6:.3g}",
                      r["design"])
    console.print(table)
    d = res.disagreement
    if d.get("designs_compared"):
        lat = d["latency_s"]
        console.print(f"analytical vs simulated latency on {d['designs_compared']} designs: median "
                      f"{100 * lat['median_abs']:.1f}%, max {100 * lat['max_abs']:.1f}% off")
    if res.out is not None:
        console.print(f"wrote {res.out / 'results.csv'}, results.json, report.html", soft_wrap=True)


# ------------------------------------------------------------------------------------ demo


@main.command("demo")
@click.argument("model", default="torchvision:mobilenet_v2")
@click.option("--target", "target", default=None, metavar="NAME|FILE", help="Target preset or file.")
@input_shape_option
@user_errors
def demo_cmd(model, target, input_shape):
    """Compile MODEL (default MobileNetV2), run it on the simulator, check it against PyTorch, profile it."""
    import npuc
    from npuc.report.accuracy import check_outputs
    from npuc.zoo import load_model

    module, inputs = load_model(model, _shapes(input_shape))
    with console.status(f"compiling {model}") as status:
        art = npuc.compile(module, inputs, target=target, name=model, on_stage=_stage_progress(status))
    console.print(f"compiled {model} for {art.target.name}: " + art.report.summary(), end="", soft_wrap=True,
                  markup=False, emoji=False)
    console.print(art.report.explain(), end="", soft_wrap=True, markup=False, emoji=False)
    with console.status("running on the simulator"):
        outs = art.run(*inputs)
    checks = check_outputs(outs, module, inputs)
    for i, c in enumerate(checks):
        verdict = "[green]within fp16 tolerance[/]" if c.ok else "[red]OUTSIDE fp16 tolerance[/]"
        console.print(f"output {i}: relative L2 error vs PyTorch fp32 {c.rel_error:.2e} (tolerance {c.tolerance:.2e}, "
                      f"PyTorch fp16 {c.fp16_rel_error:.2e}): {verdict}" + (f" ({c.note})" if c.note else ""),
                      soft_wrap=True)
    with console.status("profiling"):
        prof = art.profile(*inputs)
    _print_profile(prof, f"{model} on {art.target.name}")
    if not all(c.ok for c in checks):
        sys.exit(1)


@main.command("sim")
@click.argument("program", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--target", "target_name", default=None, metavar="NAME|FILE",
              help="Target preset or .toml file (default: the default preset).")
@click.option("--dram", "dram_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Initial DRAM image (raw bytes); default: zeros, as large as the program needs.")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a Perfetto/Chrome trace of the run here.")
@user_errors
def sim_cmd(program, target_name, dram_file, trace):
    """Simulate NPU code (assembly text, or the bytes `npuc asm` writes) and report its cost."""
    from npuc.isa import assemble, decode_program
    from npuc.runtime.sim import simulate
    from npuc.runtime.sim.trace import write_perfetto_trace
    from npuc.targets import DEFAULT_TARGET, load_target

    if trace is not None:
        check_output_path(trace, "the trace")
    tgt = load_target(target_name or DEFAULT_TARGET)
    data = read_bytes(program, "the program")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    instrs = assemble(text) if text is not None and _looks_like_asm(text) else decode_program(data)
    dram = read_bytes(dram_file, "the DRAM image") if dram_file is not None else None
    r = simulate(instrs, tgt, dram)
    t = Table(title=f"{program.name} on {tgt.name}: {len(instrs)} instructions")
    t.add_column("unit")
    t.add_column("busy cycles", justify="right")
    t.add_column("utilization", justify="right")
    for unit, busy in r.unit_busy.items():
        if unit != "ctrl":
            t.add_row(unit, f"{busy:,}", f"{r.utilization(unit):.1%}")
    console.print(t)
    console.print(
        f"total {r.total_cycles:,} cycles = {r.time_s * 1e6:.2f} us at {tgt.clock_hz / 1e6:.0f} MHz; "
        f"{r.macs:,} MACs ({r.mac_utilization:.1%} of the array's peak); DRAM {r.dram_bytes_read:,} B read, "
        f"{r.dram_bytes_written:,} B written; SRAM {r.sram_bytes_read:,} B read, {r.sram_bytes_written:,} B written; "
        f"energy {r.energy_pj / 1e6:.3f} uJ"
    )
    if trace is not None:
        write_perfetto_trace(r, trace)
        console.print(f"trace -> {trace}")


def _looks_like_asm(text: str) -> bool:
    """Assembly text starts (after comments and blank lines) with a mnemonic."""
    for line in text.splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if line:
            return line.split()[0].isidentifier()
    return True


if __name__ == "__main__":  # pragma: no cover
    from npuc.cli import main as _main  # the module itself, with every command registered

    _main()
else:
    from npuc import cli_analysis  # the analysis commands (they use the helpers above)

    main.add_command(cli_analysis.inspect_cmd)
    main.add_command(cli_analysis.debug_cmd)
    main.add_command(cli_analysis.compare_cmd)
    main.add_command(cli_analysis.report_cmd)
