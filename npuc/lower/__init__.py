"""Lowering: from an optimized graph to NPU kernels and CPU-fallback subgraphs.

``partition`` decides, node by node, whether the NPU runs it (a lowering rule exists and every
kernel it becomes is accepted by its implementation) or the host CPU does (with a reason and an
estimated cost); ``fusion`` merges elementwise work into the kernel that produces its input;
``layout`` chooses how each value is stored in DRAM.  See docs/compiler.md.
"""
