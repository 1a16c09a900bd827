"""Hand-written NPU kernels for the simulator tests, as assembly text (loops unrolled here).

Each function returns (program text, DRAM image, a function reading the result from the final
DRAM bytes) so that a test states only the reference computation.
"""

from __future__ import annotations

import numpy as np


def put(image: np.ndarray, addr: int, arr: np.ndarray) -> None:
    """Place ``arr``'s bytes in the DRAM image at ``addr``."""
    raw = np.ascontiguousarray(arr).view(np.uint8).ravel()
    image[addr : addr + raw.size] = raw


def get(dram: bytes, addr: int, dtype, shape) -> np.ndarray:
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(dram[addr : addr + n], dtype=dtype).reshape(shape)


def tiled_matmul(x: np.ndarray, w: np.ndarray, rows: int, cols: int, dtype: str = "int8") -> tuple[str, np.ndarray, int]:
    """Y = X @ W tiled for a rows x cols array (weight-stationary), all data loaded up front.

    Returns (text, dram image, address of Y in DRAM); Y is int32 (int8) or fp32 (fp16), M x N.
    """
    m, k = x.shape
    n = w.shape[1]
    es = x.dtype.itemsize
    x_dram, w_dram = 0, m * k * es
    y_dram = -(-(w_dram + k * n * es) // 64) * 64  # int32/fp32 results: aligned
    image = np.zeros(y_dram + m * n * 4, np.uint8)
    put(image, x_dram, x)
    put(image, w_dram, w)
    x_spad, w_spad = 0, m * k * es
    lines = [
        f"DMA_LOAD esize={es} dram_addr={x_dram} local_addr={x_spad} n0={k} n1={m}",
        f"DMA_LOAD esize={es} dram_addr={w_dram} local_addr={w_spad} n0={n} n1={k} signal=compute",
    ]
    first = True
    for n0 in range(0, n, cols):
        nt = min(cols, n - n0)
        for k0 in range(0, k, rows):
            kt = min(rows, k - k0)
            wait = " wait=load" if first else ""
            first = False
            lines.append(
                f"LOAD_WEIGHTS dtype={dtype} addr={w_spad + (k0 * n + n0) * es} k={kt} n={nt} s_k={n * es}{wait}"
            )
            lines.append(
                f"MATMUL dtype={dtype} acc={int(k0 > 0)} k={kt} n={nt} in_addr={x_spad + k0 * es} m0={m} "
                f"in_s0={k * es} out_addr={n0 * 4} out_s0={n * 4}"
            )
    lines[-1] += " signal=store"
    lines.append(f"DMA_STORE local=acc esize=4 dram_addr={y_dram} local_addr=0 n0={n} n1={m} wait=compute")
    lines.append("END")
    return "\n".join(lines) + "\n", image, y_dram


def double_buffered_stream(
    tiles: int, tile_bytes: int, body: str, *, double: bool = True, out_bytes: int | None = None
) -> str:
    """Stream ``tiles`` input tiles through ``body`` (compute or vector lines using {IN} and
    {OUT} for the buffers of this tile), with two buffers per side when ``double`` (else one).

    Load queue: load tile i into in-buffer i % B, signal the queue of the body's first
    instruction; before reusing a buffer it waits for the body's last instruction to free it.
    The body: wait for the tile (and for the store that freed the out-buffer), run, signal load
    (in-buffer free) and store (out-buffer ready).  Store: wait, store, signal the body (out-buffer
    free).  Where the body moves between the compute and vector queues, a token orders the two
    (and the last instruction of one tile before the first of the next, which rewrites the same
    accumulators).
    """
    from npuc.isa.instr import get_def

    out_bytes = out_bytes or tile_bytes
    nbuf = 2 if double else 1
    in_base, out_base = 0, 2 * tile_bytes
    template = body.strip().splitlines()
    queues = [get_def(line.split()[0].upper()).queue.name for line in template]
    first, last = queues[0], queues[-1]
    lines = []
    for i in range(tiles):
        b = i % nbuf
        in_buf, out_buf = in_base + b * tile_bytes, out_base + b * out_bytes
        wait_load = f" wait={last}" if i >= nbuf else ""
        lines.append(
            f"DMA_LOAD esize=1 dram_addr={i * tile_bytes} local_addr={in_buf} n0={tile_bytes} signal={first}{wait_load}"
        )
        waits = [[] for _ in template]
        signals = [[] for _ in template]
        waits[0].append("load")
        if i >= nbuf:
            waits[0].append("store")
        if i > 0 and last != first:
            waits[0].append(last)
        for j in range(1, len(template)):
            if queues[j] != queues[j - 1]:
                signals[j - 1].append(queues[j])
                waits[j].append(queues[j - 1])
        signals[-1] += ["load", "store"]
        if i + 1 < tiles and last != first:
            signals[-1].append(first)
        for j, line in enumerate(template):
            text = line.format(IN=in_buf, OUT=out_buf)
            if waits[j]:
                text += f" wait={','.join(waits[j])}"
            if signals[j]:
                text += f" signal={','.join(signals[j])}"
            lines.append(text)
        lines.append(
            f"DMA_STORE esize=1 dram_addr={tiles * tile_bytes + i * out_bytes} local_addr={out_buf} "
            f"n0={out_bytes} wait={last} signal={first}"
        )
    lines.append("END")
    return "\n".join(lines) + "\n"
