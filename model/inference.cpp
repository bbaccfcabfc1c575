#include "model/inference.h"

#include <algorithm>
#include <cstring>

#include "kernels/attention_decode.h"
#include "kernels/rope.h"

namespace dt {

namespace k = kernels;

namespace {

const FlatTensors& validated(const FlatTensors& params, int max_tokens) {
  const ModelConfig& c = params.layout().config();
  if (params.dtype() != DType::f32 || params.all().device != Device::cpu)
    throw Error(str("generation runs f32 parameters on the CPU, not ", params.all().describe(),
                    "; pass the f32 master weights (Transformer::params())"));
  if (max_tokens < 1 || max_tokens > c.max_seq_len)
    throw Error(str("max_tokens = ", max_tokens, " must be in [1, model.max_seq_len = ", c.max_seq_len,
                    "]: the prompt and the generated tokens together cannot exceed the model's context"));
  return params;
}

}  // namespace

// Attention for rows at positions [first, first + M) of one sequence: rotates them at their
// positions (llama), appends their keys and values to the layer's cache and attends over the
// cache up to them.
class InferenceSession::CachedAttention final : public AttentionCore {
 public:
  CachedAttention(InferenceSession& session, int layer, int64_t first, int64_t rows)
      : s_(session), layer_(layer), first_(first), rows_(rows) {}
  void forward(Tensor qkv, Tensor atty, Tensor /*lse: not kept*/) override {
    const ModelConfig& c = s_.config();
    if (c.traits().positions == PositionKind::rotary)
      kernels::rope_forward(qkv.reshape({1, rows_, c.qkv_width()}), s_.rope_.cos.slice_rows(first_, rows_),
                            s_.rope_.sin.slice_rows(first_, rows_), c.n_head, c.kv_heads());
    const Tensor q = s_.q_.slice_rows(0, rows_);
    s_.append_to_cache(layer_, qkv, q);
    kernels::attention_decode(atty, q, s_.cache(layer_).slice_rows(0, first_ + rows_), c.n_head, c.kv_heads());
  }

