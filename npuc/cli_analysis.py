"""The analysis commands of the `npuc` command line: inspect, debug, compare, report.

Registered in npuc.cli; each is a thin layer over npuc.report and npuc.debugger.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
from rich.table import Table

from npuc.cli_base import MODEL_HELP, _calibration_samples, _zero_inputs, console, echo_json, user_errors


# ------------------------------------------------------------------------------------ inspect


@click.command("inspect")
@click.argument("binary", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the same facts as JSON.")
@user_errors
def inspect_cmd(binary, as_json):
    """Show what a .npub holds: header, target, sections and sizes, IO signature, segments, code, memory plan."""
    import npuc
    from npuc.report.inspect import inspect_npub, inspect_text

    data = binary.read_bytes()
    art = npuc.load(data)
    d = inspect_npub(data, art)
    if as_json:
        echo_json(d)
    else:
        click.echo(inspect_text(d), nl=False)


# ------------------------------------------------------------------------------------ debug


def _fmt(x, spec: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def _debug_table(rep, only_failing: bool) -> Table:
    int8 = rep.quantize == "int8"
    t = Table(title=f"{rep.model} on {rep.target}: every NPU value against the {rep.layers[0].reference if rep.layers else 'reference'}")
    cols = ["#", "layer", "op", "rel L2", "max abs", "SQNR dB", "ok"]
    if int8:
        cols += ["vs float SQNR dB", "alone SQNR dB"]
    cols += ["source"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("layer", "op", "ok", "source") else "right",
                     no_wrap=c != "source")
    for r in rep.layers:
        if only_failing and r.within_tolerance:
            continue
        ok = "not compared" if not r.compared else ("yes" if r.within_tolerance else "[red]NO[/]")
        row = [str(r.index), r.name, r.op, _fmt(r.rel_l2, ".2e"), _fmt(r.max_abs, ".3g"), _fmt(r.sqnr_db, ".1f"), ok]
        if int8:
            row += [_fmt(r.float_sqnr_db, ".1f"), _fmt(r.alone_sqnr_db, ".1f")]
        row += [Path(r.loc).name if r.loc else ""]
        t.add_row(*row)
    return t


@click.command("debug", epilog=MODEL_HELP)
@click.argument("model")
@click.option("--target", "target", default=None, metavar="NAME|FILE", help="Target preset or .toml file.")
@click.option("--quantize", type=click.Choice(["int8"]), default=None,
              help="Quantize to int8 first: compare with the integer reference (bit-exact) and the float model.")
@click.option("--calibration", "calibration", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --quantize: calibrate on N samples of the zoo model's input generator (default 8).")
@click.option("--calibration-data", "calibration_data", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="FILE.npz", help="With --quantize: calibration samples from a .npz file.")
@click.option("--no-quantize-cost", is_flag=True, help="With --quantize: skip each layer's SQNR cost quantized alone.")
@click.option("--failing", is_flag=True, help="List only the values out of tolerance.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@user_errors
def debug_cmd(model, target, quantize, calibration, calibration_data, no_quantize_cost, failing, as_json):
    """Compile MODEL, run it on the simulator and compare every value the NPU computes with the reference."""
    import npuc
    from npuc.zoo import load_model

    module, inputs = load_model(model)
    samples = _calibration_samples(model, inputs, quantize, calibration, calibration_data)
    if as_json:
        rep = npuc.debug(module, inputs, target=target, quantize=quantize, calibration=samples, name=model,
                         quantize_cost=not no_quantize_cost)
        echo_json(rep.to_dict())
        return
    with console.status(f"compiling and running {model}, comparing every NPU value"):
        rep = npuc.debug(module, inputs, target=target, quantize=quantize, calibration=samples, name=model,
                         quantize_cost=not no_quantize_cost)
    console.print(_debug_table(rep, failing), width=max(console.width or 0, 160))
    compared = sum(r.compared for r in rep.layers)
    console.print(f"{len(rep.layers)} NPU values, {compared} compared; tolerance: {rep.tolerance}", soft_wrap=True)
    for i, (rel, mx, sqnr) in enumerate(rep.outputs):
        console.print(f"output {i} against the {'integer reference' if rep.quantize else 'fp32 interpreter'}: "
                      f"relative L2 {_fmt(rel, '.2e')}, max abs {_fmt(mx, '.3g')}", soft_wrap=True)
    for i, (rel, mx, sqnr) in enumerate(rep.float_outputs):
        console.print(f"output {i} against the float model: relative L2 {_fmt(rel, '.2e')}, SQNR {_fmt(sqnr, '.1f')} dB",
                      soft_wrap=True)
    first = rep.first_divergent
    if first is None:
        console.print("[green]every value is within tolerance[/]")
    else:
        where = f" at {first.loc}" if first.loc else ""
        console.print(f"[red]first divergent value:[/] #{first.index} {first.name} ({first.op}){where}: relative L2 "
                      f"{_fmt(first.rel_l2, '.2e')}, max abs {_fmt(first.max_abs, '.3g')}, SQNR "
                      f"{_fmt(first.sqnr_db, '.1f')} dB against the {first.reference}", soft_wrap=True)
    if rep.op_noise_share:
        shares = ", ".join(f"{op} {100 * s:.1f}% ({n} layers, {100 * m:.0f}% of the MACs)"
                           for op, n, s, m in rep.op_noise_share)
        console.print(f"quantization noise by op, each layer quantized alone: {shares}", soft_wrap=True)
        worst = ", ".join(f"{r.name} ({r.alone_sqnr_db:.1f} dB)" for r in rep.costliest_layers())
        console.print(f"layers that cost most quantized alone (output SQNR): {worst}", soft_wrap=True)
        if rep.suggested_float_ops:
            console.print(f"to recover most accuracy keep in float: float_ops={tuple(rep.suggested_float_ops)!r} "
                          "(QuantOptions.float_ops; those ops then run on the CPU)", soft_wrap=True)
        else:
            console.print("no op kind to keep in float: the noise is in the ops that do the model's MACs "
                          "(keeping them in float would move the model to the CPU)", soft_wrap=True)


# ------------------------------------------------------------------------------------ compare


@click.command("compare", epilog="ITEMS are two or more .npub files, or one MODEL with two or more --target. "
               + MODEL_HELP)
@click.argument("items", nargs=-1, required=True)
@click.option("--target", "targets", multiple=True, metavar="NAME|FILE",
              help="With a MODEL: compile it for this target (repeat for each target to compare).")
@click.option("--quantize", type=click.Choice(["int8"]), default=None, help="With a MODEL: compile it to int8.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@user_errors
def compare_cmd(items, targets, quantize, as_json):
    """Compare profiles side by side, per layer and in total: binaries, or one model on several targets."""
    import npuc
    from npuc.report.compare import compare_profiles

    binaries = [Path(i) for i in items if i.endswith(".npub")]
    labelled = []
    if len(binaries) == len(items):
        if len(items) < 2 or targets or quantize:
            raise click.UsageError("give two or more .npub files (and no --target/--quantize), or one MODEL with --target")
        for b in binaries:
            if not b.is_file():
                raise click.UsageError(f"'{b}' is not a file")
            art = npuc.load(b)
            labelled.append((b.name, art.profile(*_zero_inputs(art))))
    else:
        if len(items) != 1 or len(targets) < 2:
            raise click.UsageError("give one MODEL and two or more --target, or two or more .npub files")
        from npuc.zoo import load_model

        module, inputs = load_model(items[0])
        samples = _calibration_samples(items[0], inputs, quantize, None, None)
        for t in targets:
            with console.status(f"compiling {items[0]} for {t}"):
                art = npuc.compile(module, inputs, target=t, quantize=quantize, calibration=samples, name=items[0])
                labelled.append((art.target.name if list(targets).count(t) == 1 else t, art.profile(*inputs)))
    doc = compare_profiles(labelled)
    if as_json:
        echo_json(doc)
        return
    _print_comparison(doc)


def _print_comparison(doc) -> None:
    labels = doc["labels"]
    t = Table(title="per layer: cycles (ratio to the first)")
    t.add_column("layer")
    t.add_column("op")
    for label in labels:
        t.add_column(f"{label} cycles", justify="right")
    for label in labels[1:]:
        t.add_column(f"{label} / {labels[0]}", justify="right")
    t.add_column(f"energy uJ ({', '.join(labels)})", justify="right")
    for row in doc["layers"]:
        cells = [row["name"], row["op"]]
        base = row[labels[0]]
        for label in labels:
            cells.append(f"{row[label]['cycles']:,}" if row[label] else "")
        for label in labels[1:]:
            ok = row[label] and base and base["cycles"]
            cells.append(f"{row[label]['cycles'] / base['cycles']:.2f}" if ok else "")
        cells.append(" / ".join(f"{row[label]['energy_pj'] / 1e6:.2f}" if row[label] else "-" for label in labels))
        t.add_row(*cells)
    console.print(t, width=max(console.width or 0, 160))
    tt = Table(title="totals")
    for c in ("", "target", "cycles", "latency ms", "energy uJ", "DRAM B", "MACs", "utilization", "cycles ratio",
              "energy ratio"):
        tt.add_column(c, justify="left" if c in ("", "target") else "right")
    for r in doc["totals"]:
        tt.add_row(r["label"], r["target"], f"{r['total_cycles']:,}", f"{r['latency_s'] * 1e3:.3f}",
                   f"{r['energy_pj'] / 1e6:.1f}", f"{r['dram_bytes']:,}", f"{r['macs']:,}", f"{100 * r['utilization']:.1f}%",
                   f"{r['cycles_ratio']:.2f}" if r["cycles_ratio"] else "", f"{r['energy_ratio']:.2f}" if r["energy_ratio"] else "")
    console.print(tt)


# ------------------------------------------------------------------------------------ report


@click.command("report")
@click.argument("binary", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the HTML page (default: BINARY with .html).")
@click.option("--target", "target", default=None, metavar="NAME|FILE", help="Profile on this target (checked).")
@user_errors
def report_cmd(binary, output, target):
    """Write a self-contained HTML report of a .npub: roofline, cycles and energy per layer, traffic, CPU fallbacks."""
    from npuc.report.files import write_report_file
    from npuc.report.model_report import model_report

    import npuc

    art = npuc.load(binary, target=target)
    with console.status("simulating"):
        prof = art.profile(*_zero_inputs(art))
    out = output or binary.with_suffix(".html")
    write_report_file(out, model_report(prof, art.npub).render())
    console.print(f"report -> {out} ({out.stat().st_size:,} bytes; opens offline in any browser)")
