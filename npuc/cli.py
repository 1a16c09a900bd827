"""The `npuc` command line.

Each subcommand is a thin layer over the Python API: it parses options, calls the library and
prints.  Errors meant for users (:class:`npuc.NpucError`) are printed as one sentence and exit with
status 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from npuc.errors import NpucError
from npuc.fileio import check_output_path, read_bytes, read_text, write_atomic

# Wide enough for the per-layer tables when the output is a file or a pipe (rich assumes 80).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, highlight=False)

MODEL_HELP = (
    "MODEL is a zoo entry (e.g. torchvision:resnet18, transformers:bert-tiny; see `npuc zoo`) "
    "or a user file path/to/file.py:function whose function returns (model, example_inputs)."
)


def user_errors(fn):
    """Turn an NpucError into a one-line message and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NpucError as e:
            err_console.print(f"[bold red]error:[/] {e}", soft_wrap=True)
            sys.exit(1)

    return wrapper


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
              help="Run the graph on the reference interpreter and compare with PyTorch eager.")
@user_errors
def import_cmd(model, emit_ir, print_after, print_after_all, dump_dir, no_passes, check):
    """Import MODEL through torch.export, run the graph passes and summarize it."""
    import torch

    from npuc.frontend import import_graph
    from npuc.interp import interpret
    from npuc.pipeline import check_graph_options, run_graph_passes
    from npuc.zoo import load_model

    if not no_passes:
        check_graph_options(print_after, dump_dir)
    module, inputs = load_model(model)
    with console.status(f"exporting {model} with torch.export"):
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
              help="Also write the table as Markdown to this file (docs/ops.md).")
@user_errors
def ops_cmd(write):
    """List the graph ops npuc supports and the ATen ops they are imported from."""
    from npuc.frontend import supported_aten_ops
    from npuc.ir.opdef import all_ops

    by_graph_op: dict[str, list[str]] = {}
    for aten, graph_op in supported_aten_ops().items():
        for name in graph_op.replace(" ", "").split(","):
            by_graph_op.setdefault(name, []).append(aten)
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
@user_errors
def targets_cmd(targets):
    """Show NPU targets side by side: the presets, or the given preset names / .toml files."""
    from npuc.targets import DEFAULT_TARGET, targets_table

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
    """Disassemble encoded NPU instructions to assembly text."""
    from npuc.isa import decode_program, disassemble

    click.echo(disassemble(decode_program(read_bytes(binary, "the code"))), nl=False)  # raw: valid assembly


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
@click.option("--print-after", "print_after", multiple=True, metavar="STAGE",
              help="Print the IR after this stage: a graph pass or partition, fuse, memory_plan, codegen, package.")
@click.option("--print-after-all", is_flag=True, help="Print the IR after every stage.")
@click.option("--dump-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write the IR of every stage to this folder.")
@click.option("--explain", is_flag=True, help="List every op that runs on the CPU, why, and its estimated cost.")
@user_errors
def compile_cmd(model, target, output, quantize, calibration, calibration_data, print_after, print_after_all,
                dump_dir, explain):
    """Compile MODEL for an NPU target into a .npub binary."""
    import npuc
    from npuc.zoo import load_model

    check_output_path(output, "the binary")
    module, inputs = load_model(model)
    samples = _calibration_samples(model, inputs, quantize, calibration, calibration_data)
    with console.status(f"compiling {model}") as status:
        art = npuc.compile(module, inputs, target=target, quantize=quantize, calibration=samples, name=model,
                           on_stage=_stage_progress(status), print_after=print_after,
                           print_after_all=print_after_all, dump_dir=dump_dir)
        art.save(output)
    report = art.report
    console.print(f"{model} -> {output} for {art.target.name}: {output.stat().st_size:,} bytes", soft_wrap=True)
    console.print(report.summary(), end="", soft_wrap=True, markup=False, emoji=False)
    if explain:
        console.print(report.explain(), end="", soft_wrap=True, markup=False, emoji=False)
    elif report.cpu_ops:
        console.print(f"{len(report.cpu_ops)} ops run on the CPU (--explain says which and why)")
    times = ", ".join(f"{n} {s:.2f}s" for n, s in report.stage_seconds)
    console.print(f"stage times: {times}", soft_wrap=True, markup=False)


DEFAULT_CALIBRATION = 8


