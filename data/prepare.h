// `dtrain data prepare`: text files -> token shards that `dtrain train` reads, in constant memory.
//
// Documents (data/document_reader.h) are read in blocks, encoded in parallel batches
// (Tokenizer::encode_batch) and written as shards fill, each document preceded by the
// end-of-text token, as llm.c's scripts do, so a model learns where documents start. The
// first documents form the validation split, the rest the training split; each split is a
// run of shards of at most shard_tokens tokens named as llm.c names them: val_000000.bin,
// train_000000.bin, train_000001.bin, ... (data/token_shard.h: uint16 tokens for
// vocabularies up to 65,536, else uint32). A shard appears under its name only once it is
// complete.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "data/document_reader.h"
#include "data/tokenizer.h"

namespace dt {

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;
  std::filesystem::path out_dir;  // created when missing
  // The validation split: the first documents until val_tokens tokens when val_tokens >= 0,
  // else those starting within the first val_fraction of the input bytes (known before
  // encoding, so the split is decided while streaming). 0 makes no validation shard.
  double val_fraction = 0.005;
  int64_t val_tokens = -1;
  int64_t shard_tokens = 100'000'000;  // tokens per shard; llm.c's fineweb shards hold 1e8
  DocSeparator separator = DocSeparator::blank_lines;
  size_t block_bytes = size_t{1} << 20;   // read size; a document longer than 4x comes in pieces
  size_t batch_bytes = size_t{32} << 20;  // text encoded per parallel batch (memory ~ 3x this)
  bool progress = false;                  // redraw a progress line on stderr
};

struct PrepareSummary {
  int64_t documents = 0, bytes = 0, train_tokens = 0, val_tokens = 0;
  std::vector<std::filesystem::path> train_shards, val_shards;
  double seconds = 0;
};

// Throws dt::Error naming a missing or empty input, an out_dir that cannot be created or
// written, or a tokenizer without an end-of-text token, before anything is encoded.
PrepareSummary prepare_data(const Tokenizer& tokenizer, const PrepareOptions& options);

}  // namespace dt
