// `dtrain bench tokenizer`: encoding throughput of Tokenizer::encode_batch on the documents of
// a text file, the number bench/tokenizer_vs_hf.sh sets beside HF tokenizers' encode_batch.
#pragma once

#include <filesystem>

#include "data/document_reader.h"

namespace dt {

struct TokenizerBenchOptions {
  std::filesystem::path tokenizer, text;
  DocSeparator separator = DocSeparator::line;
  int reps = 5;     // timed repetitions after one warm-up; the median is reported
  int threads = 0;  // 0: OpenMP's default
};

// Prints a table row per repetition, then `result mb_per_s=... tokens=... threads=...`.
void run_tokenizer_bench(const TokenizerBenchOptions& options);

}  // namespace dt
