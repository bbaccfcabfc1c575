#include "plan/step_time.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/error.h"
#include "model/flops.h"
#include "model/stage.h"
#include "model/tensor_shard.h"
#include "model/transformer.h"
#include "parallel/pipeline/pipeline_parallel.h"
#include "parallel/pipeline/schedule_check.h"
#include "parallel/zero_policy.h"
#include "plan/collective_time.h"

namespace dt {
namespace {

// Flash attention's backward recomputes the scores and runs five products to the forward's two.
constexpr double kAttentionBackwardPerForward = 2.5;
// Streaming kernels pass over the activations a block keeps four times (step_time.h).
constexpr double kStreamingPassesPerKeptByte = 4;
// Attention without fusion keeps, per head and query, 5 bytes per key at 16 bits: the softmax
// output and the dropout output (2 bytes each) and the dropout mask (1) — Korthikanti et al.'s
// 5·a·s²·b per layer; scaled to the run's element size.
constexpr double kMaterializedScoreBytes = 5;
// AdamW per parameter: f32 master weight, gradient and two moments read, master and moments
// written; a 16-bit run also writes the compute copy.
constexpr double kOptimizerBytesPerParameter = 4 * 4 + 3 * 4;

// What one rank does for one micro-batch of a stage, by term: forward, and backward split into
// the input gradient's part and the weight gradient's (zero-bubble schedules run them apart).
struct Pass {
  double gemm = 0, attention = 0, streaming = 0, tensor_parallel = 0, context_parallel = 0, expert_parallel = 0;
  double seconds() const {
    return gemm + attention + streaming + tensor_parallel + context_parallel + expert_parallel;
  }
  Pass& operator+=(const Pass& o) {
    gemm += o.gemm, attention += o.attention, streaming += o.streaming;
    tensor_parallel += o.tensor_parallel, context_parallel += o.context_parallel, expert_parallel += o.expert_parallel;
    return *this;
  }
  Pass times(double k) const {
    return {gemm * k, attention * k, streaming * k, tensor_parallel * k, context_parallel * k,
            expert_parallel * k};
  }
};

struct StagePasses {
  Pass forward, backward_input, backward_weight;
  Pass backward() const {
    Pass b = backward_input;
    b += backward_weight;
    return b;
  }
};

class Estimator {
 public:
  Estimator(const ModelConfig& model, const StepLayout& l, const HardwareProfile& hw)
      : model_(model), l_(l), hw_(hw), dims_(shard_dims(model, {0, l.tp}, {0, l.ep})),
        element_(static_cast<double>(dtype_size(l.precision))),
        tokens_(static_cast<double>(l.micro_batch) * l.seq_len / l.cp), dense_block_(block(false)),
        expert_block_(block(true)), head_(head()) {}

  // The roofline time of an (m × k) @ (k × n) product in `dtype` (the run's precision by default),
  // or of `groups` of them over m rows in all with a (k × n) weight each (the experts' grouped
  // GEMM: it reaches a dense GEMM's efficiency only when each group has rows enough, which the
  // estimate assumes).
  double gemm(double m, double n, double k, double groups = 1, std::optional<DType> dtype = std::nullopt) const {
    const DType type = dtype.value_or(l_.precision);
    const double flops = 2 * m * n * k;
    const double bytes = static_cast<double>(dtype_size(type)) * (m * k + groups * k * n + m * n);
    return std::max(flops / (hw_.peak(type) * hw_.gemm_efficiency), streaming(bytes));
  }
  double streaming(double bytes) const { return bytes / (hw_.memory_bandwidth * hw_.memory_efficiency); }
  // The same product on FP8 operands (1 byte an element, the result in the run's precision), with
  // the quantization of both operands before it.
  double float8_gemm(double m, double n, double k, double groups) const {
    const double flops = 2 * m * n * k, operands = m * k + groups * k * n;
    const double reads = l_.fp8 == Float8Scaling::tensorwise ? 2 : 1;
    return std::max(flops / (hw_.peak(DType::f8e4m3) * hw_.gemm_efficiency), streaming(operands + m * n * element_)) +
           streaming(operands * (reads * element_ + 1));
  }

  // A stage's passes for one micro-batch: its blocks', and the head's where it holds it. A model's
  // blocks are of two kinds at most, dense and expert blocks (model/config.h), each timed once.
  StagePasses stage(const StageUnits& units) const {
    StagePasses s;
    for (int l = units.first_block; l < units.end_block; ++l) {
      const StagePasses& b = model_.moe_block(l) ? expert_block_ : dense_block_;
      s.forward += b.forward, s.backward_input += b.backward_input, s.backward_weight += b.backward_weight;
    }
    if (units.head)
      s.forward += head_.forward, s.backward_input += head_.backward_input, s.backward_weight += head_.backward_weight;
    return s;
  }

