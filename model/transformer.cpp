#include "model/transformer.h"

#include <cstring>
#include <map>
#include <optional>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/block.h"

namespace dt {

namespace k = kernels;

// Every activation is a (rows, width) view into one of two buffers, laid out for the largest
// micro-batch (N_max rows) and viewed with the current N. `saved` holds what backward reads
// (tag activations); `scratch` holds the backward's working gradients (tag workspace), shared
// by all layers because backward visits one layer at a time. Activations are stored in the
// model's precision; per-row statistics (norm mean and rstd, attention lse, losses) in f32.
struct Transformer::Activations {
  struct Region {
    int64_t offset = 0;  // bytes
    int64_t width = 0;   // elements per row
    DType dtype = DType::f32;
  };
  struct Layer {
    Region ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_act, res3;
  };
  std::vector<Layer> layers;
  Region encoded, lnf, lnf_mean, lnf_rstd, logits, losses;  // in saved
  Region dres, dtmp, dqkv, dfch, dact;                       // in scratch
  int64_t saved_bytes = 0, scratch_bytes = 0;
  Buffer saved, scratch;

  // Lays out the regions; allocates the two buffers on `device` unless it is nullopt (sizing only).
  Activations(const ModelConfig& c, int64_t n_max, Recompute recompute, DType precision, std::optional<Device> device) {
    const int64_t C = c.d_model, F = c.ffn_hidden();
    const int64_t mean_width = c.family == ModelFamily::gpt2 ? 1 : 0;  // RMSNorm keeps no mean
    // Each region starts on a cache line so that no two regions share one.
    auto region = [n_max](int64_t& total, int64_t width, DType dtype) {
      const Region r{.offset = total, .width = width, .dtype = dtype};
      total += (n_max * width * static_cast<int64_t>(dtype_size(dtype)) + 63) / 64 * 64;
      return r;
    };
    auto s = [&](int64_t width) { return region(saved_bytes, width, precision); };
    auto stat = [&](int64_t width) { return region(saved_bytes, width, DType::f32); };
    encoded = s(C);
    // A recomputed activation has one region that every layer shares: backward rebuilds it for
    // the layer at hand. A kept one has a region per layer.
    const auto kept_layer = [&](bool recomputed) {
      return [&, recomputed, shared = std::map<int, Region>{}](int key, int64_t width, bool is_stat = false) mutable {
        if (!recomputed) return is_stat ? stat(width) : s(width);
        if (!shared.count(key)) shared[key] = is_stat ? stat(width) : s(width);
        return shared[key];
      };
    };
    auto block = kept_layer(recompute == Recompute::full);  // everything inside a block
    auto core = kept_layer(recompute != Recompute::none);   // the attention core
    for (int l = 0; l < c.n_layer; ++l)
      layers.push_back({.ln1 = block(0, C), .ln1_mean = block(1, mean_width, true), .ln1_rstd = block(2, 1, true),
                        .qkv = block(3, c.qkv_width()), .atty = core(4, C), .lse = core(5, c.n_head, true),
                        .res2 = block(6, C), .ln2 = block(7, C), .ln2_mean = block(8, mean_width, true),
                        .ln2_rstd = block(9, 1, true), .fch = block(10, c.ffn_in_width()), .fch_act = block(11, F),
                        .res3 = s(C)});  // the next block's input: always kept
    lnf = s(C), lnf_mean = stat(mean_width), lnf_rstd = stat(1), logits = s(c.padded_vocab_size()), losses = stat(1);
    auto w = [&](int64_t width) { return region(scratch_bytes, width, precision); };
    dres = w(C), dtmp = w(C), dqkv = w(c.qkv_width()), dfch = w(c.ffn_in_width()), dact = w(F);
    if (!device) return;
    saved = Buffer(static_cast<size_t>(saved_bytes), MemTag::activations, *device, false);
    scratch = Buffer(static_cast<size_t>(scratch_bytes), MemTag::workspace, *device, false);
  }

