"""What 16-bit storage does to quantization-aware training's values (docs/training.md,
Quantization): with train.precision = bf16 or f16 the quantizer reads the 16-bit compute copy of
a weight, where the exporter reads the f32 master. For each format, the share of weights that train
on another quantization level than the file's (|fake_quantize(round16(w)) - fake_quantize(w)|
over half a level); the share whose training value, fake_quantize(round16(w)) rounded to 16
bits, differs at all from the file's value rounded the same way, round16(fake_quantize(w)); and
how many of the file's values 16 bits cannot hold.

    /usr/bin/python3 bench/qat_storage_rounding.py

Weights: 1024 x 1024 drawn from N(0, 0.02), the scale of an initialized layer. Q8_0 and Q4_0 are
the gguf package's quantizers, which equal dtrain's bit for bit (kernels/weight_quant_test.cpp);
int8 is kernels/weight_quant.h's rule in numpy (roundf: half away from zero).
"""
import numpy as np
from gguf import GGMLQuantizationType, dequantize, quantize


def bf16(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # round to nearest even
    return bits.astype(np.uint32).view(np.float32)


def f16(x):
    return x.astype(np.float16).astype(np.float32)


def int8(x):
    scale = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
    inverse = np.where(scale != 0, np.float32(1) / scale, np.float32(0)).astype(np.float32)
    product = (x * inverse).astype(np.float32)
    return (np.sign(product) * np.floor(np.abs(product) + 0.5) * scale).astype(np.float32)


def gguf_format(qtype):
    return lambda x: dequantize(quantize(x, qtype), qtype).astype(np.float32).reshape(x.shape)


weights = (np.random.default_rng(0).standard_normal((1024, 1024)) * 0.02).astype(np.float32)
formats = {"int8": int8, "q8_0": gguf_format(GGMLQuantizationType.Q8_0),
           "q4_0": gguf_format(GGMLQuantizationType.Q4_0)}
# A level's width: the row's (int8) or the block's (Q8_0, Q4_0) scale.
levels = {"int8": lambda x: np.abs(x).max(axis=1, keepdims=True) / 127,
          "q8_0": lambda x: np.repeat(np.abs(x.reshape(-1, 32)).max(axis=1) / 127, 32).reshape(x.shape),
          "q4_0": lambda x: np.repeat(np.abs(x.reshape(-1, 32)).max(axis=1) / 8, 32).reshape(x.shape)}
print("| storage | format | on another level | training value unlike the file's | file values 16 bits cannot hold |")
print("| --- | --- | --- | --- | --- |")
for storage, round16 in (("bf16", bf16), ("f16", f16)):
    for name, fake_quantize in formats.items():
        exact = fake_quantize(weights)
        training, file16 = round16(fake_quantize(round16(weights))), round16(exact)
        other_level = np.abs(fake_quantize(round16(weights)) - exact) > 0.5 * levels[name](weights)
        print("| %s | %s | %.2f%% | %.1f%% | %.1f%% |" % (storage, name, 100 * np.mean(other_level),
                                                      100 * np.mean(training != file16),
                                                      100 * np.mean(file16 != exact)))