 private:
  // One dense or expert block, one micro-batch, on the busiest tensor-parallel rank: the first,
  // whose share of every split is the largest (model/tensor_shard.h). An expert block's experts
  // run on its assignments' rows (every token's top k, or fewer within a capacity), spread over
  // this rank's experts (under expert parallelism as many as it sends, the routing balanced),
  // their rows sent there and back by all-to-all, each way in forward and in backward, waited
  // for (parallel/expert/expert_parallel.h); the router in f32.
  StagePasses block(bool experts) const {
    const double C = model_.d_model, t = tokens_;
    // A block of the kind asked for: the first expert block, or the first dense one (none: not timed).
    const int layer = experts ? model_.moe.first_dense_layers : 0;
    if (experts != model_.moe_block(layer)) return {};
    // Of the model's query and key/value heads, 1 / (this rank's share): tp where the split is even.
    const double query_parts = static_cast<double>(model_.n_head) / dims_.heads.n_head();
    const double kv_parts = static_cast<double>(model_.kv_heads()) / dims_.heads.n_kv_head();
    StagePasses p;
    const double assigned = static_cast<double>(model_.moe.expert_rows(static_cast<int64_t>(t)));
    for (const LinearDeclaration* linear : declare_block(model_, layer).linears()) {
      const double in = static_cast<double>(linear->in_features(model_, dims_));
      const double out = static_cast<double>(linear->out_features(model_, dims_));
      const double rows = linear->per_expert ? assigned : t;
      const double groups = linear->per_expert ? static_cast<double>(dims_.local_experts.size()) : 1;
      if (l_.fp8 != Float8Scaling::none && float8_quantizes(linear->name)) {
        p.forward.gemm += float8_gemm(rows, out, in, groups);
        p.backward_input.gemm += float8_gemm(rows, in, out, groups);
        p.backward_weight.gemm += float8_gemm(out, in, rows, groups);
        continue;
      }
      const std::optional<DType> dtype = linear->name == "mlp.router" ? std::optional(DType::f32) : std::nullopt;
      p.forward.gemm += gemm(rows, out, in, groups, dtype);
      p.backward_input.gemm += gemm(rows, in, out, groups, dtype);
      p.backward_weight.gemm += gemm(out, in, rows, groups, dtype);
    }
    double kept = static_cast<double>(
        Stage::activation_bytes(model_, {.embeddings = false, .first_block = layer, .end_block = layer + 1, .head = false},
                                Recompute::none, l_.precision, l_.micro_batch, l_.seq_len / l_.cp, {0, l_.tp}, l_.sp,
                                false, {0, l_.ep})
            .kept);
    const double causal_flops = attention_core_flops(model_, l_.seq_len) * t / query_parts;
    if (l_.fused_attention) {
      const double attention = causal_flops / (hw_.peak(l_.precision) * hw_.attention_efficiency(l_.precision));
      p.forward.attention = attention;
      p.backward_input.attention = kAttentionBackwardPerForward * attention;
    } else {
      // QK^T and PV over every key, masked after: twice the causal products, as GEMMs.
      const double attention = 2 * causal_flops / (hw_.peak(l_.precision) * hw_.gemm_efficiency);
      p.forward.attention = attention;
      p.backward_input.attention = 2 * attention;
      kept += kMaterializedScoreBytes * dims_.heads.n_head() * t * l_.seq_len * element_ / 2;
    }
    p.forward.streaming = p.backward_input.streaming = streaming(kStreamingPassesPerKeptByte / 2 * kept);
    // A dense block: two collectives of the block's activations each way (all-reduces, or under
    // sequence parallelism an all-gather and a reduce-scatter each: the same ring time). An
    // expert block's MLP (model/moe_mlp.h) has only its shared expert's, where it has one; under
    // sequence parallelism it gathers its input forward, and backward its output's gradient (and
    // the gated shared expert's) and its input again, each half an all-reduce's time.
    const GroupPlacement tp_group = GroupPlacement::of(l_.tp, 1, l_.gpus_per_node);
    const double all_reduce = collective_seconds(hw_, tp_group, CollectiveKind::all_reduce, t * C * element_);
    const double shared = model_.moe.shared_hidden > 0 ? 1 : 0, gated = model_.moe.shared_gate ? 1 : 0;
    const double gathers = l_.sp ? 0.5 : 0;
    p.forward.tensor_parallel = all_reduce * (experts ? 1 + shared + gathers : 2);
    p.backward_input.tensor_parallel = all_reduce * (experts ? 1 + shared + gathers * (2 + gated) : 2);
    if (experts && l_.ep > 1) {
      const GroupPlacement ep_group = GroupPlacement::of(l_.ep, l_.tp, l_.gpus_per_node);
      p.forward.expert_parallel = p.backward_input.expert_parallel =
          2 * collective_seconds(hw_, ep_group, CollectiveKind::all_to_all, assigned * C * element_);
    }
    if (l_.cp > 1) {
      // Key/value blocks around the ring, behind the attention compute where they fit.
      const double kv = t * 2.0 * model_.kv_heads() * model_.head_size() / kv_parts * element_;
      const bool spans = GroupPlacement::of(l_.cp, l_.tp, l_.gpus_per_node).spans_nodes;
      const double message = message_seconds(hw_, spans, kv);
      p.forward.context_parallel = std::max(0.0, (l_.cp - 1) * message - p.forward.attention);
      p.backward_input.context_parallel = std::max(0.0, 2 * (l_.cp - 1) * message - p.backward_input.attention);
    }
    // Recomputation repeats forward work inside the backward.
    if (l_.recompute == Recompute::full) p.backward_input += p.forward;
    if (l_.recompute == Recompute::selective) p.backward_input.attention += p.forward.attention;
    return p;
  }

