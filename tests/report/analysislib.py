"""A small CNN with every kind of work the analysis tools count (array convolutions, a depthwise
convolution (on the vector unit or the array, by cost), a residual add, pooling, a linear layer), compiled once per test
session, and a model file the CLI can load."""

from __future__ import annotations

import functools
import textwrap

import torch

MODEL_SOURCE = textwrap.dedent('''
    import torch


    class Block(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.expand = torch.nn.Conv2d(c, 2 * c, 1)
            self.dw = torch.nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c)
            self.project = torch.nn.Conv2d(2 * c, c, 1)

        def forward(self, x):
            return x + self.project(torch.relu(self.dw(torch.relu(self.expand(x)))))


    class TinyNet(torch.nn.Module):
        def __init__(self, scale=1.0):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
            self.block = Block(16)
            self.head = torch.nn.Conv2d(16, 16, 1)
            self.pool = torch.nn.AdaptiveAvgPool2d(1)
            self.fc = torch.nn.Linear(16, 10)
            with torch.no_grad():
                self.head.weight.mul_(scale)

        def forward(self, x):
            y = torch.relu(self.head(self.block(torch.relu(self.stem(x)))))
            return self.fc(self.pool(y).flatten(1))


    def build(scale=1.0):
        torch.manual_seed(0)
        return TinyNet(scale).eval(), (torch.randn(1, 3, 32, 32),)


    def build_overflowing():
        return build(scale=1e6)  # the head's fp16 output overflows
''')


def _namespace() -> dict:
    ns: dict = {}
    exec(compile(MODEL_SOURCE, "tinynet.py", "exec"), ns)
    return ns


def tiny_model(scale: float = 1.0):
    return _namespace()["build"](scale)


def write_model_file(directory) -> str:
    path = directory / "tinynet.py"
    path.write_text(MODEL_SOURCE)
    return str(path)


@functools.lru_cache(maxsize=None)
def compiled(target: str = "npu-mid", quantize: str | None = None):
    """The tiny model compiled for ``target`` (cached)."""
    import npuc

    model, inputs = tiny_model()
    calib = [(torch.randn(1, 3, 32, 32),) for _ in range(2)] if quantize else None
    return npuc.compile(model, inputs, target=target, quantize=quantize, calibration=calib, name="tinynet")
