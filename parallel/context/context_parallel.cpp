#include "parallel/context/context_parallel.h"

#include "core/error.h"
#include "parallel/context/ring_attention.h"

namespace dt {

ContextParallel::ContextParallel(Communicator& group, const ModelConfig& config, int seq_len, bool zigzag,
                                 Device device)
    : group_(group),
      seq_len_(seq_len),
      layout_{.ranks = group.size(), .rank = group.rank(), .zigzag = zigzag, .seq_len = seq_len} {
  const int chunks = layout_.chunks();
  layout_.seq_len = (seq_len + chunks - 1) / chunks * chunks;
  layout_.validate();
  // Learned positions exist up to the model's max_seq_len; the padding's are never used but must
  // be rows of the table.
  if (config.traits().positions == PositionKind::learned && layout_.seq_len > config.max_seq_len)
    throw Error(str("context parallelism over ", layout_.ranks, " ranks pads sequences of ", seq_len, " tokens to ",
                    layout_.seq_len, " (", chunks, " equal chunks), beyond model.max_seq_len = ", config.max_seq_len,
                    "; use a data.seq_len that is a multiple of ", chunks, ", or at most ",
                    config.max_seq_len / chunks * chunks));
  if (config.traits().positions == PositionKind::rotary) rope_ = make_rope_tables(config, static_cast<int>(layout_.seq_len), device);
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

void ContextParallel::take_own(Tensor whole, Tensor own, int32_t fill) const {
  const int64_t B = whole.dim(0), T = seq_len_, Tl = layout_.local_len();
  DT_CHECK(whole.dtype == DType::i32 && whole.device == Device::cpu && whole.dim(1) == T && own.dim(0) == B &&
               own.dim(1) == Tl,
           "taking a cp rank's tokens: ", whole.describe(), " into ", own.describe());
  const std::vector<int64_t> positions = layout_.positions();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t p = positions[static_cast<size_t>(t)];
      own.ptr<int32_t>()[b * Tl + t] = p < T ? whole.ptr<int32_t>()[b * T + p] : fill;
    }
}

}  // namespace dt
