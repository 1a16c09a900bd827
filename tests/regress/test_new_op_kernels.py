"""NPU kernels of the ops issue 14 added: conv_transpose2d as a convolution over the zero-inserted
input (every stride, padding -- a border that crops included --, output padding, dilation and
groups, depthwise among them), log and log1p as vector steps; each compiled with no CPU op and
within the fp16 tolerance of PyTorch eager (npuc.report.accuracy)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import npuc
from npuc.report.accuracy import check_outputs

# (in channels, out channels, kernel, stride, padding, output padding, dilation, groups, input H x W)
CONV_T = [
    (3, 4, (3, 3), 2, 1, 1, 1, 1, (4, 4)),  # the usual decoder upsampling
    (4, 4, (2, 2), 2, 0, 0, 1, 1, (3, 5)),  # U-Net's 2x2 / 2
    (2, 3, (3, 1), 1, 1, 0, 1, 1, (5, 3)),  # stride 1, equal border: the conv pads, no buffer
    (3, 3, (1, 3), 2, 0, 1, 2, 3, (2, 4)),  # depthwise, dilated, output padding
    (2, 2, (3, 3), 3, 2, 2, 1, 2, (3, 2)),  # grouped, padding larger than the border: crops
    (1, 2, (4, 4), 2, 3, 0, 1, 1, (5, 5)),  # crops on both sides
    (4, 2, (3, 2), 1, 0, 0, 2, 2, (1, 3)),  # one input row
]


@pytest.mark.parametrize("case", CONV_T, ids=lambda c: "c{}o{}k{}s{}p{}op{}d{}g{}".format(*c[:2], "x".join(map(str, c[2])), *c[3:8]))
def test_conv_transpose2d_on_the_npu(case):
    c, o, k, s, p, op, d, g, (h, w) = case
    torch.manual_seed(sum(k) + s + p)
    m = nn.ConvTranspose2d(c, o, k, stride=s, padding=p, output_padding=op, dilation=d, groups=g).eval()
    x = torch.randn(2, c, h, w)
    art = npuc.compile(m, (x,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    assert all(cc.ok for cc in check_outputs(art.run(x), m, (x,)))


def test_conv_transpose2d_with_runtime_weights_says_why_it_stays_on_the_cpu():
    class RuntimeW(nn.Module):
        def forward(self, x, w):
            return torch.nn.functional.conv_transpose2d(x, w, stride=2)

    x, w = torch.randn(1, 2, 3, 3), torch.randn(2, 3, 2, 2)
    art = npuc.compile(RuntimeW().eval(), (x, w), target="npu-mid")
    (reason,) = [o.reason for o in art.report.cpu_ops if o.op == "conv_transpose2d"]
    assert "weights computed at run time" in reason


@pytest.mark.parametrize("fn", [torch.log1p, torch.log], ids=["log1p", "log"])
def test_logarithms_on_the_npu_small_and_large(fn):
    class Log(nn.Module):
        def forward(self, x):
            return fn(x.abs() * 1e-3 + 1e-4) + fn(x.abs() * 100 + 1)

    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(5))
    m = Log().eval()
    art = npuc.compile(m, (x,), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    assert all(cc.ok for cc in check_outputs(art.run(x), m, (x,)))


# ------------------------------------------------------------------------------------ int8

class _Int8Ops(nn.Module):
    """conv -> elu -> flip -> conv -> expm1 / log1p of a magnitude / log of a positive value."""

    def __init__(self, which: str) -> None:
        super().__init__()
        self.which = which
        self.c1 = nn.Conv2d(3, 6, 3, padding=1)
        self.c2 = nn.Conv2d(6, 4, 1)

    def forward(self, x):
        y = self.c1(x)
        if self.which == "elu":
            y = torch.nn.functional.elu(y, 0.7)
        elif self.which == "selu":
            y = torch.nn.functional.selu(y)
        elif self.which == "flip":
            y = torch.flip(torch.relu(y), [1, 2])
        elif self.which == "expm1":
            y = torch.expm1(torch.clamp(y, -3.0, 2.0))
        elif self.which == "log1p":
            y = torch.log1p(torch.relu(y))
        elif self.which == "log":
            y = torch.log(torch.sigmoid(y))
        return self.c2(y)


@pytest.mark.parametrize("which", ["elu", "selu", "flip", "expm1", "log1p", "log"])
def test_int8_new_ops_run_on_the_npu_bit_exact(which):
    from npuc.artifact import compile_graph, quantized_graph, resolve_target
    from npuc.interp import interpret
    from npuc.pipeline import run_graph_passes
    from npuc.report.accuracy import rel_l2

    torch.manual_seed(3)
    m = _Int8Ops(which).eval()
    x = torch.randn(1, 3, 8, 8)
    calib = [(torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(s)),) for s in range(4)]
    tgt = resolve_target("npu-mid")
    g = run_graph_passes(quantized_graph(m, (x,), tgt, calib, f"int8_{which}"))
    ops = {n.op for n in g.nodes}
    assert ("flip" if which == "flip" else "qlut") in ops, ops
    art = compile_graph(g, tgt, quantize="int8")
    assert art.cpu_segments == 0, art.report.explain()
    (out,) = art.run(x)
    assert torch.equal(out, interpret(g, x)[0])
    with torch.no_grad():
        assert rel_l2(out, m(x)) < 0.1


# ------------------------------------------------------------------------------ grid_sample

class _Sample(nn.Module):
    def __init__(self, mode: str, padding: str, align: bool) -> None:
        super().__init__()
        self.args = dict(mode=mode, padding_mode=padding, align_corners=align)

    def forward(self, x, grid):
        return torch.nn.functional.grid_sample(x, grid, **self.args)


# (mode, padding, align_corners, x shape, output H x W); the grid reaches past [-1, 1]
GRID = [
    ("bilinear", "zeros", False, (2, 3, 5, 7), (4, 5)),
    ("bilinear", "zeros", True, (1, 4, 8, 8), (8, 8)),
    ("bilinear", "border", False, (1, 2, 3, 1), (2, 6)),
    ("bilinear", "border", True, (2, 1, 4, 4), (3, 3)),
    ("nearest", "zeros", False, (1, 3, 6, 5), (5, 4)),
    ("nearest", "border", True, (2, 2, 2, 9), (1, 7)),
]


@pytest.mark.parametrize("case", GRID, ids=lambda c: f"{c[0]}-{c[1]}-{'ac' if c[2] else 'noac'}")
def test_grid_sample_on_the_npu(case):
    mode, padding, align, shape, (ho, wo) = case
    gen = torch.Generator().manual_seed(ho * 10 + wo)
    x = torch.randn(*shape, generator=gen)
    grid = torch.rand(shape[0], ho, wo, 2, generator=gen) * 2.4 - 1.2
    grid[0, 0, 0] = torch.tensor([1.0, -1.0])  # exactly on the corners
    m = _Sample(mode, padding, align).eval()
    art = npuc.compile(m, (x, grid), target="npu-mid")
    assert not art.report.cpu_ops, art.report.explain()
    assert all(cc.ok for cc in check_outputs(art.run(x, grid), m, (x, grid)))


def test_grid_sample_zeros_padding_does_not_turn_an_infinite_border_pixel_into_nan():
    x = torch.zeros(1, 1, 3, 3)
    x[0, 0, :, 2] = float("inf")  # the right column; samples left of it never reach it
    grid = torch.tensor([[[[-1.5, 0.0], [-0.6, 0.3]]]])  # one sample outside (left), one inside
    m = _Sample("bilinear", "zeros", True).eval()
    art = npuc.compile(m, (x, grid), target="npu-mid")
    (out,) = art.run(x, grid)
    torch.testing.assert_close(out, m(x, grid))


@pytest.mark.parametrize("mode,padding", [("bicubic", "zeros"), ("bilinear", "reflection")])
def test_grid_sample_modes_the_npu_lacks_say_why(mode, padding):
    x, grid = torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1
    art = npuc.compile(_Sample(mode, padding, False).eval(), (x, grid), target="npu-mid")
    (reason,) = [o.reason for o in art.report.cpu_ops if o.op == "grid_sample"]
    assert (mode if mode == "bicubic" else padding) in reason and "the NPU" in reason


def test_vgather_gathers_rows_and_refuses_an_index_outside_the_table():
    import numpy as np

    from npuc.isa import assemble
    from npuc.runtime.sim import simulate
    from npuc.targets import load_target

    mid = load_target("npu-mid")
    table = np.arange(12, dtype=np.float16).reshape(4, 3)
    image = np.zeros(512, np.uint8)
    image[0:24] = table.reshape(-1).view(np.uint8)
    image[64:76] = np.array([3, 0, 2], np.int32).view(np.uint8)
    text = """
    DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=128 signal=vector
    VGATHER dtype=fp16 n0=3 n1=3 dst=0x100 idx=64 table=0 table_rows=4 wait=load signal=store
    DMA_STORE esize=2 dram_addr=256 local_addr=0x100 n0=9 wait=vector
    END"""
    got = np.frombuffer(simulate(assemble(text), mid, image).dram, np.uint8)[256:274].view(np.float16)
    np.testing.assert_array_equal(got.reshape(3, 3), table[[3, 0, 2]])
    image[64:68] = np.array([4], np.int32).view(np.uint8)
    with pytest.raises(npuc.NpucError, match="row index 4 .* outside the table's 4 rows"):
        simulate(assemble(text), mid, image)
