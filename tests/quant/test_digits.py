"""Accuracy that means something: a small CNN trained here on scikit-learn's 8x8 digits (shipped
with scikit-learn, no download), quantized with npuc (calibrated on training images) and run on
npuc's integer reference interpreter, loses at most one percentage point of test accuracy."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from quantlib import op_counts, quantize_and_import

from npuc.interp import interpret

sklearn_datasets = pytest.importorskip("sklearn.datasets")

BATCH = 360  # the test split: one batch of the exported shape


class DigitsNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


def digits_split():
    d = sklearn_datasets.load_digits()
    x = torch.tensor(d.data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    return (x[BATCH:], y[BATCH:]), (x[:BATCH], y[:BATCH])


def train(xs: torch.Tensor, ys: torch.Tensor) -> nn.Module:
    torch.manual_seed(0)
    model = DigitsNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(8):
        perm = torch.randperm(len(ys), generator=g)
        for i in range(0, len(ys), 64):
            idx = perm[i: i + 64]
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def accuracy(logits: torch.Tensor, ys: torch.Tensor) -> float:
    return float((logits.argmax(1) == ys).float().mean())


def test_quantized_digits_cnn_keeps_its_accuracy(record_property):
    (xtr, ytr), (xte, yte) = digits_split()
    model = train(xtr, ytr)
    with torch.no_grad():
        float_acc = accuracy(model(xte), yte)
    calibration = [(xtr[i: i + BATCH],) for i in range(0, 3 * BATCH, BATCH)]
    imp = quantize_and_import(model, (xte,), calibration)
    assert set(op_counts(imp.graph)) <= {"const", "quantize", "qconv2d", "max_pool2d", "reshape", "qlinear", "dequantize"}
    int8_acc = accuracy(interpret(imp.graph, xte)[0], yte)
    record_property("float_accuracy", float_acc)
    record_property("int8_accuracy", int8_acc)
    assert float_acc >= 0.95  # the training worked: the comparison below means something
    assert int8_acc >= float_acc - 0.01, (float_acc, int8_acc)
