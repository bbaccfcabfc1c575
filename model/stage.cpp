#include "model/stage.h"

#include <algorithm>
#include <array>

#include "core/device.h"

namespace dt {

namespace k = kernels;

namespace {

// The sum of per-token losses (f32), in token order on the CPU: the same number on every device.
double sum_in_order(Tensor losses) {
  double sum = 0;
  for (const float loss : host_values<float>(losses)) sum += loss;
  return sum;
}

}  // namespace

// Where each activation lives. Activations are in the model's precision; per-row statistics
// (norm mean and rstd, attention lse, losses) in f32. With sequence parallelism the stage's
// input, the norms' activations and the residual stream hold this rank's rows (local)
// (rank_rows of them at most); everything else holds all of them.
struct Stage::ActivationRegions {
  struct Block {
    bool experts = false;  // an expert block (ModelConfig::moe_block)
    std::array<ActivationRegion, kBlockActivations> activations;  // by BlockActivation
    // Kept for a deferred weight pass: an expert block's dexpert_fch, dlogits and dshared_fch in
    // place of dfch.
    ActivationRegion dout, dres2, dfch, dqkv, dexpert_fch, dlogits, dshared_fch;
    const ActivationRegion& operator[](BlockActivation a) const { return activations[static_cast<size_t>(a)]; }
  };
  // An expert block's working space (model/block_tensors.h), in scratch: none in a stage without
  // one, the router's f32 copies none in f32, its logits none where the z-loss keeps them, the
  // scores' gradient none without the balance loss, the shared expert's none without one, where
  // the rows travel none without expert parallelism.
  struct ExpertScratch {
    ActivationRegion router_in, router_weight, logits, routed, probs, z, sent, result, staging;
    ActivationRegion dexpert_out, dresult, dexpert_act, dexpert_fch, dweights, dlogits, drouter_in, dscores;
    ActivationRegion dshared_out, dshared_act, dshared_fch, dshared_gate, dgate_in;
  };
  ActivationRegion input;  // the embeddings' output, or the previous stage's output
  std::vector<Block> blocks;
  ActivationRegion lnf, lnf_mean, lnf_rstd, logits, losses;  // the head's
  ActivationRegion dres, dtmp, dqkv, dfch, dact;             // backward's, in scratch
  ExpertScratch experts;
  // Sequence parallelism's, in scratch (no width without it): a column-parallel layer's whole
  // input, and this rank's rows for a row-parallel layer's output or its input's gradient.
  ActivationRegion gathered, local;
  // The query and key norms' working space, in scratch (no width without them; model/qk_norm.h).
  ActivationRegion qk_rows, dqk_rows;
  ActivationRegion dinput;  // deferred weight passes: the stage input's gradient, kept
  ActivationBytes bytes;

