#include "parallel/zero_policy.h"

#include "core/error.h"

namespace dt {

ZeroPolicy ZeroPolicy::of(int stage, DType precision, int ranks) {
  DT_CHECK(exists(stage), "ZeRO stage ", stage, " does not exist (0 to ", kHighestStage, ")");
  return {.stage = stage,
          .precision = precision,
          .ranks = ranks,
          .shards_optimizer_state = stage >= 1,
          .shards_gradients = stage >= 2,
          .shards_weights = stage >= 3};
}

bool ZeroPolicy::shards_f32_parameters() const {
  return shards_weights || (shards_optimizer_state && precision != DType::f32);
}

ZeroPolicy::Reduction ZeroPolicy::reduction() const {
  return shards_optimizer_state ? Reduction::reduce_scatter_units : Reduction::all_reduce_buckets;
}

bool ZeroPolicy::reduces() const { return ranks > 1 || reduction() == Reduction::reduce_scatter_units; }

ZeroPolicy::Gather ZeroPolicy::gathers_weights() const {
  if (shards_weights) return Gather::before_each_pass;
  return shards_optimizer_state ? Gather::after_update : Gather::never;
}

bool ZeroPolicy::allows_pipeline() const {
  return !reduces_every_micro_batch() && gathers_weights() != Gather::before_each_pass;
}

std::string ZeroPolicy::pipeline_conflict() const {
  if (allows_pipeline()) return "";
  return str("ZeRO stage ", stage, " reduces", gathers_weights() == Gather::before_each_pass ? " and gathers" : "",
             " during every micro-batch's pass, which a pipeline schedule interleaves across micro-batches");
}

std::string ZeroPolicy::stages_allowing_pipeline() {
  std::string stages;
  for (int s = 0; s <= kHighestStage; ++s)
    if (of(s, DType::f32, 1).allows_pipeline()) stages += str(stages.empty() ? "" : " or ", s);
  return stages;
}

int ZeroPolicy::most_sharding_stage(bool pipeline) {
  int stage = kHighestStage;
  while (pipeline && !of(stage, DType::f32, 1).allows_pipeline()) --stage;
  return stage;
}

ParameterStorage ZeroPolicy::storage() const {
  if (!shards_optimizer_state) return {};
  // The sharded update keeps a 16-bit run's master weights as parts and writes the 16-bit copy.
  return {.unit_multiple = kParamAlignment * ranks,
          .weights = shards_weights ? Storage::per_unit : Storage::whole,
          .grads = shards_gradients ? Storage::per_unit : Storage::whole,
          .master_weights = false};
}

int64_t ZeroPolicy::optimizer_elements(const ParameterLayout& layout) const {
  if (!shards_optimizer_state) return layout.total_elements();
  int64_t elements = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) elements += part_elements(layout, u);
  return elements;
}

int64_t ZeroPolicy::part_elements(const ParameterLayout& layout, size_t u) const {
  // A unit's experts are sharded over the ranks holding the same ones: ranks / ep of them.
  const int expert_ranks = ranks / layout.expert_shard().size;
  const int64_t experts = layout.experts_of_unit(u).size();
  return (layout.units()[u].size() - experts) / ranks + experts / expert_ranks;
}

std::vector<ZeroPolicy::ShardBuffer> ZeroPolicy::shard_buffers() const {
  if (!shards_optimizer_state) return {};
  std::vector<ShardBuffer> buffers = {{ShardRole::gradients, MemTag::gradients, DType::f32}};
  if (shards_f32_parameters())
    buffers.push_back({ShardRole::f32_parameters, precision == DType::f32 ? MemTag::parameters : MemTag::optimizer_state,
                       DType::f32});
  if (shards_weights && precision != DType::f32) buffers.push_back({ShardRole::weights, MemTag::parameters, precision});
  return buffers;
}

std::string ZeroPolicy::sharded() const {
  if (shards_weights) return "optimizer state, gradients and parameters";
  if (shards_gradients) return "optimizer state and gradients";
  return shards_optimizer_state ? "optimizer state" : "nothing";
}

}  // namespace dt
