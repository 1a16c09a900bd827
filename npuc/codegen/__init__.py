"""Code generation: kernels over DRAM tensors, instruction emission with dependency tokens."""
