"""Fusion decisions and DRAM layouts."""

from __future__ import annotations

import torch

from npuc.kir.tensor import NHWC, DramTensor
from npuc.isa.enums import DType
from npuc.kir.storage import layout_name, parse_layout
from npuc.lower.layout import broadcast_to, dense_order, is_channels_last

from lowerlib import ConvBlock, SmallCnn, kernel_ops, lower, seeded


def test_residual_block_fuses_bias_activation_and_residual_add():
    m = lower(seeded(ConvBlock()), (torch.randn(1, 8, 8, 8),))
    assert kernel_ops(m) == [("conv2d", ("conv2d", "relu")), ("conv2d", ("conv2d", "add", "relu"))]
    last = m.kernels()[1].kernel
    assert [e.op for e in last.epilogue] == ["add", "add", "relu"]  # bias, residual, relu
    assert last.epilogue[1].operand.name == "x"


def test_unfused_model_keeps_one_kernel_per_op():
    m = lower(seeded(ConvBlock()), (torch.randn(1, 8, 8, 8),), fused=False)
    assert [ops for _, ops in kernel_ops(m)] == [("conv2d",), ("relu",), ("conv2d",), ("add",), ("relu",)]


class TwoUsers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.c(x)
        return torch.relu(y), y * 2.0


def test_no_fusion_when_the_intermediate_has_another_user():
    torch.manual_seed(0)
    m = lower(TwoUsers().eval(), (torch.randn(1, 4, 4, 4),))
    assert kernel_ops(m) == [("conv2d", ("conv2d",)), ("eltwise", ("relu",)), ("eltwise", ("mul",))]


class Chain(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(torch.relu(x * 2.0 + 1.0))


def test_elementwise_chains_fuse_into_one_kernel():
    m = lower(Chain(), (torch.randn(2, 16),))
    assert kernel_ops(m) == [("eltwise", ("mul", "add", "relu", "sigmoid"))]
    (k,) = m.kernels()
    assert [(e.op, e.scalar) for e in k.kernel.epilogue] == [("mul", 2.0), ("add", 1.0), ("relu", None), ("sigmoid", None)]


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x))) + x


def test_linear_on_3d_input_fuses_gelu_and_residual_through_the_reshape():
    torch.manual_seed(0)
    m = lower(Mlp().eval(), (torch.randn(1, 5, 16),))
    assert kernel_ops(m) == [("gemm", ("linear", "gelu")), ("gemm", ("linear", "add"))]


def test_cnn_activations_are_channels_last_and_need_no_transpose():
    m = lower(seeded(SmallCnn()), (torch.randn(1, 3, 32, 32),))
    kinds = [k.kernel.kind for k in m.kernels()]
    assert "copy" not in kinds
    for lk in m.kernels():
        k = lk.kernel
        if k.kind in ("conv2d", "pool2d", "depthwise_conv2d"):
            assert is_channels_last(k.inputs[0]) and is_channels_last(k.output), k


class Flatten(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.c(x), 1))


def test_flattening_a_channels_last_image_copies_it_row_major_once():
    torch.manual_seed(0)
    m = lower(Flatten().eval(), (torch.randn(1, 3, 6, 6),))
    kinds = [k.kernel.kind for k in m.kernels()]
    assert kinds == ["conv2d", "copy", "gemm"]
    copy = m.kernels()[1].kernel
    assert dense_order(copy.inputs[0]) == NHWC and dense_order(copy.output) == (0, 1, 2, 3)


def test_layout_names_round_trip():
    for order in [(0, 1, 2, 3), NHWC, (1, 0), (2, 0, 1)]:
        assert parse_layout(layout_name(order), len(order)) == order
    assert layout_name((0, 1, 2)) is None and layout_name(NHWC) == "NHWC"


def test_dense_order_and_broadcast():
    t = DramTensor.dense("t", (1, 8, 4, 4), DType.fp16, order=NHWC)
    assert dense_order(t) == NHWC
    assert dense_order(t.permute((0, 2, 3, 1))) == (0, 1, 2, 3)
    assert dense_order(t.slice(1, 0, 4)) is None
    b = broadcast_to(DramTensor.dense("b", (8,), DType.fp16).reshape((8, 1, 1)), (1, 8, 4, 4))
    assert b.strides == (0, 2, 0, 0)
