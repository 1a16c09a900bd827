"""``compare`` and ``select``: booleans as 0/1 masks on the vector unit.

A boolean of a float graph lives on the NPU as a mask in the kernel's dtype (1.0 where true, 0.0
where false).  ``compare`` computes ``out = (a op b)`` by VCMP; ``select`` computes
``out = where(m, a, b)`` by loading ``b`` into the result tile and moving ``a`` over it where the
mask is nonzero (VSEL).  Logical and / or / not of masks are ordinary ``eltwise`` steps (mul, max,
1 - x), which the lowering rules emit.

Every tensor has the output's logical shape, with zero strides where it broadcasts (a threshold,
a per-row mask, a scalar fill value).  As in ``eltwise``, they are seen together in the output's
physical order with dimensions merged (:func:`canonical`), the ``rows x cols`` space is cut into
tiles that rotate through three buffer sets (loads of the next tile and the store of the
previous one overlap the vector work), and each operand is loaded with the fewest bytes (a
broadcast operand as one row, one column or one element, expanded by the instruction's zero
strides).

Numerics: exact.  VCMP compares the stored values (fp16 on the NPU, so a float comparison is
decided on the fp16 values), VSEL copies the chosen value bit for bit (-inf fills included).
"""

from __future__ import annotations

from dataclasses import replace

from npuc.codegen.epilogue import (
    ALIGN,
    MAX_COUNT,
    Tile,
    broadcast_kind,
    load_operand,
    load_pieces,
    rows_block,
    store_pieces,
)
from npuc.codegen.kernel import register_kernel
from npuc.codegen.kernels.vector_common import EltwiseTiling, canonical, dtype_problem, largest_fitting, overlap_cap, pipeline, tile_grid
from npuc.codegen.tile_builder import TileBuilder, emit_program, planned_program, tile_plan
from npuc.errors import CompileError
from npuc.isa.enums import CmpOp
from npuc.kir.kernel import CompareAttrs, Kernel
from npuc.kir.plan import Plan
from npuc.kir.tile_program import TileProgram

NSETS = 3  # buffer sets: load i+1, compute i and store i-1 each have their own


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def emit_rows(em, instr: str, dst: Tile, operands: dict[str, Tile], **fields) -> None:
    """One 2-D vector instruction over ``dst`` with tile operands of its size (zero strides
    broadcast), rows split at the count limit."""
    for r0 in range(0, dst.rows, MAX_COUNT):
        n1 = min(MAX_COUNT, dst.rows - r0)
        f = dict(fields)
        for name, t in {"dst": dst, **operands}.items():
            f[name] = t.addr + r0 * t.s1
            f[f"{name}_space"] = t.space
            f[f"{name}_s0"] = t.s0 if dst.cols > 1 else 0
            f[f"{name}_s1"] = t.s1 if n1 > 1 else 0
        em.emit(instr, dtype=dst.dtype.name, n0=dst.cols, n1=n1, **f)


