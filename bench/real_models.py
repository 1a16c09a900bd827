"""Real models that needed ops beyond npuc's first set (bilinear resizing, transposed convolution,
group and instance norm, flip, cumsum, gather, grid sampling, elu, log1p): each is imported,
compiled for npu-mid, run on the simulator and checked against PyTorch eager with the fp16
tolerance of npuc.report.accuracy.  Prints one line per model: the verdict, the relative L2 error
and its tolerance, the share of ops on the CPU and which ops those are.

    .venv/bin/python bench/real_models.py [NAME ...]
"""

from __future__ import annotations

import sys
import time
import warnings

import torch
from torch import nn
import torch.nn.functional as F


class TinyUNet(nn.Module):
    """Two levels down, two up (transposed convolutions), skip connections, bilinear refinement."""

    def __init__(self) -> None:
        super().__init__()
        self.d1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ELU())
        self.d2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.InstanceNorm2d(16, affine=True), nn.ReLU())
        self.bottom = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU())
        self.u2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.u1 = nn.ConvTranspose2d(32, 8, 4, stride=2, padding=1)
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(a)
        c = self.bottom(b)
        u = torch.cat([self.u2(c), b], 1)
        u = torch.cat([self.u1(u), a], 1)
        return F.interpolate(self.head(u), scale_factor=2, mode="bilinear", align_corners=False)


class BiGru(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(12, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


class Lstm2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(12, 24, num_layers=2, batch_first=True)
        self.fc = nn.Linear(24, 5)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


class FlowWarp(nn.Module):
    """RAFT-style warping: sample features at coordinates displaced by a predicted flow."""

    def __init__(self) -> None:
        super().__init__()
        self.flow = nn.Conv2d(4, 2, 3, padding=1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, 8), torch.linspace(-1, 1, 8), indexing="ij")
        self.register_buffer("base", torch.stack([xs, ys], -1)[None])

    def forward(self, x):
        grid = self.base + 0.1 * torch.tanh(self.flow(x)).permute(0, 2, 3, 1)
        return F.grid_sample(x, grid, align_corners=True) + torch.log1p(x.abs())


def _hf(name: str):
    import transformers as tf

    if name == "roberta":
        cfg = tf.RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=40)
        m = tf.RobertaModel(cfg, add_pooling_layer=False)
        ids = torch.randint(3, 100, (1, 12))
        return _Out(m), (ids,)
    if name == "wav2vec2":
        cfg = tf.Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                                num_conv_pos_embedding_groups=2, feat_extract_norm="group", do_stable_layer_norm=False)
        return _Out(tf.Wav2Vec2Model(cfg)), (torch.randn(1, 400),)
    if name == "swin":
        cfg = tf.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                            window_size=4)
        return _Out(tf.SwinModel(cfg)), (torch.randn(1, 3, 32, 32),)
    raise KeyError(name)


class _Out(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x).last_hidden_state


def models() -> dict:
    import torchvision

    tv = torchvision.models
    return {
        "lraspp_mobilenet_v3_large@64": lambda: (tv.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                                     num_classes=4),
                                                (torch.randn(1, 3, 64, 64),)),
        "fcn_resnet50@64": lambda: (tv.segmentation.fcn_resnet50(weights=None, weights_backbone=None, num_classes=4,
                                                              aux_loss=False), (torch.randn(1, 3, 64, 64),)),
        "deeplabv3_mobilenet_v3_large@64": lambda: (tv.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=4, aux_loss=False), (torch.randn(1, 3, 64, 64),)),
        "alexnet@96": lambda: (tv.alexnet(num_classes=10), (torch.randn(1, 3, 96, 96),)),
        "vgg11@48": lambda: (tv.vgg11(num_classes=10), (torch.randn(1, 3, 48, 48),)),
        "tiny_unet": lambda: (TinyUNet(), (torch.randn(1, 3, 16, 16),)),
        "bigru": lambda: (BiGru(), (torch.randn(1, 6, 12),)),
        "lstm2": lambda: (Lstm2(), (torch.randn(1, 6, 12),)),
        "flow_warp": lambda: (FlowWarp(), (torch.randn(1, 4, 8, 8),)),
        "roberta-tiny": lambda: _hf("roberta"),
        "wav2vec2-tiny": lambda: _hf("wav2vec2"),
        "swin-tiny": lambda: _hf("swin"),
    }


class _DictOut(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x):
        y = self.m(x)
        return y["out"] if isinstance(y, dict) else y


def check(name: str, build) -> str:
    import npuc
    from npuc.report.accuracy import check_outputs

    torch.manual_seed(0)
    model, inputs = build()
    model = _DictOut(model).eval()
    start = time.perf_counter()
    try:
        art = npuc.compile(model, inputs, target="npu-mid", name=name)
    except npuc.NpucError as e:
        return f"{name:34s} NOT COMPILED: {str(e).splitlines()[0][:160]}"
    outs = art.run(*inputs)
    c = check_outputs(outs, model, inputs)[0]
    cpu = sorted({o.op for o in art.report.cpu_ops})
    seconds = time.perf_counter() - start
    verdict = "ok" if c.ok else "TOO FAR"
    return (f"{name:34s} {verdict:7s} rel L2 {c.rel_error:.2e} (tol {c.tolerance:.2e}); "
            f"{art.report.kernels} NPU kernels, {len(art.report.cpu_ops)} ops on the CPU {cpu}; {seconds:.0f} s")


def main(names: list[str]) -> None:
    warnings.filterwarnings("ignore")
    table = models()
    for name in names or list(table):
        print(check(name, table[name]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
