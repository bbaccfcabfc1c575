#include "plan/memory.h"

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/device.h"
#include "kernels/attention.h"
#include "kernels/float8_linear.h"
#include "kernels/cpu/linear_scratch.h"
#include "kernels/cpu/row_blocks.h"
#include "model/expert_balance.h"
#include "model/float8_linear.h"
#include "model/rope_tables.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/pipeline_parallel.h"
#include "parallel/tensor/tensor_parallel.h"
#include "parallel/zero_hooks.h"
#include "parallel/zero_policy.h"

namespace dt {

size_t MemoryPlan::allocated() const {
  size_t sum = 0;
  for (const size_t b : bytes) sum += b;
  return sum;
}

size_t MemoryPlan::total() const {
  size_t sum = allocated();
  for (const size_t b : during_step) sum += b;
  return sum;
}

namespace {

// pipeline::boundary_buffers, remembered: a layout search asks it of the same schedule and rank
// for every tensor-parallel rank, micro-batch size and ZeRO stage. A schedule is a function of
// its name, ranks, micro-batches and virtual stages.
pipeline::BoundaryBuffers boundary_buffers_of(const pipeline::Schedule& schedule, int rank) {
  using Key = std::tuple<std::string, int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, pipeline::BoundaryBuffers> known;
  const Key key{schedule.name, schedule.ranks, schedule.micro_batches, schedule.virtual_stages, rank};
  {
    const std::lock_guard lock(mutex);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  const pipeline::BoundaryBuffers held = pipeline::boundary_buffers(schedule, rank);
  const std::lock_guard lock(mutex);
  known.emplace(key, held);
  return held;
}

}  // namespace

MemoryPlan plan_rank_memory(const ModelConfig& config, int batch_size, int seq_len, int micro_batches,
                            Recompute recompute, DType precision, int dp_ranks, int zero_stage, TensorShard shard,
                            bool sp, const pipeline::Schedule* schedule, int pp_rank, ExpertShard experts,
                            const Float8Recipe& fp8) {
  DT_CHECK(schedule == nullptr || schedule->micro_batches == micro_batches, "a plan of ", micro_batches,
           " micro-batches a step under a schedule of ", schedule->micro_batches);
  MemoryPlan plan;
  const auto add = [&](MemTag tag, size_t bytes) { plan.bytes[static_cast<int>(tag)] += bytes; };
  const ZeroPolicy zero = ZeroPolicy::of(zero_stage, precision, dp_ranks);
  const ParameterStorage storage = zero.storage();
  RankStages stages{.all = {StageUnits::whole(config)}, .held = {0}, .deferred_weights = false};
  if (schedule != nullptr) stages = pipeline::PipelineParallel::rank_stages(config, *schedule, pp_rank, seq_len);
  std::vector<StageUnits> held;
  for (const int s : stages.held) held.push_back(stages.all[static_cast<size_t>(s)]);
  const ParameterLayout layout(config, storage.unit_multiple, shard, HeldUnits::of(held, config.n_layer), experts);
  // The model: its flat buffers, and each stage's activations and (llama) rotary tables.
  const Transformer::ParameterBuffers model = Transformer::parameter_buffers(precision, storage);
  for (const auto& spec : {std::optional(model.params), std::optional(model.grads), model.weights})
    if (spec) add(spec->tag, FlatTensors::held_bytes(layout, spec->dtype, spec->storage));
  // The per-linear state the model carries itself (an expert bias) and FP8's recipe keeps, over
  // the blocks held here.
  const size_t linear_states = LinearStates::bytes(layout, with_model_states(config, float8_state_declarations(fp8, config)));
  add(MemTag::parameters, linear_states);
  for (const int s : stages.held) {
    const ActivationBytes activations =
        Stage::activation_bytes(config, stages.all[static_cast<size_t>(s)], recompute, precision, batch_size, seq_len,
                                shard, sp, stages.deferred_weights, experts);
    // Each stage's store grows to the micro-batches it holds at once (one without a schedule).
    const int in_flight = schedule != nullptr ? pipeline::stage_in_flight(*schedule, s) : 1;
    add(MemTag::activations, static_cast<size_t>(activations.kept * in_flight + activations.shared));
    add(MemTag::workspace, static_cast<size_t>(activations.scratch));
    if (config.traits().positions == PositionKind::rotary) add(MemTag::workspace, rope_table_bytes(config, seq_len));
  }
  // The optimizer: the moments of its elements, and ZeRO's shards.
  const int64_t local = zero.optimizer_elements(layout);
  for (const ZeroPolicy::ShardBuffer& spec : zero.shard_buffers())
    add(spec.tag, static_cast<size_t>(local) * dtype_size(spec.dtype));
  add(MemTag::optimizer_state, 2 * AdamW::bytes_per_moment(local));
  // A checkpoint's share (f32): of the parameters and the two moments, the parts of those ZeRO
  // shards, and each unit's dense and experts' ranges of those held whole.
  const size_t sharded = (zero.shards_f32_parameters() ? 1 : 0) + (zero.shards_optimizer_state ? 2 : 0);
  int64_t dense = 0, expert = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    dense += layout.experts_of_unit(u).begin - layout.units()[u].begin;
    expert += layout.experts_of_unit(u).size();
  }
  plan.checkpoint_staging = {
      .parts = sharded * static_cast<size_t>(local) * sizeof(float),
      .dense = (3 - sharded) * static_cast<size_t>(dense) * sizeof(float) + (shard.rank == 0 ? linear_states : 0),
      .experts = (3 - sharded) * static_cast<size_t>(expert) * sizeof(float)};
  // ZeRO's hooks during the passes of a rank's one stage; a pipeline's reduction follows its
  // schedule and holds nothing more (DataParallel::reduce_gradients).
  if (schedule == nullptr)
    plan.during_step = ZeroHooks::working_set(layout, zero, Stage::unit_hook_calls(layout, held.front()), micro_batches);
  else
    DT_CHECK(zero.allows_pipeline(), "a plan of pipeline stages: ", zero.pipeline_conflict());
  // What crosses between ranks during a step, on any backend: tensor parallelism's staging in the
  // blocks and, on the rank with the head, for the loss; and the pipeline's boundary tensors (all
  // of a micro-batch's rows, or under sequence parallelism this rank's part, in the compute
  // precision), the most at once, and those held while the loss is computed. The blocks' staging
  // beside the most boundary tensors is a bound: the two need not peak together.
  const int64_t tokens = int64_t{batch_size} * seq_len;
  const TensorParallel::CommunicationBytes tp =
      shard.size > 1 ? TensorParallel::communication_bytes(config, shard, tokens, precision, sp)
                     : TensorParallel::CommunicationBytes{};
  const size_t loss = layout.held_units().head ? tp.loss : 0;
  size_t in_step = std::max(tp.staging, loss);
  if (schedule != nullptr) {
    const int64_t rows = sequence_rows(tokens, shard, sp);
    const size_t boundary = static_cast<size_t>(rows * config.d_model) * dtype_size(precision);
    const pipeline::BoundaryBuffers buffers = boundary_buffers_of(*schedule, pp_rank);
    in_step = std::max(static_cast<size_t>(buffers.peak) * boundary + tp.staging,
                       static_cast<size_t>(buffers.at_loss) * boundary + loss);
  }
  plan.during_step[static_cast<size_t>(MemTag::communication)] += in_step;
  // Each group's largest all-reduce: a double for the job's control values (stop requests); over
  // dp, the step's loss and token counts (a double, summed before any gradient) and at ZeRO 0 the
  // gradient buckets, all in flight at once; over tp its largest sum; over pp the loss, and
  // between the two holders of a tied wte its gradient.
  constexpr size_t kDouble = sizeof(double);
  const size_t gradients = plan.bytes[static_cast<size_t>(MemTag::gradients)];
  size_t& kept = plan.mpi_kept_results;
  if (dp_ranks > 1 || shard.size > 1 || schedule != nullptr) kept += kDouble;
  const bool all_reduces_gradients = zero.reduction() == ZeroPolicy::Reduction::all_reduce_buckets;
  // The experts' buckets are reduced over the ranks holding the same experts: none beside this
  // one where every dp rank holds others (ep = dp).
  size_t expert_gradients = 0;
  for (size_t u = 0; u < layout.units().size(); ++u)
    expert_gradients += static_cast<size_t>(layout.experts_of_unit(u).size()) * sizeof(float);
  const bool experts_reduced = dp_ranks / experts.size > 1;
  if (dp_ranks > 1)
    kept += kDouble + (all_reduces_gradients ? gradients - (experts_reduced ? 0 : expert_gradients) : 0);
  kept += tp.largest_sum;
  // A mixture of experts' step metrics: over the job, four values per layer (RunReport::
  // expert_metrics); over dp × cp, each of this rank's expert blocks' loads, dropped count and two
  // losses (end_step_expert_balance), which a ZeRO 0 bucket's kept buffer takes where there is one.
  if (config.moe.experts > 0) {
    if (dp_ranks > 1 || shard.size > 1 || schedule != nullptr) kept += 4 * static_cast<size_t>(config.n_layer) * kDouble;
    size_t expert_blocks = 0;
    for (int l = 0; l < config.n_layer; ++l) expert_blocks += config.moe_block(l) && layout.held_units().holds_block(l) ? 1 : 0;
    if (dp_ranks > 1 && !all_reduces_gradients)
      kept += expert_blocks * (static_cast<size_t>(config.moe.experts) + 3) * kDouble;
  }
  if (schedule != nullptr) {
    kept += kDouble;
    // Only where the embeddings and the head are on two ranks (not a V schedule's first rank).
    const bool apart = schedule->stage_rank.front() != schedule->stage_rank.back();
    if (config.tied_embeddings && apart && (layout.held_units().embeddings || layout.holds_wte_copy())) {
      const ParamInfo& wte = layout.find("wte");
      kept += static_cast<size_t>(wte.stored_rows * wte.shape[1]) * sizeof(float);
    }
  }
  return plan;
}

size_t qat_workspace_bytes(const ModelConfig& config, int batch_size, int seq_len, DType precision, TensorShard shard,
                           std::optional<QatRecipe> qat, bool head) {
  if (!qat) return 0;
  const ShardDims dims = shard_dims(config, shard);
  const int64_t tokens = int64_t{batch_size} * seq_len;
  const size_t widened = precision == DType::f32 ? 0 : sizeof(float);
  // Forward holds the weight's copy and the input's, one made (and widened) at a time, then the
  // kernel's scratch; backward_weight the input's and its kernel's. The input is every token's,
  // as the column input (kernels/cpu/linear_scratch.h's rows) is.
  const auto product = [&](int64_t in, int64_t out) {
    const size_t weight = static_cast<size_t>(in * out), input = qat->activations ? static_cast<size_t>(tokens * in) : 0;
    const size_t widening = std::max(weight, input) * widened;
    return (weight + input) * dtype_size(precision) +
           std::max(widening, kernels::cpu::linear_scratch_bytes(tokens, in, out, precision));
  };
  size_t most = 0;
  for (const BlockDeclaration* block : block_declarations(config))
    for (const LinearDeclaration* linear : block->linears())
      if (!linear->per_expert)
        most = std::max(most, product(linear->in_features(config, dims), linear->out_features(config, dims)));
  if (head && !config.tied_embeddings) most = std::max(most, product(config.d_model, dims.padded_vocab));
  return most;
}

size_t cpu_kernel_scratch_bytes(const ModelConfig& config, int batch_size, int seq_len, DType precision,
                                TensorShard shard, bool sp, bool ring_attention, bool head, int threads) {
  const ShardDims dims = shard_dims(config, shard);
  const size_t compute = precision == DType::f64 ? sizeof(double) : sizeof(float);
  // The norms run on every token of the micro-batch, or under sequence parallelism on this
  // rank's part of them; RMSNorm sums one parameter's gradient, LayerNorm two.
  const int64_t tokens = int64_t{batch_size} * seq_len, norm_rows = sequence_rows(tokens, shard, sp);
  const int norm_sums = config.traits().norm == NormKind::rmsnorm ? 1 : 2;
  const size_t norms =
      static_cast<size_t>(kernels::cpu::block_partial_elements(norm_rows, config.d_model, norm_sums)) * compute;
  // The linear layers run on all of the micro-batch's rows; the output projection on the rank
  // with the head.
  size_t linears = 0;
  for (const BlockDeclaration* block : block_declarations(config))
    for (const LinearDeclaration* linear : block->linears())
      linears = std::max(linears, kernels::cpu::linear_scratch_bytes(tokens, linear->in_features(config, dims),
                                                                     linear->out_features(config, dims), precision));
  if (head)
    linears = std::max(linears, kernels::cpu::linear_scratch_bytes(tokens, config.d_model, dims.padded_vocab, precision));
  if (ring_attention) return std::max(norms, linears);
  const size_t attention = kernels::cpu::attention_scratch_bytes(seq_len, static_cast<int>(dims.head_size),
                                                                 dims.heads.attention(), precision, threads);
  return std::max({norms, attention, linears});
}

size_t float8_workspace_bytes(const ModelConfig& config, int batch_size, int seq_len, DType precision,
                              TensorShard shard, ExpertShard experts, const Float8Recipe& fp8, bool cpu) {
  if (!fp8.enabled()) return 0;
  const ShardDims dims = shard_dims(config, shard, experts);
  const int64_t tokens = int64_t{batch_size} * seq_len, local = static_cast<int64_t>(dims.local_experts.size());
  const int64_t expert_rows = experts.size > 1 ? config.moe.received_rows(tokens, local, experts.size)
                                               : config.moe.expert_rows(tokens);
  // An experts' product runs on one expert's rows from one rank (a segment: each row once, at
  // most a capacity), blockwise on one expert's rows from every rank of the ep group.
  const int64_t segment = config.moe.capacity_factor > 0 ? config.moe.capacity(tokens) : tokens;
  const int64_t piece_rows =
      std::min(expert_rows, segment * (fp8.scaling == Float8Scaling::blockwise ? experts.size : 1));
  size_t most = 0;
  for (const BlockDeclaration* block : block_declarations(config))
    for (const LinearDeclaration* l : block->linears()) {
      if (!float8_quantizes(l->name)) continue;
      const int64_t in = l->in_features(config, dims), out = l->out_features(config, dims);
      const int64_t rows = l->per_expert ? expert_rows : tokens;
      const std::array<size_t, 3> operands = float8_operand_bytes(fp8, rows, in, out, l->per_expert ? local : 0);
      const std::array<size_t, 3> emulation =
          cpu ? kernels::cpu::float8_linear_scratch_bytes(l->per_expert ? piece_rows : rows, in, out, precision,
                                                          !l->per_expert && l->has_bias(config))
              : std::array<size_t, 3>{};
      for (size_t p = 0; p < 3; ++p) most = std::max(most, operands[p] + emulation[p]);
    }
  return most;
}

MemoryPlan plan_memory(const ModelConfig& config, int batch_size, int seq_len, int micro_batches, Recompute recompute,
                       DType precision, int dp_ranks, int zero_stage, int tp_ranks, bool sp,
                       const pipeline::Schedule* schedule, int ep_ranks, const Float8Recipe& fp8) {
  MemoryPlan largest;
  bool first = true;
  for (int pp_rank = 0; pp_rank < (schedule != nullptr ? schedule->ranks : 1); ++pp_rank)
    for (int r = 0; r < tp_ranks; ++r)
      for (int e = 0; e < ep_ranks; ++e) {
        const MemoryPlan plan = plan_rank_memory(config, batch_size, seq_len, micro_batches, recompute, precision,
                                                 dp_ranks, zero_stage, {r, tp_ranks}, sp, schedule, pp_rank,
                                                 {e, ep_ranks}, fp8);
        if (first || plan.total() > largest.total()) largest = plan;
        first = false;
      }
  return largest;
}

void check_fits_on_gpu(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute, DType precision,
                       int dp_ranks, int zero_stage, int tp_ranks, bool sp, const pipeline::Schedule* schedule) {
  const int micro_batches = schedule != nullptr ? schedule->micro_batches : 1;
  const size_t needed = plan_memory(config, batch_size, seq_len, micro_batches, recompute, precision, dp_ranks,
                                    zero_stage, tp_ranks, sp, schedule)
                            .total();
  const size_t available = device_free_bytes(Device::cuda);
  if (needed <= available) return;
  throw Error(str("training this model needs about ", format_bytes(static_cast<double>(needed)),
                  " of GPU memory per rank (parameters, gradients and AdamW's state at ZeRO stage ", zero_stage,
                  " over ", dp_ranks, " data-parallel rank", dp_ranks == 1 ? "" : "s", ", and the activations of a "
                  "micro-batch of ", batch_size, " x ", seq_len, " tokens, recompute ", recompute_name(recompute),
                  ") but the GPU has ", format_bytes(static_cast<double>(available)), " free; ",
                  ZeroPolicy::exists(zero_stage + 1)
                      ? str("raise parallel.zero_stage (up to ", ZeroPolicy::kHighestStage, ") or ")
                      : "",
                  "use more data-parallel, tensor-parallel or pipeline ranks, a smaller micro_batch_size or seq_len, "
                  "train.recompute = \"full\", "
                  "precision bf16, or a smaller model"));
}

}  // namespace dt
