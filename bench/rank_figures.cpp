#include "bench/rank_figures.h"

#include <algorithm>

#include "core/buffer.h"

namespace dt {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<double> gathered_from_ranks(Communicator& world, double value) {
  const int R = world.size();
  Buffer b(static_cast<size_t>(R) * sizeof(double), MemTag::workspace);
  const Tensor all = b.view(DType::f64, {R});
  all.ptr<double>()[world.rank()] = value;
  world.all_gather(all, all.slice_rows(world.rank(), 1)).wait();
  return {all.ptr<double>(), all.ptr<double>() + R};
}

}  // namespace dt