class _MaskKernel:
    """What ``compare`` and ``select`` share: n operands of the output's shape, one vector step.

    Subclasses give ``kind``, ``arity`` and :meth:`compute` (the instructions on one tile).
    ``direct`` is the index of the input that may be loaded straight into the result tile."""

    kind = ""
    arity = 0
    direct: int | None = None
    int32 = False  # whether the kind has an int32 form

    def supports(self, kernel: Kernel, target) -> str | None:
        if len(kernel.inputs) != self.arity:
            return f"{self.kind} takes {self.arity} inputs, got {len(kernel.inputs)}"
        if kernel.epilogue:
            return f"{self.kind} takes no epilogue"
        for t in kernel.tensors():
            if t.shape != kernel.output.shape:
                return f"tensor {t.name} has shape {list(t.shape)}, not the output's {list(kernel.output.shape)}"
        return dtype_problem(kernel.dtype, target, int8=True, int32=self.int32)

    @staticmethod
    def _canonical(kernel: Kernel) -> Kernel:
        c = canonical([*kernel.inputs, kernel.output], kernel.output)
        return replace(kernel, inputs=tuple(c[:-1]), output=c[-1])

    def _set_bytes(self, k: Kernel, rows: int, cols: int) -> int:
        tile = _aligned(rows * cols * k.dtype.size)
        return tile * (1 + self.arity)

    def plan(self, kernel: Kernel, target) -> Plan:
        k = self._canonical(kernel)
        cols = k.output.shape[-1]
        rows = k.output.numel // cols
        budget = target.scratchpad.size_bytes // NSETS
        tc = largest_fitting(lambda c: self._set_bytes(k, 1, c), budget, min(cols, MAX_COUNT))
        if tc == 0:
            raise CompileError(f"kernel '{kernel.name}': no {self.kind} tile fits {budget} bytes of scratchpad")
        tr = 1 if tc < cols else largest_fitting(lambda r: self._set_bytes(k, r, cols), budget, min(rows, MAX_COUNT))
        if tc == cols:
            tr = overlap_cap(rows, tr, max(1, 4096 // (cols * k.dtype.size)))
        elif rows == 1:
            tc = overlap_cap(cols, tc, 2048)
        choice = EltwiseTiling(rows, cols, tr, tc)
        summary = f"{self.kind} {rows}x{cols} in {tr}x{tc} tiles, {NSETS} buffer sets"
        return tile_plan(summary, self.program(kernel, choice, target), target)

    def compute(self, em, k: Kernel, tile: Tile, operands: list[Tile | None]) -> None:
        raise NotImplementedError

    def emit(self, kernel: Kernel, plan: Plan, em) -> None:
        emit_program(planned_program(kernel, plan, em.target, self.program), em)

    def program(self, kernel: Kernel, p: EltwiseTiling, target) -> TileProgram:
        """The schedule of ``kernel`` at tiling ``p``, as data."""
        k = self._canonical(kernel)
        b = TileBuilder(target, kernel)
        nbytes = _aligned(p.tile_rows * p.tile_cols * k.dtype.size)
        sets = [(b.alloc(nbytes, f"tile {i}"), [b.alloc(nbytes, f"operand {j} {i}") for j in range(self.arity)])
                for i in range(NSETS)]
        row_dims = tuple(range(k.output.rank - 1))
        col = k.output.rank - 1
        grid = list(tile_grid(p.rows, p.cols, p.tile_rows, p.tile_cols))
        pending: dict[int, tuple] = {}

        def block(t, i):
            r0, nr, c0, nc = grid[i]
            return rows_block(t, row_dims, col, r0, nr, c0, nc)

        def fetch(i: int) -> None:
            _, nr, _, nc = grid[i]
            taddr, bufs = sets[i % NSETS]
            tile = Tile(taddr, nr, nc, k.dtype)
            loaded: list[Tile | None] = []
            for j, t in enumerate(k.inputs):
                pieces = block(t, i)
                if j == self.direct and broadcast_kind(pieces) == "full":
                    load_pieces(b, pieces, tile)
                    loaded.append(None)  # already in the result tile
                else:
                    loaded.append(load_operand(b, pieces, nr, nc, k.dtype, bufs[j], nbytes))
            pending[i] = (tile, loaded)

        def compute(i: int) -> None:
            tile, loaded = pending.pop(i)
            self.compute(b, k, tile, loaded)
            store_pieces(b, tile, block(k.output, i))

        pipeline(len(grid), fetch, compute, NSETS, b)
        return b.finish(f"{p.tile_rows}x{p.tile_cols} tiles of {p.rows}x{p.cols}", p)


class CompareKernel(_MaskKernel):
    """The ``compare`` kind: out = 1 where ``a op b`` holds, else 0 (VCMP)."""

    kind = "compare"
    arity = 2
    int32 = True  # integers (npuc.lower.rules_int): VCMP int32 gives a 0/1 int32 mask

    def supports(self, kernel: Kernel, target) -> str | None:
        a = kernel.attrs
        if not isinstance(a, CompareAttrs) or a.op not in CmpOp.__members__:
            return f"compare needs CompareAttrs with op one of {', '.join(CmpOp.__members__)}, got {a!r}"
        return super().supports(kernel, target)

    def compute(self, em, k: Kernel, tile: Tile, operands: list[Tile | None]) -> None:
        a, b = operands
        emit_rows(em, "VCMP", tile, {"a": a, "b": b}, op=k.attrs.op)


class SelectKernel(_MaskKernel):
    """The ``select`` kind: out = a where the mask m is nonzero, else b (inputs m, a, b)."""

    kind = "select"
    arity = 3
    direct = 2  # b lands in the result tile, then VSEL moves a over it

    def compute(self, em, k: Kernel, tile: Tile, operands: list[Tile | None]) -> None:
        m, a, b = operands
        if b is not None:  # b broadcasts: expand it into the tile first
            emit_rows(em, "VUN", tile, {"src": b}, op="copy", imm0=0.0, imm1=0.0)
        emit_rows(em, "VSEL", tile, {"mask": m, "a": a})


register_kernel(CompareKernel())
register_kernel(SelectKernel())
