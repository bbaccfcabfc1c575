#include "tests/byte_text.h"

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace dt::testing {

ByteText::ByteText(const std::string& path, int seq_len) : path_(path), seq_len_(seq_len) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str("cannot open text file '", path, "'; check the path given to --text"));
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (size() < seq_len + 1)
    throw Error(str("text file '", path, "' has ", size(), " bytes, fewer than seq_len + 1 = ", seq_len + 1,
                    "; use a longer file or a shorter --seq"));
}

void ByteText::fill(Tensor tokens, Tensor targets, int64_t first_sample) const {
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  DT_CHECK(T == seq_len_ && targets.shape == tokens.shape, tokens.describe(), " ", targets.describe());
  const int64_t span = size() - T - 1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = span == 0 ? 0 : ((first_sample + b) * T) % span;
    for (int64_t t = 0; t < T; ++t) {
      tokens.ptr<int32_t>()[b * T + t] = bytes_[start + t];
      targets.ptr<int32_t>()[b * T + t] = bytes_[start + t + 1];
    }
  }
}

}  // namespace dt::testing
