#include "model/tensor_shard.h"

#include <algorithm>

#include "core/error.h"

namespace dt {

kernels::FlatRange even_part(int64_t count, int parts, int index) {
  const int64_t base = count / parts, larger = count % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, larger);
  return {begin, begin + base + (index < larger ? 1 : 0)};
}

void check_tensor_parallel(const ModelConfig& config, int tp, FieldProblems& problems) {
  const auto require = [&](bool ok, const std::string& what) { problems.require(ok, "parallel.tp", tp, what); };
  if (tp < 1) return require(false, "must be at least 1");
  // Each rank needs a query head, a column of the MLP and a row of the vocabulary.
  if (tp > config.n_head)
    return require(false, str("more tensor-parallel ranks than the model's ", config.n_head,
                              " attention heads (model.n_head), and each needs at least one; use parallel.tp <= ",
                              config.n_head));
  // OLMoE's query and key norms are over all heads' columns: each rank would need the others'
  // sums of squares, which nothing computes yet.
  if (tp > 1 && config.qk_norm)
    return require(false, "splits the heads, and the queries' and keys' RMSNorms (model.qk_norm) are each over "
                          "all heads' columns, which are not summed over the tensor-parallel ranks yet; use "
                          "parallel.tp = 1");
  if (config.moe.shared_hidden > 0)
    require(tp <= config.moe.shared_hidden, str("more tensor-parallel ranks than the shared expert's width (",
                                                 config.moe.shared_hidden, "); use parallel.tp <= ",
                                                 config.moe.shared_hidden));
  require(tp <= config.ffn_hidden() && tp <= config.vocab_size,
          str("more tensor-parallel ranks than the model's MLP width (", config.ffn_hidden(), ") or vocabulary (",
              config.vocab_size, "); use parallel.tp <= ", std::min(config.ffn_hidden(), config.vocab_size)));
}

void check_tensor_parallel(const ModelConfig& config, int tp) {
  validate_model_config(config);
  FieldProblems problems;
  check_tensor_parallel(config, tp, problems);
  for (const FieldProblem& p : problems.all()) throw ConfigError(str(p.field, " = ", p.value, ": ", p.what));
}

ShardDims shard_dims(const ModelConfig& config, TensorShard shard, ExpertShard experts) {
  check_tensor_parallel(config, shard.size);
  DT_CHECK(shard.rank >= 0 && shard.rank < shard.size, "tensor-parallel rank ", shard.rank, " of ", shard.size);
  ShardDims d;
  const int NH = config.n_head, NKV = config.kv_heads(), group = NH / NKV;
  HeadShard& h = d.heads;
  h.group = group;
  h.kv_split = NKV >= shard.size;
  if (h.kv_split) {
    const kernels::FlatRange kv = even_part(NKV, shard.size, shard.rank);
    h.kv_begin = static_cast<int>(kv.begin), h.kv_end = static_cast<int>(kv.end);
    h.q_begin = h.kv_begin * group, h.q_end = h.kv_end * group;
  } else {
    const kernels::FlatRange q = even_part(NH, shard.size, shard.rank);
    h.q_begin = static_cast<int>(q.begin), h.q_end = static_cast<int>(q.end);
    h.kv_begin = h.q_begin / group, h.kv_end = (h.q_end - 1) / group + 1;
  }
  d.ffn = even_part(config.ffn_hidden(), shard.size, shard.rank);
  d.shared_ffn = even_part(config.moe.shared_hidden, shard.size, shard.rank);
  d.experts = config.moe.experts;
  DT_CHECK(experts.rank >= 0 && experts.rank < experts.size && experts.size <= std::max(1, config.moe.experts),
           "expert-parallel rank ", experts.rank, " of ", experts.size, " for ", config.moe.experts, " experts");
  d.local_experts = even_part(config.moe.experts, experts.size, experts.rank);
  d.expert_ranks = experts.size;
  d.expert_hidden = config.moe.expert_hidden;
  d.vocab = even_part(config.vocab_size, shard.size, shard.rank);
  const int64_t pad = config.vocab_pad_multiple;
  d.padded_vocab = (d.vocab.size() + pad - 1) / pad * pad;
  d.head_size = config.head_size();
  return d;
}

}  // namespace dt
