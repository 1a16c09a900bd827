"""Share of cycles on the NPU for transformer encoders/decoders whose attention builds its mask from
booleans (comparisons, logical ops, ``where``): DistilBERT and Qwen2, built from small configs
(random weights; DistilBERT also with its full vocabulary), compiled fp16 for npu-mid and profiled.  Prints, per model, the NPU cycles, the
total cycles (CPU segments converted at the target clock), the NPU share, the ops left on the CPU
and the accuracy against PyTorch eager.

    .venv/bin/python bench/npu_share.py [distilbert-tiny] [qwen2-tiny] [distilbert-vocab]
"""

from __future__ import annotations

import sys
import time
import warnings

import torch
from torch import nn

SEQ = 16


class _Hidden(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids).last_hidden_state


def _distilbert(vocab: int = 100):
    import transformers as tf

    cfg = tf.DistilBertConfig(vocab_size=vocab, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
                              max_position_embeddings=64, attn_implementation="sdpa")
    return _Hidden(tf.DistilBertModel(cfg))


def _qwen2():
    import transformers as tf

    cfg = tf.Qwen2Config(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         attn_implementation="sdpa")
    return _Hidden(tf.Qwen2Model(cfg))


MODELS = {"distilbert-tiny": _distilbert, "qwen2-tiny": _qwen2,
          # the full 30522-token vocabulary: a table of 3.9 MB in fp16, gathered from DRAM (DMA_GATHER)
          "distilbert-vocab": lambda: _distilbert(30522)}


def measure(name: str) -> dict:
    import npuc
    from npuc.report.accuracy import check_outputs

    torch.manual_seed(0)
    model = MODELS[name]().eval()
    ids = torch.randint(1, model.m.config.vocab_size, (1, SEQ))
    inputs = (ids,)
    start = time.perf_counter()
    art = npuc.compile(model, inputs, target="npu-mid", name=name)
    prof = art.profile(*inputs)
    c = check_outputs(art.run(*inputs), model, inputs)[0]
    cpu_ops: dict[str, int] = {}
    for o in art.report.cpu_ops:
        cpu_ops[o.op] = cpu_ops.get(o.op, 0) + 1
    return {"model": name, "npu_cycles": prof.npu_cycles, "total_cycles": prof.total_cycles,
            "npu_share": prof.npu_cycles / prof.total_cycles, "cpu_ops": cpu_ops, "rel_l2": c.rel_error,
            "tolerance": c.tolerance, "ok": c.ok, "seconds": time.perf_counter() - start}


def main(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"models to measure: {', '.join(MODELS)} (default: all)")
    names = ap.parse_args(argv).models
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    warnings.filterwarnings("ignore")
    for name in names or list(MODELS):
        r = measure(name)
        print(f"{r['model']:16s} NPU share {r['npu_share']:.1%} ({r['npu_cycles']:,} of {r['total_cycles']:,} cycles); "
              f"rel L2 {r['rel_l2']:.2e} (tol {r['tolerance']:.2e}, {'ok' if r['ok'] else 'TOO FAR'}); "
              f"CPU ops {dict(sorted(r['cpu_ops'].items()))}; {r['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
