"""Top-k routing as the Hugging Face models compute it: the reference for kernels/moe_route.h.

Usage: /usr/bin/python3 moe_route_reference.py IN.safetensors OUT.safetensors

IN's metadata "cases" lists comma-separated case names; for each case C it holds
  C.logits (N, E) f32, C.dweights (N, k) f32, optionally C.bias (E) f32 and C.dscores (N, E) f32,
and the metadata C.routing: "mixtral", "qwen" or "deepseek_v3", and C.top_k, C.route_scale.
OUT receives, per case, C.scores (N, E) f32, C.experts (N, k) int32, C.weights (N, k) f32 and
C.dlogits (N, E) f32: the gradient of sum(weights * dweights) + sum(scores * dscores).

The three routings are the models' own code, in float32 as they run it:
  mixtral      MixtralSparseMoeBlock: softmax in float, torch.topk, weights /= their sum
  qwen         Qwen2MoeSparseMoeBlock with norm_topk_prob False (Qwen1.5-MoE; OLMoE is the same):
               softmax, torch.topk, no renormalization
  deepseek_v3  DeepseekV3TopkRouter (n_group = topk_group = 1, so no group limit): sigmoid; the
               choice by torch.topk of scores + e_score_correction_bias (sorted=False); the weights
               gathered from the scores, divided by their sum + 1e-20, times routed_scaling_factor
DeepSeek-V3's topk is unsorted: its experts are put in descending order of choice here (the
weights move with them), the order kernels/moe_route.h returns.
"""
import sys

import torch

from safetensors_io import load, save


def route(kind, logits, bias, top_k, route_scale):
    if kind in ("mixtral", "qwen"):
        scores = torch.softmax(logits, dim=1, dtype=torch.float)
        weights, experts = torch.topk(scores, top_k, dim=-1)
        if kind == "mixtral":
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return scores, experts, weights * route_scale
    assert kind == "deepseek_v3", kind
    scores = logits.sigmoid()
    choice = scores.detach() + bias.unsqueeze(0)
    experts = torch.topk(choice, k=top_k, dim=-1, sorted=False)[1]
    order = torch.argsort(choice.gather(1, experts), dim=-1, descending=True)
    experts = experts.gather(1, order)
    weights = scores.gather(1, experts)
    weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return scores, experts, weights * route_scale


def main():
    tensors, metadata = load(sys.argv[1])
    out = {}
    for case in metadata["cases"].split(","):
        logits = tensors[case + ".logits"].clone().requires_grad_(True)
        bias = tensors.get(case + ".bias")
        scores, experts, weights = route(metadata[case + ".routing"], logits, bias, int(metadata[case + ".top_k"]),
                                         float(metadata[case + ".route_scale"]))
        loss = (weights * tensors[case + ".dweights"]).sum()
        if case + ".dscores" in tensors:
            loss = loss + (scores * tensors[case + ".dscores"]).sum()
        loss.backward()
        out[case + ".scores"] = scores.detach()
        out[case + ".experts"] = experts.to(torch.int32)
        out[case + ".weights"] = weights.detach()
        out[case + ".dlogits"] = logits.grad
    save(sys.argv[2], out)


if __name__ == "__main__":
    main()
