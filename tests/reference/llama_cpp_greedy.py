"""llama.cpp (through llama-cpp-python, /opt/dtrain-llama-cpp) running a GGUF file that dtrain
exported, for cli/llama_cpp_cli_test.cpp: tokenizes the prompt with the file's own tokenizer,
then picks N tokens greedily, and writes OUT (JSON): the prompt's ids, the tokens picked, and the
logits each pick was made from (N rows of the vocabulary).

usage: llama_cpp_greedy.py MODEL.gguf PROMPT N OUT
"""
import json
import sys

import numpy as np
from llama_cpp import Llama

model, prompt, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
llm = Llama(model_path=model, n_ctx=64, n_batch=64, n_threads=1, logits_all=True, verbose=False)
prompt_tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=False)
llm.eval(prompt_tokens)
tokens, logits = [], []
for _ in range(n):
    row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    token = int(row.argmax())
    tokens.append(token)
    logits.append(row.tolist())
    llm.eval([token])
with open(out, "w") as f:
    json.dump({"prompt_tokens": prompt_tokens, "tokens": tokens, "logits": logits}, f)
