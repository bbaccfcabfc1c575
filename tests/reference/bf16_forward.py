"""PyTorch's bf16 forward of the reference model: the peer for dtrain's bf16 forward.

Usage: /usr/bin/python3 bf16_forward.py IN.safetensors OUT.safetensors

IN holds the parameters under dtrain's names, `tokens` (B, T) and the model description in
its metadata, as for transformer_reference.py. The model is cast to bfloat16 as a whole
(model.to(torch.bfloat16)): weights and every activation are stored in bf16, and PyTorch's CPU
kernels compute each op in fp32 and round its output, as dtrain's bf16 storage does. OUT gets
`logits` (B, T, V) in f32.
"""
import sys

import torch

import safetensors_io
from transformer_reference import Description, Transformer


def main(in_path, out_path):
    inputs, meta = safetensors_io.load(in_path)
    model = Transformer(Description(meta))
    with torch.no_grad():
        for name, p in model.named_dtrain_parameters():
            p.copy_(inputs[name])
        model = model.to(torch.bfloat16)
        logits = model(inputs["tokens"].long())
    safetensors_io.save(out_path, {"logits": logits.float()})


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
