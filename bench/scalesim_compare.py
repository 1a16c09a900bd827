"""npuc's array timing against SCALE-Sim on single GEMM and convolution layers.

For each layer, array size (16 x 16 as npu-mid, 32 x 32 as npu-large) and dataflow (weight- and
output-stationary), the script runs SCALE-Sim (pip package ``scalesim``, in its own virtual
environment because it needs numpy < 2.3) and reads the compute cycles of COMPUTE_REPORT.csv;
then it simulates, in npuc's timing tier, the program a compiler would emit for the same GEMM
(a convolution as its im2col GEMM: M = output pixels, K = kh x kw x C, N = filters):

* weight-stationary: per fold (a k-tile of at most `rows` rows and an n-tile of at most `cols`
  columns) one LOAD_WEIGHTS then one MATMUL streaming all M rows; a NOP between folds keeps
  weight loading from overlapping compute, as SCALE-Sim assumes (its 1 cycle per fold is
  subtracted); the last column shows npuc with double-buffered weights (no NOPs);
* output-stationary: one MATMUL_OS per (m-tile, n-tile) with the whole K streamed.

SCALE-Sim charges every fold the full array (2 x rows + cols + T - 2); npuc charges the rows and
columns a partial fold uses, so the two agree on full folds and npuc is lower on partial ones.
npuc runs on a copy of the preset with enlarged scratchpad and accumulator so that each layer is
one pass, like SCALE-Sim's operand streaming (the array parameters are the preset's).

    .venv/bin/python bench/scalesim_compare.py [--venv /tmp/npuc-scalesim-venv]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from npuc.isa import Instr, Program
from npuc.runtime.sim import simulate
from npuc.targets import Target, target_from_dict


@dataclass(frozen=True)
class Layer:
    """A GEMM (kh = kw = 1, C = K, H = M, W = 1) or a convolution without padding."""

    name: str
    h: int
    w: int
    kh: int
    kw: int
    c: int
    f: int
    stride: int = 1

    @property
    def gemm(self) -> tuple[int, int, int]:
        oh = (self.h - self.kh) // self.stride + 1
        ow = (self.w - self.kw) // self.stride + 1
        return oh * ow, self.kh * self.kw * self.c, self.f


def gemm(name: str, m: int, k: int, n: int) -> Layer:
    return Layer(name, m, 1, 1, 1, k, n)


LAYERS = [
    gemm("gemm 256x256x256", 256, 256, 256),
    gemm("gemm 100x50x70", 100, 50, 70),
    gemm("gemm 1x512x512 (decode)", 1, 512, 512),
    gemm("gemm 64x32x32", 64, 32, 32),
    Layer("conv 28x28x64 3x3 f64", 28, 28, 3, 3, 64, 64),
    Layer("conv 56x56x3 3x3 f16 s2", 56, 56, 3, 3, 3, 16, 2),
    Layer("conv 14x14x256 1x1 f128", 14, 14, 1, 1, 256, 128),
]

# ------------------------------------------------------------------------------------ SCALE-Sim
_CONFIG = """\
[general]
run_name = npuc_compare

