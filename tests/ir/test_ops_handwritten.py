"""Hand-written per-op cases (see ircases.py) and exact shape rules swept against PyTorch."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from ircases import CASES
from irtestlib import Case, build, check

from npuc.errors import VerifyError
from npuc.ir import all_ops
from npuc.ir.ops.linalg import Conv2dAttrs
from npuc.ir.ops.pooling import AvgPool2dAttrs, MaxPool2dAttrs


@pytest.mark.parametrize("name,case,expected", CASES, ids=[c[0] for c in CASES])
def test_handwritten_case(name: str, case: Case, expected) -> None:
    check(case, expected())


def test_every_op_has_a_handwritten_case() -> None:
    have = {c.op for _, c, _ in CASES}
    # Quantized ops need quantized operand types; their hand-written cases are in tests/quant/.
    missing = [op.name for op in all_ops() if op.name not in have and op.name != "const" and op.category != "quantized"]
    assert not missing
    assert any(c.consts for _, c, _ in CASES), "some case must feed a const node"


def _outcome(fn):
    """("ok", shape) or ("error", None) for a call that may raise."""
    try:
        return "ok", tuple(fn().shape)
    except (RuntimeError, ValueError, VerifyError):
        return "error", None


def _random_window(rng: random.Random) -> dict:
    return dict(
        h=rng.randint(1, 9), w=rng.randint(1, 9), k=(rng.randint(1, 4), rng.randint(1, 4)),
        s=(rng.randint(1, 3), rng.randint(1, 3)), p=(rng.randint(0, 2), rng.randint(0, 2)),
        d=(rng.randint(1, 3), rng.randint(1, 3)), ceil=rng.random() < 0.5,
    )


def test_conv2d_shape_rule_and_domain_match_pytorch() -> None:
    """Across random configurations, npuc accepts exactly what PyTorch accepts, with its shape."""
    rng = random.Random(1)
    agreed = {"ok": 0, "error": 0}
    for _ in range(300):
        c = _random_window(rng)
        groups = rng.choice([1, 2, 3])
        cin, cout = groups * rng.randint(1, 2), groups * rng.randint(1, 2)
        x, w = torch.zeros(1, cin, c["h"], c["w"]), torch.zeros(cout, cin // groups, *c["k"])
        attrs = Conv2dAttrs(c["s"], c["p"], c["d"], groups)
        want = _outcome(lambda: F.conv2d(x, w, None, c["s"], c["p"], c["d"], groups))
        got = _outcome(lambda: torch.empty(_inferred(Case("conv2d", (x, w), attrs))))
        assert got == want, f"conv2d {c} groups={groups}: npuc {got}, PyTorch {want}"
        agreed[want[0]] += 1
    assert min(agreed.values()) > 20  # both outcomes were exercised


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_shape_rule_and_domain_match_pytorch(kind: str) -> None:
    rng = random.Random(2 if kind == "max" else 3)
    agreed = {"ok": 0, "error": 0}
    for _ in range(400):
        c = _random_window(rng)
        x = torch.zeros(1, 2, c["h"], c["w"])
        if kind == "max":
            attrs = MaxPool2dAttrs(c["k"], c["s"], c["p"], c["d"], c["ceil"])
            want = _outcome(lambda: F.max_pool2d(x, c["k"], c["s"], c["p"], c["d"], c["ceil"]))
            op = "max_pool2d"
        else:
            attrs = AvgPool2dAttrs(c["k"], c["s"], c["p"], c["ceil"], True, None)
            want = _outcome(lambda: F.avg_pool2d(x, c["k"], c["s"], c["p"], c["ceil"]))
            op = "avg_pool2d"
        got = _outcome(lambda: torch.empty(_inferred(Case(op, (x,), attrs))))
        assert got == want, f"{kind} pool {c}: npuc {got}, PyTorch {want}"
        agreed[want[0]] += 1
    assert min(agreed.values()) > 20


def _inferred(case: Case) -> tuple[int, ...]:
    return build(case).outputs[0].type.shape
