"""Lowered models for the kernel-IR tests: a CNN and a transformer block in fp16, a CNN in int8."""

from __future__ import annotations

import functools

import torch

from lowerlib import SmallCnn, lower, seeded


class Block(torch.nn.Module):
    """layernorm -> attention (softmax) -> gelu MLP, with residuals, then a mean."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.fc2 = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ v
        y = x + a
        return (y + self.fc2(torch.nn.functional.gelu(self.fc1(y)))).mean(dim=1)


@functools.cache
def cnn_fp16():
    return lower(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),))


@functools.cache
def block_fp16():
    torch.manual_seed(0)
    return lower(Block().eval(), (torch.randn(1, 8, 16),))


@functools.cache
def cnn_int8():
    from npuc.frontend.quantized import import_quantized
    from npuc.lower.fusion import fuse
    from npuc.lower.io_quant import absorb_io_quantization
    from npuc.lower.partition import partition
    from npuc.lower.precision import choose_precision
    from npuc.pipeline import run_graph_passes
    from npuc.targets import load_target

    torch.manual_seed(0)
    model = seeded(SmallCnn())
    samples = [(torch.randn(1, 3, 32, 32),) for _ in range(2)]
    tgt = load_target("npu-mid")
    precision = choose_precision(tgt, "int8")
    g = run_graph_passes(import_quantized(model, samples[0], samples, target=tgt))
    return fuse(partition(absorb_io_quantization(g), tgt, precision))


class ErfInTheMiddle(torch.nn.Module):
    """linear -> erf (no NPU lowering: a CPU segment) -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.b(torch.erf(self.a(x)))


@functools.cache
def with_cpu_segments():
    torch.manual_seed(0)
    return lower(ErfInTheMiddle().eval(), (torch.randn(2, 16),))


MODELS = {"with_cpu_segments": with_cpu_segments, "cnn_fp16": cnn_fp16, "block_fp16": block_fp16, "cnn_int8": cnn_int8}
