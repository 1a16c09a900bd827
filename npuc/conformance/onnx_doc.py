"""The ONNX operator table (docs/onnx-ops.md), generated from ONNX_TABLE and the conformance suite."""

from __future__ import annotations

import collections

from npuc.frontend.onnx_table import ONNX_TABLE

_HEADER = """# ONNX operators

Generated from `npuc/frontend/onnx_table.py` and ONNX's node conformance cases by
`npuc.conformance.onnx_doc.onnx_ops_markdown()` (`npuc ops --onnx --write docs/onnx-ops.md`); do not
edit by hand.  Default ONNX domain, opsets {min_opset} to {max_opset} (older models are converted by
`onnx.version_converter`).  An operator not listed is still imported when all its operands are
known at import time: ONNX's reference implementation evaluates it (import-time folding).

The conformance columns count the node cases of the installed onnx package ({onnx_version}) that
use the operator, run on npuc's reference interpreter with each case's tolerances: passed as
written, passed once the operator's parameters (graph inputs in those cases, initializers in
exported models) are fixed at import time, and refused with a reason (an element type npuc has
no type for, a mode with no graph op, ...).  No case gives a wrong answer.
"""


def onnx_ops_markdown(suite=None) -> str:
    """The Markdown table of every ONNX operator of the table with its conformance counts."""
    import onnx

    from npuc.conformance.onnx_node import run_suite
    from npuc.frontend.onnx_import import MIN_OPSET, max_opset

    suite = run_suite() if suite is None else suite
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in suite.results:
        for op in r.ops:
            counts[op][r.outcome] += 1
    head = _HEADER.format(min_opset=MIN_OPSET, max_opset=max_opset(), onnx_version=onnx.__version__)
    lines = [
        head,
        f"{len(ONNX_TABLE)} operators; {suite.summary()}.",
        "",
        "| ONNX operator | graph ops | passed | passed, parameters fixed | refused |",
        "|---|---|---|---|---|",
    ]
    for op in sorted(ONNX_TABLE):
        c = counts[op]
        graph_ops = ONNX_TABLE[op].graph_ops.replace("|", "\\|")
        lines.append(f"| `{op}` | {graph_ops} | {c['passed']} | {c['passed_fixed']} | {c['refused']} |")
    return "\n".join(lines) + "\n"
