"""ExecuTorch: a partitioner and a backend that delegate subgraphs to npuc, and a way to run the
resulting ``.pte`` in Python with the delegates on npuc's simulator.

::

    from executorch.exir import to_edge_transform_and_lower
    from npuc.integrations.executorch import NpucPartitioner, PteRunner

    ep = torch.export.export(model, (x,))
    prog = to_edge_transform_and_lower(ep, partitioner=[NpucPartitioner(target="npu-mid")]).to_executorch()
    open("model.pte", "wb").write(prog.buffer)
    (y,) = PteRunner(prog.buffer).run(x)

Needs the ``executorch`` extra (``pip install 'npuc[executorch]'``).
"""

from npuc.extras import require

require("executorch")

from npuc.integrations.executorch.backend import NpucBackend  # noqa: E402
from npuc.integrations.executorch.partitioner import NpucPartitioner, npu_placement  # noqa: E402
from npuc.integrations.executorch.runner import PteRunner  # noqa: E402

__all__ = ["NpucBackend", "NpucPartitioner", "PteRunner", "npu_placement"]
