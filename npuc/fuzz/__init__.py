"""Randomized differential testing: random graphs over every graph op (``graphs``), each checked
against PyTorch eager on the interpreter, the fp16 NPU path and the int8 path (``check``);
``python -m npuc.fuzz --seed S --count N`` (``make fuzz``) runs a long campaign."""
