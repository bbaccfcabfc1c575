"""PyTorch training in bf16 or fp16 with dtrain's mixed-precision recipe: the peer for dtrain's
16-bit training.

Usage: /usr/bin/python3 mixed_precision_reference.py IN.safetensors OUT.safetensors

IN as for transformer_reference.py (initial f32 parameters, `s{step}.mb{k}.tokens` / `.targets`,
model and optimizer settings in the metadata), plus in its metadata `precision` (bf16 or f16)
and the loss scaler's settings: loss_scale (the initial scale), growth_factor, backoff_factor,
growth_interval (bf16 passes scale 1 and an interval no run here reaches: no scaling).

The recipe (dtrain's, model/transformer.h; Micikevicius et al., "Mixed Precision Training"):
AdamW keeps f32 master weights; before each step they are rounded into a 16-bit copy of the
model, whose forward and backward store every activation and activation gradient in 16 bits.
The loss is taken in f32 from the 16-bit logits and multiplied by the loss scale, and its
gradient is rounded once as it is stored over the logits. The weight gradients of each
micro-batch are added into f32 accumulators; a step whose gradients hold inf or NaN is skipped
and the scale backed off; otherwise the gradients are divided by the scale, clipped by their
global norm and applied to the master weights, and after growth_interval applied steps in a row
the scale grows.

bf16 runs PyTorch's own bf16 model (model.to(torch.bfloat16)), whose CPU kernels compute each op
in f32 and round its result, as dtrain's do, where oneDNN runs its bf16 GEMMs (AVX-512 BF16, AMX).
Without those units PyTorch 1.13's own bf16 GEMM with a transposed operand (the weight gradients')
accumulates in bf16 (on an AVX2 EPYC, 7,486 of 9,216 elements of a 192 x 48 weight gradient
differ from the f32 product rounded once): there, as for fp16, the model runs under RoundedKernels.
PyTorch 1.13 has no CPU fp16 kernels ("addmm_impl_cpu_" not implemented for 'Half', and so on for
layer_norm, softmax, gelu, silu), so the fp16 model always runs under RoundedKernels, which
computes every op on 16-bit tensors in f32 and rounds its 16-bit results: what a GPU's kernels do. Where the model itself asks for f32 (the statistics of RMSNorm, the
rotary products) both stay in f32, and so does a mixture of experts' router, as dtrain's. One
difference from dtrain remains: the 16-bit model's weight gradients (but the routers') are rounded
to 16 bits once per micro-batch before they reach the f32 accumulators, where dtrain's kernels
accumulate them in f32.

OUT, for every step i: s{i}.mb{k}.logits (B, T, V); s{i}.loss ();
s{i}.loss_scale (), the scale the step's backward used; s{i}.applied () i32, 0 for a skipped step;
and for an applied step s{i}.grad_norm (), s{i}.grad.{name} (unscaled, before clipping),
s{i}.param.{name} (the master weights after the update) and s{i}.exp_avg.{name},
s{i}.exp_avg_sq.{name} (AdamW's moments after the update).
"""
import contextlib
import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import safetensors_io
from transformer_reference import IGNORE_INDEX, Description, MoeMlp, Transformer, adamw, record_update


