"""Checks of npuc against other people's references: ONNX's node conformance cases and the
generated ONNX operator table built from them."""