  // `d`: this rank's widths (the model's on one rank).
  ActivationRegions(const ModelConfig& c, const ShardDims& d, StageUnits units, Recompute recompute, DType precision,
          int64_t sequences, int64_t max_rows, int64_t rank_rows, bool sequence_parallel, bool deferred_weights) {
    RegionLayout kept(ActivationPool::kept, max_rows), shared(ActivationPool::shared, max_rows),
        scratch(ActivationPool::scratch, max_rows);
    const int64_t C = c.d_model, F = d.ffn_hidden(), QKV = d.qkv_width();
    const int64_t F_in = d.ffn_in_width(c);
    const bool layernorm = c.traits().norm == NormKind::layernorm;
    input = kept.add(C, precision, rank_rows);
    // A kept activation has a region per block and micro-batch; one the policy rebuilds in
    // backward has one shared region that every block uses, rebuilt for the block at hand.
    std::array<std::optional<ActivationRegion>, kBlockActivations> once;
    for (int l = units.first_block; l < units.end_block; ++l) {
      Block& b = blocks.emplace_back();
      b.experts = c.moe_block(l);
      for (const ActivationDeclaration& a : declare_block(c, l).activations) {
        const int64_t width = a.width_of(c, d), rows = a.rows_of(c, d, max_rows, rank_rows, sequences);
        std::optional<ActivationRegion>& shared_region = once[static_cast<size_t>(a.id)];
        if (!a.kept(recompute) && !shared_region) shared_region = shared.add(width, a.dtype(precision), rows);
        b.activations[static_cast<size_t>(a.id)] =
            a.kept(recompute) ? kept.add(width, a.dtype(precision), rows) : *shared_region;
      }
    }
    // What a deferred weight pass reads beside the activations: each block's output gradient and
    // x''s (this rank's rows), and its fc and qkv outputs' gradients.
    const int64_t E = d.experts, top_k = c.moe.routing.top_k, F_e = d.expert_hidden, F_s = d.shared_ffn.size();
    // The micro-batch's rows' assignments (every rank of a tensor-parallel group routes them all),
    // and the experts' output gradient's, which also serves as scratch of N rows; the rows this
    // rank's experts receive, and whether they travel.
    const int64_t assignments = c.moe.expert_rows(max_rows), dy_rows = std::max(assignments, max_rows);
    const int64_t received = c.moe.received_rows(max_rows, d.local_experts.size(), d.expert_ranks);
    const int64_t travelling = d.expert_ranks > 1 ? C : 0;
    for (Block& b : blocks) {
      if (!deferred_weights) break;
      b.dout = kept.add(C, precision, rank_rows), b.dres2 = kept.add(C, precision, rank_rows);
      b.dqkv = kept.add(QKV, precision);
      if (!b.experts) {
        b.dfch = kept.add(F_in, precision);
        continue;
      }
      b.dexpert_fch = kept.add(2 * F_e, precision, received), b.dlogits = kept.add(E, DType::f32);
      b.dshared_fch = kept.add(2 * F_s, precision);
    }
    if (deferred_weights) dinput = kept.add(C, precision, rank_rows);
    if (units.head) {
      lnf = kept.add(C, precision, rank_rows), lnf_mean = kept.add(layernorm ? 1 : 0, DType::f32, rank_rows),
      lnf_rstd = kept.add(1, DType::f32, rank_rows);
      logits = kept.add(d.padded_vocab, precision), losses = kept.add(1, DType::f32);
    }
    // dtmp holds the attention output's gradient too (A <= C), and the embeddings' lookup.
    dres = scratch.add(C, precision, rank_rows), dtmp = scratch.add(C, precision);
    dqkv = scratch.add(QKV, precision), dfch = scratch.add(F_in, precision), dact = scratch.add(F, precision);
    gathered = scratch.add(sequence_parallel ? C : 0, precision);
    local = scratch.add(sequence_parallel ? C : 0, precision, rank_rows);
    const int64_t query = c.qk_norm ? span_width(d, Span::query_heads) : 0;
    qk_rows = scratch.add(query, precision), dqk_rows = scratch.add(query, precision);
    if (std::ranges::any_of(blocks, &Block::experts)) {
      const int64_t widened = precision == DType::f32 ? 0 : C;
      experts = {.router_in = scratch.add(widened, DType::f32),
                 .router_weight = scratch.add(widened, DType::f32, E),
                 .logits = scratch.add(c.moe.z_loss_coef > 0 ? 0 : E, DType::f32),
                 .routed = scratch.add(C, precision),
                 .probs = scratch.add(c.moe.aux_loss_coef > 0 ? E : 0, DType::f32, sequences),
                 .z = scratch.add(c.moe.z_loss_coef > 0 ? 1 : 0, DType::f32, sequences),
                 .sent = scratch.add(travelling, precision, assignments),
                 .result = scratch.add(travelling, precision, received),
                 .staging = scratch.add(travelling, precision, received),
                 .dexpert_out = scratch.add(C, precision, dy_rows),
                 .dresult = scratch.add(travelling, precision, received),
                 .dexpert_act = scratch.add(F_e, precision, received),
                 .dexpert_fch = scratch.add(2 * F_e, precision, received),
                 .dweights = scratch.add(top_k, DType::f32),
                 .dlogits = scratch.add(E, DType::f32),
                 .drouter_in = scratch.add(C, DType::f32),
                 .dscores = scratch.add(c.moe.aux_loss_coef > 0 ? E : 0, DType::f32),
                 .dshared_out = scratch.add(F_s > 0 && c.moe.shared_gate ? C : 0, precision, rank_rows),
                 .dshared_act = scratch.add(F_s, precision),
                 .dshared_fch = scratch.add(2 * F_s, precision),
                 .dshared_gate = scratch.add(F_s > 0 && c.moe.shared_gate ? 1 : 0, DType::f32, rank_rows),
                 .dgate_in = scratch.add(F_s > 0 && c.moe.shared_gate ? C : 0, DType::f32, rank_rows)};
    }
    bytes = {.kept = kept.bytes(), .shared = shared.bytes(), .scratch = scratch.bytes()};
  }
};

namespace {

// The most rows of `max_rows` a rank holds in the norms and the residual stream: the first
// rank's, whose part is the largest.
int64_t rank_rows(int64_t max_rows, int ranks, bool sequence_parallel) {
  return sequence_rows(max_rows, {0, ranks}, sequence_parallel);
}

}  // namespace

Stage::Stage(const ParameterLayout& layout, StageUnits units, Recompute recompute, DType precision, Device device,
             int batch_size, int seq_len, ParallelRegions& regions, bool deferred_weights, const AttentionScope& scope,
             const LinearStates& states, ExpertExchange& experts)
    : config_(layout.config()),
      dims_(layout.dims()),
      units_(units),
      parallel_(regions),
      scope_(scope),
      order_(layout, units),
      activation_regions_(std::make_unique<ActivationRegions>(
          config_, dims_, units, recompute, precision, batch_size, int64_t{batch_size} * seq_len,
          rank_rows(int64_t{batch_size} * seq_len, layout.shard().size, regions.sequence_parallel()),
          regions.sequence_parallel(), deferred_weights)),
      store_(activation_regions_->bytes.kept, activation_regions_->bytes.shared, activation_regions_->bytes.scratch,
             device, /*reserved=*/1),
      deferred_weights_(deferred_weights) {
  // A deferred weight pass reads the activations of its own micro-batch: none may be rebuilt for
  // another in between.
  DT_CHECK(!deferred_weights || recompute == Recompute::none,
           "deferred weight passes keep every activation: recompute must be none, not ", recompute_name(recompute));
  DT_CHECK(0 <= units.first_block && units.first_block <= units.end_block && units.end_block <= config_.n_layer,
           "stage blocks [", units.first_block, ", ", units.end_block, ") outside the model's ", config_.n_layer);
  DT_CHECK(regions.shard().rank == layout.shard().rank && regions.shard().size == layout.shard().size,
           "a stage of tensor-parallel rank ", layout.shard().rank, " of ", layout.shard().size,
           " communicating as rank ", regions.shard().rank, " of ", regions.shard().size);
  DT_CHECK((!units.embeddings || layout.held_units().embeddings) && (!units.head || layout.held_units().head),
           "a stage with units its layout does not hold");
  for (int l = units.first_block; l < units.end_block; ++l) {
    blocks_.emplace_back(layout, l, recompute, regions, states, scope, experts);
    expert_records_.push_back({.loads = std::vector<int64_t>(config_.moe_block(l) ? config_.moe.experts : 0, 0)});
  }
  if (units.embeddings) embedding_.emplace(layout);
  if (units.head) {
    ln_f_.emplace(layout, "ln_f");
    output_ = ColumnParallelLinear::output_projection(layout, regions, states.qat());
  }
  if (config_.traits().positions == PositionKind::rotary) rope_ = make_rope_tables(config_, seq_len, device);
}

Stage::~Stage() = default;

void Stage::reset_expert_records() {
  for (ExpertRecord& record : expert_records_) record = {.loads = std::vector<int64_t>(record.loads.size(), 0)};
}

ActivationBytes Stage::activation_bytes(const ModelConfig& config, StageUnits units, Recompute recompute,
                                        DType precision, int batch_size, int seq_len, TensorShard shard,
                                        bool sequence_parallel, bool deferred_weights, ExpertShard experts) {
  const int64_t rows = int64_t{batch_size} * seq_len;
  return ActivationRegions(config, shard_dims(config, shard, experts), units, recompute, precision, batch_size, rows,
                 rank_rows(rows, shard.size, sequence_parallel), sequence_parallel, deferred_weights)
      .bytes;
}

float Stage::loss_scale() const {
  const bool router_losses = config_.moe.aux_loss_coef > 0 || config_.moe.z_loss_coef > 0;
  DT_CHECK(loss_scale_.has_value() || !router_losses,
           "a backward of a model whose routers train with auxiliary losses, before set_loss_scale: their gradients "
           "need the scale the token losses' gradient carries");
  return loss_scale_.value_or(0.0f);
}

Tensor Stage::rows(int k, const ActivationRegion& r, int64_t N) const {
  return r.width == 0 ? Tensor{} : region(k, r, N).reshape({N});
}

BlockActivations Stage::block_activations(int k, size_t i, int64_t N) const {
  using A = BlockActivation;
  const ActivationRegions::Block& b = activation_regions_->blocks[i];
  const int64_t P = parallel_.rows(N).size();  // this rank's rows of the norms and the residual stream
  const auto all = [&](const ActivationRegion& r) { return region(k, r, N); };
  const auto mine = [&](const ActivationRegion& r) { return region(k, r, P); };
  // The branch outputs go through dtmp (and local): free in forward, and in backward when full
  // recomputation reruns a block (the block above has consumed it; dres is kept).
  BlockActivations a{.ln1 = mine(b[A::ln1]), .ln1_mean = rows(k, b[A::ln1_mean], P),
                     .ln1_rstd = rows(k, b[A::ln1_rstd], P), .qkv = all(b[A::qkv]), .atty = all(b[A::atty]),
                     .lse = all(b[A::lse]), .proj_out = all(activation_regions_->dtmp), .res2 = mine(b[A::res2]),
                     .ln2 = mine(b[A::ln2]), .ln2_mean = rows(k, b[A::ln2_mean], P),
                     .ln2_rstd = rows(k, b[A::ln2_rstd], P),
                     .fch = b.experts ? Tensor{} : all(b[A::fch]),
                     .fch_act = b.experts ? Tensor{} : all(b[A::fch_act]), .res3 = mine(b[A::res3]),
                     .branch = mine(activation_regions_->local), .gathered = all(activation_regions_->gathered)};
  if (config_.qk_norm)
    a.qk = {.q_in = all(b[A::q_in]), .k_in = all(b[A::k_in]), .q_rstd = rows(k, b[A::q_rstd], N),
            .k_rstd = rows(k, b[A::k_rstd], N), .rows = all(activation_regions_->qk_rows)};
  if (!b.experts) return a;
  const ActivationRegions::ExpertScratch& s = activation_regions_->experts;
  const auto assigned = [&](const ActivationRegion& r) { return region(k, r, config_.moe.expert_rows(N)); };
  const auto received = [&](const ActivationRegion& r) { return region(k, r, received_rows(N)); };
  const int64_t B = shapes_.at(k).B;
  a.experts = {.scores = all(b[A::route_scores]), .experts = all(b[A::route_experts]),
               .weights = all(b[A::route_weights]), .rows = all(b[A::route_rows]),
               .expert_in = received(b[A::expert_in]), .expert_fch = received(b[A::expert_fch]),
               .expert_act = received(b[A::expert_act]), .expert_out = assigned(b[A::expert_out]),
               .counts = region(k, b[A::route_counts], B), .router_in = all(s.router_in),
               .router_weight = region(k, s.router_weight, dims_.experts),
               .logits = all(config_.moe.z_loss_coef > 0 ? b[A::route_logits] : s.logits), .routed = all(s.routed),
               .probs = region(k, s.probs, B), .z = rows(k, s.z, B)};
  if (b[A::route_counts].width == 0) a.experts.counts = a.experts.probs = Tensor{};
  // Without expert parallelism the rows stay: the experts read them where they are put, and write
  // where they return.
  const bool travel = s.sent.width > 0;
  a.experts.sent = travel ? assigned(s.sent) : a.experts.expert_in;
  a.experts.result = travel ? received(s.result) : a.experts.expert_out;
  if (travel) a.experts.staging = received(s.staging);
  if (config_.moe.shared_hidden > 0) {
    a.experts.shared_fch = all(b[A::shared_fch]), a.experts.shared_act = all(b[A::shared_act]);
    a.experts.shared_out = mine(b[A::shared_out]);
    if (config_.moe.shared_gate) a.experts.shared_gate = rows(k, b[A::shared_gate], P);
  }
  return a;
}

ExpertGradients Stage::expert_gradients(int k, size_t i, int64_t N, bool deferred) const {
  const ActivationRegions::Block& b = activation_regions_->blocks[i];
  if (!b.experts) return {};
  const ActivationRegions::ExpertScratch& s = activation_regions_->experts;
  const int64_t P = parallel_.rows(N).size();
  const auto mine = [&](const ActivationRegion& r) { return region(k, r, P); };
  const auto all = [&](const ActivationRegion& r) { return region(k, r, N); };
  const auto received = [&](const ActivationRegion& r) { return region(k, r, received_rows(N)); };
  const Tensor dexpert_out = region(k, s.dexpert_out, std::max(config_.moe.expert_rows(N), N));
  ExpertGradients g{.dexpert_out = dexpert_out,
                    .dresult = s.dresult.width > 0 ? received(s.dresult) : dexpert_out,
                    .dexpert_act = received(s.dexpert_act),
                    .dexpert_fch = received(deferred ? b.dexpert_fch : s.dexpert_fch), .dweights = all(s.dweights),
                    .dlogits = all(deferred ? b.dlogits : s.dlogits), .drouter_in = all(s.drouter_in),
                    .dscores = s.dscores.width == 0 ? Tensor{} : all(s.dscores), .loss_scale = loss_scale()};
  if (config_.moe.shared_hidden > 0) {
    g.dshared_act = all(s.dshared_act), g.dshared_fch = all(deferred ? b.dshared_fch : s.dshared_fch);
    if (config_.moe.shared_gate)
      g.dshared_out = mine(s.dshared_out), g.dshared_gate = rows(k, s.dshared_gate, P), g.dgate_in = mine(s.dgate_in);
  }
  return g;
}

BlockGradients Stage::deferred_gradients(int k, size_t i, int64_t N) const {
  const ActivationRegions& r = *activation_regions_;
  const ActivationRegions::Block& b = r.blocks[i];
  const int64_t P = parallel_.rows(N).size();
  const auto mine = [&](const ActivationRegion& region) { return store_.view(k, region, P); };
  const auto all = [&](const ActivationRegion& region) { return store_.view(k, region, N); };
  const Tensor dtmp = all(r.dtmp);
  return {.dout = mine(b.dout), .dres2 = mine(b.dres2), .din = mine(i == 0 ? r.dinput : r.blocks[i - 1].dout),
          .dtmp = dtmp,
          .datty = dtmp.reshape({dtmp.numel()}).slice_rows(0, N * dims_.attention_width()).reshape(
              {N, dims_.attention_width()}),
          .dact = all(r.dact), .dfch = all(b.dfch), .dqkv = all(b.dqkv), .dlocal = mine(r.local),
          .dqk_rows = all(r.dqk_rows), .experts = expert_gradients(k, i, N, /*deferred=*/true)};
}

Tensor Stage::block_input(int k, size_t i, int64_t N) const {
  return region(k, i == 0 ? activation_regions_->input : activation_regions_->blocks[i - 1][BlockActivation::res3], parallel_.rows(N).size());
}

Stage::UnitOrder::UnitOrder(const ParameterLayout& layout, StageUnits units)
    : embeddings(units.embeddings), head(units.head) {
  if (units.embeddings) forward.push_back(layout.embeddings_unit());
  for (int l = units.first_block; l < units.end_block; ++l) forward.push_back(layout.block_unit(l));
  if (units.head) {
    head_unit = layout.head_unit();
    output_unit = layout.unit_of(output_projection_weight(layout));
    forward.push_back(head_unit);
  }
}

std::optional<size_t> Stage::UnitOrder::forward_next(size_t u) const {
  const auto at = std::ranges::find(forward, u);
  return at + 1 < forward.end() ? std::optional<size_t>(*(at + 1)) : std::nullopt;
}

std::optional<size_t> Stage::UnitOrder::backward_next(size_t u) const {
  // The lookup's backward reads no weights: backward needs the embeddings' weights only when tied.
  const auto at = std::ranges::find(forward, u);
  const auto first = forward.begin() + (embeddings ? 1 : 0);
  return at > first && at != forward.end() ? std::optional<size_t>(*(at - 1)) : std::nullopt;
}

std::vector<UnitHookCall> Stage::unit_hook_calls(const ParameterLayout& layout, StageUnits units) {
  // forward() and backward()'s calls, in their order (stage_test.cpp records theirs against these).
  using Hook = UnitHookCall::Hook;
  const UnitOrder order(layout, units);
  std::vector<UnitHookCall> calls;
  const auto call = [&](Hook hook, size_t u, std::optional<size_t> next = std::nullopt) {
    calls.push_back({hook, u, next});
  };
  const size_t blocks_begin = units.embeddings ? 1 : 0;
  const size_t blocks_end = blocks_begin + static_cast<size_t>(units.end_block - units.first_block);
  if (units.embeddings) {
    call(Hook::weights_needed, 0, order.forward_next(0));
    if (!order.tied_here()) call(Hook::weights_done, 0);
  }
  for (size_t i = blocks_begin; i < blocks_end; ++i) {
    call(Hook::weights_needed, order.forward[i], order.forward_next(order.forward[i]));
    call(Hook::weights_done, order.forward[i]);
  }
  if (units.head) {
    call(Hook::weights_needed, order.head_unit);  // held into backward, which starts with it
    call(Hook::weights_needed, order.head_unit, order.backward_next(order.head_unit));
    call(Hook::weights_needed, order.output_unit);
    call(Hook::gradients_needed, order.head_unit);
    call(Hook::gradients_needed, order.output_unit);
    if (order.output_unit != order.head_unit) call(Hook::weights_done, order.output_unit);
    call(Hook::weights_done, order.head_unit);
    call(Hook::gradients_final, order.head_unit);
  }
  for (size_t i = blocks_end; i-- > blocks_begin;) {
    call(Hook::weights_needed, order.forward[i], order.backward_next(order.forward[i]));
    call(Hook::gradients_needed, order.forward[i]);
    call(Hook::weights_done, order.forward[i]);
    call(Hook::gradients_final, order.forward[i]);
  }
  if (units.embeddings) {
    call(Hook::gradients_needed, 0);
    call(Hook::gradients_final, 0);
  }
  return calls;
}

void Stage::weights_needed(size_t u, std::optional<size_t> next) const {
  if (hooks_ != nullptr) hooks_->weights_needed(u, next);
}
void Stage::weights_done(size_t u) const {
  if (hooks_ != nullptr) hooks_->weights_done(u);
}
void Stage::gradients_needed(size_t u) const {
  if (hooks_ != nullptr) hooks_->gradients_needed(u);
}
void Stage::gradients_final(size_t u) const {
  if (hooks_ != nullptr) hooks_->gradients_final(u);
}

int64_t Stage::boundary_rows(int64_t tokens) const { return parallel_.rows(tokens).size(); }

Tensor Stage::forward(int k, Tensor in, const FlatTensors& weights, bool backward_follows, Shape tokens) {
  DT_CHECK(units_.embeddings ? in.dtype == DType::i32 && in.ndim() == 2 : tokens.ndim() == 2,
           "a stage's input: tokens (B, T) to the embeddings, else activations with the tokens' shape");
  if (units_.embeddings) tokens = in.shape;
  const int64_t B = tokens[0], T = tokens[1], N = B * T, C = config_.d_model;
  DT_CHECK(units_.embeddings || in.numel() == boundary_rows(N) * C, "stage input ", in.describe(), " for ", N,
           " tokens");
  if (!store_.held(k)) store_.hold(k);
  shapes_[k] = {B, T};
  const Tensor x = block_input(k, 0, N);
  // A tied wte is read again by the output projection.
  const bool tied_here = order_.tied_here();
  if (units_.embeddings) {
    weights_needed(0, order_.forward_next(0));
    // This rank's vocabulary rows looked up: the sum over the group is the lookup, of this rank's
    // rows with sequence parallelism (the whole lookup then goes through dtmp).
    const Tensor lookup = parallel_.sequence_parallel() ? region(k, activation_regions_->dtmp, N) : x;
    embedding_->forward(weights, lookup, in, scope_.positions(T));
    parallel_.row_output(lookup, x);
    if (!tied_here) weights_done(0);
  } else {
    copy_bytes(x.data, x.device, in.data, in.device, x.bytes());
  }
  const std::unique_ptr<TrainingAttention> attention = scope_.core(dims_.heads.attention(), B, T, rope_.cos, rope_.sin);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const size_t u = blocks_[i].unit();
    weights_needed(u, order_.forward_next(u));
    BlockActivations a = block_activations(k, i, N);
    if (!expert_records_[i].loads.empty()) a.experts.record = &expert_records_[i];
    blocks_[i].forward(weights, block_input(k, i, N), a, *attention);
    weights_done(u);
  }
  const Tensor out = block_input(k, blocks_.size(), N);
  if (!units_.head) return out;
  const ActivationRegions& r = *activation_regions_;
  const int64_t P = out.dim(0);
  weights_needed(order_.head_unit, std::nullopt);
  const Tensor lnf = region(k, r.lnf, P), logits = region(k, r.logits, N);
  ln_f_->forward(weights, lnf, rows(k, r.lnf_mean, P), rows(k, r.lnf_rstd, P), out);
  // Padding rows of the output weight are zero, so padding columns of the logits are zero; the
  // loss never reads them and sets their gradient to zero.
  output_->forward(weights, logits, lnf, region(k, r.gathered, N));
  if (backward_follows) return logits;  // it starts with the head
  weights_done(order_.head_unit);
  if (tied_here) weights_done(0);
  return logits;
}

