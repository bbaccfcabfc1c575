#include "parallel/context/context_parallel.h"

#include <cstring>

#include "core/error.h"
#include "parallel/context/ring_attention.h"

namespace dt {

ContextParallel::ContextParallel(Communicator& group, const ModelConfig& config, int seq_len, bool zigzag,
                                 Device device)
    : group_(group), layout_{.ranks = group.size(), .rank = group.rank(), .zigzag = zigzag, .seq_len = seq_len} {
  layout_.validate();
  if (config.family == ModelFamily::llama) rope_ = make_rope_tables(config, seq_len, device);
}

std::unique_ptr<TrainingAttention> ContextParallel::core(kernels::AttentionHeads heads, int64_t B, int64_t T,
                                                         Tensor /*rope_cos*/, Tensor /*rope_sin*/) const {
  DT_CHECK(T == layout_.local_len(), "a context-parallel stage of ", T, " tokens per sequence; this rank holds ",
           layout_.local_len());
  return std::make_unique<RingAttention>(group_, layout_, heads, B, rope_.cos, rope_.sin);
}

std::vector<AttentionScope::Positions> ContextParallel::positions(int64_t T) const {
  DT_CHECK(T == layout_.local_len(), "positions of ", T, " tokens; this rank holds ", layout_.local_len());
  std::vector<Positions> runs;
  for (const int c : layout_.own_chunks()) runs.push_back({c * layout_.chunk_len(), layout_.chunk_len()});
  return runs;
}

void ContextParallel::take_own(Tensor whole, Tensor own) const {
  const int64_t B = whole.dim(0), T = layout_.seq_len, Tl = layout_.local_len(), Tc = layout_.chunk_len();
  DT_CHECK(whole.dtype == DType::i32 && whole.device == Device::cpu && whole.dim(1) == T && own.dim(0) == B &&
               own.dim(1) == Tl,
           "taking a cp rank's tokens: ", whole.describe(), " into ", own.describe());
  const std::vector<int> chunks = layout_.own_chunks();
  for (int64_t b = 0; b < B; ++b)
    for (size_t i = 0; i < chunks.size(); ++i)
      std::memcpy(own.ptr<int32_t>() + b * Tl + static_cast<int64_t>(i) * Tc,
                  whole.ptr<int32_t>() + b * T + chunks[i] * Tc, static_cast<size_t>(Tc) * sizeof(int32_t));
}

}  // namespace dt
