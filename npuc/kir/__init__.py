"""The kernel-level IR: what lowering produces and scheduling and code generation consume.

``tensor``   :class:`DramTensor`, a logical shape over a strided DRAM layout (views are strides);
``storage``  how NPU-side tensors are stored: element types, the names of dense layouts;
``kernel``   :class:`Kernel` (one fused NPU operation), :class:`EpilogueOp`, the attribute records
             of the kernel kinds and :data:`KERNEL_KINDS`;
``records``  how per-channel REQUANT records are stored (5 bytes a channel) and loaded;
``plan``     :class:`Plan`, a kernel's chosen schedule;
``program``  the lowered model: buffers, homes, NPU segments of :class:`LKernel` s, CPU segments;
``text``     the text form (print and parse kernels and NPU segments; print the whole model);
``verify``   the verifier the stage runner calls after partition and fusion.

Lowering (npuc.lower), scheduling (npuc.schedule) and code generation (npuc.codegen) import this
package; it imports none of them (tests/test_import_graph.py keeps it so).  See docs/compiler.md.
"""
