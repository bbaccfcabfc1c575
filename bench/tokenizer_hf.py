"""Hugging Face tokenizers' encode_batch on the documents of a text file: the peer of
`dtrain bench tokenizer`. Documents are split as dtrain's DocumentReader splits them
(line: each non-empty line; blank-lines: runs of lines between empty lines; file: the whole
file), so both sides encode the same bytes. Threads: RAYON_NUM_THREADS, set by the caller.

    python3 bench/tokenizer_hf.py TOKENIZER_JSON TEXT_FILE SEPARATOR REPS
prints `result mb_per_s=... tokens=...` (the median of REPS timed runs after one warm-up).
"""
import re
import statistics
import sys
import time

from tokenizers import Tokenizer


def documents(text, separator):
    if separator == "file":
        return [text]
    if separator == "line":
        return [line for line in text.split("\n") if line]
    return [doc for doc in re.split(r"\n(?:\n)+", text.strip("\n"))]


def main(tokenizer_json, text_file, separator, reps):
    tokenizer = Tokenizer.from_file(tokenizer_json)
    with open(text_file, encoding="utf-8") as f:
        docs = documents(f.read(), separator)
    megabytes = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    tokenizer.encode_batch(docs, add_special_tokens=False)  # warm-up
    rates, tokens = [], 0
    for _ in range(int(reps)):
        start = time.perf_counter()
        encoded = tokenizer.encode_batch(docs, add_special_tokens=False)
        rates.append(megabytes / (time.perf_counter() - start))
        tokens = sum(len(e.ids) for e in encoded)
    print(f"result mb_per_s={statistics.median(rates):.2f} tokens={tokens} documents={len(docs)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
