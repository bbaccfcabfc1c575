#include "model/transformer.h"

#include <cstring>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/convert.h"
#include "kernels/cross_entropy.h"

namespace dt {

namespace k = kernels;

namespace {

// How the f32 parameters are stored: as the weights themselves in f32; in 16-bit runs as the
// master copy, whole where kept here, else never held (ZeRO keeps them as its shards). The
// constructor and allocated_bytes share it.
Storage f32_parameter_storage(DType precision, const ParameterStorage& storage) {
  if (precision == DType::f32) return storage.weights;
  return storage.master_weights ? Storage::whole : Storage::per_unit;
}

}  // namespace

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
      stage_(layout_, StageUnits::whole(config), recompute, precision, device, batch_size, seq_len) {
  if (precision != DType::f32) compute_weights_.emplace(layout_, MemTag::parameters, device, precision, storage.weights);
  master_weights_ = precision != DType::f32 && storage.master_weights;
}

size_t Transformer::allocated_bytes(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                                    DType precision, const ParameterStorage& storage) {
  const auto params = static_cast<size_t>(ParameterLayout(config, storage.unit_multiple).total_elements());
  const bool sixteen_bit = precision != DType::f32;
  // As the constructor makes them: f32 parameters, the 16-bit compute copy, f32 gradients.
  size_t per_element = f32_parameter_storage(precision, storage) == Storage::whole ? 4 : 0;
  if (sixteen_bit && storage.weights == Storage::whole) per_element += dtype_size(precision);
  if (storage.grads == Storage::whole) per_element += 4;
  const ActivationBytes activations =
      Stage::activation_bytes(config, StageUnits::whole(config), recompute, precision, batch_size, seq_len);
  return params * per_element + static_cast<size_t>(activations.with_micro_batches(1));
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

Transformer::~Transformer() = default;

const ModelConfig& Transformer::validated(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                                          DType precision, Device device, const ParameterStorage& storage) {
  validate_model_config(config);
  require_device(device);
  if (!is_training_precision(precision))
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

double Transformer::forward(Tensor tokens, Tensor targets) {
  check_inputs(tokens, targets);
  stage_.forward(0, tokens, weights(), /*backward_follows=*/false);
  return targets.defined() ? stage_.loss(0, targets, 1, /*with_gradient=*/false) : 0.0;
}

double Transformer::forward_backward(Tensor tokens, Tensor targets, float loss_scale) {
  DT_CHECK(targets.defined(), "forward_backward needs targets");
  check_inputs(tokens, targets);
  stage_.forward(0, tokens, weights(), /*backward_follows=*/true);
  const double loss = stage_.loss(0, targets, loss_scale, /*with_gradient=*/true);
  stage_.backward(0, Tensor{}, tokens, weights(), grads_);
  return loss;
}

void Transformer::copy_logits(Tensor out) const {
  const Tensor logits = stage_.logits(0);
  const int64_t N = logits.dim(0), V = config().vocab_size, Vp = config().padded_vocab_size();
  DT_CHECK(out.dtype == DType::f32 && out.device == Device::cpu && out.numel() == N * V, "logits out ",
           out.describe());
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

Tensor Transformer::losses() const { return stage_.losses(0); }

int64_t Transformer::count_targets(Tensor targets) {
  int64_t n = 0;
  for (const int32_t t : host_values<int32_t>(targets)) n += t != k::kIgnoreIndex;
  return n;
}

}  // namespace dt
