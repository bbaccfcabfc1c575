"""PyTorch's fp32 <-> bf16/fp16 conversions: the reference that core/dtype.h must match bit for bit.

Usage: /usr/bin/python3 dtype_reference.py IN.f32 OUT_DIR

IN.f32 holds raw little-endian float32 values. The script writes to OUT_DIR:
  bf16.u16          x.to(torch.bfloat16) for every value of IN, as raw bits
  f16.u16           x.to(torch.float16) for every value of IN, as raw bits
  bf16_decoded.u32  every bf16 bit pattern 0..65535, in order, .to(torch.float32), as raw bits
  f16_decoded.u32   every fp16 bit pattern 0..65535, in order, .to(torch.float32), as raw bits
"""
import os
import sys

import numpy as np
import torch


def bits16(t):
    return t.view(torch.int16).numpy().view(np.uint16)


def decoded_bits(dtype):
    patterns = torch.from_numpy(np.arange(65536, dtype=np.uint16).view(np.int16))
    return patterns.view(dtype).to(torch.float32).numpy().view(np.uint32)


def main():
    in_path, out_dir = sys.argv[1], sys.argv[2]
    x = torch.from_numpy(np.fromfile(in_path, dtype="<f4"))
    bits16(x.to(torch.bfloat16)).astype("<u2").tofile(os.path.join(out_dir, "bf16.u16"))
    bits16(x.to(torch.float16)).astype("<u2").tofile(os.path.join(out_dir, "f16.u16"))
    decoded_bits(torch.bfloat16).astype("<u4").tofile(os.path.join(out_dir, "bf16_decoded.u32"))
    decoded_bits(torch.float16).astype("<u4").tofile(os.path.join(out_dir, "f16_decoded.u32"))


if __name__ == "__main__":
    main()
