"""The PyTorch frontend: torch.export -> core ATen -> npuc graph IR.

``import_graph(model, example_inputs)`` returns the unoptimized graph; the graph passes run in
:mod:`npuc.pipeline`.  ``supported_aten_ops()`` lists the one ATen-to-graph-op table.
"""

from npuc.frontend.aten_table import supported_aten_ops
from npuc.frontend.importer import import_graph, import_program

__all__ = ["import_graph", "import_program", "supported_aten_ops"]
