#include "model/float8_recipe.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "model/block_declaration.h"

namespace dt {

namespace {

constexpr std::array kScalings{std::pair{Float8Scaling::none, "none"}, std::pair{Float8Scaling::tensorwise, "tensorwise"},
                               std::pair{Float8Scaling::delayed, "delayed"},
                               std::pair{Float8Scaling::blockwise, "blockwise"}};

}  // namespace

std::string_view float8_scaling_name(Float8Scaling scaling) {
  for (const auto& [s, name] : kScalings)
    if (s == scaling) return name;
  return "?";
}

Float8Scaling float8_scaling_from_name(std::string_view name) {
  for (const auto& [s, n] : kScalings)
    if (n == name) return s;
  throw Error(str("unknown FP8 recipe '", name, "'; train.fp8 is none, tensorwise, delayed or blockwise"));
}

std::vector<std::pair<std::string, std::string>> float8_recipe_problems(const Float8Recipe& r) {
  std::vector<std::pair<std::string, std::string>> problems;
  if (r.format != "hybrid" && r.format != "e4m3")
    problems.emplace_back("fp8.format", "must be \"hybrid\" (e4m3 inputs and weights, e5m2 gradients) or \"e4m3\" (all three)");
  if (r.amax_history < 1) problems.emplace_back("fp8.amax_history", "must be at least 1 (steps of amaxes kept)");
  if (r.amax_compute != "max" && r.amax_compute != "most_recent")
    problems.emplace_back("fp8.amax_compute", "must be \"max\" (over the history) or \"most_recent\"");
  if (r.margin < 0 || r.margin > 30) problems.emplace_back("fp8.margin", "must be in [0, 30] (binades left free)");
  if (r.block < 1 || (r.block & (r.block - 1)) != 0)
    problems.emplace_back("fp8.block", "must be a power of two (a tile's side; DeepSeek-V3's is 128)");
  return problems;
}

bool float8_quantizes(std::string_view linear) {
  return linear == "attn.qkv" || linear == "attn.proj" || linear == "mlp.fc" || linear == "mlp.proj" ||
         linear == "mlp.shared.fc" || linear == "mlp.shared.proj" || linear == "mlp.experts.fc" ||
         linear == "mlp.experts.proj";
}

std::vector<LinearStateDeclaration> float8_state_declarations(const Float8Recipe& recipe, const ModelConfig& config) {
  if (recipe.scaling != Float8Scaling::delayed) return {};
  std::vector<std::string> linears;
  for (const BlockDeclaration* b : block_declarations(config))
    for (const LinearDeclaration* l : b->linears())
      if (float8_quantizes(l->name) && std::ranges::count(linears, l->name) == 0) linears.push_back(l->name);
  return {{.name = "fp8_amax", .count = 3, .linears = linears, .initial = 0},
          {.name = "fp8_amax_history", .count = 3 * static_cast<int64_t>(recipe.amax_history), .linears = linears,
           .initial = 0},
          {.name = "fp8_scale", .count = 3, .linears = linears, .initial = 1}};
}

}  // namespace dt
