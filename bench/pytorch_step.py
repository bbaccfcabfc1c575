"""PyTorch's CPU training step on the same model shape as `dtrain bench step`: the peer.

Usage: /usr/bin/python3 bench/pytorch_step.py --family gpt2 --n-layer 4 --d-model 768 --n-head 12
           --vocab-size 50257 --max-seq-len 1024 --batch 8 --seq 256 --steps 10 --warmup 2 --threads 2
       (llama also takes --n-kv-head, --ffn-hidden, --tied, --rope-theta, --rope-scaling-factor)

The model is tests/reference/transformer_reference.py's (the one the equivalence tests check),
run as fast as PyTorch 1.13 on a CPU allows: fp32, or with --precision bf16 under
torch.autocast (bf16 matrix products through oneDNN, fp32 weights and optimizer), foreach AdamW,
gradients set to None instead of zeroed, the same thread count. (torch.compile and scaled_dot_product_attention arrived in
PyTorch 2.0; Debian's 1.13 has neither.) Prints one line per timed step and a final
`result tokens_per_s=...` line.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from transformer_reference import Description, Transformer  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--family", choices=["gpt2", "llama"], default="gpt2")
    for name, default in [("n-layer", 4), ("d-model", 768), ("n-head", 12), ("n-kv-head", 0), ("ffn-hidden", 0),
                          ("vocab-size", 50257), ("max-seq-len", 1024), ("tied", 1), ("batch", 8), ("seq", 256),
                          ("steps", 10), ("warmup", 2), ("threads", 1)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--rope-theta", type=float, default=10000)
    p.add_argument("--rope-scaling-factor", type=float, default=0)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: torch.autocast on the CPU (bf16 matmuls, fp32 weights and optimizer)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    description = Description({
        "family": a.family, "n_layer": a.n_layer, "d_model": a.d_model, "n_head": a.n_head,
        "n_kv_head": a.n_kv_head or a.n_head, "ffn_hidden": a.ffn_hidden or 4 * a.d_model,
        "vocab_size": a.vocab_size, "max_seq_len": a.max_seq_len, "tied": str(a.tied), "norm_eps": 1e-5,
        "rope_theta": a.rope_theta, "rope_scaling_factor": a.rope_scaling_factor, "rope_low_freq_factor": 1,
        "rope_high_freq_factor": 4, "rope_original_max_seq_len": 8192})
    model = Transformer(description)
    for name, param in model.named_parameters():
        if param.dim() == 2:
            torch.nn.init.normal_(param, std=0.02)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    tokens = torch.randint(0, a.vocab_size, (a.batch, a.seq))
    targets = torch.randint(0, a.vocab_size, (a.batch, a.seq))
    n_tokens = a.batch * a.seq
    print(f"# pytorch {torch.__version__} step: {a.family} n_layer={a.n_layer} d_model={a.d_model} "
          f"n_head={a.n_head} n_kv_head={description.n_kv_head} vocab={a.vocab_size}, batch {a.batch} x seq {a.seq}, "
          f"{a.precision}, {torch.get_num_threads()} threads")
    times = []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        seconds = time.perf_counter() - start
        if i >= a.warmup:
            times.append(seconds)
            print(f" {i - a.warmup + 1:6d} {seconds * 1e3:12.2f} {n_tokens / seconds:14.1f}")
    median = statistics.median(times)
    print(f"result tokens_per_s={n_tokens / median:.1f} median_step_ms={median * 1e3:.2f}")


if __name__ == "__main__":
    main()
