"""npuc's int8 quantization (PT2E prepare, calibration, convert) against PyTorch's own flow.

For each network (MobileNetV2 and ResNet-18 by default) the model is captured once with
torch.export (not timed: a compile exports once, and both flows start from the same program);
then, each step timed in CPU seconds, median of ``--repeat``:

* **npuc**: what the ``quantize`` stage of ``npuc.compile`` runs
  (``npuc.frontend.pt2e.quantize_captured``): ``prepare_pt2e`` with the NpuQuantizer, the
  calibration samples through the observed model (with npuc's finiteness check of the ranges),
  ``convert_pt2e``;
* **torchao**: the same steps with the XNNPACK quantizer that ships with torchao's PT2E tests
  and its default static configuration (``get_symmetric_quantization_config(is_per_channel=True)``:
  histogram observers on activations, per-channel min/max on weights), and again with min/max
  activation observers (npuc's default observer), so that the two flows are compared with the
  same observer too.

torch runs single-threaded.  The export count and stage split of a whole int8 compile are
``bench/int8_compile_bench.py``'s.

    python bench/calibration_time.py [--networks mobilenet_v2,resnet18] [--calibration 8] [--repeat 3]
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


def _cpu(fn, *args):
    start = time.process_time()
    out = fn(*args)
    return out, time.process_time() - start


def npuc_flow(captured, samples, target) -> dict[str, float]:
    """CPU seconds of npuc's prepare, calibration and convert."""
    from npuc.frontend.pt2e import convert_pt2e, prepare_pt2e, quiet_torch_logs
    from npuc.quant.calibrate import run_calibration
    from npuc.quant.quantizer import NpuQuantizer, QuantOptions

    with quiet_torch_logs():
        prepared, t_prep = _cpu(prepare_pt2e, captured.module(), NpuQuantizer(target, QuantOptions()))
        _, t_cal = _cpu(run_calibration, prepared, samples)
        _, t_conv = _cpu(convert_pt2e, prepared)
    return {"prepare": t_prep, "calibrate": t_cal, "convert": t_conv}


def torchao_flow(captured, samples, minmax: bool) -> dict[str, float]:
    """CPU seconds of prepare, calibration and convert with torchao's XNNPACK test quantizer."""
    from torchao.quantization.pt2e.observer import MinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    from npuc.frontend.pt2e import quiet_torch_logs

    config = get_symmetric_quantization_config(is_per_channel=True)
    if minmax:
        from dataclasses import replace

        act = config.input_activation
        act = replace(act, observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2**-12))
        config = replace(config, input_activation=act, output_activation=act)
    quantizer = XNNPACKQuantizer().set_global(config)

    def calibrate(prepared):
        with torch.no_grad():
            for s in samples:
                prepared(*s)

    with quiet_torch_logs():
        prepared, t_prep = _cpu(prepare_pt2e, captured.module(), quantizer)
        _, t_cal = _cpu(calibrate, prepared)
        _, t_conv = _cpu(convert_pt2e, prepared)
    return {"prepare": t_prep, "calibrate": t_cal, "convert": t_conv}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default="mobilenet_v2,resnet18")
    ap.add_argument("--calibration", type=int, default=8, help="calibration samples")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", default="npu-mid")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from npuc.frontend.export import capture_program
    from npuc.targets import load_target

    target = load_target(args.target)
    print(f"int8 quantization CPU seconds (median of {args.repeat}), {args.calibration} calibration samples, "
          f"torch threads 1; each flow from the same captured program")
    print(f"{'network':<13} {'flow':<26} {'prepare':>8} {'calibrate':>9} {'convert':>8} {'total':>8} {'/ npuc':>7}")
    for name in args.networks.split(","):
        model, example = vp.NETWORKS[name]()
        samples = vp.calibration_samples(name, args.calibration, example)
        captured = capture_program(model.eval(), example)
        flows = {
            "npuc (NpuQuantizer, minmax)": lambda: npuc_flow(captured, samples, target),
            "torchao XNNPACK, default": lambda: torchao_flow(captured, samples, False),
            "torchao XNNPACK, minmax": lambda: torchao_flow(captured, samples, True),
        }
        npuc_total = None
        for label, run in flows.items():
            runs = [run() for _ in range(args.repeat)]
            med = {k: vp.median([r[k] for r in runs]) for k in runs[0]}
            total = vp.median([sum(r.values()) for r in runs])
            npuc_total = total if npuc_total is None else npuc_total
            print(f"{name:<13} {label:<26} {med['prepare']:>8.3f} {med['calibrate']:>9.3f} {med['convert']:>8.3f} "
                  f"{total:>8.3f} {total / npuc_total:>7.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