[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
ifmapsramszkB = 65536
filtersramszkB = 65536
ofmapsramszkB = 65536
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Dataflow = {df}
ReadRequestBuffer = 32
WriteRequestBuffer = 32
Bandwidth = 10

[layout]
IfmapCustomLayout = False
FilterCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
"""

_RUNNER = textwrap.dedent(
    """
    import csv, json, sys
    from scalesim.scale_sim import scalesim
    cfg, topo, layout, out = sys.argv[1:5]
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout)
    s.run_scale(top_path=out)
    import glob
    (report,) = glob.glob(out + "/**/COMPUTE_REPORT.csv", recursive=True)
    rows = list(csv.reader(open(report)))[1:]
    print(json.dumps([[int(r[2]), int(r[3])] for r in rows]))
    """
)


def ensure_venv(venv: Path) -> Path:
    """The python of a virtual environment with scalesim installed (created on first use)."""
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"creating {venv} and installing scalesim (numpy < 2.3) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "scalesim", "numpy<2.3"], check=True)
    return py


def scalesim_cycles(py: Path, rows: int, cols: int, dataflow: str, layers: list[Layer]) -> list[tuple[int, int]]:
    """(compute cycles, stall cycles) per layer from SCALE-Sim's COMPUTE_REPORT.csv."""
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "cfg.cfg").write_text(_CONFIG.format(rows=rows, cols=cols, df=dataflow))
        lines = ["Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,"]
        lines += [f"l{i}, {x.h}, {x.w}, {x.kh}, {x.kw}, {x.c}, {x.f}, {x.stride}," for i, x in enumerate(layers)]
        (d / "topo.csv").write_text("\n".join(lines) + "\n")
        (d / "layout.csv").write_text("Layer,\n")
        (d / "runner.py").write_text(_RUNNER)
        out = subprocess.run(
            [str(py), str(d / "runner.py"), str(d / "cfg.cfg"), str(d / "topo.csv"), str(d / "layout.csv"), str(d / "out")],
            check=True,
            capture_output=True,
            text=True,
            cwd=d,
        )
        return [tuple(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


# ------------------------------------------------------------------------------------ npuc
def bench_target(preset: str) -> Target:
    """The preset with a scratchpad and accumulator large enough for one pass per layer."""
    doc = tomllib.loads((resources.files("npuc.targets") / "presets" / f"{preset}.toml").read_text())
    doc["name"] = f"{preset}-bigsram"
    doc["scratchpad"]["size_bytes"] = 1 << 23
    doc["accumulator"]["size_bytes"] = 1 << 22
    return target_from_dict(doc, f"{preset} (enlarged SRAM)")


def ws_program(m: int, k: int, n: int, t: Target, overlap: bool) -> Program:
    rows, cols = t.array.rows, t.array.cols
    ins = []
    for n0 in range(0, n, cols):
        nt = min(cols, n - n0)
        for k0 in range(0, k, rows):
            kt = min(rows, k - k0)
            if ins and not overlap:
                ins.append(Instr.make("NOP"))
            ins.append(Instr.make("LOAD_WEIGHTS", addr=m * k + k0 * n + n0, k=kt, n=nt, s_k=n))
            ins.append(Instr.make("MATMUL", acc=int(k0 > 0), k=kt, n=nt, in_addr=k0, m0=m, in_s0=k, out_addr=0, out_s0=nt * 4))
    return Program(tuple(ins) + (Instr.make("END"),))


def os_program(m: int, k: int, n: int, t: Target) -> Program:
    rows, cols = t.array.rows, t.array.cols
    ins = []
    for m0 in range(0, m, rows):
        mt = min(rows, m - m0)
        for n0 in range(0, n, cols):
            nt = min(cols, n - n0)
            ins.append(
                Instr.make("MATMUL_OS", m=mt, k=k, n=nt, in_addr=m0 * k, in_s=k, w_addr=m * k + n0, w_s=n, out_addr=0, out_s=nt * 4)
            )
    return Program(tuple(ins) + (Instr.make("END"),))


def npuc_cycles(program: Program, t: Target) -> int:
    return simulate(program, t, functional=False, dram_size=1).total_cycles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/npuc-scalesim-venv"), help="virtual environment for scalesim")
    args = ap.parse_args()
    py = ensure_venv(args.venv)
    for preset in ("npu-mid", "npu-large"):
        t = bench_target(preset)
        r, c = t.array.rows, t.array.cols
        for df, df_name in (("ws", "weight-stationary"), ("os", "output-stationary")):
            ss = scalesim_cycles(py, r, c, df, LAYERS)
            print(f"\n{r} x {c} array ({preset}), {df_name}")
            head = f"{'layer':28s} {'M x K x N':>18s} {'SCALE-Sim':>10s} {'npuc':>10s} {'ratio':>6s}"
            print(head + (f" {'npuc, weights overlapped':>26s}" if df == "ws" else ""))
            for layer, (ss_cycles, stalls) in zip(LAYERS, ss):
                m, k, n = layer.gemm
                if df == "ws":
                    prog = ws_program(m, k, n, t, overlap=False)
                    ours = npuc_cycles(prog, t) - sum(i.op == "NOP" for i in prog)
                    extra = f" {npuc_cycles(ws_program(m, k, n, t, overlap=True), t):>26,d}"
                else:
                    ours = npuc_cycles(os_program(m, k, n, t), t)
                    extra = ""
                note = f"  (SCALE-Sim stalls: {stalls})" if stalls else ""
                print(f"{layer.name:28s} {f'{m}x{k}x{n}':>18s} {ss_cycles:>10,d} {ours:>10,d} {ours / ss_cycles:>6.3f}{extra}{note}")


if __name__ == "__main__":
    main()
