"""The host back-end: CPU segments of a binary compiled ahead of time through MLIR and LLVM."""