class RoundedKernels(TorchDispatchMode):
    """Runs every op that reads a tensor of `dtype` (fp16 or bf16) in f32 and rounds its result to
    `dtype` (to nearest even, overflowing to inf): a GPU kernel's numerics on a CPU without such
    kernels. An op that also reads an f32 tensor with dimensions gives f32, as type promotion does;
    views and conversions run as they are."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        if (func is torch.ops.aten._to_copy.default or is_view
                or not any(t.dtype == self.dtype for t in tensors)):
            return func(*args, **kwargs)
        if schema.is_mutable:  # none in this model's passes; it would need its result written back
            raise NotImplementedError(f"{func} writes a {self.dtype} tensor in place")
        promotes = any(t.dim() > 0 and t.dtype in (torch.float32, torch.float64) for t in tensors)

        def widen(t):
            if t is self.dtype:  # a dtype argument (softmax's backward takes its input's)
                return torch.float32
            return t.float() if isinstance(t, torch.Tensor) and t.dtype == self.dtype else t

        def narrow(t):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and not promotes:
                return t.to(self.dtype)
            return t

        return tree_map(narrow, func(*tree_map(widen, args), **tree_map(widen, kwargs)))


def bf16_gemms_round_once():
    """Whether PyTorch's bf16 CPU GEMMs compute in f32 and round once on this processor, for the
    transposed product a weight gradient takes."""
    g = torch.Generator().manual_seed(0)
    a, d = torch.randn(74, 48, generator=g).bfloat16(), torch.randn(74, 192, generator=g).bfloat16()
    return torch.equal(d.t() @ a, (d.float().t() @ a.float()).bfloat16())


def main(in_path, out_path):
    inputs, meta = safetensors_io.load(in_path)
    m = {k: float(v) for k, v in meta.items() if k not in ("family", "precision")}
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[meta["precision"]]
    own_kernels = dtype == torch.bfloat16 and bf16_gemms_round_once()
    kernels = contextlib.nullcontext() if own_kernels else RoundedKernels(dtype)

    model = Transformer(Description(meta))
    master = {}
    with torch.no_grad():
        for name, p in model.named_dtrain_parameters():
            master[name] = torch.nn.Parameter(inputs[name].clone())
    model = model.to(dtype)
    # dtrain's router computes in f32 from its 16-bit weight widened, and takes that weight's
    # gradient in f32 (model/moe_mlp.h): here the routers' weights are f32 holding the 16-bit
    # rounding of the master, so that their gradients are not rounded to 16 bits either. The
    # balancing bias (f32) and the load counts (f64) keep their types too.
    for module in model.modules():
        if isinstance(module, MoeMlp):
            module.router.float()
            module.expert_bias, module.loads = module.expert_bias.float(), module.loads.double()
    weights = dict(model.named_dtrain_parameters())
    optimizer = adamw(master, m)

    scale, applied_in_a_row = m["loss_scale"], 0
    out = {}
    for step in range(int(m["steps"])):
        with torch.no_grad():
            for name, w in weights.items():
                w.copy_(master[name].to(dtype))  # rounds to nearest even
        mbs = [(inputs[f"s{step}.mb{k}.tokens"].long(), inputs[f"s{step}.mb{k}.targets"].long())
               for k in range(int(m["micro_batches"]))]
        count = sum(int((t != IGNORE_INDEX).sum()) for _, t in mbs)
        grads = {name: torch.zeros_like(p) for name, p in master.items()}
        total = 0.0
        for k, (tokens, targets) in enumerate(mbs):
            with kernels:
                logits16 = model(tokens)
            logits = logits16.detach().float().requires_grad_()
            loss_sum = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX,
                                       reduction="sum")
            (loss_sum * (scale / count)).backward()
            with kernels:
                logits16.backward(logits.grad.to(dtype))
            for name, w in weights.items():
                grads[name] += w.grad.float()
                w.grad = None
            out[f"s{step}.mb{k}.logits"] = logits.detach()
            total += loss_sum.item()
        out[f"s{step}.loss"] = torch.tensor(total / count)
        out[f"s{step}.loss_scale"] = torch.tensor(scale, dtype=torch.float32)
        applied = all(bool(torch.isfinite(g).all()) for g in grads.values())
        out[f"s{step}.applied"] = torch.tensor(int(applied), dtype=torch.int32)
        if not applied:
            scale, applied_in_a_row = scale * m["backoff_factor"], 0
            continue
        for name, p in master.items():
            p.grad = grads[name] / scale
            out[f"s{step}.grad.{name}"] = p.grad.clone()
        norm = torch.nn.utils.clip_grad_norm_(master.values(), m["max_grad_norm"])
        out[f"s{step}.grad_norm"] = norm.detach().reshape(())
        optimizer.step()
        record_update(out, step, master, optimizer)
        applied_in_a_row += 1
        if applied_in_a_row == int(m["growth_interval"]):
            scale, applied_in_a_row = scale * m["growth_factor"], 0
    safetensors_io.save(out_path, out)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
