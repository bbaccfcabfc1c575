"""GPT-2 in plain PyTorch: the reference that dtrain's GPT-2 must match.

Usage: /usr/bin/python3 gpt2_reference.py IN.safetensors OUT.safetensors

IN holds the initial parameters under dtrain's names and shapes (weights are (out, in), as
torch.nn.Linear), the inputs `s{step}.mb{k}.tokens` / `.targets`, and in its metadata the model
sizes and the optimizer settings. The reference runs, for each step: forward of every
micro-batch (logits and summed loss recorded), backward of the global-batch mean loss,
global-norm clipping, one AdamW step; and writes everything to OUT:
  s{i}.mb{k}.logits  (B, T, V)    s{i}.mb{k}.loss_sum ()   s{i}.loss ()   s{i}.grad_norm ()
  s{i}.grad.{name}                 s{i}.param.{name}        (after the optimizer step)
  s{i}.exp_avg.{name}   s{i}.exp_avg_sq.{name}     (AdamW's moments after the step)
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_io

IGNORE_INDEX = -100


class Attention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.n_head))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = Mlp(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, n_layer, d_model, n_head, vocab_size, max_seq_len):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(max_seq_len, d_model)
        self.h = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied output embedding

    def named_dtrain_parameters(self):
        """(dtrain name, parameter): dtrain calls the embeddings 'wte' and 'wpe'."""
        for name, p in self.named_parameters():
            yield name.replace("wte.weight", "wte").replace("wpe.weight", "wpe"), p


def main(in_path, out_path):
    inputs, meta = safetensors_io.load(in_path)
    m = {k: float(v) for k, v in meta.items()}
    model = GPT2(int(m["n_layer"]), int(m["d_model"]), int(m["n_head"]), int(m["vocab_size"]),
                 int(m["max_seq_len"]))
    with torch.no_grad():
        for name, p in model.named_dtrain_parameters():
            p.copy_(inputs[name])
    params = dict(model.named_dtrain_parameters())
    decay = [p for n, p in params.items() if p.dim() == 2 and n not in ("wte", "wpe")]
    no_decay = [p for n, p in params.items() if not (p.dim() == 2 and n not in ("wte", "wpe"))]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": m["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=m["lr"], betas=(m["beta1"], m["beta2"]), eps=m["eps"], foreach=False)

    out = {}
    for step in range(int(m["steps"])):
        mbs = [(inputs[f"s{step}.mb{k}.tokens"].long(), inputs[f"s{step}.mb{k}.targets"].long())
               for k in range(int(m["micro_batches"]))]
        count = sum(int((t != IGNORE_INDEX).sum()) for _, t in mbs)
        optimizer.zero_grad()
        total = 0.0
        for k, (tokens, targets) in enumerate(mbs):
            logits = model(tokens)
            loss_sum = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX,
                                       reduction="sum")
            (loss_sum / count).backward()
            out[f"s{step}.mb{k}.logits"] = logits.detach()
            out[f"s{step}.mb{k}.loss_sum"] = loss_sum.detach().reshape(())
            total += loss_sum.item()
        out[f"s{step}.loss"] = torch.tensor(total / count)
        for name, p in params.items():
            out[f"s{step}.grad.{name}"] = p.grad.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), m["max_grad_norm"])
        out[f"s{step}.grad_norm"] = norm.detach().reshape(())
        optimizer.step()
        for name, p in params.items():
            out[f"s{step}.param.{name}"] = p.detach().clone()
            out[f"s{step}.exp_avg.{name}"] = optimizer.state[p]["exp_avg"].clone()
            out[f"s{step}.exp_avg_sq.{name}"] = optimizer.state[p]["exp_avg_sq"].clone()
    safetensors_io.save(out_path, out)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