def _calibration_samples(model: str, inputs, quantize, count, data_file):
    """The calibration samples of an int8 compile: from a .npz, or ``count`` draws of the zoo
    model's input generator (seeds 1..count); None without --quantize."""
    if quantize is None:
        if count is not None or data_file is not None:
            raise click.UsageError("--calibration and --calibration-data need --quantize int8")
        return None
    if count is not None and data_file is not None:
        raise click.UsageError("give either --calibration N or --calibration-data FILE, not both")
    if data_file is not None:
        return load_calibration_npz(data_file, len(inputs))
    from npuc.zoo import ZOO

    n = DEFAULT_CALIBRATION if count is None else count
    if model not in ZOO:
        raise click.UsageError(f"{model} is not a zoo model: give its calibration samples with --calibration-data FILE.npz")
    return [ZOO[model].make_inputs(seed) for seed in range(1, n + 1)]


def load_calibration_npz(path: Path, n_inputs: int) -> list[tuple]:
    """Samples from a .npz holding one array per model input (in file order), each with a leading
    sample dimension: sample k is (arr_0[k], arr_1[k], ...)."""
    import numpy as np
    import torch

    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise NpucError(f"cannot read calibration data '{path}': {e}") from None
    arrays = [data[k] for k in data.files]
    if len(arrays) != n_inputs:
        raise NpucError(f"calibration data '{path}' holds {len(arrays)} arrays; the model takes {n_inputs} inputs")
    counts = {a.shape[0] if a.ndim else 0 for a in arrays}
    if len(counts) != 1 or 0 in counts:
        raise NpucError(f"calibration arrays in '{path}' must share a leading sample dimension (got shapes "
                        f"{[list(a.shape) for a in arrays]})")
    return [tuple(torch.from_numpy(np.ascontiguousarray(a[k])) for a in arrays) for k in range(counts.pop())]


# ------------------------------------------------------------------------------------ run


def _inputs_for(art, input_files, model):
    """Inputs from .npy files, else the zoo model's example inputs (seed 0)."""
    import numpy as np
    import torch

    if input_files:
        return tuple(torch.from_numpy(a) for f in input_files for a in load_input_arrays(Path(f)))
    name = model or art.model_name
    from npuc.zoo import ZOO

    if name in ZOO:
        return ZOO[name].make_inputs(0)
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
@user_errors
def run_cmd(binary, input_files, model, target):
    """Run a .npub on the simulator; compare with PyTorch when the model is known."""
    import npuc
    from npuc.zoo import ZOO, load_model

    art = npuc.load(binary, target=target)
    inputs = _inputs_for(art, input_files, model)
    with console.status("running on the simulator"):
        outs = art.run(*inputs)
    for i, o in enumerate(outs):
        console.print(f"output {i}: shape {list(o.shape)}, mean {float(o.float().mean()):.4g}, "
                      f"std {float(o.float().std()) if o.numel() > 1 else 0.0:.4g}")
    name = model or (art.model_name if art.model_name in ZOO else None)
    if name is None:
        return
    from npuc.report.accuracy import check_outputs

    module, _ = load_model(name)
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
@user_errors
def profile_cmd(binary, trace, target):
    """Per-layer cycles, utilization, traffic and energy of a .npub, and the totals."""
    import npuc

    if trace is not None:
        check_output_path(trace, "the trace")
    art = npuc.load(binary, target=target)
    with console.status("simulating"):
        prof = art.profile(*_zero_inputs(art))
    _print_profile(prof, f"{art.model_name or binary.name} on {art.target.name}")
    if trace is not None:
        prof.write_trace(trace)
        console.print(f"trace -> {trace} (open in ui.perfetto.dev)")


def _zero_inputs(art):
    """Inputs of the right shapes and types (timing does not depend on the values)."""
    import torch

    from npuc.runtime.executor import is_quantized, logical_shape

    out = []
    for io in art.npub.io_signature.inputs:
        dtype = torch.float32 if io.type.dtype.is_float or is_quantized(io.type) else io.type.dtype.torch
        out.append(torch.zeros(logical_shape(io.type), dtype=dtype))
    return tuple(out)


# ------------------------------------------------------------------------------------ demo


@main.command("demo")
@click.argument("model", default="torchvision:mobilenet_v2")
@click.option("--target", "target", default=None, metavar="NAME|FILE", help="Target preset or file.")
@user_errors
def demo_cmd(model, target):
    """Compile MODEL (default MobileNetV2), run it on the simulator, check it against PyTorch, profile it."""
    import npuc
    from npuc.report.accuracy import check_outputs
    from npuc.zoo import load_model

    module, inputs = load_model(model)
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
    main()
