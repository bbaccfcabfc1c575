#include "parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/flops.h"

namespace dt::pipeline {

std::vector<StageUnits> partition_stages(const ModelConfig& config, int stages, int seq_len) {
  const int L = config.n_layer;
  if (stages < 1 || stages > L)
    throw ConfigError(str(stages, " pipeline stages: ", stages < 1 ? "there must be at least 1" :
                          str("more pipeline stages than the model's ", L, " blocks (model.n_layer), and each stage "
                              "needs one; use at most ", L, " stages")));
  // prefix[b]: blocks [0, b)'s work; cost(a, b): blocks [a, b) as one stage, the head's work on
  // the last. (Integer FLOP counts: exact sums.)
  std::vector<double> prefix(static_cast<size_t>(L) + 1, 0.0);
  for (int l = 0; l < L; ++l) prefix[l + 1] = prefix[l] + block_flops(config, l, seq_len);
  const double head = head_flops(config);
  const auto cost = [&](int a, int b) { return prefix[b] - prefix[a] + (b == L ? head : 0.0); };
  // best[s][b]: the smallest largest stage over blocks [0, b) cut into s stages; cut[s][b] its
  // last stage's first block.
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(L + 1, kNone));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int b = s; b <= L; ++b)
      for (int a = s - 1; a < b; ++a) {
        const double largest = std::max(best[s - 1][a], cost(a, b));
        if (largest < best[s][b]) best[s][b] = largest, cut[s][b] = a;
      }
  std::vector<StageUnits> out(static_cast<size_t>(stages));
  for (int s = stages, b = L; s >= 1; --s) {
    const int a = cut[s][b];
    out[s - 1] = {.embeddings = s == 1, .first_block = a, .end_block = b, .head = s == stages};
    b = a;
  }
  return out;
}

}  // namespace dt::pipeline
