"""The gguf package's Q8_0 and Q4_0 (gguf.quants, llama.cpp's Python port of its reference
quantizers), for kernels/weight_quant_test.cpp: quantizes DIR/x.f32 (f32 values, a multiple of 32)
into DIR/gguf.q8_0 and DIR/gguf.q4_0, and dequantizes dtrain's DIR/ours.q8_0 and DIR/ours.q4_0
into DIR/gguf_of_ours.q8_0.f32 and .q4_0.f32.

usage: gguf_quants.py DIR
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

directory = sys.argv[1]
x = np.fromfile(os.path.join(directory, "x.f32"), dtype=np.float32).reshape(-1, 32)
for name, qtype in (("q8_0", GGMLQuantizationType.Q8_0), ("q4_0", GGMLQuantizationType.Q4_0)):
    with np.errstate(over="ignore"):  # a scale past fp16's range is inf, as in llama.cpp
        quantize(x, qtype).tofile(os.path.join(directory, "gguf." + name))
    ours = np.fromfile(os.path.join(directory, "ours." + name), dtype=np.uint8).reshape(x.shape[0], -1)
    with np.errstate(invalid="ignore"):
        dequantize(ours, qtype).astype(np.float32).tofile(os.path.join(directory, f"gguf_of_ours.{name}.f32"))