double Stage::loss(int k, Tensor targets, float loss_scale, bool with_gradient) {
  DT_CHECK(units_.head, "the loss is computed by the stage with the head");
  const int64_t N = targets.numel();
  const Tensor losses = rows(k, activation_regions_->losses, N), logits = region(k, activation_regions_->logits, N);
  parallel_.cross_entropy(losses, logits, targets.reshape({N}), dims_.vocab, with_gradient, loss_scale);
  return sum_in_order(losses);
}

Tensor Stage::backward(int k, Tensor dout, Tensor tokens, const FlatTensors& weights, const FlatTensors& grads,
                       bool weights_now) {
  DT_CHECK(weights_now || (deferred_weights_ && hooks_ == nullptr),
           "a deferred weight pass needs a stage made with deferred_weights, and no unit hooks");
  const auto [B, T] = shapes_.at(k);
  const int64_t N = B * T;
  const ActivationRegions& r = *activation_regions_;
  const int64_t P = parallel_.rows(N).size();
  const auto scratch = [&](const ActivationRegion& region) { return store_.view(k, region, N); };
  // dres carries the gradient of the residual stream (this rank's rows) down through the blocks,
  // updated in place: each branch's norm backward adds into it (kernels/layernorm.h and
  // rmsnorm.h accumulate dinp).
  const Tensor dres = store_.view(k, r.dres, P), dtmp = scratch(r.dtmp), dlocal = store_.view(k, r.local, P);
  const Tensor gathered = scratch(r.gathered);
  const Tensor out = block_input(k, blocks_.size(), N);
  if (units_.head) {
    const Tensor dlogits = region(k, r.logits, N);
    weights_needed(order_.head_unit, order_.backward_next(order_.head_unit));
    weights_needed(order_.output_unit, std::nullopt);  // the head's, or a tied wte, still held from forward
    gradients_needed(order_.head_unit);
    gradients_needed(order_.output_unit);
    PendingSum dlnf = output_->backward_input(weights, dtmp, dlogits, dlocal);
    if (weights_now) output_->backward_weight(grads, dlogits, region(k, r.lnf, P), gathered);
    dlnf.done.wait();
    // The lookup's backward reads no weights.
    if (order_.output_unit != order_.head_unit) weights_done(order_.output_unit);
    zero_bytes(dres.data, dres.device, dres.bytes());
    ln_f_->backward(weights, grads, dres, dlnf.value, out, rows(k, r.lnf_mean, P), rows(k, r.lnf_rstd, P),
                    parallel_);
    weights_done(order_.head_unit);
    gradients_final(order_.head_unit);
  } else {
    copy_bytes(dres.data, dres.device, dout.data, dout.device, dres.bytes());
  }
  const std::unique_ptr<TrainingAttention> attention = scope_.core(dims_.heads.attention(), B, T, rope_.cos, rope_.sin);
  const Tensor datty = dtmp.reshape({dtmp.numel()}).slice_rows(0, N * dims_.attention_width()).reshape(
      {N, dims_.attention_width()});
  // At once, the residual stream's gradient is updated in place in dres; deferred, each block's
  // is kept apart (deferred_gradients), the last block's output gradient first.
  BlockGradients at_once{.dout = dres, .dres2 = dres, .din = dres, .dtmp = dtmp, .datty = datty,
                         .dact = scratch(r.dact), .dfch = scratch(r.dfch), .dqkv = scratch(r.dqkv), .dlocal = dlocal,
                         .dqk_rows = scratch(r.dqk_rows)};
  const Tensor dinput = weights_now ? dres : store_.view(k, r.dinput, P);
  if (!weights_now) {
    const Tensor last = blocks_.empty() ? dinput : deferred_gradients(k, blocks_.size() - 1, N).dout;
    copy_bytes(last.data, last.device, dres.data, dres.device, last.bytes());
  }
  for (size_t i = blocks_.size(); i-- > 0;) {
    const size_t u = blocks_[i].unit();
    weights_needed(u, order_.backward_next(u));
    gradients_needed(u);
    at_once.experts = expert_gradients(k, i, N, /*deferred=*/false);
    blocks_[i].backward_input(weights, grads, block_input(k, i, N), block_activations(k, i, N),
                              weights_now ? at_once : deferred_gradients(k, i, N), *attention, weights_now);
    weights_done(u);
    gradients_final(u);
  }
  if (!units_.embeddings) return dinput;
  if (!weights_now) return Tensor{};  // the lookup's gradient is a weight pass
  gradients_needed(0);
  embedding_->backward(grads, tokens, parallel_.row_output_gradient(dres, gathered), scope_.positions(T));
  gradients_final(0);
  return Tensor{};
}

