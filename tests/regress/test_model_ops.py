"""The ops real models needed (issue 14): each imported from its ATen op, interpreted as PyTorch
computes it, compiled and run within the fp16 tolerance; elu and bilinear resizing on the NPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import npuc
from npuc.report.accuracy import check_outputs


class Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


IDX = torch.tensor([[0, 4, 2], [1, 1, 3]])

CASES = {
    "elu": (Fn(lambda x: F.elu(x, 0.7)), (_randn(2, 5),), "elu"),
    "selu": (Fn(F.selu), (_randn(1, 3, 4, 4),), "elu"),
    "log1p": (Fn(lambda x: torch.log1p(x.abs())), (_randn(2, 5),), "log1p"),
    "log": (Fn(lambda x: torch.log(x.abs() + 0.01)), (_randn(3, 7),), "log"),
    "celu": (Fn(lambda x: F.celu(x, 0.5)), (_randn(2, 5),), "expm1"),
    "flip": (Fn(lambda x: torch.flip(x, [0, 2])), (_randn(2, 3, 4),), "flip"),
    "flip_outer": (Fn(lambda x: torch.flip(x, [0, 1]) * 2), (_randn(2, 3, 4),), "flip"),
    "cumsum": (Fn(lambda x: torch.cumsum(x, 1)), (_randn(2, 7),), "cumsum"),
    "gather": (Fn(lambda x: torch.gather(x, 1, IDX)), (_randn(2, 5),), "gather"),
    "group_norm": (nn.GroupNorm(2, 4), (_randn(2, 4, 3, 3),), "group_norm"),
    "instance_norm": (nn.InstanceNorm2d(4, affine=True), (_randn(2, 4, 3, 3),), "group_norm"),
    "bilinear": (Fn(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear")), (_randn(1, 2, 3, 5),),
                 "upsample_bilinear2d"),
    "bilinear_scale_1.5": (Fn(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear")), (_randn(2, 2, 5, 5),),
                           "upsample_bilinear2d"),
    "bilinear_align_corners": (Fn(lambda x: F.interpolate(x, size=(7, 4), mode="bilinear", align_corners=True)),
                               (_randn(1, 3, 3, 6),), "upsample_bilinear2d"),
    "conv_transpose2d": (nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), (_randn(1, 3, 4, 4),),
                         "conv_transpose2d"),
    "conv_transpose1d": (nn.ConvTranspose1d(3, 2, 4, stride=2, groups=1), (_randn(1, 3, 6),), "conv_transpose2d"),
    "grid_sample": (Fn(lambda x, g: F.grid_sample(x, g, align_corners=False, padding_mode="border")),
                    (_randn(1, 2, 4, 4), _randn(1, 3, 3, 2).clamp(-1.2, 1.2)), "grid_sample"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_imports_interprets_exactly_and_compiles(name):
    model, inputs, op = CASES[name]
    model = model.eval()
    torch.manual_seed(0)
    g = npuc.import_model(model, inputs)
    assert op in {n.op for n in g.nodes}, str(g)
    with torch.no_grad():
        ref = model(*inputs)
    (got,) = npuc.interpret(g, *inputs)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    art = npuc.compile(model, inputs)
    outs = art.run(*inputs)
    assert all(c.ok for c in check_outputs(outs, model, inputs))


@pytest.mark.parametrize("name", ["elu", "selu", "bilinear", "bilinear_scale_1.5", "bilinear_align_corners",
                                  "group_norm", "instance_norm", "flip_outer", "cumsum", "log1p", "log",
                                  "conv_transpose2d", "conv_transpose1d", "grid_sample", "gather"])
def test_on_the_npu(name):
    model, inputs, _ = CASES[name]
    art = npuc.compile(model.eval(), inputs)
    assert not art.report.cpu_ops, art.report.explain()


def test_batch_statistics_over_a_batch_are_refused_with_a_reason():
    class Train(nn.Module):
        def forward(self, x):
            return F.batch_norm(x, None, None, training=True)

    with pytest.raises(npuc.NpucError, match="batch of more than one"):
        npuc.import_model(Train(), (_randn(2, 3, 4, 4),))


def test_gather_of_a_parameter_by_constant_indices_is_folded():
    class RelPos(nn.Module):  # Swin's relative position bias
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(9, 2))
            self.register_buffer("index", torch.randint(0, 9, (16,)))

        def forward(self, x):
            bias = self.table[self.index].view(4, 4, 2).permute(2, 0, 1)
            return x + bias

    m, x = RelPos().eval(), _randn(1, 2, 4, 4)
    g = npuc.import_model(m, (x,))
    assert {n.op for n in g.nodes} <= {"const", "add"}, str(g)
    torch.testing.assert_close(npuc.interpret(g, x)[0], m(x).detach())


@pytest.mark.parametrize("size,out", [((2, 2), (6, 6)), ((5, 7), (3, 2)), ((7, 7), (3, 3))])
def test_adaptive_avg_pool_with_unequal_windows_on_the_npu(size, out):
    m = nn.AdaptiveAvgPool2d(out).eval()
    x = _randn(1, 3, *size)
    art = npuc.compile(m, (x,))
    assert not art.report.cpu_ops, art.report.explain()
    assert all(c.ok for c in check_outputs(art.run(x), m, (x,)))
