"""The LOOP writing of code generation alone: ``reroll.roll`` and the check of its result, per network.

For each network (default: ResNet-18 fp16 and MobileNetV2 int8 on npu-mid) one compile is run
to collect every NPU segment as emitted (``driver.finish_segment``'s input); then, on those same
instructions, the script times (CPU seconds, the median of ``--repeat``):

* ``roll`` with the emitter's moves (``Emitter.loop_moves``: each nest iteration compared by its
  flags alone, what code generation does) and without them (every iteration compared field by
  field, as before the moves were handed over), and whether the two give the same LOOPs;
* the check of the result run on every program (``reroll.check_loops``: linear in the encoded
  program plus a flags comparison per dynamic instruction) and the full expansion and
  comparison (``reroll.check_expansion``).

It also prints how many emitted instructions lie outside every loop nest (what the rerolling
search has to look at).  Prints a table; asserts nothing.

    python bench/roll_time.py [--networks resnet18:fp16,mobilenet_v2:int8] [--target npu-mid] [--repeat 3]
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


def emitted_segments(name: str, precision: str, target: str, calibration: int) -> list:
    """Every NPU segment of one compile, as handed to ``finish_segment``: (instructions, segment)."""
    import npuc
    from npuc.codegen import driver

    got: list = []
    real = driver.finish_segment

    def spy(e, instrs=None):
        got.append((list(e.instrs if instrs is None else instrs), e))
        return real(e, instrs)

    model, example = vp.NETWORKS[name]()
    samples = vp.calibration_samples(name, calibration, example) if precision == "int8" else None
    driver.finish_segment = spy
    try:
        npuc.compile(model, example, target=target, quantize="int8" if samples else None, calibration=samples)
    finally:
        driver.finish_segment = real
    return got


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
    return vp.median(times), out


def main() -> None:
    from npuc.codegen.reroll import check_expansion, check_loops, roll

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", default="resnet18:fp16,mobilenet_v2:int8", help="network:precision, comma-separated")
    ap.add_argument("--target", default="npu-mid")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calibration", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'network':<14} {'prec':<5} {'emitted':>8} {'no nest':>8} {'encoded':>8} {'roll s':>7} "
          f"{'w/o moves s':>11} {'same':>5} {'check s':>8} {'expand s':>9}")
    for item in args.networks.split(","):
        name, precision = item.split(":")
        for instrs, e in emitted_segments(name, precision, args.target, args.calibration):
            rewritten = tuple(i for i, (a, b) in enumerate(zip(instrs, e.instrs)) if a is not b)
            fast, (rolled, labels) = timed(lambda: roll(instrs, e.labels, e.loops, e.loop_moves, rewritten), args.repeat)
            slow, plain = timed(lambda: roll(instrs, e.labels, e.loops), args.repeat)
            check, _ = timed(lambda: check_loops(rolled, instrs, labels), args.repeat)
            full, _ = timed(lambda: check_expansion(rolled, instrs, labels), args.repeat)
            outside = len(instrs) - sum(body * n for _, body, n in e.loops)
            print(f"{name:<14} {precision:<5} {len(instrs):>8,} {outside:>8,} {len(rolled):>8,} {fast:>7.2f} "
                  f"{slow:>11.2f} {'yes' if plain == (rolled, labels) else 'NO':>5} {check:>8.2f} {full:>9.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
