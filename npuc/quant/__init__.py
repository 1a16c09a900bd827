"""int8 quantization: the integer arithmetic (:mod:`npuc.quant.arith`), the PT2E quantizer for
the NPU (:mod:`npuc.quant.quantizer`) and calibration (:mod:`npuc.quant.calibrate`).

Importing this package is cheap; torchao is imported by the quantizer module only.
"""
