#include "bench/rank_figures.h"

#include <algorithm>

#include "core/buffer.h"
#include "core/device.h"

namespace dt {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<double> gathered_from_ranks(Communicator& world, double value) {
  const int R = world.size();
  std::vector<double> all(static_cast<size_t>(R));
  all[static_cast<size_t>(world.rank())] = value;
  // Through a buffer on the communicator's device: one that moves CUDA buffers takes no other.
  const Buffer b(all.size() * sizeof(double), MemTag::workspace, world.device());
  copy_bytes(b.data(), world.device(), all.data(), Device::cpu, b.bytes());
  const Tensor t = b.view(DType::f64, {R});
  world.all_gather(t, t.slice_rows(world.rank(), 1)).wait();
  copy_bytes(all.data(), Device::cpu, b.data(), world.device(), b.bytes());
  return all;
}

}  // namespace dt
