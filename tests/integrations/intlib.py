"""Small hand-made models of the integration tests (a few layers each, fast to compile)."""

from __future__ import annotations

import torch


class SmallCnn(torch.nn.Module):
    """conv + batch norm + relu, a residual add, depthwise conv, pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = y + torch.nn.functional.hardtanh(self.dw(y), 0.0, 6.0)
        return self.head(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


def seeded_small_cnn(seed: int = 0) -> SmallCnn:
    torch.manual_seed(seed)
    m = SmallCnn().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.2, 0.2)
    return m


def image(seed: int, shape=(1, 3, 16, 16)) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))
