#include "model/parameters.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "core/suggest.h"

namespace dt {

Shape ParamInfo::stored_shape() const {
  Shape s;
  s.push_back(stored_rows);
  for (int i = 1; i < shape.ndim(); ++i) s.push_back(shape[i]);
  return s;
}

ParameterLayout::ParameterLayout(const ModelConfig& config, int64_t unit_multiple)
    : config_(config), unit_multiple_(unit_multiple) {
  validate_model_config(config);
  DT_CHECK(unit_multiple >= 1 && unit_multiple % kParamAlignment == 0, "unit multiple ", unit_multiple,
           " must be a positive multiple of ", kParamAlignment);
  const int64_t C = config.d_model, L = config.n_layer, F = config.ffn_hidden();
  const int64_t Vp = config.padded_vocab_size();
  const bool gpt2 = config.family == ModelFamily::gpt2;
  // N(0, 0.02) for weights, as GPT-2 and Hugging Face's Llama initialise; GPT-2 also scales the
  // residual projections by 1/sqrt(2L) so the residual stream's variance does not grow with
  // depth. Norm weights start at one, biases at zero.
  const float std = 0.02f;
  const float residual_std = gpt2 ? std / std::sqrt(2.0f * static_cast<float>(L)) : std;
  const auto norm = [&](const std::string& name) {
    add(name + ".weight", {C}, ParamInit::ones, 0);
    if (gpt2) add(name + ".bias", {C}, ParamInit::zeros, 0);
  };
  const auto linear = [&](const std::string& name, int64_t out, int64_t in, float init_std) {
    add(name + ".weight", {out, in}, ParamInit::normal, init_std);
    if (gpt2) add(name + ".bias", {out}, ParamInit::zeros, 0);
  };
  add("wte", {config.vocab_size, C}, ParamInit::normal, std, Vp);
  if (gpt2) add("wpe", {config.max_seq_len, C}, ParamInit::normal, std);
  end_unit(0);
  for (int l = 0; l < L; ++l) {
    const int64_t block_begin = total_elements_;
    const std::string h = str("h.", l, ".");
    norm(h + "ln_1");
    linear(h + "attn.qkv", config.qkv_width(), C, std);
    linear(h + "attn.proj", C, C, residual_std);
    norm(h + "ln_2");
    linear(h + "mlp.fc", config.ffn_in_width(), C, std);  // llama: gate rows, then up rows
    linear(h + "mlp.proj", C, F, residual_std);
    end_unit(block_begin);
  }
  const int64_t head_begin = total_elements_;
  norm("ln_f");
  if (!config.tied_embeddings) add("lm_head", {config.vocab_size, C}, ParamInit::normal, std, Vp);
  end_unit(head_begin);
}

void ParameterLayout::end_unit(int64_t begin) {
  total_elements_ = (total_elements_ + unit_multiple_ - 1) / unit_multiple_ * unit_multiple_;
  units_.push_back({begin, total_elements_});
}

void ParameterLayout::add(std::string name, Shape shape, ParamInit init, float init_std, int64_t stored_rows) {
  ParamInfo p{.name = std::move(name),
              .shape = shape,
              .stored_rows = stored_rows < 0 ? shape[0] : stored_rows,
              .offset = total_elements_,
              .init = init,
              .init_std = init_std,
              .is_matrix = shape.ndim() == 2,
              .is_embedding = false};
  // The output projection counts as an embedding whether tied (wte) or not (lm_head), so
  // untying does not change which weights decay.
  p.is_embedding = p.name == "wte" || p.name == "wpe" || p.name == "lm_head";
  total_elements_ += (p.stored_numel() + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  params_.push_back(std::move(p));
}

const ParamInfo& ParameterLayout::find(std::string_view name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  std::vector<std::string> names;
  for (const auto& p : params_) names.push_back(p.name);
  const std::string suggestion = closest_match(name, names);
  throw Error(str("no parameter named '", name, "' in this ", model_family_name(config_.family), " model",
                  suggestion.empty() ? "" : str(" (did you mean '", suggestion, "'?)")));
}

std::vector<kernels::FlatRange> ParameterLayout::unpadded_ranges(
    const std::function<bool(const ParamInfo&)>& include) const {
  std::vector<kernels::FlatRange> ranges;
  for (const ParamInfo& p : params_)
    if (!include || include(p)) kernels::append_range(ranges, {p.offset, p.offset + p.numel()});
  return ranges;
}

int64_t ParameterLayout::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

size_t ParameterLayout::unit_of(const ParamInfo& p) const {
  const auto after = std::upper_bound(units_.begin(), units_.end(), p.offset,
                                      [](int64_t offset, const kernels::FlatRange& u) { return offset < u.begin; });
  return static_cast<size_t>(after - units_.begin()) - 1;
}

FlatTensors::FlatTensors(const ParameterLayout& layout, MemTag tag, Device device, DType dtype, Storage storage)
    : layout_(&layout), dtype_(dtype), tag_(tag), device_(device), storage_(storage) {
  if (storage == Storage::whole)
    buffer_ = Buffer(held_bytes(layout, dtype, storage), tag, device);
  else
    units_.resize(layout.units().size());
}

size_t FlatTensors::held_bytes(const ParameterLayout& layout, DType dtype, Storage storage) {
  return storage == Storage::whole ? static_cast<size_t>(layout.total_elements()) * dtype_size(dtype) : 0;
}

Tensor FlatTensors::all() const {
  DT_CHECK(storage_ == Storage::whole, "all() of flat tensors stored per unit: use unit()");
  return buffer_.view(dtype_, {layout_->total_elements()});
}

Tensor FlatTensors::unit(size_t u) const {
  const kernels::FlatRange& range = layout_->units().at(u);
  if (storage_ == Storage::whole) return all().slice_rows(range.begin, range.size());
  DT_CHECK(held(u), "unit ", u, " of flat tensors stored per unit is not held");
  return units_[u].view(dtype_, {range.size()});
}

bool FlatTensors::held(size_t u) const { return storage_ == Storage::whole || units_.at(u).data() != nullptr; }

void FlatTensors::hold(size_t u) {
  if (held(u)) return;
  units_[u] = Buffer(static_cast<size_t>(layout_->units()[u].size()) * dtype_size(dtype_), tag_, device_, false);
}

void FlatTensors::release(size_t u) {
  if (storage_ == Storage::per_unit) units_.at(u) = Buffer();
}

void FlatTensors::zero() {
  if (storage_ == Storage::whole) return buffer_.zero();
  for (Buffer& b : units_)
    if (b.data() != nullptr) b.zero();
}

std::pair<const Buffer*, size_t> FlatTensors::locate(const ParamInfo& info) const {
  if (storage_ == Storage::whole) return {&buffer_, static_cast<size_t>(info.offset) * dtype_size(dtype_)};
  const size_t u = layout_->unit_of(info);
  DT_CHECK(held(u), info.name, " is in unit ", u, " of flat tensors stored per unit, which is not held");
  return {&units_[u], static_cast<size_t>(info.offset - layout_->units()[u].begin) * dtype_size(dtype_)};
}

Tensor FlatTensors::stored(const ParamInfo& info) const {
  const auto [buffer, offset] = locate(info);
  return buffer->view(dtype_, info.stored_shape(), offset);
}

Tensor FlatTensors::unpadded(const ParamInfo& info) const {
  const auto [buffer, offset] = locate(info);
  return buffer->view(dtype_, info.shape, offset);
}

void init_parameters(FlatTensors& params, uint64_t seed) {
  params.zero();  // alignment gaps and padding rows stay zero
  std::vector<float> values;
  for (const auto& p : params.layout().params()) {
    if (p.init == ParamInit::zeros) continue;
    // Filled on the CPU, then copied where the parameters live.
    values.assign(static_cast<size_t>(p.numel()), 1.0f);
    if (p.init == ParamInit::normal) fill_normal(values.data(), p.numel(), 0, ElementRng(seed, p.name), 0.0f, p.init_std);
    const Tensor unpadded = params.unpadded(p);
    copy_bytes(unpadded.data, unpadded.device, values.data(), Device::cpu, values.size() * sizeof(float));
  }
}

}  // namespace dt
