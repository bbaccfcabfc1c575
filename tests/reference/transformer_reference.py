"""GPT-2 and Llama in plain PyTorch: the reference that dtrain's models must match.

Usage: /usr/bin/python3 transformer_reference.py IN.safetensors OUT.safetensors

IN holds the initial parameters under dtrain's names and shapes (weights are (out, in), as
torch.nn.Linear; llama's mlp.fc stacks the gate rows over the up rows), the inputs
`s{step}.mb{k}.tokens` / `.targets`, and in its metadata the model description (family,
n_layer, d_model, n_head, n_kv_head, ffn_hidden, vocab_size, max_seq_len, tied, qkv_bias, norm_eps,
rope_theta, rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor,
rope_original_max_seq_len, and a mixture of experts' moe_experts (0: dense), moe_expert_hidden,
moe_top_k, moe_sigmoid, moe_renormalize, moe_route_scale, moe_first_dense_layers,
moe_bias_update_rate, moe_aux_loss_coef, moe_z_loss_coef, moe_shared_hidden, moe_shared_gate,
moe_capacity_factor) and the optimizer settings. From those initial parameters the reference trains on its own; for each step it runs: forward of every
micro-batch (logits and summed loss recorded), backward of the global-batch mean loss (plus the
routers' losses, each over the global batch's target count as model/moe_mlp.h defines them),
global-norm clipping, one AdamW step; and writes everything to OUT:
  s{i}.mb{k}.logits  (B, T, V)    s{i}.mb{k}.loss_sum ()   s{i}.loss ()   s{i}.grad_norm ()
  s{i}.grad.{name}                 s{i}.param.{name}        (after the optimizer step)
  s{i}.exp_avg.{name}   s{i}.exp_avg_sq.{name}     (AdamW's moments after the step)
  s{i}.expert_bias.h.{l} (E)      (an expert block's balancing bias after the step)
  s{i}.aux_loss.h.{l} ()  s{i}.z_loss.h.{l} ()   (an expert block's routers' losses in the step)
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_io

IGNORE_INDEX = -100


def rope_inverse_frequencies(head_size, theta, factor=0.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_seq_len=8192):
    """Hugging Face's default rotary frequencies, with its "llama3" scaling when factor > 0
    (transformers/modeling_rope_utils.py, _compute_llama3_parameters)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_size, 2, dtype=torch.int64).float() / head_size))
    if factor <= 0:
        return inv_freq
    low_freq_wavelen = original_max_seq_len / low_freq_factor
    high_freq_wavelen = original_max_seq_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_seq_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, d_model, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        # As Hugging Face's LlamaRMSNorm: statistics in f32 whatever the storage type.
        dtype = x.dtype
        x = x.float()
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)


