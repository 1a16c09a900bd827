"""Packaging: compatible ranges in pyproject.toml, exact versions in constraints.txt (used by the
Makefile's install), py.typed, a license, and a public API that type checkers see."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _names(reqs: list[str]) -> dict[str, str]:
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower(): r for r in reqs}


def test_library_declares_ranges_not_pins():
    deps = _names(PROJECT["dependencies"])
    assert "torchvision" not in deps and "torchao" not in deps  # only the extras need them
    assert all("==" not in r for r in PROJECT["dependencies"]), PROJECT["dependencies"]
    extras = PROJECT["optional-dependencies"]
    assert "torchvision" in _names(extras["zoo"]) and "torchao" in _names(extras["quant"])
    assert "executorch" in _names(extras["executorch"])
    assert all("==" not in r for reqs in extras.values() for r in reqs)
    assert {"mypy", "pytest"} <= set(_names(extras["test"]))


def test_constraints_pin_the_tested_versions_and_make_uses_them():
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert pins["torch"] == "2.14.1" and pins["torchvision"] == "0.29.1"
    assert pins["torchao"] == "0.18.0" and pins["executorch"] == "1.5.1"
    assert "-c constraints.txt -e '.[test]'" in (ROOT / "Makefile").read_text()


def test_metadata_license_typed_marker_and_entry_points():
    assert PROJECT["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert "Typing :: Typed" in PROJECT["classifiers"]
    assert (ROOT / "npuc" / "py.typed").exists()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["npuc"]
    assert PROJECT["entry-points"]["torch_dynamo_backends"]["npuc"] == "npuc.integrations.dynamo:npuc_backend"


GOOD = """
import torch
import npuc

model = torch.nn.Linear(4, 2).eval()
x = torch.randn(1, 4)
art: npuc.Artifact = npuc.compile(model, (x,), target="npu-mid", quantize=npuc.QuantOptions(per_channel=False))
outs: list[torch.Tensor] = art.run(x)
size: int = art.report.code_bytes if art.report is not None else 0
again: npuc.Artifact = npuc.load(art.to_bytes())
"""

BAD = """
import torch
import npuc

art = npuc.compile(torch.nn.Linear(4, 2), (torch.randn(1, 4),), target=3)
name: int = art.model_name
"""


def test_mypy_sees_the_public_api(tmp_path):
    pytest.importorskip("mypy")
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    env = {**os.environ, "MYPYPATH": str(ROOT)}

    run = subprocess.run(  # one run over both files: mypy analyses torch once
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), "good.py", "bad.py"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    assert "good.py" not in run.stdout, run.stdout + run.stderr
    assert 'bad.py:5: error: Argument "target" to "compile" has incompatible type "int"' in run.stdout, run.stdout
    assert 'bad.py:6: error: Incompatible types in assignment (expression has type "str", variable has type "int")' \
        in run.stdout, run.stdout
