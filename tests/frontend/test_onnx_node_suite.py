"""ONNX's own node conformance cases, run through npuc for every operator the ONNX table claims.

The cases ship inside the onnx package (``collect_testcases``, in memory).  A case is claimed when
all its operators are in ONNX_TABLE; every claimed case is imported and run on the reference
interpreter (case tolerances), and every passing one the NPU takes is compiled and run on the
simulator (fp16 criterion).  No wrong answer is accepted; refusals carry a reason.
"""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("onnx")

from npuc.conformance.onnx_node import node_cases, run_suite  # noqa: E402
from npuc.frontend.onnx_table import ONNX_TABLE  # noqa: E402


@pytest.fixture(scope="module")
def suite():
    return run_suite(node_cases(), simulate=True)


def test_interpreter_gives_no_wrong_answer(suite):
    print("\n" + suite.summary())
    wrong = [f"{r.name}: {r.detail}" for r in suite.results if r.outcome == "wrong"]
    assert not wrong, "\n".join(wrong)
    refused = [r for r in suite.results if r.outcome == "refused"]
    assert all(r.detail for r in refused), "a refusal without a reason"
    assert suite.count("passed") + suite.count("passed_fixed") >= 500


def test_every_claimed_operator_passes_a_case(suite):
    passing = collections.Counter(op for r in suite.results if r.outcome.startswith("passed") for op in r.ops)
    seen = {op for r in suite.results for op in r.ops}
    # Operators whose every conformance case uses a form npuc refuses (with the reason why).
    no_passing_case: dict[str, str] = {}
    missing = sorted(op for op in ONNX_TABLE if passing[op] == 0 and op in seen and op not in no_passing_case)
    assert not missing, f"claimed operators with no passing conformance case: {missing}"


def test_simulator_gives_no_wrong_answer(suite):
    print("\n" + suite.sim_summary())
    wrong = [f"{r.name}: {r.detail}" for r in suite.simulated if r.outcome == "sim_wrong"]
    assert not wrong, "\n".join(wrong)
    assert suite.count("sim_passed") >= 250
    for r in suite.simulated:
        if r.outcome in ("sim_overflow", "sim_crash"):
            print(f"  {r.outcome} {r.name}: {r.detail}")
