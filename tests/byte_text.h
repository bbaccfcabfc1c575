// A text file as a stream of byte tokens (vocabulary 256): training data for tests that need
// a real text but no tokenizer or shards.
//
// Sample k is the window of seq_len + 1 bytes starting at byte (k * seq_len) mod (size - seq_len - 1):
// tokens are its first seq_len bytes, targets its last seq_len.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dt::testing {

constexpr int kByteVocabSize = 256;

class ByteText {
 public:
  // Throws dt::Error naming the file when it cannot be read or is shorter than seq_len + 1 bytes.
  ByteText(const std::string& path, int seq_len);
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  // Fills rows of tokens and targets (B, T) i32 with samples first_sample, first_sample + 1, ...
  void fill(Tensor tokens, Tensor targets, int64_t first_sample) const;

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  int seq_len_;
};

}  // namespace dt::testing
