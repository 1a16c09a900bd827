"""Reports: per-layer profiles of a compiled model, tables and Perfetto traces."""
