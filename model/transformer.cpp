#include "model/gpt2.h"

#include <cstring>

#include "core/buffer.h"
#include "kernels/add.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"

namespace dt {

namespace k = kernels;

// Every activation is a (rows, width) view into one of two buffers, laid out for the largest
// micro-batch (N_max rows) and viewed with the current N. `saved` holds what backward reads
// (tag activations); `scratch` holds the backward's working gradients (tag workspace), shared
// by all layers because backward visits one layer at a time.
struct GPT2::Activations {
  struct Layer {
    int64_t ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
  };
  std::vector<Layer> layers;
  int64_t encoded, lnf, lnf_mean, lnf_rstd, logits, losses;   // offsets into saved
  int64_t dres, dtmp, dqkv, dfch;                               // offsets into scratch
  Buffer saved, scratch;
  int64_t n_max;

  Activations(const ModelConfig& c, int64_t n_max) : n_max(n_max) {
    const int64_t C = c.d_model;
    int64_t saved_elems = 0, scratch_elems = 0;
    // Each region is rounded to a cache line so that no two regions share one.
    auto region = [n_max](int64_t& total, int64_t width) {
      const int64_t at = total;
      total += (n_max * width + 15) / 16 * 16;
      return at;
    };
    auto s = [&](int64_t width) { return region(saved_elems, width); };
    encoded = s(C);
    for (int l = 0; l < c.n_layer; ++l)
      layers.push_back({.ln1 = s(C), .ln1_mean = s(1), .ln1_rstd = s(1), .qkv = s(3 * C), .atty = s(C),
                        .lse = s(c.n_head), .res2 = s(C), .ln2 = s(C), .ln2_mean = s(1), .ln2_rstd = s(1),
                        .fch = s(c.ffn_hidden()), .fch_gelu = s(c.ffn_hidden()), .res3 = s(C)});
    lnf = s(C), lnf_mean = s(1), lnf_rstd = s(1), logits = s(c.padded_vocab_size()), losses = s(1);
    auto w = [&](int64_t width) { return region(scratch_elems, width); };
    dres = w(C), dtmp = w(C), dqkv = w(3 * C), dfch = w(c.ffn_hidden());
    saved = Buffer(static_cast<size_t>(saved_elems) * sizeof(float), MemTag::activations, Device::cpu, false);
    scratch = Buffer(static_cast<size_t>(scratch_elems) * sizeof(float), MemTag::workspace, Device::cpu, false);
  }