void Stage::backward_weight(int k, Tensor tokens, const FlatTensors& grads) {
  DT_CHECK(deferred_weights_, "backward_weight of a stage made without deferred_weights");
  const auto [B, T] = shapes_.at(k);
  const int64_t N = B * T, P = parallel_.rows(N).size();
  const ActivationRegions& r = *activation_regions_;
  const Tensor gathered = store_.view(k, r.gathered, N);
  // The order of backward: the output projection, the blocks from the last, the lookup (a tied
  // wte gets its two gradients in backward's order).
  if (units_.head)
    output_->backward_weight(grads, region(k, r.logits, N), region(k, r.lnf, P), gathered);
  for (size_t i = blocks_.size(); i-- > 0;)
    blocks_[i].backward_weight(grads, block_activations(k, i, N), deferred_gradients(k, i, N));
  if (units_.embeddings)
    embedding_->backward(grads, tokens, parallel_.row_output_gradient(store_.view(k, r.dinput, P), gathered),
                         scope_.positions(T));
}

Tensor Stage::logits(int k) const {
  const Tokens s = shapes_.at(k);
  return region(k, activation_regions_->logits, s.B * s.T);
}

Tensor Stage::losses(int k) const {
  const Tokens s = shapes_.at(k);
  return region(k, activation_regions_->losses, s.B * s.T).reshape({s.B, s.T});
}

}  // namespace dt
