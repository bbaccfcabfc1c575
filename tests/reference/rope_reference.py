"""Hugging Face's rotary-embedding frequencies and tables: the reference for kernels/rope.h.

Usage: /usr/bin/python3 rope_reference.py OUT_DIR HEAD_SIZE THETA FACTOR LOW_FREQ_FACTOR
           HIGH_FREQ_FACTOR ORIGINAL_MAX_SEQ_LEN POSITIONS

transformers is not installed here, so its two functions are restated from
transformers/modeling_rope_utils.py (_compute_default_rope_parameters and
_compute_llama3_parameters) and its LlamaRotaryEmbedding.forward, in float32 as there.
POSITIONS is comma-separated. The script writes raw little-endian float32 to OUT_DIR:
  inv_freq.f32         (HEAD_SIZE/2,) unscaled: 1 / THETA^(2i / HEAD_SIZE)
  inv_freq_llama3.f32  (HEAD_SIZE/2,) with rope_type "llama3" scaling
  cos.f32, sin.f32     (len(POSITIONS), HEAD_SIZE) emb.cos(), emb.sin() of the scaled frequencies,
                       emb = cat(freqs, freqs), freqs = outer(positions.float(), inv_freq)
"""
import math
import os
import sys

import torch


def default_inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def llama3_inv_freq(inv_freq, factor, low_freq_factor, high_freq_factor, old_context_len):
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def write(path, t):
    t.contiguous().to(torch.float32).numpy().astype("<f4").tofile(path)


def main():
    out_dir = sys.argv[1]
    head_size = int(sys.argv[2])
    theta, factor, low, high = (float(v) for v in sys.argv[3:7])
    original = int(sys.argv[7])
    positions = torch.tensor([int(p) for p in sys.argv[8].split(",")], dtype=torch.int64)

    inv_freq = default_inv_freq(theta, head_size)
    scaled = llama3_inv_freq(inv_freq, factor, low, high, original)
    freqs = torch.outer(positions.float(), scaled)
    emb = torch.cat((freqs, freqs), dim=-1)
    write(os.path.join(out_dir, "inv_freq.f32"), inv_freq)
    write(os.path.join(out_dir, "inv_freq_llama3.f32"), scaled)
    write(os.path.join(out_dir, "cos.f32"), emb.cos())
    write(os.path.join(out_dir, "sin.f32"), emb.sin())


if __name__ == "__main__":
    main()