  // Region r viewed as (N, width).
  static Tensor view(const Buffer& b, const Region& r, int64_t N) {
    return b.view(r.dtype, {N, r.width}, static_cast<size_t>(r.offset));
  }
};

namespace {

// How the f32 parameters are stored: as the weights themselves in f32; in 16-bit runs as the
// master copy, whole where kept here, else never held (ZeRO keeps them as its shards). The
// constructor and allocated_bytes share it.
Storage f32_parameter_storage(DType precision, const ParameterStorage& storage) {
  if (precision == DType::f32) return storage.weights;
  return storage.master_weights ? Storage::whole : Storage::per_unit;
}

// The sum of per-token losses (f32), in token order on the CPU: the same number on every device.
double sum_in_order(Tensor losses) {
  double sum = 0;
  for (const float loss : host_values<float>(losses)) sum += loss;
  return sum;
}

}  // namespace

std::string_view recompute_name(Recompute policy) {
  switch (policy) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

Recompute recompute_from_name(std::string_view name) {
  for (Recompute policy : {Recompute::none, Recompute::selective, Recompute::full})
    if (recompute_name(policy) == name) return policy;
  throw Error(str("unknown recomputation policy '", name, "'; valid policies are none, selective, full"));
}

DType precision_from_name(std::string_view name) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    if (dtype_name(dtype) == name) return dtype;
  throw Error(str("unknown precision '", name, "'; valid precisions are f32, bf16 (bf16 storage, f32 master weights and "
                  "gradients) and f16 (the same in fp16; use a loss scale)"));
}

Transformer::Transformer(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                         DType precision, Device device, const ParameterStorage& storage)
    : layout_(validated(config, batch_size, seq_len, recompute, precision, device, storage),  // before allocating
              storage.unit_multiple),
      params_(layout_, precision == DType::f32 ? MemTag::parameters : MemTag::optimizer_state, device, DType::f32,
              f32_parameter_storage(precision, storage)),
      grads_(layout_, MemTag::gradients, device, DType::f32, storage.grads),
      recompute_(recompute),
      precision_(precision),
      device_(device),
      batch_size_(batch_size),
      seq_len_(seq_len),
      acts_(std::make_unique<Activations>(config, static_cast<int64_t>(batch_size) * seq_len, recompute, precision,
                                          device)) {
  if (precision != DType::f32) compute_weights_.emplace(layout_, MemTag::parameters, device, precision, storage.weights);
  master_weights_ = precision != DType::f32 && storage.master_weights;
  if (config.family != ModelFamily::llama) return;
  // The table is computed on the CPU and copied to the device.
  const int64_t half = config.head_size() / 2;
  const size_t table_bytes = static_cast<size_t>(2 * seq_len * half) * sizeof(float);
  const Buffer host_table(table_bytes, MemTag::workspace);
  const kernels::RopeScaling scaling{.factor = config.rope_scaling_factor,
                                     .low_freq_factor = config.rope_low_freq_factor,
                                     .high_freq_factor = config.rope_high_freq_factor,
                                     .original_max_seq_len = static_cast<double>(config.rope_original_max_seq_len)};
  k::rope_table(host_table.view(DType::f32, {seq_len, half}),
                host_table.view(DType::f32, {seq_len, half}, static_cast<size_t>(seq_len * half) * sizeof(float)),
                k::rope_inverse_frequencies(config.head_size(), config.rope_theta, scaling));
  rope_table_ = Buffer(table_bytes, MemTag::workspace, device, false);
  copy_bytes(rope_table_.data(), device, host_table.data(), Device::cpu, table_bytes);
}

size_t Transformer::allocated_bytes(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                                    DType precision, const ParameterStorage& storage) {
  const auto params = static_cast<size_t>(ParameterLayout(config, storage.unit_multiple).total_elements());
  const bool sixteen_bit = precision != DType::f32;
  // As the constructor makes them: f32 parameters, the 16-bit compute copy, f32 gradients.
  size_t per_element = f32_parameter_storage(precision, storage) == Storage::whole ? 4 : 0;
  if (sixteen_bit && storage.weights == Storage::whole) per_element += dtype_size(precision);
  if (storage.grads == Storage::whole) per_element += 4;
  const Activations sizes(config, static_cast<int64_t>(batch_size) * seq_len, recompute, precision, std::nullopt);
  return params * per_element + static_cast<size_t>(sizes.saved_bytes + sizes.scratch_bytes);
}

size_t Transformer::training_bytes(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                                   DType precision) {
  const auto params = static_cast<size_t>(ParameterLayout(config).total_elements());
  return allocated_bytes(config, batch_size, seq_len, recompute, precision) + params * 8;  // + AdamW's m and v
}

void Transformer::check_fits_on_gpu(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                                    DType precision, const ParameterStorage& storage) {
  if (config.head_size() > 256)
    throw Error(str("head size ", config.head_size(), " (d_model ", config.d_model, " / n_head ", config.n_head,
                    ") is above the 256 the CUDA attention kernels support; use more heads, or device = \"cpu\""));
  const size_t needed = allocated_bytes(config, batch_size, seq_len, recompute, precision, storage);
  const size_t available = device_free_bytes(Device::cuda);
  if (needed > available)
    throw Error(str("this model needs about ", format_bytes(static_cast<double>(needed)),
                    " of GPU memory (its parameters, gradients and the activations of a micro-batch of ", batch_size,
                    " x ", seq_len, " tokens, recompute ", recompute_name(recompute), ") but the GPU has ",
                    format_bytes(static_cast<double>(available)),
                    " free; use a smaller micro_batch_size or seq_len, train.recompute = \"full\", precision bf16, "
                    "ZeRO stage 3 over several GPUs, or a smaller model"));
}

Tensor Transformer::rope_cos() const { return rope_table_.view(DType::f32, {seq_len_, config().head_size() / 2}); }

Tensor Transformer::rope_sin() const {
  const int64_t half = config().head_size() / 2;
  return rope_table_.view(DType::f32, {seq_len_, half}, static_cast<size_t>(seq_len_ * half) * sizeof(float));
}

Transformer::~Transformer() = default;

const ModelConfig& Transformer::validated(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                                          DType precision, Device device, const ParameterStorage& storage) {
  validate_model_config(config);
  require_device(device);
  if (precision != DType::f32 && precision != DType::bf16 && precision != DType::f16)
    throw Error(str("precision ", dtype_name(precision), " is not one the model runs in; use f32, bf16 or f16"));
  if (batch_size < 1) throw Error(str("batch size ", batch_size, " must be at least 1"));
  if (seq_len < 1 || seq_len > config.max_seq_len)
    throw Error(str("sequence length ", seq_len, " must be in [1, model.max_seq_len = ", config.max_seq_len,
                    "]; shorten the sequence or use a model with a longer max_seq_len"));
  if (device == Device::cuda) check_fits_on_gpu(config, batch_size, seq_len, recompute, precision, storage);
  return config;
}

void Transformer::check_inputs(Tensor tokens, Tensor targets) const {
  DT_CHECK(tokens.dtype == DType::i32 && tokens.ndim() == 2, "tokens ", tokens.describe());
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  if (B < 1 || B > batch_size_ || T < 1 || T > seq_len_)
    throw Error(str("tokens of shape ", tokens.shape.to_string(), " do not fit this model's micro-batch of (",
                    batch_size_, ", ", seq_len_, "); pass at most that many sequences and tokens"));
  const int V = config().vocab_size;
  auto check_ids = [&](Tensor ids, std::string_view what, bool allow_ignore) {
    const std::vector<int32_t> host = host_values<int32_t>(ids);
    const int32_t* p = host.data();
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

void Transformer::refresh_compute_weights() {
  if (!master_weights_) return;
  // The whole flat buffer in one pass: padding rows and alignment gaps are zero in the master
  // weights (the optimizer updates shown elements only), so they stay zero in the copy.
  k::convert(compute_weights_->all(), params_.all());
}

void Transformer::norm_backward(Tensor dinp, Tensor dout, Tensor inp, Tensor mean, Tensor rstd, const std::string& name) {
  const Tensor weight = weights().stored(name + ".weight"), dweight = grads_.stored(name + ".weight");
  if (config().family == ModelFamily::gpt2)
    k::layernorm_backward(dinp, dweight, family_bias(config(), grads_, name), dout, inp, weight, mean, rstd);
  else
    k::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd);
}

void Transformer::weights_needed(size_t u, std::optional<size_t> next) const {
  if (hooks_ != nullptr) hooks_->weights_needed(u, next);
}
void Transformer::weights_done(size_t u) const {
  if (hooks_ != nullptr) hooks_->weights_done(u);
}
void Transformer::gradients_needed(size_t u) const {
  if (hooks_ != nullptr) hooks_->gradients_needed(u);
}
void Transformer::gradients_final(size_t u) const {
  if (hooks_ != nullptr) hooks_->gradients_final(u);
}

size_t Transformer::output_unit() const { return layout_.unit_of(layout_.find(output_weight_name(config()))); }

void Transformer::forward_blocks(Tensor tokens, bool backward_follows) {
  const ModelConfig& c = config();
  const int64_t B = tokens.dim(0), T = tokens.dim(1), N = B * T, C = c.d_model;
  Activations& a = *acts_;
  auto act = [&](const Activations::Region& r) { return Activations::view(a.saved, r, N); };
  current_batch_ = static_cast<int>(B);
  current_seq_ = static_cast<int>(T);
  refresh_compute_weights();  // the master weights may have changed since the last forward

  Tensor x = act(a.encoded);
  const bool tied = output_unit() == 0;
  weights_needed(0, 1);
  k::embedding_forward(x, tokens.reshape({N}), weights().stored("wte"));
  if (c.family == ModelFamily::gpt2) k::position_embedding_forward(x.reshape({B, T, C}), weights().stored("wpe"));
  if (!tied) weights_done(0);  // else the output projection reads wte again
  Tensor lnf = act(a.lnf);
  // ln_f comes with the last block's residual add, or, without blocks, from the embeddings.
  for (int l = 0; l < c.n_layer; ++l) block_forward(l, B, T, /*recomputing=*/false);
  if (c.n_layer == 0) {
    weights_needed(head_unit(), std::nullopt);
    norm_forward(c, weights(), "ln_f", lnf, c.family == ModelFamily::gpt2 ? act(a.lnf_mean).reshape({N}) : Tensor{},
                 act(a.lnf_rstd).reshape({N}), x);
  }
  // Padding rows of the output weight are zero, so padding columns of the logits are zero; the
  // loss never reads them and sets their gradient to zero.
  k::linear_forward(act(a.logits), lnf, weights().stored(output_weight_name(c)), Tensor{});
  if (backward_follows) return;  // it starts with the head
  weights_done(head_unit());
  if (tied) weights_done(0);
}

void Transformer::block_forward(int l, int64_t B, int64_t T, bool recomputing) {
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.d_model, QKV = c.qkv_width();
  const bool gpt2 = c.family == ModelFamily::gpt2;
  Activations& a = *acts_;
  const Activations::Layer& L = a.layers[l];
  auto act = [&](const Activations::Region& r) { return Activations::view(a.saved, r, N); };
  auto rows = [&](const Activations::Region& r) { return Activations::view(a.saved, r, N).reshape({N}); };
  auto mean_rows = [&](const Activations::Region& r) { return gpt2 ? rows(r) : Tensor{}; };  // RMSNorm has none
  auto p = [&](std::string_view name) { return weights().stored(str("h.", l, ".", name)); };
  auto b = [&](std::string_view name) { return family_bias(c, weights(), str("h.", l, ".", name)); };
  const std::string h = str("h.", l, ".");
  // The branch outputs go through dtmp: free during forward, and free in backward when full
  // recomputation reruns a block (the previous block's backward has consumed it; dres is kept).
  Tensor proj_out = Activations::view(a.scratch, a.dtmp, N);

  const size_t unit = static_cast<size_t>(l) + 1, next = unit + 1;  // the next block's, or the head
  // Forward reads the next unit's first norm at the end of this block; backward goes down.
  weights_needed(unit, recomputing ? backward_next(unit) : std::optional<size_t>(next));
  Tensor x = l == 0 ? act(a.encoded) : act(a.layers[l - 1].res3);
  Tensor ln1 = act(L.ln1), qkv = act(L.qkv), atty = act(L.atty), res2 = act(L.res2);
  if (l == 0 || recomputing) norm_forward(c, weights(), h + "ln_1", ln1, mean_rows(L.ln1_mean), rows(L.ln1_rstd), x);
  k::linear_forward(qkv, ln1, p("attn.qkv.weight"), b("attn.qkv"));
  // Rotated in place: attention and its backward need only the rotated q and k.
  if (!gpt2) k::rope_forward(qkv.reshape({B, T, QKV}), rope_cos(), rope_sin(), c.n_head, c.kv_heads());
  k::attention_forward(atty.reshape({B, T, C}), Activations::view(a.saved, L.lse, N).reshape({B, c.n_head, T}),
                       qkv.reshape({B, T, QKV}), c.n_head, c.kv_heads());
  k::linear_forward(proj_out, atty, p("attn.proj.weight"), b("attn.proj"));
  Tensor ln2 = act(L.ln2), fch = act(L.fch), fch_act = act(L.fch_act), res3 = act(L.res3);
  add_norm_forward(c, weights(), h + "ln_2", res2, ln2, mean_rows(L.ln2_mean), rows(L.ln2_rstd), x, proj_out);
  k::linear_forward(fch, ln2, p("mlp.fc.weight"), b("mlp.fc"));
  if (gpt2)
    k::gelu_forward(fch_act, fch);
  else
    k::swiglu_forward(fch_act, fch);
  if (recomputing) return;
  k::linear_forward(proj_out, fch_act, p("mlp.proj.weight"), b("mlp.proj"));
  // The residual add below is fused with the next unit's first norm: it reads that unit's
  // weights, and no more of this one's.
  weights_done(unit);
  weights_needed(next, next + 1 < layout_.units().size() ? std::optional<size_t>(next + 1) : std::nullopt);
  if (l + 1 < c.n_layer) {
    const Activations::Layer& next = a.layers[l + 1];
    add_norm_forward(c, weights(), str("h.", l + 1, ".ln_1"), res3, act(next.ln1), mean_rows(next.ln1_mean),
                     rows(next.ln1_rstd), res2, proj_out);
  } else {
    add_norm_forward(c, weights(), "ln_f", res3, act(a.lnf), mean_rows(a.lnf_mean), rows(a.lnf_rstd), res2,
                     proj_out);
  }
}

double Transformer::forward(Tensor tokens, Tensor targets) {
  check_inputs(tokens, targets);
  forward_blocks(tokens, /*backward_follows=*/false);
  if (!targets.defined()) return 0.0;
  const int64_t N = tokens.numel();
  Tensor losses_n = Activations::view(acts_->saved, acts_->losses, N).reshape({N});
  k::cross_entropy_forward(losses_n, Activations::view(acts_->saved, acts_->logits, N),
                           targets.reshape({N}), config().vocab_size);
  return sum_in_order(losses_n);
}

double Transformer::forward_backward(Tensor tokens, Tensor targets, float loss_scale) {
  DT_CHECK(targets.defined(), "forward_backward needs targets");
  check_inputs(tokens, targets);
  forward_blocks(tokens, /*backward_follows=*/true);
  const int64_t N = tokens.numel();
  Tensor losses_n = Activations::view(acts_->saved, acts_->losses, N).reshape({N});
  k::cross_entropy_forward_backward(losses_n,
                                    Activations::view(acts_->saved, acts_->logits, N),
                                    targets.reshape({N}), config().vocab_size, loss_scale);
  backward_blocks(tokens);
  return sum_in_order(losses_n);
}

void Transformer::backward_blocks(Tensor tokens) {
  const ModelConfig& c = config();
  const int64_t B = tokens.dim(0), T = tokens.dim(1), N = B * T, C = c.d_model, QKV = c.qkv_width();
  const bool gpt2 = c.family == ModelFamily::gpt2;
  Activations& a = *acts_;
  auto act = [&](const Activations::Region& r) { return Activations::view(a.saved, r, N); };
  auto rows = [&](const Activations::Region& r) { return Activations::view(a.saved, r, N).reshape({N}); };
  auto mean_rows = [&](const Activations::Region& r) { return gpt2 ? rows(r) : Tensor{}; };  // RMSNorm has none
  auto tmp = [&](const Activations::Region& r) { return Activations::view(a.scratch, r, N); };
  auto p = [&](int l, std::string_view name) { return weights().stored(str("h.", l, ".", name)); };
  auto g = [&](int l, std::string_view name) { return grads_.stored(str("h.", l, ".", name)); };
  auto gb = [&](int l, std::string_view name) { return family_bias(c, grads_, str("h.", l, ".", name)); };

  // dres carries the gradient of the residual stream down through the blocks; each branch's
  // norm backward adds into it (kernels/layernorm.h and rmsnorm.h accumulate dinp).
  Tensor dres = tmp(a.dres), dtmp = tmp(a.dtmp);
  Tensor dlogits = act(a.logits);
  const size_t head = head_unit(), output = output_unit();
  weights_needed(head, backward_next(head));
  weights_needed(output, std::nullopt);  // the head's, or a tied wte, still held from forward
  gradients_needed(head);
  gradients_needed(output);
  k::linear_backward_input(dtmp, dlogits, weights().stored(output_weight_name(c)));
  k::linear_backward_weight(grads_.stored(output_weight_name(c)), Tensor{}, dlogits, act(a.lnf));
  if (output != head) weights_done(output);  // the lookup's backward reads no weights
  zero_bytes(dres.data, device_, dres.bytes());
  Tensor x_last = c.n_layer > 0 ? act(a.layers.back().res3) : act(a.encoded);
  norm_backward(dres, dtmp, x_last, mean_rows(a.lnf_mean), rows(a.lnf_rstd), "ln_f");
  weights_done(head);
  gradients_final(head);

  for (int l = c.n_layer - 1; l >= 0; --l) {
    const Activations::Layer& L = a.layers[l];
    const std::string h = str("h.", l, ".");
    Tensor x = l == 0 ? act(a.encoded) : act(a.layers[l - 1].res3);
    const size_t unit = static_cast<size_t>(l) + 1;
    weights_needed(unit, backward_next(unit));
    gradients_needed(unit);
    if (recompute_ == Recompute::full) block_forward(l, B, T, /*recomputing=*/true);
    // MLP branch: dres is d(res3) here.
    Tensor dfch = tmp(a.dfch), dact = tmp(a.dact);
    k::linear_backward_input(dact, dres, p(l, "mlp.proj.weight"));
    k::linear_backward_weight(g(l, "mlp.proj.weight"), gb(l, "mlp.proj"), dres, act(L.fch_act));
    if (gpt2)
      k::gelu_backward(dfch, act(L.fch), dact);
    else
      k::swiglu_backward(dfch, dact, act(L.fch));
    k::linear_backward_input(dtmp, dfch, p(l, "mlp.fc.weight"));
    k::linear_backward_weight(g(l, "mlp.fc.weight"), gb(l, "mlp.fc"), dfch, act(L.ln2));
    norm_backward(dres, dtmp, act(L.res2), mean_rows(L.ln2_mean), rows(L.ln2_rstd), h + "ln_2");
    // Attention branch: dres is d(res2) now.
    if (recompute_ == Recompute::selective)
      k::attention_forward(act(L.atty).reshape({B, T, C}), Activations::view(a.saved, L.lse, N).reshape({B, c.n_head, T}),
                           act(L.qkv).reshape({B, T, QKV}), c.n_head, c.kv_heads());
    k::linear_backward_input(dtmp, dres, p(l, "attn.proj.weight"));
    k::linear_backward_weight(g(l, "attn.proj.weight"), gb(l, "attn.proj"), dres, act(L.atty));
    Tensor dqkv = tmp(a.dqkv);
    k::attention_backward(dqkv.reshape({B, T, QKV}), dtmp.reshape({B, T, C}), act(L.qkv).reshape({B, T, QKV}),
                          act(L.atty).reshape({B, T, C}), Activations::view(a.saved, L.lse, N).reshape({B, c.n_head, T}),
                          c.n_head, c.kv_heads());
    if (!gpt2)
      k::rope_backward(dqkv.reshape({B, T, QKV}), rope_cos(), rope_sin(), c.n_head, c.kv_heads());
    k::linear_backward_input(dtmp, dqkv, p(l, "attn.qkv.weight"));
    k::linear_backward_weight(g(l, "attn.qkv.weight"), gb(l, "attn.qkv"), dqkv, act(L.ln1));
    norm_backward(dres, dtmp, x, mean_rows(L.ln1_mean), rows(L.ln1_rstd), h + "ln_1");
    weights_done(unit);
    gradients_final(unit);
  }
  gradients_needed(0);
  if (gpt2) k::position_embedding_backward(grads_.stored("wpe"), dres.reshape({B, T, C}));
  k::embedding_backward(grads_.stored("wte"), tokens.reshape({N}), dres);
  gradients_final(0);
}

void Transformer::copy_logits(Tensor out) const {
  const int64_t N = static_cast<int64_t>(current_batch_) * current_seq_;
  const int64_t V = config().vocab_size, Vp = config().padded_vocab_size();
  DT_CHECK(out.dtype == DType::f32 && out.device == Device::cpu && out.numel() == N * V, "logits out ",
           out.describe());
  const Tensor logits = Activations::view(acts_->saved, acts_->logits, N);
  // One copy to the host and one widening to f32 of the padded (N, Vp) logits, then each row
  // without its padding columns.
  const Buffer host(logits.bytes(), MemTag::workspace, Device::cpu, false);
  copy_bytes(host.data(), Device::cpu, logits.data, logits.device, logits.bytes());
  const Buffer widened(static_cast<size_t>(N * Vp) * sizeof(float), MemTag::workspace, Device::cpu, false);
  const Tensor all = widened.view(DType::f32, {N * Vp});
  k::convert(all, host.view(logits.dtype, {N * Vp}));
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(out.ptr<float>() + n * V, all.ptr<float>() + n * Vp, static_cast<size_t>(V) * sizeof(float));
}

Tensor Transformer::losses() const {
  return Activations::view(acts_->saved, acts_->losses, int64_t{current_batch_} * current_seq_).reshape({current_batch_, current_seq_});
}

int64_t Transformer::count_targets(Tensor targets) {
  int64_t n = 0;
  for (const int32_t t : host_values<int32_t>(targets)) n += t != k::kIgnoreIndex;
  return n;
}

}  // namespace dt
