#include "parallel/data_parallel.h"

#include <algorithm>


namespace dt {

namespace {

// Ranges of whole parameters, from the end of the layout, each of at least `bucket_elements`
// (the last may be smaller), together covering [0, total elements).
std::vector<kernels::FlatRange> make_buckets(const ParameterLayout& layout, int64_t bucket_elements) {
  std::vector<kernels::FlatRange> buckets;
  int64_t end = layout.total_elements();
  const auto& params = layout.params();
  for (auto p = params.rbegin(); p != params.rend(); ++p) {
    const bool last = std::next(p) == params.rend();
    if (end - p->offset >= bucket_elements || last) {
      buckets.push_back({last ? 0 : p->offset, end});
      end = p->offset;
    }
  }
  return buckets;
}

}  // namespace

DataParallel::DataParallel(Transformer& model, Communicator& dp, double bucket_mb)
    : model_(model),
      dp_(dp),
      buckets_(make_buckets(model.layout(),
                            std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / sizeof(float))))) {
  DT_CHECK(dp.device() == model.device(), "data parallelism over a ", device_name(dp.device()),
           " communicator for a model on ", device_name(model.device()));
  model_.set_gradients_ready([this](int64_t ready_from) { on_gradients_ready(ready_from); });
}

DataParallel::~DataParallel() { model_.set_gradients_ready({}); }

void DataParallel::reduce_during_next_backward() {
  DT_CHECK(in_flight_.empty(), "the previous step's gradient reduction was not waited for");
  armed_ = dp_.size() > 1;
  next_bucket_ = 0;
}

void DataParallel::on_gradients_ready(int64_t ready_from) {
  if (!armed_) return;
  const Tensor grads = model_.grads().all();
  for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= ready_from; ++next_bucket_) {
    const kernels::FlatRange& b = buckets_[next_bucket_];
    in_flight_.push_back(dp_.all_reduce(grads.slice_rows(b.begin, b.size()), ReduceOp::sum));
  }
  if (next_bucket_ == buckets_.size()) armed_ = false;
}

void DataParallel::wait_for_gradients() {
  DT_CHECK(!armed_, "waiting for the gradients before backward reported them all final");
  for (CollectiveHandle& h : in_flight_) h.wait();
  in_flight_.clear();
}

}  // namespace dt
