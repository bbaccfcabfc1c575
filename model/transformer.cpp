#include "model/transformer.h"

#include <cstring>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/convert.h"
#include "kernels/cross_entropy.h"
#include "model/expert_balance.h"

namespace dt {

namespace k = kernels;


namespace {

std::vector<StageUnits> held_units(const ModelConfig& config, const RankStages& stages) {
  if (stages.all.empty()) return {StageUnits::whole(config)};
  std::vector<StageUnits> held;
  for (const int s : stages.held) held.push_back(stages.all.at(static_cast<size_t>(s)));
  return held;
}

// The kinds `declared` and those FP8 training's recipe keeps.
std::vector<LinearStateDeclaration> with_float8_states(const Float8Training* float8, const ModelConfig& config,
                                                       std::vector<LinearStateDeclaration> declared) {
  if (float8 == nullptr) return declared;
  for (LinearStateDeclaration& d : float8_state_declarations(float8->recipe, config)) declared.push_back(std::move(d));
  return declared;
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, int batch_size, int seq_len, Recompute recompute,
                         DType precision, Device device, const ParameterStorage& storage, ParallelRegions* regions,
                         const RankStages& stages, const AttentionScope* scope,
                         const std::vector<LinearStateDeclaration>& linear_states, ExpertExchange* experts,
                         const Float8Training* float8, std::optional<QatRecipe> qat)
    : regions_(regions != nullptr ? *regions : ParallelRegions::single_rank()),
      experts_(experts != nullptr ? *experts : ExpertExchange::single_rank()),
      layout_(validated(config, batch_size, seq_len, precision, device),  // before allocating
              storage.unit_multiple, regions_.shard(), HeldUnits::of(held_units(config, stages), config.n_layer),
              experts_.shard()),
      params_(layout_, parameter_buffers(precision, storage).params.tag, device, DType::f32,
              parameter_buffers(precision, storage).params.storage),
      grads_(layout_, MemTag::gradients, device, DType::f32, parameter_buffers(precision, storage).grads.storage),
      linear_states_(layout_, with_model_states(layout_.config(), with_float8_states(float8, config, linear_states)),
                     device, float8, qat),
      recompute_(recompute),
      precision_(precision),
      device_(device),
      batch_size_(batch_size),
      seq_len_(seq_len) {
  if (stages.all.empty())
    stages_.push_back(std::make_unique<Stage>(layout_, StageUnits::whole(config), recompute, precision, device,
                                              batch_size, seq_len, regions_, false,
                                              scope != nullptr ? *scope : AttentionScope::local(), linear_states_,
                                              experts_));
  else
    stages_.resize(stages.all.size());
  for (const int s : stages.held)
    stages_.at(static_cast<size_t>(s)) =
        std::make_unique<Stage>(layout_, stages.all.at(static_cast<size_t>(s)), recompute, precision, device,
                                batch_size, seq_len, regions_, stages.deferred_weights,
                                scope != nullptr ? *scope : AttentionScope::local(), linear_states_, experts_);
  if (const auto weights = parameter_buffers(precision, storage).weights)
    compute_weights_.emplace(layout_, weights->tag, device, weights->dtype, weights->storage);
  master_weights_ = precision != DType::f32 && storage.master_weights;
}

Transformer::ParameterBuffers Transformer::parameter_buffers(DType precision, const ParameterStorage& storage) {
  if (precision == DType::f32)
    return {.params = {MemTag::parameters, DType::f32, storage.weights},
            .grads = {MemTag::gradients, DType::f32, storage.grads},
            .weights = std::nullopt};
  // A 16-bit run's f32 parameters are the master weights, counted with the optimizer state as
  // the ZeRO paper does: whole where kept here, else never held (ZeRO keeps them as its shards).
  return {.params = {MemTag::optimizer_state, DType::f32, storage.master_weights ? Storage::whole : Storage::per_unit},
          .grads = {MemTag::gradients, DType::f32, storage.grads},
          .weights = FlatBufferSpec{MemTag::parameters, precision, storage.weights}};
}

Transformer::~Transformer() = default;

std::vector<Stage*> Transformer::stages() const {
  std::vector<Stage*> stages;
  for (const auto& s : stages_) stages.push_back(s.get());
  return stages;
}

Stage& Transformer::single() const {
  DT_CHECK(single_stage(), "one pass of the whole model on a pipeline rank, which holds ", layout_.units().size(),
           " units of its stages: run the stages through a schedule (parallel/pipeline/)");
  return *stages_.front();
}

void Transformer::set_unit_hooks(UnitHooks* hooks) {
  for (const auto& s : stages_)
    if (s) s->set_unit_hooks(hooks);
}

const ModelConfig& Transformer::validated(const ModelConfig& config, int batch_size, int seq_len, DType precision,
                                          Device device) {
  validate_model_config(config);
  require_device(device);
  if (!is_training_precision(precision))
    throw Error(str("precision ", dtype_name(precision), " is not one the model runs in; use f32, bf16 or f16"));
  if (batch_size < 1) throw Error(str("batch size ", batch_size, " must be at least 1"));
  if (seq_len < 1 || seq_len > config.max_seq_len)
    throw Error(str("sequence length ", seq_len, " must be in [1, model.max_seq_len = ", config.max_seq_len,
                    "]; shorten the sequence or use a model with a longer max_seq_len"));
  if (device == Device::cuda && config.head_size() > 256)
    throw Error(str("head size ", config.head_size(), " (d_model ", config.d_model, " / n_head ", config.n_head,
                    ") is above the 256 the CUDA attention kernels support; use more heads, or device = \"cpu\""));
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
  single().forward(0, tokens, weights(), /*backward_follows=*/false);
  return targets.defined() ? single().loss(0, targets, 1, /*with_gradient=*/false) : 0.0;
}

double Transformer::forward_backward(Tensor tokens, Tensor targets, float loss_scale) {
  DT_CHECK(targets.defined(), "forward_backward needs targets");
  check_inputs(tokens, targets);
  single().set_loss_scale(loss_scale);
  single().forward(0, tokens, weights(), /*backward_follows=*/true);
  const double loss = single().loss(0, targets, loss_scale, /*with_gradient=*/true);
  single().backward(0, Tensor{}, tokens, weights(), grads_);
  return loss;
}

void Transformer::copy_logits(Tensor out) const {
  DT_CHECK(layout_.shard().size == 1, "copy_logits of tensor-parallel rank ", layout_.shard().rank,
           ": its logits are a slice of the vocabulary");
  const Tensor logits = single().logits(0);
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

Tensor Transformer::losses() const { return single().losses(0); }

int64_t Transformer::count_targets(Tensor targets) {
  int64_t n = 0;
  for (const int32_t t : host_values<int32_t>(targets)) n += t != k::kIgnoreIndex;
  return n;
}

}  // namespace dt
