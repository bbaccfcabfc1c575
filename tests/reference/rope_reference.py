"""Hugging Face's rotary-embedding frequencies and tables: the reference for kernels/rope.h.

Usage: /usr/bin/python3 rope_reference.py OUT_DIR HEAD_SIZE THETA FACTOR LOW_FREQ_FACTOR
           HIGH_FREQ_FACTOR ORIGINAL_MAX_SEQ_LEN POSITIONS

Calls transformers itself (the pinned version in scripts/python-requirements.txt): its
ROPE_INIT_FUNCTIONS "default" and "llama3" and LlamaRotaryEmbedding, all in float32.
POSITIONS is comma-separated. The script writes raw little-endian float32 to OUT_DIR:
  inv_freq.f32         (HEAD_SIZE/2,) unscaled: 1 / THETA^(2i / HEAD_SIZE)
  inv_freq_llama3.f32  (HEAD_SIZE/2,) with rope_type "llama3" scaling
  cos.f32, sin.f32     (len(POSITIONS), HEAD_SIZE) of the scaled frequencies, as
                       LlamaRotaryEmbedding returns them (the two halves repeat)
"""
import os
import sys

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding


def write(path, t):
    t.contiguous().to(torch.float32).numpy().astype("<f4").tofile(path)


def main():
    out_dir = sys.argv[1]
    head_size = int(sys.argv[2])
    theta, factor, low, high = (float(v) for v in sys.argv[3:7])
    original = int(sys.argv[7])
    positions = torch.tensor([[int(p) for p in sys.argv[8].split(",")]], dtype=torch.int64)

    def config(scaling):
        return LlamaConfig(hidden_size=head_size, num_attention_heads=1, rope_theta=theta,
                           max_position_embeddings=max(2 * original, int(positions.max()) + 1), rope_scaling=scaling)

    plain = config(None)
    scaled = config({"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
                     "original_max_position_embeddings": original})
    inv_freq, _ = ROPE_INIT_FUNCTIONS["default"](plain, None)
    inv_freq_llama3, _ = ROPE_INIT_FUNCTIONS["llama3"](scaled, None)
    cos, sin = LlamaRotaryEmbedding(config=scaled)(torch.zeros(1, dtype=torch.float32), positions)
    write(os.path.join(out_dir, "inv_freq.f32"), inv_freq)
    write(os.path.join(out_dir, "inv_freq_llama3.f32"), inv_freq_llama3)
    write(os.path.join(out_dir, "cos.f32"), cos[0])
    write(os.path.join(out_dir, "sin.f32"), sin[0])


if __name__ == "__main__":
    main()
