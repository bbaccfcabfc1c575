// Ranges of a flat buffer, for the multi-tensor ops.
//
// The parameters, gradients and optimizer moments are each one flat buffer (model/
// parameters.h). The optimizer's update and the gradient norm run over the parameters' parts
// of them — every parameter, but not the alignment gaps or padding rows between them — as a
// list of ranges, in one pass (one launch on the GPU) instead of one call per parameter. ZeRO's
// shards are ranges of the same buffers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace dt::kernels {

// Elements [begin, end) of a flat buffer.
struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const FlatRange&) const = default;
};

// Appends r to a list kept in increasing order, merging it into the last range when the two
// touch: [0, 16) then [16, 40) become [0, 40). Empty ranges are skipped.
void append_range(std::vector<FlatRange>& ranges, FlatRange r);

// Throws, naming the op, unless the ranges are non-empty, in increasing order, disjoint and
// within a buffer of n elements: the ops would otherwise count an element twice or write
// outside the buffer.
void expect_ranges(std::string_view op, std::span<const FlatRange> ranges, int64_t n);

}  // namespace dt::kernels
