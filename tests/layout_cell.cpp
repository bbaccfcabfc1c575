#include "tests/layout_cell.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "comm/mpi.h"
#include "model/transformer.h"
#include "parallel/context/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/equivalence.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline/pipeline_parallel.h"
#include "parallel/tensor/tensor_parallel.h"
#include "train/global_batch.h"
#include "train/step.h"

namespace dt::testing {

namespace {

constexpr int kB = 2, kT = 16;

// gpt2-tiny with 6 heads of 8 (so that 4 ranks split them 2, 2, 1, 1), and llama-tiny: 6 query
// heads over 2 key/value heads (split over 2 ranks, copied over 3 and 4), an untied output layer,
// or tied. Both have the vocabulary of 997 (250, 249, 249, 249 rows over 4 ranks) and an MLP of
// 192 and 128 columns. moe-tiny: every block's MLP the top 2 of 4 experts, balanced by a bias
// moved after each step from the loads every rank counts (model/expert_balance.h), at a rate that
// changes choices within the cell's steps, and trained with both routers' losses (model/moe_mlp.h),
// the balance loss's counts per sequence summed over the ranks holding its tokens, at weights
// that make their share of the router's gradient count; with a gated shared expert (Qwen-MoE's);
// and, where context parallelism does not split the micro-batches (which a capacity refuses), each
// expert within a capacity of 1.25 its share (model/config.h), which drops assignments.
// olmoe-tiny: OLMoE's block, the queries and keys RMS-normalized (model/qk_norm.h), 4 experts, two
// per token, not renormalized.
// Under pipeline parallelism one block more than
// stages, so that one stage has two and the stages are uneven.
ModelConfig test_model(const LayoutCell& cell, int stages) {
  ModelConfig c = model_preset(cell.family == "gpt2"    ? "gpt2-tiny"
                               : cell.family == "moe"   ? "moe-tiny"
                               : cell.family == "olmoe" ? "olmoe-tiny"
                                                        : "llama-tiny");
  if (cell.family == "gpt2") c.n_head = 6;
  if (cell.family == "llama_tied") c.tied_embeddings = true;
  if (cell.family == "moe") {
    c.moe.bias_update_rate = 0.01f, c.moe.aux_loss_coef = 0.1f, c.moe.z_loss_coef = 0.01f;
    c.moe.shared_hidden = 24, c.moe.shared_gate = true;
    if (cell.cp == 1) c.moe.capacity_factor = 1.25f;
  }
  if (cell.pp > 1) c.n_layer = stages + 1;
  return c;
}

// Delayed scaling's amax history after `steps` steps, newest first: its first step's amaxes
// (slot steps - 1), of tensors that both runs computed from the same weights, on every layer
// this rank holds against one rank's, within `bound` (relative). A max over the wrong ranks is
// 29-34% off (measured, tp 2 in f32).
void expect_same_first_amaxes(const Transformer& one, const Transformer& mine, int steps, double bound,
                              const std::string& what) {
  const LinearStates &reference = one.linear_states(), &states = mine.linear_states();
  double worst = 0;
  int compared = 0;
  for (const LinearStates::Entry& e : states.entries()) {
    if (states.declared()[e.kind].name != "fp8_amax_history") continue;
    const auto host = [](const Tensor& t) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      std::memcpy(v.data(), t.data, t.bytes());
      return v;
    };
    const std::vector<float> a = host(states.at(e)), b = host(reference.find(e.layer, e.linear, "fp8_amax_history"));
    // A history per operand of each weight (an experts' layer's E weights), newest first.
    const size_t H = static_cast<size_t>(states.declared()[e.kind].count / 3);
    for (size_t row = 0; row < a.size() / H; ++row) {
      const float x = a[row * H + static_cast<size_t>(steps - 1)], y = b[row * H + static_cast<size_t>(steps - 1)];
      if (y == 0) {  // only an expert that no row reached, whose amax is 0 in every layout
        EXPECT_EQ(x, 0) << what << ": " << e.name << " row " << row << " recorded an amax one rank did not";
        continue;
      }
      worst = std::max(worst, std::fabs(static_cast<double>(x) - y) / y);
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << what;
  EXPECT_LT(worst, bound) << what << ": delayed scaling's first amaxes";
}

}  // namespace

std::string cell_name(const LayoutCell& c) {
  std::string schedule = c.schedule;  // a test's name is letters, digits and underscores
  std::ranges::replace(schedule, '-', '_');
  return str(c.family, "_", dtype_name(c.precision), "_dp", c.dp, "_zero", c.zero, c.sp ? "_sp" : "",
             c.recompute == Recompute::none ? "" : str("_", recompute_name(c.recompute)),
             c.pp == 1 ? "" : str("_pp", c.pp, "_", schedule, c.virtual_stages > 1 ? str("_v", c.virtual_stages) : ""),
             c.cp == 1 ? "" : str("_cp", c.cp, c.zigzag ? "" : "_plain", c.padded ? "_padded" : ""),
             c.ep == 1 ? "" : str("_ep", c.ep), c.fp8 == Float8Scaling::none ? "" : str("_fp8", float8_scaling_name(c.fp8)),
             c.qat == "none" ? "" : str("_qat", c.qat, c.qat_activations ? "_activations" : ""));
}

void expect_layout_matches_one_rank(const LayoutCell& cell) {
  std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int tp = world->size() / cell.dp / cell.pp / cell.cp;
  ProcessGroups groups =
      make_process_groups(std::move(world), {.dp = cell.dp, .cp = cell.cp, .tp = tp, .pp = cell.pp, .ep = cell.ep});
  // Context parallelism splits longer sequences: 48 tokens cut into 4, 6 or 8 chunks, or 45,
  // padded to 48.
  const int T = cell.cp == 1 ? kT : cell.padded ? 45 : 48;
  std::optional<ContextParallel> context;
  if (cell.cp > 1) context.emplace(*groups.cp, test_model(cell, 1), T, cell.zigzag, Device::cpu);
  const int T_local = context ? context->local_len() : T;
  const int rank = groups.world->rank(), dp_rank = groups.coords.dp;
  const int steps = kEquivalenceSteps;
  for (const int accumulation : cell.accumulations) {
    std::optional<pipeline::Schedule> schedule;
    if (cell.pp > 1) schedule = pipeline::make_schedule(cell.schedule, cell.pp, accumulation, cell.virtual_stages);
    const ModelConfig config = test_model(cell, schedule ? schedule->stages() : 1);
    const int micro_batches = cell.dp * accumulation;
    const Float8Recipe recipe{.scaling = cell.fp8, .block = 4};
    const Float8Training one_fp8{.recipe = recipe};
    const Float8Training my_fp8{.recipe = recipe, .tp = tp > 1 ? groups.tp.get() : nullptr,
                                .cp = cell.cp > 1 ? groups.cp.get() : nullptr,
                                .replicas = cell.cp > 1 ? &groups.dp_cp() : nullptr};
    Transformer one(config, kB, T, cell.recompute, cell.precision, Device::cpu, {}, nullptr, {}, nullptr, {}, nullptr,
                    &one_fp8);
    AdamW one_optimizer(one.layout(), OptimizerParts::whole(one), {});
    init_parameters(one.params(), kEquivalenceSeed);
    one_optimizer.round_weights();

    std::optional<TensorParallel> tensor_parallel;
    if (tp > 1) tensor_parallel.emplace(*groups.tp, config, cell.sp);
    std::optional<ExpertParallel> expert_parallel;
    if (cell.ep > 1) expert_parallel.emplace(*groups.ep, config.moe.experts);
    const RankStages stages =
        schedule ? pipeline::PipelineParallel::rank_stages(config, *schedule, groups.coords.pp, kT) : RankStages{};
    // cp joins dp: the parameters' gradients are summed, and ZeRO shards, over dp × cp.
    const ZeroPolicy zero = ZeroPolicy::of(cell.zero, cell.precision, cell.dp * cell.cp);
    Transformer mine(config, kB, T_local, cell.recompute, cell.precision, Device::cpu, zero.storage(), tensor_parallel ? &*tensor_parallel : nullptr,
                     stages, context ? &*context : nullptr, {}, expert_parallel ? &*expert_parallel : nullptr,
                     &my_fp8);
    DataParallel data_parallel(mine, groups.dp_cp(), /*bucket_mb=*/0.05, zero, {},
                               schedule ? groups.pp.get() : nullptr, groups.expert_dp.get());
    std::optional<pipeline::PipelineParallel> pipeline;
    if (schedule) pipeline.emplace(mine, *groups.pp, *schedule);
    FlatTensors whole(mine.layout(), MemTag::workspace);  // this rank's part of the model, whole
    init_parameters(whole, kEquivalenceSeed);
    data_parallel.take_parameters(whole);

    std::vector<double> one_losses, one_norms, losses, norms;
    BatchBuffers all(micro_batches, kB, T, Device::cpu), own(accumulation, kB, T_local, Device::cpu);
    for (int step = 0; step < steps; ++step) {
      const GlobalBatch batch(micro_batches * kB, T, config.vocab_size, step);
      take_rank_micro_batches(batch, 1, 0, nullptr, all);
      take_rank_micro_batches(batch, cell.dp, dp_rank, context ? &*context : nullptr, own);
      const StepStats a = train_step(one, one_optimizer, all.on_device(), kEquivalenceLr, 1.0f);
      const StepStats b = train_step(mine, data_parallel, own.on_device(), kEquivalenceLr, 1.0f, nullptr, step + 1,
                                     pipeline ? &*pipeline : nullptr);
      EXPECT_EQ(a.targets, b.targets);
      one_losses.push_back(a.loss), one_norms.push_back(a.grad_norm);
      losses.push_back(b.loss), norms.push_back(b.grad_norm);
    }
    // This rank's part of the f32 parameters, gathered over dp where ZeRO shards them: on rank 0
    // of dp × cp, and each expert group's experts on its rank 0.
    std::optional<FlatTensors> gathered;
    const FlatTensors* parameters = &mine.params();
    bool experts_only = false;
    if (zero.shards_f32_parameters()) {
      experts_only = groups.dp_cp().rank() != 0 && groups.expert_dp->rank() == 0;
      if (groups.dp_cp().rank() == 0 || experts_only) gathered.emplace(mine.layout(), MemTag::workspace);
      data_parallel.gather_parameters(gathered ? &*gathered : nullptr);
      parameters = gathered ? &*gathered : nullptr;
    }
    const double loss_diff = max_relative_difference(losses, one_losses);
    const double norm_diff = max_relative_difference(norms, one_norms);
    double parameter_diff = 0;
    if (parameters != nullptr)
      for (const TensorDifference& d :
           parameter_differences(one.params(), *parameters, [&](const ParamInfo& p) { return !experts_only || p.is_expert; }))
        parameter_diff = std::max(parameter_diff, d.difference);
    const std::string what = str(cell_name(cell), " tp ", tp, " accumulation ", accumulation, " rank ", rank);
    const EquivalenceBounds bound = equivalence_bounds(cell.precision, cell.fp8, cell.cp);
    EXPECT_LT(max_relative_difference({losses[0]}, {one_losses[0]}), bound.first_loss) << what;
    EXPECT_LT(loss_diff, bound.losses) << what;
    EXPECT_LT(max_relative_difference({norms[0]}, {one_norms[0]}), bound.first_norm) << what;
    EXPECT_LT(norm_diff, bound.norms) << what;
    EXPECT_LT(parameter_diff, bound.parameters) << what;
    if (cell.fp8 == Float8Scaling::delayed) expect_same_first_amaxes(one, mine, steps, bound.first_amaxes, what);
    const double worst_loss = all_reduce_value(*groups.world, loss_diff, ReduceOp::max);
    const double worst_norm = all_reduce_value(*groups.world, norm_diff, ReduceOp::max);
    const double worst = all_reduce_value(*groups.world, parameter_diff, ReduceOp::max);
    if (rank == 0)
      std::printf("%s: %s, %d micro-batch%s per dp rank: losses within %.2e, gradient norms within %.2e, "
                  "parameters within %.2e of the largest\n",
                  cell_name(cell).c_str(), groups.dims.describe().c_str(), accumulation,
                  accumulation == 1 ? "" : "es", worst_loss, worst_norm, worst);
    // What every tp rank holds whole (a norm's weight, here the last) is the same bits on each.
    if (parameters != nullptr && !experts_only && mine.layout().held_units().head) {
      const Tensor ln_f = parameters->unpadded("ln_f.weight");
      Buffer lead(ln_f.bytes(), MemTag::workspace);
      std::memcpy(lead.data(), ln_f.data, ln_f.bytes());
      groups.tp->broadcast(lead.view(DType::f32, {ln_f.numel()}), 0).wait();
      EXPECT_EQ(std::memcmp(lead.data(), ln_f.data, ln_f.bytes()), 0) << what << ": ln_f differs from tp rank 0's";
    }
  }
}

}  // namespace dt::testing