  static Tensor view(const Buffer& b, int64_t offset, Shape shape) {
    return b.view(DType::f32, shape, static_cast<size_t>(offset) * sizeof(float));
  }
};

GPT2::GPT2(const ModelConfig& config, int batch_size, int seq_len)
    : layout_(validated(config, batch_size, seq_len)),  // before anything is allocated
      params_(layout_, MemTag::parameters),
      grads_(layout_, MemTag::gradients),
      batch_size_(batch_size),
      seq_len_(seq_len),
      acts_(std::make_unique<Activations>(config, static_cast<int64_t>(batch_size) * seq_len)) {}

GPT2::~GPT2() = default;

const ModelConfig& GPT2::validated(const ModelConfig& config, int batch_size, int seq_len) {
  validate_model_config(config);
  if (batch_size < 1) throw Error(str("batch size ", batch_size, " must be at least 1"));
  if (seq_len < 1 || seq_len > config.max_seq_len)
    throw Error(str("sequence length ", seq_len, " must be in [1, model.max_seq_len = ", config.max_seq_len,
                    "]; shorten the sequence or use a model with a longer max_seq_len"));
  return config;
}

void GPT2::check_inputs(Tensor tokens, Tensor targets) const {
  DT_CHECK(tokens.dtype == DType::i32 && tokens.ndim() == 2, "tokens ", tokens.describe());
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  if (B < 1 || B > batch_size_ || T < 1 || T > seq_len_)
    throw Error(str("tokens of shape ", tokens.shape.to_string(), " do not fit this model's micro-batch of (",
                    batch_size_, ", ", seq_len_, "); pass at most that many sequences and tokens"));
  const int V = config().vocab_size;
  auto check_ids = [&](Tensor ids, std::string_view what, bool allow_ignore) {
    const int32_t* p = ids.ptr<int32_t>();
    for (int64_t i = 0; i < ids.numel(); ++i) {
      if ((p[i] >= 0 && p[i] < V) || (allow_ignore && p[i] == k::kIgnoreIndex)) continue;
      throw Error(str(what, " id ", p[i], " at (", i / T, ", ", i % T, ") is outside the vocabulary [0, ", V,
                      ")", allow_ignore ? str(" and is not the ignore index ", k::kIgnoreIndex) : "",
                      "; the data was tokenized with a different vocabulary than model.vocab_size = ", V));
    }
  };
  check_ids(tokens, "token", false);
  if (targets.defined()) {
    DT_CHECK(targets.dtype == DType::i32 && targets.shape == tokens.shape, "targets ", targets.describe());
    check_ids(targets, "target", true);
  }
}

void GPT2::forward_blocks(Tensor tokens) {
  const ModelConfig& c = config();
  const int64_t B = tokens.dim(0), T = tokens.dim(1), N = B * T, C = c.d_model, F = c.ffn_hidden();
  Activations& a = *acts_;
  auto act = [&](int64_t offset, int64_t width) { return Activations::view(a.saved, offset, {N, width}); };
  auto p = [&](int l, std::string_view name) { return params_.stored(str("h.", l, ".", name)); };
  current_batch_ = static_cast<int>(B);
  current_seq_ = static_cast<int>(T);

  Tensor x = act(a.encoded, C);
  k::embedding_forward(x, tokens.reshape({N}), params_.stored("wte"));
  k::position_embedding_forward(x.reshape({B, T, C}), params_.stored("wpe"));
  Tensor proj_out = Activations::view(a.scratch, a.dtmp, {N, C});  // scratch is free during forward
  for (int l = 0; l < c.n_layer; ++l) {
    const Activations::Layer& L = a.layers[l];
    Tensor ln1 = act(L.ln1, C), qkv = act(L.qkv, 3 * C), atty = act(L.atty, C), res2 = act(L.res2, C);
    k::layernorm_forward(ln1, act(L.ln1_mean, 1).reshape({N}), act(L.ln1_rstd, 1).reshape({N}), x,
                         p(l, "ln_1.weight"), p(l, "ln_1.bias"));
    k::linear_forward(qkv, ln1, p(l, "attn.qkv.weight"), p(l, "attn.qkv.bias"));
    k::attention_forward(atty.reshape({B, T, C}), Activations::view(a.saved, L.lse, {B, c.n_head, T}),
                         qkv.reshape({B, T, 3 * C}), c.n_head, c.n_head);
    k::linear_forward(proj_out, atty, p(l, "attn.proj.weight"), p(l, "attn.proj.bias"));
    k::add_forward(res2, x, proj_out);

    Tensor ln2 = act(L.ln2, C), fch = act(L.fch, F), fch_gelu = act(L.fch_gelu, F), res3 = act(L.res3, C);
    k::layernorm_forward(ln2, act(L.ln2_mean, 1).reshape({N}), act(L.ln2_rstd, 1).reshape({N}), res2,
                         p(l, "ln_2.weight"), p(l, "ln_2.bias"));
    k::linear_forward(fch, ln2, p(l, "mlp.fc.weight"), p(l, "mlp.fc.bias"));
    k::gelu_forward(fch_gelu, fch);
    k::linear_forward(proj_out, fch_gelu, p(l, "mlp.proj.weight"), p(l, "mlp.proj.bias"));
    k::add_forward(res3, res2, proj_out);
    x = res3;
  }
  Tensor lnf = act(a.lnf, C);
  k::layernorm_forward(lnf, act(a.lnf_mean, 1).reshape({N}), act(a.lnf_rstd, 1).reshape({N}), x,
                       params_.stored("ln_f.weight"), params_.stored("ln_f.bias"));
  // Padding rows of wte are zero, so padding columns of the logits are zero; the loss never
  // reads them and sets their gradient to zero.
  k::linear_forward(act(a.logits, c.padded_vocab_size()), lnf, params_.stored("wte"), Tensor{});
}

double GPT2::forward(Tensor tokens, Tensor targets) {
  check_inputs(tokens, targets);
  forward_blocks(tokens);
  if (!targets.defined()) return 0.0;
  const int64_t N = tokens.numel();
  Tensor losses_n = Activations::view(acts_->saved, acts_->losses, {N});
  k::cross_entropy_forward(losses_n, Activations::view(acts_->saved, acts_->logits, {N, config().padded_vocab_size()}),
                           targets.reshape({N}), config().vocab_size);
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += losses_n.ptr<float>()[i];
  return sum;
}

double GPT2::forward_backward(Tensor tokens, Tensor targets, float loss_scale) {
  DT_CHECK(targets.defined(), "forward_backward needs targets");
  check_inputs(tokens, targets);
  forward_blocks(tokens);
  const int64_t N = tokens.numel();
  Tensor losses_n = Activations::view(acts_->saved, acts_->losses, {N});
  k::cross_entropy_forward_backward(losses_n,
                                    Activations::view(acts_->saved, acts_->logits, {N, config().padded_vocab_size()}),
                                    targets.reshape({N}), config().vocab_size, loss_scale);
  backward_blocks(tokens);
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += losses_n.ptr<float>()[i];
  return sum;
}

void GPT2::backward_blocks(Tensor tokens) {
  const ModelConfig& c = config();
  const int64_t B = tokens.dim(0), T = tokens.dim(1), N = B * T, C = c.d_model, F = c.ffn_hidden();
  Activations& a = *acts_;
  auto act = [&](int64_t offset, int64_t width) { return Activations::view(a.saved, offset, {N, width}); };
  auto tmp = [&](int64_t offset, int64_t width) { return Activations::view(a.scratch, offset, {N, width}); };
  auto p = [&](int l, std::string_view name) { return params_.stored(str("h.", l, ".", name)); };
  auto g = [&](int l, std::string_view name) { return grads_.stored(str("h.", l, ".", name)); };

  // dres carries the gradient of the residual stream down through the blocks; each branch's
  // LayerNorm backward adds into it (kernels/layernorm.h accumulates dinp).
  Tensor dres = tmp(a.dres, C), dtmp = tmp(a.dtmp, C);
  Tensor dlogits = act(a.logits, c.padded_vocab_size());
  k::linear_backward_input(dtmp, dlogits, params_.stored("wte"));
  k::linear_backward_weight(grads_.stored("wte"), Tensor{}, dlogits, act(a.lnf, C));
  std::memset(dres.data, 0, dres.bytes());
  Tensor x_last = c.n_layer > 0 ? act(a.layers.back().res3, C) : act(a.encoded, C);
  k::layernorm_backward(dres, grads_.stored("ln_f.weight"), grads_.stored("ln_f.bias"), dtmp, x_last,
                        params_.stored("ln_f.weight"), act(a.lnf_mean, 1).reshape({N}), act(a.lnf_rstd, 1).reshape({N}));

  for (int l = c.n_layer - 1; l >= 0; --l) {
    const Activations::Layer& L = a.layers[l];
    Tensor x = l == 0 ? act(a.encoded, C) : act(a.layers[l - 1].res3, C);
    // MLP branch: dres is d(res3) here.
    Tensor dfch = tmp(a.dfch, F);
    k::linear_backward_input(dfch, dres, p(l, "mlp.proj.weight"));
    k::linear_backward_weight(g(l, "mlp.proj.weight"), g(l, "mlp.proj.bias"), dres, act(L.fch_gelu, F));
    k::gelu_backward(dfch, act(L.fch, F), dfch);
    k::linear_backward_input(dtmp, dfch, p(l, "mlp.fc.weight"));
    k::linear_backward_weight(g(l, "mlp.fc.weight"), g(l, "mlp.fc.bias"), dfch, act(L.ln2, C));
    k::layernorm_backward(dres, g(l, "ln_2.weight"), g(l, "ln_2.bias"), dtmp, act(L.res2, C), p(l, "ln_2.weight"),
                          act(L.ln2_mean, 1).reshape({N}), act(L.ln2_rstd, 1).reshape({N}));
    // Attention branch: dres is d(res2) now.
    k::linear_backward_input(dtmp, dres, p(l, "attn.proj.weight"));
    k::linear_backward_weight(g(l, "attn.proj.weight"), g(l, "attn.proj.bias"), dres, act(L.atty, C));
    Tensor dqkv = tmp(a.dqkv, 3 * C);
    k::attention_backward(dqkv.reshape({B, T, 3 * C}), dtmp.reshape({B, T, C}), act(L.qkv, 3 * C).reshape({B, T, 3 * C}),
                          act(L.atty, C).reshape({B, T, C}), Activations::view(a.saved, L.lse, {B, c.n_head, T}),
                          c.n_head, c.n_head);
    k::linear_backward_input(dtmp, dqkv, p(l, "attn.qkv.weight"));
    k::linear_backward_weight(g(l, "attn.qkv.weight"), g(l, "attn.qkv.bias"), dqkv, act(L.ln1, C));
    k::layernorm_backward(dres, g(l, "ln_1.weight"), g(l, "ln_1.bias"), dtmp, x, p(l, "ln_1.weight"),
                          act(L.ln1_mean, 1).reshape({N}), act(L.ln1_rstd, 1).reshape({N}));
  }
  k::position_embedding_backward(grads_.stored("wpe"), dres.reshape({B, T, C}));
  k::embedding_backward(grads_.stored("wte"), tokens.reshape({N}), dres);
}

void GPT2::copy_logits(Tensor out) const {
  const int64_t N = static_cast<int64_t>(current_batch_) * current_seq_;
  const int64_t V = config().vocab_size, Vp = config().padded_vocab_size();
  DT_CHECK(out.dtype == DType::f32 && out.numel() == N * V, "logits out ", out.describe());
  const float* src = Activations::view(acts_->saved, acts_->logits, {N, Vp}).ptr<float>();
  float* dst = out.ptr<float>();
  for (int64_t n = 0; n < N; ++n) std::memcpy(dst + n * V, src + n * Vp, static_cast<size_t>(V) * sizeof(float));
}

Tensor GPT2::losses() const {
  return Activations::view(acts_->saved, acts_->losses, {current_batch_, current_seq_});
}

int64_t GPT2::count_targets(Tensor targets) {
  const int32_t* t = targets.ptr<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += t[i] != k::kIgnoreIndex;
  return n;
}

}  // namespace dt
