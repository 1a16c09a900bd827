"""Code bytes per layer of one compiled model, and why the array layers' loop nests do not roll.

Compiles one zoo model (int8 by default) on one target, then emits every array layer
(conv2d, gemm) again on its own with the plan the compile chose, writes it with its LOOPs
(:func:`npuc.codegen.reroll.roll`) and prints, largest first: the encoded bytes, the tiling,
the dynamic and encoded instructions, and each loop nest the layer handed to the emitter
(iterations x body steps) with how many of its iterations became one LOOP and, for the
iterations that stayed plain, the first body instruction whose dependency flags differ from
the iteration after it (a LOOP repeats the flags of its body, so such iterations are
peeled: the pipeline's first and last tiles).  A layer alone encodes a little differently
from the same layer inside its segment (the references of the variable-length encoding and
the tokens at its edges); the totals line gives both.  Prints; asserts nothing.

    python bench/code_size_layers.py [--model mobilenet_v2] [--target npu-mid] [--precision int8]
                                     [--top 25] [--calibration 2]
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

import npuc
from npuc.codegen.emitter import Emitter
from npuc.codegen.kernel import get_kernel
from npuc.codegen.reroll import roll
from npuc.isa.encoding import encode_program
from npuc.isa.loops import expand
from npuc.zoo import ZOO, load_model

ARRAY_KINDS = ("conv2d", "gemm")


def _nest_report(instrs, start: int, body: int, n: int, rolled_starts: set[int]) -> str:
    """``n x body``, the iterations a LOOP starts at, and the first flag difference between
    consecutive iterations."""
    its = [instrs[start + v * body:start + (v + 1) * body] for v in range(n)]
    diffs = []
    for v in range(n - 1):
        j = next((j for j, (a, b) in enumerate(zip(its[v], its[v + 1])) if a.deps != b.deps), None)
        if j is not None:
            diffs.append(f"it{v}/it{v + 1}@{j} {its[v][j].op}")
    looped = sum(1 for v in range(n) if start + v * body in rolled_starts)
    return f"{n}x{body} ({looped} LOOP starts; flags differ: {', '.join(diffs[:3]) or 'nowhere'})"


def layer_code(kernel, plan, target) -> dict[str, Any]:
    em = Emitter(target)
    with em.source(kernel.name):
        get_kernel(kernel.kind).emit(kernel, plan, em)
    program, labels = em.finish()
    rolled, _ = roll(program.instrs, labels, em.loops)
    # which nest iterations a LOOP covers: expand the rolled program's top-level LOOP starts
    starts, pos, i = set(), 0, 0
    while i < len(rolled):
        ins = rolled[i]
        if ins.op == "LOOP":
            starts.add(pos)
            lo, hi = i, i + 1 + ins.args.body
            pos += len(expand(list(rolled[lo:hi]))[0])
            i = hi
        else:
            pos += 1
            i += 1
    nests = [_nest_report(program.instrs, s, b, n, starts) for s, b, n in em.loops]
    return {"name": kernel.name, "kind": kernel.kind, "bytes": len(encode_program(rolled)),
            "plan": str(plan.details), "dynamic": len(program.instrs) - 1, "encoded": len(rolled) - 1,
            "nests": nests}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--precision", default="int8", choices=("int8", "fp16"))
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--top", type=int, default=25, help="layers printed (largest code first)")
    args = ap.parse_args()
    spec = f"torchvision:{args.model}"
    model, example = load_model(spec)
    kw = {}
    if args.precision == "int8":
        kw = {"quantize": "int8", "calibration": [ZOO[spec].make_inputs(s) for s in range(1, args.calibration + 1)]}
    art = npuc.compile(model, example, target=args.target, **kw)
    rows = []
    for code in art.compiled.codes:
        for lk, plan in zip(code.segment.kernels, code.plans):
            if lk.kernel.kind in ARRAY_KINDS:
                rows.append(layer_code(lk.kernel, plan, art.target))
    rows.sort(key=lambda r: -r["bytes"])
    r = art.report
    by_kind = collections.Counter()
    for row in rows:
        by_kind[row["kind"]] += row["bytes"]
    print(f"{args.model} {args.precision} on {args.target}: program {r.code_bytes:,} B, constants "
          f"{r.constant_bytes:,} B ({100 * r.code_bytes / max(1, r.constant_bytes):.2f}%); array layers alone: "
          + ", ".join(f"{k} {v:,} B" for k, v in by_kind.items()))
    for row in rows[:args.top]:
        print(f"{row['bytes']:7,d} B {row['name']:30s} {row['kind']:7s} {row['dynamic']:6,d} dyn {row['encoded']:5,d} enc  "
              f"{row['plan']}")
        for nest in row["nests"]:
            print(f"          nest {nest}")
        if not row["nests"]:
            print("          no loop nest handed over (no run of output tiles that repeat with constant strides)")


if __name__ == "__main__":
    main()
