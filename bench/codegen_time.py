"""Code generation time and the instructions behind it, per network and precision.

For each network (default: ResNet-18, ResNet-50, MobileNetV2) in fp16 and int8 (8 calibration
samples), one compile with torch single-threaded prints: the CPU seconds of ``npuc.compile``
less those spent inside ``torch.export.export``, the ``codegen`` stage's seconds
(``CompileReport.stage_seconds``), and the instructions: emitted in program order by the
emitter (the expanded program), those of them whose tokens came from a conflict scan (the rest
were appended from a loop body's settled state: npuc.codegen.loop_tokens), and the encoded
program (LOOPs included).  Prints a table; asserts nothing.

    python bench/codegen_time.py [--networks resnet18,mobilenet_v2] [--target npu-mid] [--precisions fp16,int8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import vela_peer as vp  # noqa: E402
from vela_compile_time import ExportClock  # noqa: E402


class EmitterCount:
    """Counts the emitted and the scanned instructions of every Emitter finished while installed."""

    def __init__(self) -> None:
        from npuc.codegen.emitter import Emitter

        self.emitted = self.replicated = 0
        self._cls = Emitter
        self._real = Emitter.finish

    def __enter__(self) -> "EmitterCount":
        real, count = self._real, self

        def finish(em):
            if not em._finished:
                count.emitted += len(em._ops) + 1
                count.replicated += getattr(em, "replicated", 0)
            return real(em)

        self._cls.finish = finish
        return self

    def __exit__(self, *exc) -> None:
        self._cls.finish = self._real


def one(name: str, precision: str, target: str, calibration: int) -> dict:
    import npuc

    model, example = vp.NETWORKS[name]()
    samples = vp.calibration_samples(name, calibration, example) if precision == "int8" else None
    with ExportClock() as clock, EmitterCount() as count:
        start = time.process_time()
        art = npuc.compile(model, example, target=target, quantize="int8" if samples else None, calibration=samples)
        cpu = time.process_time() - start - clock.cpu
    codegen = sum(s for n, s in art.report.stage_seconds if n == "codegen")
    return {"network": name, "precision": precision, "cpu_s": cpu, "codegen_s": codegen,
            "emitted": count.emitted, "scanned": count.emitted - count.replicated,
            "encoded": art.report.instructions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", default="resnet18,resnet50,mobilenet_v2")
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--calibration", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'network':<14} {'prec':<5} {'CPU s':>7} {'codegen s':>10} {'emitted':>9} {'scanned':>9} {'encoded':>8}")
    for name in args.networks.split(","):
        for precision in args.precisions.split(","):
            r = one(name, precision, args.target, args.calibration)
            print(f"{r['network']:<14} {r['precision']:<5} {r['cpu_s']:>7.2f} {r['codegen_s']:>10.2f} "
                  f"{r['emitted']:>9,} {r['scanned']:>9,} {r['encoded']:>8,}", flush=True)


if __name__ == "__main__":
    main()