  // The head's projection and the fused classifier's passes over the logits, one micro-batch.
  StagePasses head() const {
    // The padded vocabulary's rows over the ranks (the first holds at most a pad multiple more).
    const double C = model_.d_model, t = tokens_, V = model_.padded_vocab_size() / static_cast<double>(l_.tp);
    StagePasses p;
    p.forward.gemm = gemm(t, V, C);
    p.backward_input.gemm = gemm(t, C, V);
    p.backward_weight.gemm = gemm(V, C, t);
    p.forward.streaming = streaming(2 * t * V * element_);  // the classifier reads the logits, writes their gradient
    return p;
  }

  const ModelConfig& model_;
  const StepLayout& l_;
  const HardwareProfile& hw_;
  ShardDims dims_;  // the busiest tensor-parallel rank's sizes
  double element_, tokens_;
  StagePasses dense_block_, expert_block_, head_;  // after the members block() and head() read
};

// One of the rank's passes: the mean over its stages (interleaved and V schedules hold several),
// what the schedule's replay times each action with.
StagePasses rank_passes(const Estimator& e, const RankStages& stages) {
  StagePasses sum;
  for (const int s : stages.held) {
    const StagePasses p = e.stage(stages.all[static_cast<size_t>(s)]);
    sum.forward += p.forward, sum.backward_input += p.backward_input, sum.backward_weight += p.backward_weight;
  }
  const double k = 1.0 / static_cast<double>(stages.held.size());
  return {sum.forward.times(k), sum.backward_input.times(k), sum.backward_weight.times(k)};
}

}  // namespace

StepTime predict_step_time(const ModelConfig& model, const StepLayout& l, const HardwareProfile& hw) {
  DT_CHECK(l.dp >= 1 && l.tp >= 1 && l.pp >= 1 && l.cp >= 1 && l.micro_batch >= 1 && l.micro_batches >= 1 &&
               l.seq_len >= l.cp,
           "plan: layout dp ", l.dp, " tp ", l.tp, " pp ", l.pp, " cp ", l.cp, ", ", l.micro_batches,
           " micro-batches of ", l.micro_batch, " x ", l.seq_len);
  const Estimator e(model, l, hw);
  StepTime r;

  // The pipeline: each rank's stages, timed per micro-batch, replayed through the schedule.
  std::vector<RankStages> ranks;
  pipeline::Schedule schedule;
  if (l.pp > 1) {
    schedule = pipeline::make_schedule(l.schedule, l.pp, l.micro_batches, l.pp_virtual);
    for (int rank = 0; rank < l.pp; ++rank)
      ranks.push_back(pipeline::PipelineParallel::rank_stages(model, schedule, rank, l.seq_len));
  } else {
    ranks.push_back({.all = {StageUnits::whole(model)}, .held = {0}, .deferred_weights = false});
  }
  std::vector<StagePasses> passes;
  std::vector<pipeline::PassTimes> times;
  for (const RankStages& stages : ranks) {
    passes.push_back(rank_passes(e, stages));
    const StagePasses& p = passes.back();
    times.push_back({.forward = p.forward.seconds(),
                     .backward = p.backward().seconds(),
                     .backward_input = p.backward_input.seconds(),
                     .backward_weight = p.backward_weight.seconds()});
  }
  // The busiest rank carries the step's compute terms.
  size_t busiest = 0;
  double makespan = 0;
  if (l.pp > 1) {
    const pipeline::ScheduleCheck replay = pipeline::check_schedule(schedule, times);
    DT_CHECK(replay.ok(), "plan: the ", l.schedule, " schedule does not run: ", replay.problem);
    busiest = static_cast<size_t>(std::max_element(replay.busy.begin(), replay.busy.end()) - replay.busy.begin());
    makespan = replay.makespan;
  }
  // Each micro-batch runs every stage the rank holds (several under interleaved and V schedules).
  const StagePasses& p = passes[busiest];
  Pass work = p.forward;
  work += p.backward();
  work = work.times(static_cast<double>(l.micro_batches) * static_cast<double>(ranks[busiest].held.size()));
  r.gemm = work.gemm, r.attention = work.attention, r.streaming = work.streaming;
  r.tensor_parallel = work.tensor_parallel, r.context_parallel = work.context_parallel;
  r.expert_parallel = work.expert_parallel;
  if (l.pp == 1) makespan = work.seconds();
  r.bubble = makespan - work.seconds();

  // Activations and their gradients between stages while the pipeline fills and drains.
  if (l.pp > 1) {
    const double boundary = static_cast<double>(l.micro_batch) * l.seq_len / l.cp * model.d_model /
                            (l.sp ? l.tp : 1) * static_cast<double>(dtype_size(l.precision));
    const bool spans = GroupPlacement::of(l.pp, l.tp * l.cp * l.dp, l.gpus_per_node).spans_nodes;
    r.pipeline_transfers = 2.0 * (l.pp - 1) * message_seconds(hw, spans, boundary);
  }

  // The rank's parameters, gradients and optimizer shard, from the engine's own layout.
  const int replicas = l.dp * l.cp;
  const ZeroPolicy zero = ZeroPolicy::of(l.zero_stage, l.precision, replicas);
  const ParameterStorage storage = zero.storage();
  std::vector<StageUnits> held;
  for (const int s : ranks[busiest].held) held.push_back(ranks[busiest].all[static_cast<size_t>(s)]);
  const ParameterLayout layout(model, storage.unit_multiple, {0, l.tp}, HeldUnits::of(held, model.n_layer),
                               {0, l.ep});
  const double parameters = static_cast<double>(layout.total_elements());
  const Transformer::ParameterBuffers buffers = Transformer::parameter_buffers(l.precision, storage);
  const double gradient_bytes = parameters * static_cast<double>(dtype_size(buffers.grads.dtype));
  const double weight_bytes = parameters * static_cast<double>(dtype_size(l.precision));
  const GroupPlacement dp_group = GroupPlacement::of(replicas, l.tp, l.gpus_per_node);
  const double last_backward = p.backward().seconds();
  if (replicas > 1) {
    const CollectiveKind reduce = zero.reduction() == ZeroPolicy::Reduction::all_reduce_buckets
                                      ? CollectiveKind::all_reduce
                                      : CollectiveKind::reduce_scatter;
    r.data_parallel = std::max(0.0, collective_seconds(hw, dp_group, reduce, gradient_bytes) - last_backward);
    const double gather = collective_seconds(hw, dp_group, CollectiveKind::all_gather, weight_bytes);
    if (zero.gathers_weights() == ZeroPolicy::Gather::after_update) r.data_parallel += gather;
    // Before every forward and backward, behind the other passes' compute.
    if (zero.gathers_weights() == ZeroPolicy::Gather::before_each_pass)
      r.data_parallel += l.micro_batches * (std::max(0.0, gather - p.forward.seconds()) +
                                            std::max(0.0, gather - last_backward));
  }
  const double optimizer_parameters = static_cast<double>(zero.optimizer_elements(layout));
  const double copy = l.precision == DType::f32 ? 0.0 : static_cast<double>(dtype_size(l.precision));
  r.optimizer = e.streaming(optimizer_parameters * (kOptimizerBytesPerParameter + copy));

  r.total = makespan + r.pipeline_transfers + r.data_parallel + r.optimizer;
  const double tokens = static_cast<double>(l.global_batch()) * l.seq_len;
  const StepFlops flops = training_flops(model, l.seq_len, static_cast<int64_t>(tokens), l.recompute);
  r.model_flops = flops.model, r.hardware_flops = flops.hardware;
  r.tokens_per_s = tokens / r.total;
  r.model_tflops_per_gpu = flops.model / r.total / l.gpus() / 1e12;
  r.hardware_tflops_per_gpu = flops.hardware / r.total / l.gpus() / 1e12;
  r.mfu = flops.model / r.total / l.gpus() / hw.peak(l.precision);
  return r;
}

}  // namespace dt
