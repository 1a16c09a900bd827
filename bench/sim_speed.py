"""Simulator speed: simulated instructions per second of the functional and timing tiers.

The program is a realistic int8 linear layer (Y = requant(X @ W), X: M x 256, W: 256 x 256) on
npu-mid, written the way a compiler would: weights resident in the scratchpad, input row-tiles
of 64 double-buffered on the load queue, one LOAD_WEIGHTS + MATMUL per 16 x 16 weight tile
(overlapped), a per-channel REQUANT per tile and double-buffered stores.  Prints figures only.

    .venv/bin/python bench/sim_speed.py [--m 2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from npuc.isa import assemble
from npuc.runtime.sim import simulate
from npuc.targets import load_target


def linear_layer_program(m: int, k: int = 256, n: int = 256, tile_m: int = 64, arr: int = 16) -> tuple[str, int]:
    """Assembly text of the layer, and the DRAM bytes it needs."""
    x_dram, w_dram = 0, m * k
    q_dram = w_dram + k * n
    y_dram = q_dram + 8 * n
    w_spad = 0
    q_spad = k * n
    in_spad = q_spad + 8 * n
    out_spad = in_spad + 2 * tile_m * k
    lines = [
        f"DMA_LOAD esize=1 dram_addr={w_dram} local_addr={w_spad} n0={n} n1={k}",
        f"DMA_LOAD esize=4 dram_addr={q_dram} local_addr={q_spad} n0={2 * n} signal=compute",
    ]
    tiles = m // tile_m
    for t in range(tiles):
        buf = t % 2
        wait = " wait=compute" if t >= 2 else ""
        lines.append(
            f"DMA_LOAD esize=1 dram_addr={x_dram + t * tile_m * k} local_addr={in_spad + buf * tile_m * k} "
            f"n0={k * tile_m} signal=compute{wait}"
        )
        # Tile 0: its first LOAD_WEIGHTS takes the weights' token, its first MATMUL the input's.
        # Later tiles: the first instruction takes the input's token and, from tile 2 on, the
        # token of the store that freed this output buffer.
        first_waits = {0: " wait=load", 1: " wait=load"}.get(t, " wait=load,store")
        for j, (n0, k0) in enumerate((n0, k0) for n0 in range(0, n, arr) for k0 in range(0, k, arr)):
            lw_wait = first_waits if j == 0 else ""
            mm_wait = " wait=load" if (t == 0 and j == 0) else ""
            lines.append(f"LOAD_WEIGHTS addr={w_spad + k0 * n + n0} k={arr} n={arr} s_k={n}{lw_wait}")
            lines.append(
                f"MATMUL acc={int(k0 > 0)} k={arr} n={arr} in_addr={in_spad + buf * tile_m * k + k0} m0={tile_m} "
                f"in_s0={k} out_addr={n0 * 4} out_s0={n * 4}{mm_wait}"
            )
        lines.append(
            f"REQUANT n0={n} n1={tile_m} src_space=acc src=0 src_s0=4 dst={out_spad + buf * tile_m * n} "
            f"per_channel=1 qparams={q_spad} signal=load,store"
        )
        lines.append(
            f"DMA_STORE esize=1 dram_addr={y_dram + t * tile_m * n} local_addr={out_spad + buf * tile_m * n} "
            f"n0={tile_m * n} wait=compute signal=compute"
        )
    lines.append("END")
    return "\n".join(lines) + "\n", y_dram + m * n


def distinct_program(n_pairs: int = 8000) -> str:
    """A stream in which no two instructions are equal (the worst case for the simulator's
    per-instruction preparation cache): vector ops and output-stationary matmuls at moving
    addresses."""
    lines = []
    for i in range(n_pairs):
        lines.append(f"VUN op=relu dtype=int8 n0=64 dst={0x10000 + (i % 4000) * 64 + i // 4000} src={i * 8}")
        lines.append(f"MATMUL_OS m=16 k=16 n=16 in_addr={i * 4} w_addr={0x20000 + i * 2} out_addr={(i % 64) * 1024}")
    lines.append("END")
    return "\n".join(lines) + "\n"


def measure(program, target, image, functional: bool, repeat: int) -> tuple[float, object]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = simulate(program, target, image if functional else None, functional=functional, dram_size=len(image))
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=2048, help="rows of X (a multiple of 64)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    target = load_target("npu-mid")
    t0 = time.perf_counter()
    text, dram_bytes = linear_layer_program(args.m)
    program = assemble(text)
    t_asm = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, dram_bytes, dtype=np.uint8)
    q = np.stack([np.full(256, 1 << 30), np.full(256, 8)], axis=1).astype(np.int32).view(np.uint8).ravel()
    image[args.m * 256 + 256 * 256 : args.m * 256 + 256 * 256 + q.size] = q
    n = len(program)
    print(f"program: int8 linear layer {args.m} x 256 x 256 on {target.name}: {n} instructions "
          f"(assembled in {t_asm:.2f} s, {n / t_asm:,.0f} instr/s)")
    for functional in (False, True):
        wall, r = measure(program, target, image, functional, args.repeat)
        tier = "functional + timing + energy" if functional else "timing + energy only"
        print(f"  {tier:30s} {wall:7.3f} s  {n / wall:12,.0f} instr/s   "
              f"({r.total_cycles:,} cycles, MAC utilization {r.mac_utilization:.1%}, {r.energy_pj / 1e6:.3f} uJ)")
    worst = assemble(distinct_program())
    n = len(worst)
    print(f"program: {n} instructions, no two alike (vector ops and output-stationary matmuls)")
    blank = np.zeros(1, np.uint8)
    for functional in (False, True):
        wall, r = measure(worst, target, blank, functional, args.repeat)
        tier = "functional + timing + energy" if functional else "timing + energy only"
        print(f"  {tier:30s} {wall:7.3f} s  {n / wall:12,.0f} instr/s   ({r.total_cycles:,} cycles)")


if __name__ == "__main__":
    main()
