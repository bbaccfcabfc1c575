"""Hugging Face tokenizers as the reference for dtrain's byte-level BPE (data/tokenizer.h).

  train  --pattern gpt2|llama3 --vocab-size N --out tokenizer.json FILES...
         HF's BpeTrainer on the files (each file's text one training sequence, as dtrain reads
         them), with the full byte alphabet and <|endoftext|>, pre-tokenized as GPT-2 (ByteLevel
         with its regex) or Llama 3 (Split on its regex, then ByteLevel) do.
  encode --tokenizer tokenizer.json --out ids.txt FILES...
         one line per file: its token ids, special tokens recognised, no post-processing.
"""
import argparse
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def read(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def train(args):
    tokenizer = Tokenizer(models.BPE())
    if args.pattern == "gpt2":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([read(f) for f in args.files], trainer=trainer)
    tokenizer.save(args.out)


def encode(args):
    tokenizer = Tokenizer.from_file(args.tokenizer)
    with open(args.out, "w") as out:
        for f in args.files:
            ids = tokenizer.encode(read(f), add_special_tokens=False).ids
            out.write(" ".join(map(str, ids)) + "\n")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("--pattern", choices=["gpt2", "llama3"], required=True)
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--out", required=True)
    t.add_argument("files", nargs="+")
    e = sub.add_parser("encode")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("files", nargs="+")
    args = parser.parse_args()
    train(args) if args.command == "train" else encode(args)


if __name__ == "__main__":
    sys.exit(main())
