#include "parallel/parallel_run.h"

#include "comm/mpi.h"
#include "comm/world.h"

namespace dt {

ParallelRun::ParallelRun(const ParallelOptions& options, Communicator& control)
    : ParallelRun(options, make_world(options.device, options.backend, &control)) {
  if (launched_by_mpi()) set_rank_description(groups_.dims.rank_description(groups_.world->rank()));
}

ParallelRun::ParallelRun(const ParallelOptions& options, std::unique_ptr<Communicator> world) : options_(options) {
  const ModelConfig& mc = options_.model;
  const int T = options_.seq_len;
  // 1. The groups first: every other step communicates over one of them. Splitting the world is
  // a collective, so every rank makes the same communicators in the same order.
  groups_ = make_process_groups(std::move(world), options_.dims);
  // 2. The pipeline schedule before the model: it says which stages this rank makes.
  if (groups_.dims.pp > 1)
    schedule_ = pipeline::make_schedule(options_.pp_schedule, groups_.dims.pp, options_.micro_batches,
                                        options_.pp_virtual);
  // 3. Context parallelism before the model: the model runs this rank's tokens of every sequence
  // (local_len), attending across the cp group.
  if (groups_.dims.cp > 1) context_.emplace(*groups_.cp, mc, T, options_.cp_zigzag, options_.device);
  const int T_local = context_ ? context_->local_len() : T;
  // 4. Tensor parallelism before the model: the model is then this rank's shard, communicating
  // through the tp group's regions.
  if (groups_.dims.tp > 1) tensor_parallel_.emplace(*groups_.tp, mc, options_.sp);
  // 5. Expert parallelism before the model: the model then holds this rank's experts, its expert
  // blocks' rows travelling to them over the ep group.
  if (groups_.dims.ep > 1) expert_parallel_.emplace(*groups_.ep, mc.moe.experts);
  // 6. The model: this rank's shard of its stages over its tokens, stored as ZeRO's policy says,
  // its linear layers in FP8 where the recipe says.
  if (options_.fp8.enabled())
    float8_ = Float8Training{.recipe = options_.fp8,
                             .tp = groups_.dims.tp > 1 ? groups_.tp.get() : nullptr,
                             .cp = groups_.dims.cp > 1 ? groups_.cp.get() : nullptr,
                             .replicas = groups_.dims.cp > 1 ? &groups_.dp_cp() : nullptr};
  model_.emplace(mc, options_.micro_batch_size, T_local, options_.recompute, options_.precision, options_.device,
                 options_.zero.storage(), tensor_parallel_ ? &*tensor_parallel_ : nullptr,
                 schedule_ ? pipeline::PipelineParallel::rank_stages(mc, *schedule_, groups_.coords.pp, T)
                           : RankStages{},
                 context_ ? &*context_ : nullptr, options_.linear_states,
                 expert_parallel_ ? &*expert_parallel_ : nullptr, float8_ ? &*float8_ : nullptr, options_.qat);
  // 7. Data parallelism over the finished model: it hooks the model's units, shards its states
  // over dp × cp (the cp ranks join the gradients' sum; the experts' over the ranks holding the
  // same ones) and holds the optimizer of this rank's parts; under pipeline parallelism the
  // gradient norm also spans the pp group.
  data_parallel_.emplace(*model_, groups_.dp_cp(), options_.bucket_mb, options_.zero, options_.adamw,
                         schedule_ ? groups_.pp.get() : nullptr, groups_.expert_dp.get());
  // 8. The pipeline executor last: its steps end in data parallelism's reduction and update.
  if (schedule_) pipeline_.emplace(*model_, *groups_.pp, *schedule_);
  const HeldUnits& held = model_->layout().held_units();
  whole_layout_.emplace(mc);
  stages_layout_.emplace(mc, kParamAlignment, TensorShard{}, held);
  // The layout a tp rank sends its shard with every expert in, as its tp group receives it.
  shard_layout_.emplace(mc, model_->layout().unit_multiple(), model_->layout().shard(), held);
}

bool ParallelRun::evaluates() const {
  const bool forward_is_collective =
      options_.zero.gathers_weights() == ZeroPolicy::Gather::before_each_pass || groups_.dims.ep > 1;
  return forward_is_collective || groups_.coords.dp == 0;
}

const FlatTensors* ParallelRun::WholeParameters::whole() const {
  if (!lead_) return nullptr;
  if (whole_) return &*whole_;
  if (stages_whole_) return &*stages_whole_;
  if (experts_whole_) return &*experts_whole_;
  if (gathered_) return &*gathered_;
  return own_;
}

ParallelRun::WholeParameters ParallelRun::gather_whole_parameters() {
  WholeParameters result;
  const bool sharded = options_.zero.shards_f32_parameters();
  const int tp = groups_.dims.tp, pp = groups_.dims.pp, ep = groups_.dims.ep;
  if (!lead() && !sharded && tp == 1 && pp == 1 && ep == 1) return result;  // nothing to send
  // This rank's f32 parameters whole: the model's, or gathered over dp × cp on its rank 0, and its
  // experts over the ranks holding them on their rank 0 (the first ep of dp × cp), which alone go
  // on.
  const bool shard_lead = groups_.dp_cp().rank() == 0, experts_lead = groups_.expert_dp->rank() == 0;
  if (sharded) {
    if (shard_lead || experts_lead) result.gathered_.emplace(model_->layout(), MemTag::workspace, Device::cpu);
    data_parallel_->gather_parameters(result.gathered_ ? &*result.gathered_ : nullptr);
  }
  const FlatTensors& mine = result.gathered_ ? *result.gathered_ : model_->params();
  const ParameterLayout& layout = model_->layout();
  // Then every ep rank's experts placed beside the rest of this tp rank's shard on ep rank 0.
  if (ep > 1 && experts_lead) {
    if (shard_lead) result.experts_whole_.emplace(*shard_layout_, MemTag::workspace, Device::cpu);
    gather_shards(
        *groups_.ep, mine, result.experts_whole_ ? &*result.experts_whole_ : nullptr,
        [&](int r) {
          return ParameterLayout(layout.config(), layout.unit_multiple(), layout.shard(), layout.held_units(),
                                 {r, ep});
        },
        // The others' experts only: the rest they hold is ep rank 0's, and may not have been
        // gathered there.
        [](const ParamInfo& p) { return p.is_expert; });
  }
  const FlatTensors& shard = result.experts_whole_ ? *result.experts_whole_ : mine;
  // Then every tp rank's shard placed in its stages' part of the model on tp rank 0, and every
  // pipeline rank's part in the whole model on the lead.
  if (tp > 1 && shard_lead) {
    if (groups_.coords.tp == 0) result.stages_whole_.emplace(*stages_layout_, MemTag::workspace, Device::cpu);
    gather_shards(*groups_.tp, shard, result.stages_whole_ ? &*result.stages_whole_ : nullptr, [&](int r) {
      return ParameterLayout(layout.config(), layout.unit_multiple(), {r, tp}, layout.held_units());
    });
  }
  const FlatTensors& part = result.stages_whole_ ? *result.stages_whole_ : shard;
  if (pp > 1 && shard_lead && groups_.coords.tp == 0) {
    if (lead()) result.whole_.emplace(*whole_layout_, MemTag::workspace, Device::cpu);
    pipeline_->gather_parameters(part, result.whole_ ? &*result.whole_ : nullptr);
  }
  result.lead_ = lead();
  result.own_ = &model_->params();
  return result;
}

}  // namespace dt
