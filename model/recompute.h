// What backward recomputes instead of keeping from forward (Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models"), applied by each block
// (model/block.h):
//   none:      every activation backward reads is kept.
//   selective: the attention core (scores, softmax, weighted sum: atty and lse) is rerun in
//              backward from the kept qkv, as Megatron's selective recomputation.
//   full:      only each block's input is kept; the block's forward is rerun in backward.
// The kernels are deterministic, so gradients are bitwise the same under every policy.
// docs/precision.md#activation-recomputation measures what each policy keeps.
#pragma once

#include <string_view>

namespace dt {

// Ordered from the least to the most recomputed (the planner's searches compare them so).
enum class Recompute { none, selective, full };
std::string_view recompute_name(Recompute policy);
// Parses "none", "selective" or "full"; throws dt::Error naming the valid values.
Recompute recompute_from_name(std::string_view name);

}  // namespace dt
