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

console = Console(highlight=False)
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
    from npuc.frontend.summary import graph_summary
    from npuc.interp import interpret
    from npuc.pipeline import run_graph_passes
    from npuc.zoo import load_model

    module, inputs = load_model(model)
    with console.status(f"exporting {model} with torch.export"):
        raw = import_graph(module, inputs, name=model)
    g = raw
    if not no_passes:
        g = run_graph_passes(raw, print_after=print_after, print_after_all=print_after_all,
                             dump_dir=dump_dir)
    if emit_ir:
        console.print(str(g), markup=False, end="")
    _print_summary(g, model)
    if check:
        with torch.no_grad():
            expected = module(*inputs)
        expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        got = interpret(g, *inputs)
        _print_match(expected, got)


def _print_summary(g, model: str) -> None:
    rows, totals = graph_summary(g)
    t = Table(title=f"{model}: {len(g.nodes)} nodes after the graph passes", show_lines=False)
    for col, just in (("#", "right"), ("op", "left"), ("output", "left"), ("params", "right"),
                      ("MACs", "right"), ("source", "left")):
        t.add_column(col, justify=just)
    for i, r in enumerate(rows):
        t.add_row(str(i), r.op, r.shape, f"{r.params:,}" if r.params else "",
                  f"{r.macs:,}" if r.macs else "", r.source or "")
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

        write.write_text(ops_markdown())
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

    program = assemble(source.read_text())
    data = encode_program(program)
    output.write_bytes(data)
    console.print(f"{len(program)} instructions, {len(data)} bytes -> {output}")


@main.command("disasm")
@click.argument("binary", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@user_errors
def disasm_cmd(binary):
    """Disassemble encoded NPU instructions to assembly text."""
    from npuc.isa import decode_program, disassemble

    console.print(disassemble(decode_program(binary.read_bytes())), markup=False, end="")


if __name__ == "__main__":  # pragma: no cover
    main()
