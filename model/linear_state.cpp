#include "model/linear_state.h"

#include <algorithm>

#include "core/device.h"
#include "core/error.h"
#include "core/suggest.h"
#include "model/float8_recipe.h"

namespace dt {

namespace {

// The linear layers of `block` that carry kind `d`, in forward order; throws for a name no block
// of the model declares (a dense block's mlp.fc is in no expert block, and carries only where it is).
std::vector<const LinearDeclaration*> carriers(const ModelConfig& config, const BlockDeclaration& block,
                                               const LinearStateDeclaration& d) {
  std::vector<std::string> all;
  for (const BlockDeclaration* b : block_declarations(config))
    for (const LinearDeclaration* l : b->linears())
      if (std::ranges::count(all, l->name) == 0) all.push_back(l->name);
  for (const std::string& name : d.linears)
    if (std::ranges::count(all, name) == 0) {
      std::string known;
      for (const std::string& n : all) known += str(known.empty() ? "" : ", ", n);
      const std::string suggestion = closest_match(name, all);
      throw Error(str("per-linear state '", d.name, "' is declared for linear layer '", name,
                      "', which no block of the model has", suggestion.empty() ? "" : str(" (did you mean '", suggestion, "'?)"),
                      "; its linear layers are ", known));
    }
  std::vector<const LinearDeclaration*> chosen;
  for (const LinearDeclaration* l : block.linears())
    if (d.linears.empty() || std::ranges::count(d.linears, l->name) > 0) chosen.push_back(l);
  return chosen;
}

void check_declarations(const std::vector<LinearStateDeclaration>& declared) {
  for (size_t k = 0; k < declared.size(); ++k) {
    const LinearStateDeclaration& d = declared[k];
    if (d.name.empty()) throw Error(str("per-linear state ", k, " has no name; name it (\"amax_history\")"));
    if (d.count < 1)
      throw Error(str("per-linear state '", d.name, "' has ", d.count, " elements per linear layer; declare at least 1"));
    for (size_t j = 0; j < k; ++j)
      if (declared[j].name == d.name)
        throw Error(str("per-linear state '", d.name, "' is declared twice; give each kind its own name"));
  }
}

// Each entry of the declared kinds over the blocks `holds` says are held, kind-major, with its
// offset; and the names of every block's entries.
struct Plan {
  std::vector<LinearStates::Entry> entries;
  std::vector<std::pair<int64_t, int64_t>> kinds;
  std::vector<std::string> model_names;
  int64_t elements = 0;
};

Plan plan_states(const ParameterLayout& layout, const std::vector<LinearStateDeclaration>& declared) {
  check_declarations(declared);
  const ModelConfig& config = layout.config();
  Plan plan;
  for (size_t k = 0; k < declared.size(); ++k) {
    const LinearStateDeclaration& d = declared[k];
    const int64_t first = plan.elements;
    for (int l = 0; l < config.n_layer; ++l)
      for (const LinearDeclaration* linear : carriers(config, declare_block(config, l), d)) {
        std::string name = str(block_prefix(l), linear->name, ".", d.name);
        plan.model_names.push_back(name);
        if (!layout.held_units().holds_block(l)) continue;
        const int64_t count = d.count * (linear->per_expert ? config.moe.experts : 1);
        plan.entries.push_back({std::move(name), l, linear->name, k, plan.elements, count});
        plan.elements += count;
      }
    plan.kinds.emplace_back(first, plan.elements);
  }
  return plan;
}

}  // namespace

Tensor LinearStateView::get(std::string_view state) const {
  for (const auto& [name, view] : states_)
    if (name == state) return view;
  std::string known;
  for (const auto& [name, view] : states_) known += str(known.empty() ? "" : ", ", name);
  throw Error(str("linear layer '", linear_, "' has no per-linear state '", state, "'",
                  known.empty() ? "; none is declared for it" : str("; it has ", known)));
}

LinearStates::LinearStates(const ParameterLayout& layout, std::vector<LinearStateDeclaration> declared, Device device,
                           const Float8Training* float8, std::optional<QatRecipe> qat)
    : declared_(std::move(declared)), float8_(float8), qat_(qat) {
  Plan plan = plan_states(layout, declared_);
  entries_ = std::move(plan.entries);
  kinds_ = std::move(plan.kinds);
  model_names_ = std::move(plan.model_names);
  buffer_ = Buffer(static_cast<size_t>(plan.elements) * sizeof(float), MemTag::parameters, device);
  // The buffer starts at zero; a kind that starts elsewhere is set on the host and copied over.
  for (size_t k = 0; k < declared_.size(); ++k) {
    if (declared_[k].initial == 0) continue;
    const Tensor kind = all(declared_[k].name);
    const std::vector<float> values(static_cast<size_t>(kind.numel()), declared_[k].initial);
    copy_bytes(kind.data, kind.device, values.data(), Device::cpu, kind.bytes());
  }
}

size_t LinearStates::bytes(const ParameterLayout& layout, const std::vector<LinearStateDeclaration>& declared) {
  return static_cast<size_t>(plan_states(layout, declared).elements) * sizeof(float);
}

const LinearStates& LinearStates::none() {
  static const LinearStates empty;
  return empty;
}

Tensor LinearStates::at(const Entry& entry) const {
  return buffer_.view(DType::f32, {entry.count}, static_cast<size_t>(entry.offset) * sizeof(float));
}

Tensor LinearStates::find(int layer, std::string_view linear, std::string_view state) const {
  for (const Entry& e : entries_)
    if (e.layer == layer && e.linear == linear && declared_[e.kind].name == state) return at(e);
  std::vector<std::string> names;
  for (const Entry& e : entries_) names.push_back(e.name);
  const std::string wanted = str(block_prefix(layer), linear, ".", state);
  const std::string suggestion = closest_match(wanted, names);
  throw Error(str("no per-linear state '", wanted, "' on this rank (it holds ", entries_.size(), ")",
                  suggestion.empty() ? "" : str("; did you mean '", suggestion, "'?")));
}

size_t LinearStates::kind_index(std::string_view state) const {
  for (size_t k = 0; k < declared_.size(); ++k)
    if (declared_[k].name == state) return k;
  std::string known;
  for (const LinearStateDeclaration& d : declared_) known += str(known.empty() ? "" : ", ", d.name);
  throw Error(str("no per-linear state '", state, "' is declared", known.empty() ? "" : str(" (declared: ", known, ")")));
}

Tensor LinearStates::all(std::string_view state) const {
  const size_t k = kind_index(state);
  const auto [first, end] = kinds_[k];
  const int64_t count = declared_[k].count;
  return buffer_.view(DType::f32, {(end - first) / count, count}, static_cast<size_t>(first) * sizeof(float));
}

LinearStateView LinearStates::of(int layer, std::string_view linear) const {
  LinearStateView view;
  view.linear_ = str(block_prefix(layer), linear);
  if (float8_ != nullptr && float8_->recipe.enabled() && float8_quantizes(linear)) view.float8_ = float8_;
  view.qat_ = qat_;
  for (const Entry& e : entries_)
    if (e.layer == layer && e.linear == linear) view.states_.emplace_back(declared_[e.kind].name, at(e));
  return view;
}

void LinearStates::reduce_max(std::string_view state, const std::vector<Communicator*>& groups) const {
  const Tensor values = all(state);
  if (values.numel() == 0) return;
  const Tensor flat = values.reshape({values.numel()});
  for (Communicator* group : groups) group->all_reduce(flat, ReduceOp::max).wait();
}

}  // namespace dt
