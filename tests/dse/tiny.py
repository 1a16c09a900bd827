"""A small network for the explorer's tests: a convolution, a depthwise block and a classifier.

``build()`` is also a MODEL spec for the CLI (``tests/dse/tiny.py:build``)."""

from __future__ import annotations

import torch


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = torch.nn.Conv2d(16, 32, 1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.relu(self.dw(x))
        x = self.pw(x)
        return self.fc(x.mean((2, 3)))


def build():
    torch.manual_seed(0)
    return Tiny().eval(), (torch.randn(1, 3, 16, 16),)
