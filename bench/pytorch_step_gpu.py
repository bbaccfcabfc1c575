"""PyTorch's training step on a GPU, at its best, for the shapes `dtrain bench step --device cuda`
times: the peer of bench/step_vs_pytorch_gpu.sh.

Usage: python3 bench/pytorch_step_gpu.py --family gpt2 --n-layer 12 --d-model 768 --n-head 12
           --vocab-size 50257 --max-seq-len 1024 --batch 8 --seq 1024 --steps 20 --warmup 5
       (llama also takes --n-kv-head, --ffn-hidden, --rope-theta; --precision bf16 | fp32)

At its best means: torch.compile of the whole model together with its loss (as nanoGPT and
torchtitan's loss-in-the-graph do: the compiler fuses the logits' upcast into the cross-entropy
instead of materializing fp32 logits), in the default mode or --mode max-autotune (which also tries
Triton GEMMs and replays CUDA graphs), F.scaled_dot_product_attention with a causal mask (the flash kernel in bf16), bf16 autocast with fp32 weights and optimizer state (what dtrain's
bf16 precision keeps), fused AdamW, gradients set to None, TF32 off for fp32 (dtrain's fp32
GEMMs do not use TF32). The model is the same function as dtrain's: GPT-2 (LayerNorm, tanh GELU,
learned positions, biases, tied output) or Llama (RMSNorm, rotary, grouped-query attention,
SwiGLU, no biases, tied output; rotary without Llama 3's frequency scaling, which changes no
work). Prints one line per timed step and `result tokens_per_s=...`.
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, a, bias):
        super().__init__()
        self.nh, self.nkv, self.hs = a.n_head, a.n_kv_head, a.d_model // a.n_head
        self.qkv = nn.Linear(a.d_model, (self.nh + 2 * self.nkv) * self.hs, bias=bias)
        self.proj = nn.Linear(a.d_model, a.d_model, bias=bias)

    def forward(self, x, rope):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([self.nh * self.hs, self.nkv * self.hs, self.nkv * self.hs], dim=-1)
        q = q.view(B, T, self.nh, self.hs).transpose(1, 2)
        k = k.view(B, T, self.nkv, self.hs).transpose(1, 2)
        v = v.view(B, T, self.nkv, self.hs).transpose(1, 2)
        if rope is not None:
            q, k = rope(q), rope(k)
        if self.nkv != self.nh:
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class Rotary:
    def __init__(self, head_size, seq, theta, device):
        inv = 1.0 / theta ** (torch.arange(0, head_size, 2, device=device).float() / head_size)
        angles = torch.outer(torch.arange(seq, device=device).float(), inv)
        self.cos, self.sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)

    def __call__(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        T = x.shape[-2]
        return x * self.cos[:T] + rotated * self.sin[:T]


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        gpt2 = a.family == "gpt2"
        norm = (lambda: nn.LayerNorm(a.d_model)) if gpt2 else (lambda: nn.RMSNorm(a.d_model, eps=1e-5))
        self.gpt2, self.ln_1, self.ln_2 = gpt2, norm(), norm()
        self.attn = Attention(a, bias=gpt2)
        self.fc = nn.Linear(a.d_model, a.ffn_hidden * (1 if gpt2 else 2), bias=gpt2)
        self.mlp_proj = nn.Linear(a.ffn_hidden, a.d_model, bias=gpt2)

    def forward(self, x, rope):
        x = x + self.attn(self.ln_1(x), rope)
        h = self.fc(self.ln_2(x))
        if self.gpt2:
            h = F.gelu(h, approximate="tanh")
        else:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        return x + self.mlp_proj(h)


class Model(nn.Module):
    def __init__(self, a, device):
        super().__init__()
        self.wte = nn.Embedding(a.vocab_size, a.d_model)
        self.wpe = nn.Embedding(a.max_seq_len, a.d_model) if a.family == "gpt2" else None
        self.rope = None if a.family == "gpt2" else Rotary(a.d_model // a.n_head, a.max_seq_len, a.rope_theta, device)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.n_layer))
        self.ln_f = nn.LayerNorm(a.d_model) if a.family == "gpt2" else nn.RMSNorm(a.d_model, eps=1e-5)

    def forward(self, tokens, targets):
        x = self.wte(tokens)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x, self.rope)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied output
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--family", choices=["gpt2", "llama"], default="gpt2")
    for name, default in [("n-layer", 12), ("d-model", 768), ("n-head", 12), ("n-kv-head", 0), ("ffn-hidden", 0),
                          ("vocab-size", 50257), ("max-seq-len", 1024), ("batch", 8), ("seq", 1024), ("steps", 20),
                          ("warmup", 5)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--rope-theta", type=float, default=500000)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--no-compile", action="store_true", help="eager mode (to see what torch.compile gives)")
    p.add_argument("--mode", choices=["default", "max-autotune"], default="default", help="torch.compile's mode")
    a = p.parse_args()
    a.n_kv_head = a.n_kv_head or a.n_head
    a.ffn_hidden = a.ffn_hidden or 4 * a.d_model
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = Model(a, device).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_model = model if a.no_compile else torch.compile(model, mode=None if a.mode == "default" else a.mode)
    tokens = torch.randint(0, a.vocab_size, (a.batch, a.seq), device=device)
    targets = torch.randint(0, a.vocab_size, (a.batch, a.seq), device=device)
    n_tokens = a.batch * a.seq
    print(f"# pytorch {torch.__version__} on {torch.cuda.get_device_name()}: {a.family} n_layer={a.n_layer} "
          f"d_model={a.d_model} n_head={a.n_head} n_kv_head={a.n_kv_head} vocab={a.vocab_size}, batch {a.batch} x "
          f"seq {a.seq}, {a.precision}, {'eager' if a.no_compile else 'torch.compile mode ' + a.mode}")
    times = []
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = step_model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if i == 0:
            print(f"# first step (compilation included): {seconds:.1f} s")
        if i >= a.warmup:
            times.append(seconds)
            print(f" {i - a.warmup + 1:6d} {seconds * 1e3:12.2f} {n_tokens / seconds:14.1f}")
    median = statistics.median(times)
    print(f"result tokens_per_s={n_tokens / median:.1f} median_step_ms={median * 1e3:.2f} "
          f"peak_memory_gib={torch.cuda.max_memory_allocated() / 2**30:.2f}")


if __name__ == "__main__":
    main()
