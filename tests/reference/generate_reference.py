"""Hugging Face transformers' greedy generation as the reference for dtrain's (train/generate.h).

usage:
  generate_reference.py DIR PROMPT MAX_NEW_TOKENS OUT
      loads the model saved in DIR (hf_reference.py make), generates MAX_NEW_TOKENS tokens after
      the token ids PROMPT (comma-separated) with model.generate(do_sample=False), and writes
      the new ids, comma-separated, to OUT. End-of-sequence stopping is turned off (a random
      model's config names an eos id that greedy decoding may well reach), so exactly
      MAX_NEW_TOKENS come out. Prints the smallest gap between the best and second-best logit
      over the steps: how far from a tie, and so how robust to f32 rounding, each choice was.
"""
import sys

import torch
from transformers import AutoModelForCausalLM


def main(directory, prompt, max_new_tokens, out):
    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager", torch_dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0  # one sequence: never used, but silences a warning
    ids = torch.tensor([[int(t) for t in prompt.split(",")]])
    with torch.no_grad():
        result = model.generate(ids, do_sample=False, max_new_tokens=int(max_new_tokens), min_new_tokens=None,
                                output_scores=True, return_dict_in_generate=True, use_cache=True)
    new = result.sequences[0, ids.shape[1]:].tolist()
    assert len(new) == int(max_new_tokens), new
    margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in result.scores]
    print(f"greedy: {len(new)} tokens, smallest top-2 logit gap {min(margins):.3g}")
    with open(out, "w") as f:
        f.write(",".join(str(t) for t in new))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    main(*sys.argv[1:5])
