// How closely a parallel layout's training must follow one rank's: the bounds the layout matrix
// (tests/layout_cell.h) holds every layout to, and `dtrain check` a user's (train/layout_check.h).
//
// Both train the same regime, the one the bounds were measured in: kEquivalenceSteps steps at a
// learning rate of kEquivalenceLr, AdamW's defaults, gradients clipped at 1, from the random
// initialisation of kEquivalenceSeed, on the same synthetic global batch (train/global_batch.h). The layout
// and one rank then differ by rounding only: sums taken in another order or in pieces. The
// bounds say how far that rounding carries; parallel/equivalence.cpp gives the reasons and the
// measurements behind each.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/float8_recipe.h"
#include "model/parameters.h"

namespace dt {

inline constexpr int kEquivalenceSteps = 3;
inline constexpr float kEquivalenceLr = 1e-3f;
inline constexpr uint64_t kEquivalenceSeed = 7;

// Relative bounds: losses and gradient norms against one rank's; parameters as the largest
// difference over the largest of one rank's parameters; delayed scaling's first amaxes against
// one rank's. The first step's loss and norm are bounded on their own: both runs start there from
// the same weights, so a wrong forward or reduction shows there first.
struct EquivalenceBounds {
  double first_loss, losses, first_norm, norms, parameters, first_amaxes;
};
// The bounds of a layout trained in `precision` with FP8 `scaling` (none: off) over `cp`
// context-parallel ranks.
EquivalenceBounds equivalence_bounds(DType precision, Float8Scaling scaling, int cp);

// |a - b| / |b|, and its largest over two series of the same length.
double relative_difference(double a, double b);
double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b);

// How far one tensor of a layout's parameters lies from one rank's, over the largest of one
// rank's parameters.
struct TensorDifference {
  std::string name;
  double difference = 0;
};
// Each parameter `part` holds against the same places of `reference` (the whole model's, as
// one rank trains it), in the part's layout order. `part` is any rank's share (a tp shard, a
// stage, an expert group's experts) or the whole model; `include` selects the parameters compared
// (all without it). Either may lie on any device.
std::vector<TensorDifference> parameter_differences(const FlatTensors& reference, const FlatTensors& part,
                                                    const std::function<bool(const ParamInfo&)>& include = {});

}  // namespace dt
