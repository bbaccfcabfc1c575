#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#include "kernels/convert.h"
#include "kernels/reduce.h"

namespace dt {

namespace {

// The parts of `ranges` (sorted flat ranges) inside `window`, relative to the window's start.
std::vector<kernels::FlatRange> clipped(const std::vector<kernels::FlatRange>& ranges, kernels::FlatRange window) {
  std::vector<kernels::FlatRange> out;
  for (const kernels::FlatRange& r : ranges) {
    const int64_t b = std::max(r.begin, window.begin), e = std::min(r.end, window.end);
    if (b < e) kernels::append_range(out, {b - window.begin, e - window.begin});
  }
  return out;
}

}  // namespace

void AdamWConfig::check(FieldProblems& p) const {
  p.require(beta1 >= 0 && beta1 < 1, "beta1", beta1, "must be in [0, 1)");
  p.require(beta2 >= 0 && beta2 < 1, "beta2", beta2, "must be in [0, 1)");
  p.require(eps > 0 && std::isfinite(eps), "eps", eps, "must be finite and above 0 (it keeps m / sqrt(v) finite)");
  p.require(weight_decay >= 0 && std::isfinite(weight_decay), "weight_decay", weight_decay,
            "must be finite and at least 0");
}

void AdamWConfig::validate() const {
  FieldProblems problems;
  check(problems);
  problems.throw_if_any("invalid AdamW settings:");
}

OptimizerParts OptimizerParts::whole(Transformer& model) {
  const int64_t total = model.layout().total_elements();
  return {.ranges = {{0, total}},
          .grads = model.grads().all(),
          .params = model.params().all(),
          .weights = model.precision() == DType::f32 ? Tensor{} : model.weights().all(),
          .tensor_parallel = model.regions().group(),
          .experts = model.experts().group()};
}

// The config is validated before the moments are allocated.
AdamW::AdamW(const ParameterLayout& layout, OptimizerParts parts, AdamWConfig config, MemTag tag)
    : config_((config.validate(), config)), layout_(layout), parts_(std::move(parts)) {
  const auto decayed = layout.unpadded_ranges([this](const ParamInfo& p) { return decays(p); });
  const auto not_decayed = layout.unpadded_ranges([this](const ParamInfo& p) { return !decays(p); });
  const bool experts_apart = parts_.experts != nullptr;
  const auto owned = layout.owned_ranges([&](const ParamInfo& p) { return !experts_apart || !p.is_expert; });
  const auto owned_experts = experts_apart ? layout.owned_ranges([](const ParamInfo& p) { return p.is_expert; })
                                           : std::vector<kernels::FlatRange>{};
  for (const kernels::FlatRange& range : parts_.ranges) {
    DT_CHECK(range.begin >= 0 && range.end <= layout.total_elements() &&
                 (part_list_.empty() || part_list_.back().range.end <= range.begin),
             "optimizer ranges must be increasing, disjoint and inside the layout");
    Part p{.range = range,
           .offset = local_elements_,
           .decayed = clipped(decayed, range),
           .not_decayed = clipped(not_decayed, range),
           .owned = clipped(owned, range),
           .owned_experts = clipped(owned_experts, range)};
    for (const kernels::FlatRange& r : p.owned) kernels::append_range(owned_local_, {p.offset + r.begin, p.offset + r.end});
    for (const kernels::FlatRange& r : p.owned_experts)
      kernels::append_range(owned_experts_local_, {p.offset + r.begin, p.offset + r.end});
    local_elements_ += range.size();
    part_list_.push_back(std::move(p));
  }
  DT_CHECK(parts_.grads.dtype == DType::f32 && parts_.grads.numel() == local_elements_, "optimizer gradients ",
           parts_.grads.describe(), " for ", local_elements_, " local elements");
  const size_t bytes = bytes_per_moment(local_elements_);
  m_ = Buffer(bytes, tag, parts_.grads.device);
  v_ = Buffer(bytes, tag, parts_.grads.device);
}

bool adamw_decays(const AdamWConfig& config, const ParamInfo& p) {
  return p.is_matrix && (!p.is_embedding || config.decay_embeddings);
}

bool AdamW::decays(const ParamInfo& p) const { return adamw_decays(config_, p); }

Tensor AdamW::part_of(Tensor buffer, bool local, const Part& p) {
  return buffer.reshape({buffer.numel()}).slice_rows(local ? p.offset : p.range.begin, p.range.size());
}

Tensor AdamW::local_moment(Moment which) const {
  return (which == Moment::first ? m_ : v_).view(DType::f32, {local_elements_});
}

namespace {

// value reduced over each group there is, in turn.
double reduced(double value, ReduceOp op, std::initializer_list<Communicator*> groups) {
  for (Communicator* group : groups)
    if (group != nullptr) value = all_reduce_value(*group, value, op);
  return value;
}

}  // namespace

double AdamW::global_grad_norm() const {
  double mine = kernels::sum_of_squares(parts_.grads, owned_local_);
  if (parts_.experts != nullptr)
    mine += all_reduce_value(*parts_.experts, kernels::sum_of_squares(parts_.grads, owned_experts_local_),
                             ReduceOp::sum);
  return std::sqrt(reduced(mine, ReduceOp::sum, {parts_.group, parts_.tensor_parallel, parts_.pipeline}));
}

std::string AdamW::first_nonfinite_gradient() const {
  // Backward computes the parameters from the last to the first, so the first non-finite one it
  // reached is the highest index holding one in any part, counted in the whole model's order
  // (a pipeline rank's layout holds some of its tensors).
  const auto& params = layout_.params();
  const ParameterLayout whole(layout_.config());
  const auto index_in_model = [&](const std::string& name) {
    return static_cast<double>(&whole.find(name) - whole.params().data());
  };
  double highest = -1;
  for (size_t i = params.size(); i-- > 0 && highest < 0;) {
    const ParamInfo& info = params[i];
    for (const Part& p : part_list_) {
      const int64_t b = std::max(info.offset, p.range.begin), e = std::min(info.offset + info.numel(), p.range.end);
      if (b < e && !kernels::all_finite(part_of(parts_.grads, true, p).slice_rows(b - p.range.begin, e - b)))
        highest = index_in_model(info.name);
    }
  }
  highest = reduced(highest, ReduceOp::max, {parts_.group, parts_.tensor_parallel, parts_.pipeline, parts_.experts});
  return highest < 0 ? "" : whole.params()[static_cast<size_t>(highest)].name;
}

void AdamW::step(float lr, float grad_scale) {
  ++steps_taken_;
  kernels::AdamWStep decayed{.lr = lr,
                             .beta1 = config_.beta1,
                             .beta2 = config_.beta2,
                             .eps = config_.eps,
                             .weight_decay = config_.weight_decay,
                             .step = steps_taken_,
                             .grad_scale = grad_scale};
  kernels::AdamWStep not_decayed = decayed;
  not_decayed.weight_decay = 0;
  const Tensor m = local_moment(Moment::first), v = local_moment(Moment::second);
  for (const Part& p : part_list_) {
    const Tensor param = part_of(parts_.params, parts_.params_local, p), grad = part_of(parts_.grads, true, p);
    const Tensor pm = part_of(m, true, p), pv = part_of(v, true, p);
    if (!p.decayed.empty()) kernels::adamw_update(param, grad, pm, pv, p.decayed, decayed);
    if (!p.not_decayed.empty()) kernels::adamw_update(param, grad, pm, pv, p.not_decayed, not_decayed);
  }
  round_weights();
}

void AdamW::round_weights() const {
  if (!parts_.weights.defined()) return;
  // Whole parts in one pass each: padding rows and alignment gaps are zero in the f32 parameters
  // (only unpadded elements are updated), so they stay zero in the copy.
  for (const Part& p : part_list_)
    kernels::convert(part_of(parts_.weights, parts_.weights_local, p), part_of(parts_.params, parts_.params_local, p));
}

std::vector<Tensor> AdamW::moment_parts(Moment which) const {
  std::vector<Tensor> out;
  for (const Part& p : part_list_) out.push_back(part_of(local_moment(which), true, p));
  return out;
}

Tensor AdamW::moment(Moment which, const ParamInfo& info) const {
  for (const Part& p : part_list_)
    if (p.range.begin <= info.offset && info.offset + info.numel() <= p.range.end)
      return part_of(local_moment(which), true, p)
          .slice_rows(info.offset - p.range.begin, info.numel())
          .reshape(info.shape);
  throw Error(str("parameter ", info.name, " is not inside one of this optimizer's parts"));
}

void AdamW::take_moment(Moment which, Tensor whole) {
  DT_CHECK(whole.numel() == layout_.total_elements(), "a whole moment of ", whole.numel(), " elements for a layout of ",
           layout_.total_elements());
  for (const Part& p : part_list_) {
    const Tensor to = part_of(local_moment(which), true, p), from = part_of(whole, false, p);
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
}

void AdamW::put_moment(Moment which, Tensor whole) const {
  DT_CHECK(whole.numel() == layout_.total_elements(), "a whole moment of ", whole.numel(), " elements for a layout of ",
           layout_.total_elements());
  for (const Part& p : part_list_) {
    const Tensor to = part_of(whole, false, p), from = part_of(local_moment(which), true, p);
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
}

}  // namespace dt
