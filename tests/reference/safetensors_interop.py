"""Interoperability of ckpt/safetensors with the `safetensors` package (the version pinned in
scripts/python-requirements.txt): the package reads a file dtrain wrote, bit for bit, and writes
one for dtrain to read.

usage: safetensors_interop.py IN OUT

IN, written by dtrain, must hold exactly TENSORS (one per dtype dtrain reads and writes, and a
0-d and an empty tensor) with the metadata DTRAIN_METADATA. Each tensor's bytes are compared
with the same values encoded here, independently of dtrain: by numpy, by PyTorch for BF16 (numpy
has no bfloat16), and by hand for the fp8 formats, which neither numpy nor PyTorch 1.13 has. The
package reads each tensor twice: with its own parser (safetensors.deserialize: dtype name,
shape, raw bytes), which covers every dtype, and with its numpy or PyTorch API where that knows
the dtype (all but fp8, which only PyTorch 2.1 and later loads).
OUT gets the same tensors written by the package's writer (serialize_file, which its numpy and
torch save_file call) with the metadata PYTHON_METADATA.
"""
import sys

import numpy as np
import torch
from safetensors import deserialize, safe_open, serialize_file

INF = float("inf")
# name: (dtype as safetensors names it, shape, values). Float values are exact in their format:
# -0, 1, -2.5, the smallest subnormal, the largest finite value, and -infinity (e4m3fn has none:
# its lowest finite value instead). fp8 is given as bytes: sign, exponent, mantissa.
TENSORS = {
    "f64": ("F64", [3, 2], [-0.0, 1.0, -2.5, 2.0**-1074, 1.7976931348623157e308, -INF]),
    "f32": ("F32", [2, 3], [-0.0, 1.0, -2.5, 2.0**-149, 3.4028234663852886e38, -INF]),
    "bf16": ("BF16", [6], [-0.0, 1.0, -2.5, 2.0**-133, 3.3895313892515355e38, -INF]),
    "f16": ("F16", [1, 2, 3], [-0.0, 1.0, -2.5, 2.0**-24, 65504.0, -INF]),
    # e4m3fn, bias 7: -0 0x80, 1 = 0 0111 000, -2.5 = 1 1000 010, 2^-9 = 0 0000 001,
    # 448 = 0 1111 110, -448
    "f8e4m3": ("F8_E4M3", [2, 3], bytes([0x80, 0x38, 0xC2, 0x01, 0x7E, 0xFE])),
    # e5m2, bias 15: -0 0x80, 1 = 0 01111 00, -2.5 = 1 10000 01, 2^-16 = 0 00000 01,
    # 57344 = 0 11110 11, -inf = 1 11111 00
    "f8e5m2": ("F8_E5M2", [3, 2], bytes([0x80, 0x3C, 0xC1, 0x01, 0x7B, 0xFC])),
    "i8": ("I8", [2, 2], [-128, -1, 0, 127]),
    "i32": ("I32", [5], [-2**31, -1, 0, 1, 2**31 - 1]),
    "i64": ("I64", [3], [-2**63, 0, 2**53 - 1]),
    "u16": ("U16", [3], [0, 1, 2**16 - 1]),
    "u32": ("U32", [3], [0, 1, 2**32 - 1]),
    "scalar": ("F32", [], [0.1]),  # 0.1 rounded to f32
    "empty": ("F32", [0, 4], []),
}
DTRAIN_METADATA = {"origin": "dtrain", "text": "UTF-8: π ≈ 3.14159"}
PYTHON_METADATA = {"origin": "python", "text": "UTF-8: é, 日本"}

# numpy's little-endian dtypes, as the format stores them.
NUMPY = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "I8": np.dtype("i1"),
         "I32": np.dtype("<i4"), "I64": np.dtype("<i8"),
         "U16": np.dtype("<u2"), "U32": np.dtype("<u4")}
# The dtype names safetensors' writer takes (numpy's and PyTorch's).
WRITER_NAMES = {"F64": "float64", "F32": "float32", "BF16": "bfloat16", "F16": "float16",
                "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I8": "int8", "I32": "int32",
                "I64": "int64", "U16": "uint16",
                "U32": "uint32"}


def encoded(dtype, values):
    """The little-endian bytes of `values` in `dtype`."""
    if isinstance(values, bytes):
        return values
    if dtype == "BF16":
        return torch.tensor(values, dtype=torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    return np.array(values, dtype=NUMPY[dtype]).tobytes()


def check_read(path):
    with safe_open(path, framework="np") as f:
        assert f.metadata() == DTRAIN_METADATA, f.metadata()
        assert sorted(f.keys()) == sorted(TENSORS), f.keys()
        for name, (dtype, shape, values) in TENSORS.items():
            if dtype in NUMPY:
                a = f.get_tensor(name)
                assert a.dtype == NUMPY[dtype] and list(a.shape) == shape, (name, a.dtype, a.shape)
                assert a.tobytes() == encoded(dtype, values), (name, a)
    with safe_open(path, framework="pt") as f:
        t = f.get_tensor("bf16")
        assert t.dtype == torch.bfloat16 and list(t.shape) == TENSORS["bf16"][1], (t.dtype, t.shape)
        assert t.view(torch.int16).numpy().astype("<i2").tobytes() == encoded("BF16", TENSORS["bf16"][2]), t
    with open(path, "rb") as f:
        stored = dict(deserialize(f.read()))
    for name, (dtype, shape, values) in TENSORS.items():
        assert (stored[name]["dtype"], stored[name]["shape"]) == (dtype, shape), (name, stored[name])
        assert bytes(stored[name]["data"]) == encoded(dtype, values), (name, bytes(stored[name]["data"]))


def write(path):
    serialize_file({name: {"dtype": WRITER_NAMES[dtype], "shape": shape, "data": encoded(dtype, values)}
                    for name, (dtype, shape, values) in TENSORS.items()}, path, PYTHON_METADATA)


if __name__ == "__main__":
    check_read(sys.argv[1])
    write(sys.argv[2])
