#include "kernels/flat_ranges.h"

#include "core/error.h"

namespace dt::kernels {

void append_range(std::vector<FlatRange>& ranges, FlatRange r) {
  if (r.size() <= 0) return;
  if (!ranges.empty() && ranges.back().end == r.begin)
    ranges.back().end = r.end;
  else
    ranges.push_back(r);
}

void expect_ranges(std::string_view op, std::span<const FlatRange> ranges, int64_t n) {
  int64_t previous_end = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const FlatRange& r = ranges[i];
    if (r.begin < previous_end || r.end <= r.begin || r.end > n)
      throw Error(str(op, ": range ", i, " [", r.begin, ", ", r.end, ") must be non-empty, start at or after the ",
                      "previous range's end (", previous_end, ") and end within the buffer's ", n, " elements"));
    previous_end = r.end;
  }
}

}  // namespace dt::kernels
