"""Scheduling: how an operation maps onto the NPU (tile sizes, loop order, dataflow), chosen by
an analytical cost model built on the instruction set's own timing definitions.

``problem``  the array problem (an implicit GEMM over windows) and its tiling, the loop nest
             both the code generator and the cost model walk;
``cost``     cycles of single instructions (from ``npuc.isa`` definitions) and of a whole tiling;
``search``   candidate tilings and the choice among them.
"""
