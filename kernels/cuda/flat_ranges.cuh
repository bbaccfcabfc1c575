// Ranges of a flat buffer (kernels/flat_ranges.h) handed to one kernel launch.
//
// A launch takes up to kRangesPerLaunch ranges by value, as a kernel parameter (about 6 KiB;
// CUDA 12.1 raised the limit to 32 KiB), so nothing is copied to the GPU before the launch
// and nothing must be kept alive after it. More ranges take more launches.
//
// The work is cut into quads: four consecutive elements of one range, the last quad of a range
// possibly shorter. Quads are numbered across the ranges of a launch; thread work is a
// grid-stride loop over quad numbers, and find_quad turns a number into its elements with a
// binary search over the ranges' first quads (neighbouring threads share a range, so the
// search reads the same parameter words: broadcasts from the constant cache). When the buffers
// are 16-byte aligned and every range starts at a multiple of 4, a full quad is one 16-byte
// load per buffer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/flat_ranges.h"

namespace dt::kernels::cuda {

constexpr int kRangesPerLaunch = 256;

struct RangeTable {
  int count = 0;
  bool quads_aligned = false;              // every begin is a multiple of 4
  int64_t first_quad[kRangesPerLaunch + 1];  // first_quad[count] is the launch's total
  int64_t begin[kRangesPerLaunch];
  int64_t end[kRangesPerLaunch];

  __host__ __device__ int64_t quads() const { return first_quad[count]; }
};

// The ranges split into tables of at most kRangesPerLaunch, in order.
inline std::vector<RangeTable> range_tables(std::span<const FlatRange> ranges) {
  std::vector<RangeTable> tables;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i % kRangesPerLaunch == 0) tables.push_back(RangeTable{.quads_aligned = true, .first_quad = {0}});
    RangeTable& t = tables.back();
    const FlatRange& r = ranges[i];
    t.begin[t.count] = r.begin;
    t.end[t.count] = r.end;
    t.quads_aligned = t.quads_aligned && r.begin % 4 == 0;
    t.first_quad[t.count + 1] = t.first_quad[t.count] + (r.size() + 3) / 4;
    ++t.count;
  }
  return tables;
}

// Quad q of a table: its first element and how many elements it has (1 to 4).
struct Quad {
  int64_t first;
  int count;
};

__device__ __forceinline__ Quad find_quad(const RangeTable& t, int64_t q) {
  int lo = 0, hi = t.count - 1;  // the range r with first_quad[r] <= q < first_quad[r + 1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first_quad[mid] <= q)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t first = t.begin[lo] + 4 * (q - t.first_quad[lo]);
  const int64_t left = t.end[lo] - first;
  return {first, static_cast<int>(left < 4 ? left : 4)};
}

}  // namespace dt::kernels::cuda