 private:
  InferenceSession& s_;
  int layer_;
  int64_t first_, rows_;
};

InferenceSession::InferenceSession(const FlatTensors& params, int max_tokens)
    : params_(validated(params, max_tokens)),
      max_tokens_(max_tokens),
      chunk_rows_(std::min(max_tokens, kPrefillChunk)),
      embedding_(params.layout()),
      ln_f_(params.layout(), "ln_f"),
      output_(ColumnParallelLinear::output_projection(params.layout(), ParallelRegions::single_rank())) {
  const ModelConfig& c = config();
  const int64_t R = chunk_rows_, C = c.d_model, KV = 2 * int64_t{c.kv_heads()} * c.head_size();
  const bool moe = c.moe.experts > 0;
  const int64_t E = c.moe.experts, top_k = moe ? c.moe.routing.top_k : 0, A = R * top_k, F_e = c.moe.expert_hidden;
  const int64_t F_s = c.moe.shared_hidden, gates = F_s > 0 && c.moe.shared_gate ? R : 0;
  const int64_t Q = c.qk_norm ? int64_t{c.n_head} * c.head_size() : 0, K = c.qk_norm ? KV / 2 : 0,
                qk_rows = c.qk_norm ? R : 0;
  cache_ = Buffer(static_cast<size_t>(int64_t{c.n_layer} * max_tokens * KV) * sizeof(float), MemTag::activations);

  // Every view starts on a cache line; one list both sizes and places them.
  struct Region {
    Tensor* view;
    DType dtype;
    Shape shape;
  };
  const Region regions[] = {
      {&ids_, DType::i32, {R}},        {&x_, DType::f32, {R, C}},       {&ln_, DType::f32, {R, C}},
      {&mean_, DType::f32, {R}},       {&rstd_, DType::f32, {R}},       {&qkv_, DType::f32, {R, c.qkv_width()}},
      {&q_, DType::f32, {R, C}},       {&atty_, DType::f32, {R, C}},    {&proj_out_, DType::f32, {R, C}},
      {&fch_, DType::f32, {R, c.ffn_in_width()}}, {&fch_act_, DType::f32, {R, c.ffn_hidden()}},
      {&logits_, DType::f32, {1, c.padded_vocab_size()}},
      {&experts_.scores, DType::f32, {R, E}},          {&experts_.experts, DType::i32, {R, top_k}},
      {&experts_.weights, DType::f32, {R, top_k}},     {&experts_.rows, DType::i32, {R, top_k}},
      {&experts_.expert_in, DType::f32, {A, C}},       {&experts_.expert_fch, DType::f32, {A, 2 * F_e}},
      {&experts_.expert_act, DType::f32, {A, F_e}},    {&experts_.expert_out, DType::f32, {A, C}},
      {&experts_.logits, DType::f32, {R, E}},          {&experts_.routed, DType::f32, {R, moe ? C : 0}},
      {&experts_.shared_fch, DType::f32, {R, 2 * F_s}}, {&experts_.shared_act, DType::f32, {R, F_s}},
      {&experts_.shared_out, DType::f32, {R, F_s > 0 ? C : 0}}, {&experts_.shared_gate, DType::f32, {gates}},
      {&qk_.q_in, DType::f32, {R, Q}},                 {&qk_.k_in, DType::f32, {R, K}},
      {&qk_.q_rstd, DType::f32, {qk_rows}},            {&qk_.k_rstd, DType::f32, {qk_rows}},
      {&qk_.rows, DType::f32, {R, Q}}};
  auto bytes = [](const Region& r) {
    return (static_cast<size_t>(r.shape.numel()) * dtype_size(r.dtype) + 63) / 64 * 64;
  };
  size_t total = 0;
  for (const Region& r : regions) total += bytes(r);
  acts_ = Buffer(total, MemTag::activations);
  size_t offset = 0;
  for (const Region& r : regions) {
    *r.view = acts_.view(r.dtype, r.shape, offset);
    offset += bytes(r);
  }
  for (int l = 0; l < c.n_layer; ++l) blocks_.emplace_back(params.layout(), l, Recompute::none);
  if (c.traits().positions == PositionKind::rotary) rope_ = make_rope_tables(c, max_tokens);
}

Tensor InferenceSession::cache(int layer) const {
  const int64_t KV = 2 * int64_t{config().kv_heads()} * config().head_size();
  const size_t offset = static_cast<size_t>(int64_t{layer} * max_tokens_ * KV) * sizeof(float);
  return cache_.view(DType::f32, {max_tokens_, KV}, offset);
}

void InferenceSession::check_tokens(std::span<const int32_t> tokens) const {
  if (tokens.empty()) throw Error("prefill got an empty prompt; pass at least one token id");
  const int V = config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      throw Error(str("token id ", tokens[i], " at index ", i, " is outside the vocabulary [0, ", V,
                      "); the text was tokenized with a different vocabulary than model.vocab_size = ", V));
  if (static_cast<int64_t>(size_) + static_cast<int64_t>(tokens.size()) > max_tokens_)
    throw Error(str("the key/value cache holds ", size_, " of max_tokens = ", max_tokens_, " tokens and cannot take ",
                    tokens.size(), " more; generate fewer tokens, shorten the prompt, or create the session with a "
                    "larger max_tokens (at most model.max_seq_len = ", config().max_seq_len, ")"));
}

std::span<const float> InferenceSession::prefill(std::span<const int32_t> prompt) {
  check_tokens(prompt);  // all of it, before the cache changes
  for (size_t first = 0; first < prompt.size(); first += static_cast<size_t>(chunk_rows_))
    forward_chunk(prompt.subspan(first, std::min(prompt.size() - first, static_cast<size_t>(chunk_rows_))));

  // Only the last position's logits: the final norm and the output projection of one row.
  const ModelConfig& c = config();
  const int64_t last = (static_cast<int64_t>(prompt.size()) - 1) % chunk_rows_;
  ln_f_.forward(params_, ln_.slice_rows(0, 1), mean_.slice_rows(0, 1), rstd_.slice_rows(0, 1), x_.slice_rows(last, 1));
  output_.forward(params_, logits_, ln_.slice_rows(0, 1), Tensor{});
  return {logits_.ptr<float>(), static_cast<size_t>(c.vocab_size)};  // the padding columns are not shown
}

void InferenceSession::forward_chunk(std::span<const int32_t> tokens) {
  const int64_t M = static_cast<int64_t>(tokens.size()), first = size_;
  auto rows = [M](Tensor t) { return t.slice_rows(0, M); };
  const int64_t top_k = config().moe.experts > 0 ? config().moe.routing.top_k : 0;
  auto assigned = [&](Tensor t) { return t.slice_rows(0, M * top_k); };
  std::copy(tokens.begin(), tokens.end(), ids_.ptr<int32_t>());
  const Tensor x = rows(x_);
  embedding_.forward(params_, x, rows(ids_).reshape({1, M}), first);
  // Generation keeps no activation past its layer: one set of views serves every layer, and the
  // residual stream x is updated in place.
  const BlockActivations a{.ln1 = rows(ln_), .ln1_mean = rows(mean_), .ln1_rstd = rows(rstd_), .qkv = rows(qkv_),
                           .atty = rows(atty_), .lse = Tensor{}, .proj_out = rows(proj_out_), .res2 = x,
                           .ln2 = rows(ln_),
                           .ln2_mean = rows(mean_), .ln2_rstd = rows(rstd_), .fch = rows(fch_),
                           .fch_act = rows(fch_act_), .res3 = x, .branch = Tensor{}, .gathered = Tensor{},
                           .qk = config().qk_norm ? QkActivations{.q_in = rows(qk_.q_in), .k_in = rows(qk_.k_in),
                                                                  .q_rstd = rows(qk_.q_rstd),
                                                                  .k_rstd = rows(qk_.k_rstd), .rows = rows(qk_.rows)}
                                                  : QkActivations{},
                           .experts = {.scores = rows(experts_.scores), .experts = rows(experts_.experts),
                                       .weights = rows(experts_.weights), .rows = rows(experts_.rows),
                                       .expert_in = assigned(experts_.expert_in),
                                       .expert_fch = assigned(experts_.expert_fch),
                                       .expert_act = assigned(experts_.expert_act),
                                       .expert_out = assigned(experts_.expert_out), .router_in = Tensor{},
                                       .router_weight = Tensor{}, .logits = rows(experts_.logits),
                                       .routed = rows(experts_.routed),
                                       .shared_fch = rows(experts_.shared_fch),
                                       .shared_act = rows(experts_.shared_act),
                                       .shared_out = rows(experts_.shared_out),
                                       .shared_gate = experts_.shared_gate.numel() > 0 ? rows(experts_.shared_gate)
                                                                                       : Tensor{},
                                       // One process's experts: the rows stay where they are put.
                                       .sent = assigned(experts_.expert_in),
                                       .result = assigned(experts_.expert_out),
                                       .keep_all = true}};
  for (const Block& block : blocks_) {
    CachedAttention attention(*this, block.layer(), first, M);
    block.forward(params_, x, a, attention);
  }
  size_ += static_cast<int>(M);
}

void InferenceSession::append_to_cache(int layer, Tensor qkv, Tensor q) {
  const int64_t M = qkv.dim(0), C = config().d_model, QKV = qkv.dim(1), KV = QKV - C;
  const float* src = qkv.ptr<float>();
  float* kv = cache(layer).slice_rows(size_, M).ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(q.ptr<float>() + m * C, src + m * QKV, static_cast<size_t>(C) * sizeof(float));
    std::memcpy(kv + m * KV, src + m * QKV + C, static_cast<size_t>(KV) * sizeof(float));
  }
}

}  // namespace dt
