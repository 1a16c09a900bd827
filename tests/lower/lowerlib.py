"""Helpers for the backend tests: small models, targets from edited presets, lowering shortcuts."""

from __future__ import annotations

import re
from pathlib import Path

import torch

import npuc
from npuc.lower.fusion import fuse
from npuc.lower.partition import partition
from npuc.lower.precision import choose_precision
from npuc.targets import load_target, target_from_toml

PRESETS = Path(npuc.__file__).parent / "targets" / "presets"


def edited_target(base: str = "npu-mid", name: str | None = None, **values: int) -> object:
    """A preset with some ``key = value`` lines replaced (e.g. ``size_bytes`` under a section)."""
    text = (PRESETS / f"{base}.toml").read_text()
    for key, value in values.items():
        section, field = key.split("__")
        pattern = rf"(\[{section}\][^\[]*?\n{field}\s*=\s*)[^\n#]+"
        text, n = re.subn(pattern, rf"\g<1>{value}", text, flags=re.S)
        assert n == 1, key
    if name:
        text = re.sub(r'^name = "[^"]+"', f'name = "{name}"', text, flags=re.M)
    return target_from_toml(text, source="test")


def lower(model: torch.nn.Module, inputs: tuple, target="npu-mid", fused: bool = True):
    """The model imported, partitioned (and fused) for ``target``."""
    tgt = load_target(target) if isinstance(target, str) else target
    g = npuc.import_model(model, inputs)
    m = partition(g, tgt, choose_precision(tgt, None))
    return fuse(m) if fused else m


def kernel_ops(m) -> list[tuple[str, tuple[str, ...]]]:
    """(kind, graph ops) of every kernel, in program order."""
    return [(k.kernel.kind, k.ops) for k in m.kernels()]


class ConvBlock(torch.nn.Module):
    """conv -> bn -> relu -> conv -> bn -> + x -> relu (a ResNet basic block)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(c)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


class SmallCnn(torch.nn.Module):
    """stem conv, max pool, two residual blocks, global pool, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.b1 = ConvBlock(8)
        self.b2 = ConvBlock(8)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        y = self.b2(self.b1(self.pool(torch.relu(self.stem(x)))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def seeded(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """``model`` with seeded weights and non-trivial batch-norm statistics, in eval mode."""
    torch.manual_seed(seed)
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    return model.eval()
