#include "model/activation_store.h"

namespace dt {

ActivationRegion RegionLayout::add(int64_t width, DType dtype, int64_t rows) {
  const ActivationRegion r{.pool = pool_, .offset = bytes_, .width = width, .dtype = dtype};
  // Each region starts on a cache line so that no two regions share one.
  bytes_ += ((rows < 0 ? max_rows_ : rows) * width * static_cast<int64_t>(dtype_size(dtype)) + 63) / 64 * 64;
  return r;
}

ActivationStore::ActivationStore(int64_t kept_bytes, int64_t shared_bytes, int64_t scratch_bytes, Device device,
                                 int reserved)
    : kept_bytes_(kept_bytes),
      device_(device),
      shared_(static_cast<size_t>(shared_bytes), MemTag::activations, device, false),
      scratch_(static_cast<size_t>(scratch_bytes), MemTag::workspace, device, false) {
  for (int i = 0; i < reserved; ++i)
    released_.emplace_back(static_cast<size_t>(kept_bytes_), MemTag::activations, device_, false);
}

void ActivationStore::hold(int k) {
  DT_CHECK(!held(k), "micro-batch ", k, "'s activations are already held");
  if (released_.empty()) {
    kept_.emplace(k, Buffer(static_cast<size_t>(kept_bytes_), MemTag::activations, device_, false));
    return;
  }
  kept_.emplace(k, std::move(released_.back()));
  released_.pop_back();
}

void ActivationStore::release(int k) {
  const auto it = kept_.find(k);
  DT_CHECK(it != kept_.end(), "micro-batch ", k, "'s activations are not held");
  released_.push_back(std::move(it->second));
  kept_.erase(it);
}

Tensor ActivationStore::view(int k, const ActivationRegion& r, int64_t rows) const {
  const Buffer* b = &shared_;
  if (r.pool == ActivationPool::scratch) b = &scratch_;
  if (r.pool == ActivationPool::kept) {
    const auto it = kept_.find(k);
    DT_CHECK(it != kept_.end(), "micro-batch ", k, "'s activations are not held");
    b = &it->second;
  }
  return b->view(r.dtype, {rows, r.width}, static_cast<size_t>(r.offset));
}

}  // namespace dt