class Attention(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_size = m.n_head, m.n_kv_head, m.d_model // m.n_head
        bias = m.family == "gpt2"
        self.qkv = nn.Linear(m.d_model, (m.n_head + 2 * m.n_kv_head) * self.head_size, bias=bias or m.qkv_bias)
        if m.qk_norm:
            # OLMoE's: each over all heads' columns, before rotary (transformers' OlmoeAttention).
            self.q_norm = RMSNorm(m.n_head * self.head_size, m.norm_eps)
            self.k_norm = RMSNorm(m.n_kv_head * self.head_size, m.norm_eps)
        self.proj = nn.Linear(m.d_model, m.d_model, bias=bias)

    def forward(self, x, rope):
        B, T, C = x.shape
        HS = self.head_size
        q, k, v = self.qkv(x).split([self.n_head * HS, self.n_kv_head * HS, self.n_kv_head * HS], dim=2)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, self.n_head, HS).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, HS).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, HS).transpose(1, 2)
        if rope is not None:
            # In f32 and rounded once, whatever the storage type (a no-op for f32 models).
            cos, sin = rope
            q = (q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype)
            k = (k.float() * cos + rotate_half(k.float()) * sin).to(k.dtype)
        # Query head h reads key/value head h // (n_head / n_kv_head), as Hugging Face's repeat_kv.
        k = k.repeat_interleave(self.n_head // self.n_kv_head, dim=1)
        v = v.repeat_interleave(self.n_head // self.n_kv_head, dim=1)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.gated = m.family == "llama"
        bias = not self.gated
        self.fc = nn.Linear(m.d_model, (2 if self.gated else 1) * m.ffn_hidden, bias=bias)
        self.proj = nn.Linear(m.ffn_hidden, m.d_model, bias=bias)

    def forward(self, x):
        h = self.fc(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            return self.proj(F.silu(gate) * up)
        return self.proj(F.gelu(h, approximate="tanh"))


class ExpertWeights(nn.Module):
    """One (E, out, in) weight: every expert's copy of a linear layer."""

    def __init__(self, experts, out_features, in_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, out_features, in_features))


class MoeMlp(nn.Module):
    """A mixture of SwiGLU experts: the router in f32, the top k experts of each token by score
    (softmax or sigmoid), their weights renormalized over the k or not and scaled; each expert
    computed on its tokens, its output added with the token's weight, within a capacity of
    ceil(factor · N · k / E) of the micro-batch's N rows each where the factor is set (the
    assignments of largest weight kept, the earlier first among equal ones); and a shared SwiGLU expert
    every token passes through, scaled by sigmoid(u · shared_gate) (computed in f32) where gated
    (Qwen-MoE)."""

    def __init__(self, m):
        super().__init__()
        self.m = m
        self.router = nn.Linear(m.d_model, m.moe_experts, bias=False)
        # DeepSeek-V3's balancing bias, which only chooses, and the step's assignments per expert.
        self.register_buffer("expert_bias", torch.zeros(m.moe_experts), persistent=False)
        self.register_buffer("loads", torch.zeros(m.moe_experts, dtype=torch.float64), persistent=False)
        self.experts = nn.ModuleDict({"fc": ExpertWeights(m.moe_experts, 2 * m.moe_expert_hidden, m.d_model),
                                      "proj": ExpertWeights(m.moe_experts, m.d_model, m.moe_expert_hidden)})
        self.aux_sum = self.z_sum = 0.0
        if m.moe_shared_hidden > 0:
            self.shared = nn.ModuleDict({"fc": nn.Linear(m.d_model, 2 * m.moe_shared_hidden, bias=False),
                                         "proj": nn.Linear(m.moe_shared_hidden, m.d_model, bias=False)})
            if m.moe_shared_gate:
                self.shared_gate = nn.Linear(m.d_model, 1, bias=False)

    def forward(self, x):
        m = self.m
        u = x.reshape(-1, x.shape[-1])
        logits = F.linear(u.float(), self.router.weight.float())
        scores = torch.sigmoid(logits) if m.moe_sigmoid else F.softmax(logits, dim=-1)
        chosen = torch.topk(scores + self.expert_bias, m.moe_top_k, dim=-1).indices
        weights = scores.gather(1, chosen)
        self.loads += torch.bincount(chosen.flatten(), minlength=m.moe_experts).double()
        self.add_router_losses(x.shape[0], x.shape[1], logits, scores, chosen)
        if m.moe_renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights * m.moe_route_scale
        # Each token's weighted sum in f32, rounded once to a 16-bit model's type (as dtrain's
        # combine, kernels/moe_permute.h; Hugging Face's Mixtral rounds after each expert).
        out = torch.zeros(u.shape, dtype=torch.float32)
        capacity = math.ceil(m.moe_capacity_factor * u.shape[0] * m.moe_top_k / m.moe_experts)
        for e in range(m.moe_experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)  # in assignment order
            if m.moe_capacity_factor > 0:
                kept = torch.sort(-weights[token, slot].detach(), stable=True).indices[:capacity]
                token, slot = token[kept], slot[kept]
            gate, up = (u[token] @ self.experts["fc"].weight[e].t()).chunk(2, dim=-1)
            y = (F.silu(gate) * up) @ self.experts["proj"].weight[e].t()
            out = out.index_add(0, token, y.float() * weights[token, slot, None])
        out = out.to(u.dtype)
        if m.moe_shared_hidden > 0:
            gate, up = self.shared["fc"](u).chunk(2, dim=-1)
            h = self.shared["proj"](F.silu(gate) * up)
            g = torch.sigmoid(F.linear(u.float(), self.shared_gate.weight.float())) if m.moe_shared_gate else 1.0
            out = (out.float() + g * h.float()).to(u.dtype)
        return out.view(x.shape)

    def add_router_losses(self, S, T, logits, scores, chosen):
        """The micro-batch's balance loss (per sequence of T tokens: coef · E / (k T) · sum_e
        counts_e · sum of P_e, P the softmax scores or the sigmoid ones normalized, the counts held
        fixed) and z-loss (coef · sum of logsumexp²), before the division by the target count:
        kept in self.router_loss for backward, their values added to the step's sums."""
        m = self.m
        E, k = m.moe_experts, m.moe_top_k
        self.router_loss = torch.zeros(())
        if m.moe_aux_loss_coef > 0:
            p = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20) if m.moe_sigmoid else scores
            counts = F.one_hot(chosen, E).view(S, T * k, E).sum(dim=1).float()
            aux = m.moe_aux_loss_coef * E / (k * T) * (counts * p.view(S, T, E).sum(dim=1)).sum()
            self.router_loss = self.router_loss + aux
            self.aux_sum += aux.item()
        if m.moe_z_loss_coef > 0:
            z = m.moe_z_loss_coef * (torch.logsumexp(logits, dim=-1) ** 2).sum()
            self.router_loss = self.router_loss + z
            self.z_sum += z.item()

    def end_step(self):
        """bias += rate · sign(mean load - load), then a new count."""
        self.expert_bias += self.m.moe_bias_update_rate * torch.sign(self.loads.mean() - self.loads).float()
        self.loads.zero_()
        self.aux_sum = self.z_sum = 0.0


def make_norm(m):
    return nn.LayerNorm(m.d_model, eps=m.norm_eps) if m.family == "gpt2" else RMSNorm(m.d_model, m.norm_eps)


class Block(nn.Module):
    def __init__(self, m, layer):
        super().__init__()
        self.ln_1 = make_norm(m)
        self.attn = Attention(m)
        self.ln_2 = make_norm(m)
        self.mlp = MoeMlp(m) if m.moe_experts > 0 and layer >= m.moe_first_dense_layers else Mlp(m)

    def forward(self, x, rope):
        x = x + self.attn(self.ln_1(x), rope)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        self.wte = nn.Embedding(m.vocab_size, m.d_model)
        if m.family == "gpt2":
            self.wpe = nn.Embedding(m.max_seq_len, m.d_model)
        self.h = nn.ModuleList(Block(m, layer) for layer in range(m.n_layer))
        self.ln_f = make_norm(m)
        if not m.tied:
            self.lm_head = nn.Linear(m.d_model, m.vocab_size, bias=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.wte(tokens)
        rope = None
        if self.m.family == "gpt2":
            x = x + self.wpe(torch.arange(T))
        else:
            m = self.m
            inv_freq = rope_inverse_frequencies(m.d_model // m.n_head, m.rope_theta, m.rope_scaling_factor,
                                                m.rope_low_freq_factor, m.rope_high_freq_factor,
                                                m.rope_original_max_seq_len)
            freqs = torch.outer(torch.arange(T).float(), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            rope = (emb.cos(), emb.sin())
        for block in self.h:
            x = block(x, rope)
        out = self.wte.weight if self.m.tied else self.lm_head.weight
        return self.ln_f(x) @ out.t()

    def named_dtrain_parameters(self):
        """(dtrain name, parameter): dtrain calls the embeddings 'wte', 'wpe' and 'lm_head'."""
        for name, p in self.named_parameters():
            yield {"wte.weight": "wte", "wpe.weight": "wpe", "lm_head.weight": "lm_head"}.get(name, name), p


class Description:
    """The model description from the metadata, with typed fields."""

    def __init__(self, meta):
        self.family = meta["family"]
        for key in ("n_layer", "d_model", "n_head", "n_kv_head", "ffn_hidden", "vocab_size", "max_seq_len",
                    "rope_original_max_seq_len", "moe_experts", "moe_expert_hidden", "moe_top_k",
                    "moe_first_dense_layers", "moe_shared_hidden"):
            setattr(self, key, int(meta[key]))
        for key in ("norm_eps", "rope_theta", "rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                    "moe_route_scale", "moe_bias_update_rate", "moe_aux_loss_coef", "moe_z_loss_coef",
                    "moe_capacity_factor"):
            setattr(self, key, float(meta[key]))
        self.tied = meta["tied"] == "1"
        self.qkv_bias = meta["qkv_bias"] == "1"
        self.qk_norm = meta["qk_norm"] == "1"
        self.moe_sigmoid = meta["moe_sigmoid"] == "1"
        self.moe_renormalize = meta["moe_renormalize"] == "1"
        self.moe_shared_gate = meta["moe_shared_gate"] == "1"


def adamw(params, m):
    """torch's AdamW over {dtrain name: parameter} with dtrain's weight decay: matrices (the experts'
    (E, out, in) too) only, not the embeddings (optim/adamw.h); lr, betas, eps and weight_decay
    from the metadata m."""
    embeddings = ("wte", "wpe", "lm_head")
    decay = [p for n, p in params.items() if p.dim() >= 2 and n not in embeddings]
    no_decay = [p for n, p in params.items() if not (p.dim() >= 2 and n not in embeddings)]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": m["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=m["lr"], betas=(m["beta1"], m["beta2"]), eps=m["eps"], foreach=False)


def record_update(out, step, params, optimizer):
    """Each parameter and both AdamW moments after step `step`, under the names the tests read."""
    for name, p in params.items():
        out[f"s{step}.param.{name}"] = p.detach().clone()
        out[f"s{step}.exp_avg.{name}"] = optimizer.state[p]["exp_avg"].clone()
        out[f"s{step}.exp_avg_sq.{name}"] = optimizer.state[p]["exp_avg_sq"].clone()


def main(in_path, out_path):
    inputs, meta = safetensors_io.load(in_path)
    m = {k: float(v) for k, v in meta.items() if k != "family"}
    model = Transformer(Description(meta))
    with torch.no_grad():
        for name, p in model.named_dtrain_parameters():
            p.copy_(inputs[name])
    params = dict(model.named_dtrain_parameters())
    optimizer = adamw(params, m)

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
            router_loss = sum(b.mlp.router_loss for b in model.h if isinstance(b.mlp, MoeMlp))
            ((loss_sum + router_loss) / count).backward()
            out[f"s{step}.mb{k}.logits"] = logits.detach()
            out[f"s{step}.mb{k}.loss_sum"] = loss_sum.detach().reshape(())
            total += loss_sum.item()
        out[f"s{step}.loss"] = torch.tensor(total / count)
        for name, p in params.items():
            out[f"s{step}.grad.{name}"] = p.grad.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), m["max_grad_norm"])
        out[f"s{step}.grad_norm"] = norm.detach().reshape(())
        optimizer.step()
        record_update(out, step, params, optimizer)
        for layer, block in enumerate(model.h):
            if isinstance(block.mlp, MoeMlp):
                out[f"s{step}.aux_loss.h.{layer}"] = torch.tensor(block.mlp.aux_sum / count)
                out[f"s{step}.z_loss.h.{layer}"] = torch.tensor(block.mlp.z_sum / count)
                block.mlp.end_step()
                out[f"s{step}.expert_bias.h.{layer}"] = block.mlp.expert_bias.clone()
    safetensors_io.save(out_path, out)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
