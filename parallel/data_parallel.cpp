#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#include "kernels/adamw.h"
#include "kernels/reduce.h"

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

// The parts of `ranges` (sorted flat ranges) inside `window`, relative to the window's start.
std::vector<kernels::FlatRange> clipped(const std::vector<kernels::FlatRange>& ranges, kernels::FlatRange window) {
  std::vector<kernels::FlatRange> out;
  for (const kernels::FlatRange& r : ranges) {
    const int64_t b = std::max(r.begin, window.begin), e = std::min(r.end, window.end);
    if (b < e) kernels::append_range(out, {b - window.begin, e - window.begin});
  }
  return out;
}

}  // namespace

DataParallel::DataParallel(Transformer& model, Communicator& dp, double bucket_mb, int zero_stage,
                           const AdamWConfig& adamw)
    : model_(model), dp_(dp), zero_stage_(zero_stage), adamw_(adamw) {
  DT_CHECK(dp.device() == model.device(), "data parallelism over a ", device_name(dp.device()),
           " communicator for a model on ", device_name(model.device()));
  DT_CHECK(zero_stage == 0 || zero_stage == 1, "ZeRO stage ", zero_stage, " is not built yet (stages 0 and 1 are)");
  const ParameterLayout& layout = model.layout();
  if (zero_stage == 0) {
    buckets_ = make_buckets(layout, std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / sizeof(float))));
  } else {
    const int ranks = dp.size(), rank = dp.rank();
    DT_CHECK(layout.unit_multiple() % unit_multiple(ranks) == 0, "ZeRO over ", ranks,
             " ranks needs the model's layout made with unit multiple ", unit_multiple(ranks), ", not ",
             layout.unit_multiple());
    const auto decayed = layout.shown_ranges([&](const ParamInfo& p) { return adamw_decays(adamw, p); });
    const auto not_decayed = layout.shown_ranges([&](const ParamInfo& p) { return !adamw_decays(adamw, p); });
    for (const kernels::FlatRange& unit : layout.units()) {
      const int64_t part = unit.size() / ranks;
      const kernels::FlatRange mine{unit.begin + rank * part, unit.begin + (rank + 1) * part};
      Part p{.unit = unit,
             .global = mine,
             .local = shard_elements_,
             .decayed = clipped(decayed, mine),
             .not_decayed = clipped(not_decayed, mine)};
      for (const kernels::FlatRange& r : clipped(layout.shown_ranges(), p.global))
        kernels::append_range(shown_local_, {p.local + r.begin, p.local + r.end});
      shard_elements_ += part;
      parts_.push_back(std::move(p));
    }
    const size_t bytes = static_cast<size_t>(shard_elements_) * sizeof(float);
    grad_shard_ = Buffer(bytes, MemTag::gradients, model.device());
    m_ = Buffer(bytes, MemTag::optimizer_state, model.device());
    v_ = Buffer(bytes, MemTag::optimizer_state, model.device());
  }
  model_.set_gradients_ready([this](int64_t ready_from) { on_gradients_ready(ready_from); });
}

DataParallel::~DataParallel() { model_.set_gradients_ready({}); }

Tensor DataParallel::shard_view(const Buffer& b, const Part& p) const {
  return b.view(DType::f32, {p.global.size()}, static_cast<size_t>(p.local) * sizeof(float));
}

void DataParallel::reduce_during_next_backward() {
  DT_CHECK(in_flight_.empty(), "the previous step's gradient reduction was not waited for");
  // Stage 1 reduce-scatters even over one rank: the update reads the shard.
  armed_ = dp_.size() > 1 || zero_stage_ >= 1;
  next_ = 0;
}

void DataParallel::on_gradients_ready(int64_t ready_from) {
  if (!armed_) return;
  const Tensor grads = model_.grads().all();
  if (zero_stage_ == 0) {
    for (; next_ < buckets_.size() && buckets_[next_].begin >= ready_from; ++next_) {
      const kernels::FlatRange& b = buckets_[next_];
      in_flight_.push_back(dp_.all_reduce(grads.slice_rows(b.begin, b.size()), ReduceOp::sum));
    }
    if (next_ == buckets_.size()) armed_ = false;
    return;
  }
  for (; next_ < parts_.size() && parts_[parts_.size() - 1 - next_].unit.begin >= ready_from; ++next_) {
    const Part& p = parts_[parts_.size() - 1 - next_];
    in_flight_.push_back(
        dp_.reduce_scatter(shard_view(grad_shard_, p), grads.slice_rows(p.unit.begin, p.unit.size()), ReduceOp::sum));
  }
  if (next_ == parts_.size()) armed_ = false;
}

void DataParallel::wait_for_gradients() {
  DT_CHECK(!armed_, "waiting for the gradients before backward reported them all final");
  for (CollectiveHandle& h : in_flight_) h.wait();
  in_flight_.clear();
}

double DataParallel::global_grad_norm() {
  DT_CHECK(zero_stage_ >= 1, "global_grad_norm of the shards is ZeRO's; stage 0 uses optim/grad_clip.h");
  const double mine = kernels::sum_of_squares(grad_shard_.view(DType::f32, {shard_elements_}), shown_local_);
  return std::sqrt(all_reduce_value(dp_, mine, ReduceOp::sum));
}

void DataParallel::update(float lr, float grad_scale) {
  DT_CHECK(zero_stage_ >= 1, "update of the shards is ZeRO's; stage 0 uses optim/adamw.h");
  ++steps_taken_;
  const Tensor params = model_.params().all();
  kernels::AdamWStep decayed = adamw_step(adamw_, lr, grad_scale, steps_taken_), not_decayed = decayed;
  not_decayed.weight_decay = 0;
  for (const Part& p : parts_) {
    const Tensor param = params.slice_rows(p.global.begin, p.global.size());
    const Tensor grad = shard_view(grad_shard_, p), m = shard_view(m_, p), v = shard_view(v_, p);
    if (!p.decayed.empty()) kernels::adamw_update(param, grad, m, v, p.decayed, decayed);
    if (!p.not_decayed.empty()) kernels::adamw_update(param, grad, m, v, p.not_decayed, not_decayed);
  }
  // Every rank's parts back into every rank's parameters, unit by unit (in flight together).
  std::vector<CollectiveHandle> gathers;
  for (const Part& p : parts_)
    gathers.push_back(dp_.all_gather(params.slice_rows(p.unit.begin, p.unit.size()),
                                     params.slice_rows(p.global.begin, p.global.size())));
  for (CollectiveHandle& h : gathers) h.wait();
}

void DataParallel::gather_moments(AdamW* full) {
  DT_CHECK(zero_stage_ >= 1, "gather_moments is ZeRO's");
  const bool lead = dp_.rank() == 0;
  DT_CHECK(lead == (full != nullptr), "gather_moments: rank 0 of the group, and only it, passes the whole state");
  for (const auto& [shard, which] : {std::pair{&m_, 0}, std::pair{&v_, 1}}) {
    std::vector<CollectiveHandle> parts;
    if (!lead) {
      for (const Part& p : parts_) parts.push_back(dp_.send(shard_view(*shard, p), 0));
      for (CollectiveHandle& h : parts) h.wait();
      continue;
    }
    // Rank 0 receives every other rank's part of every unit, in the group's device memory, then
    // copies the whole moment to `full`.
    const Tensor target = which == 0 ? full->m().all() : full->v().all();
    const Buffer whole(target.bytes(), MemTag::communication, dp_.device());
    const Tensor w = whole.view(DType::f32, {target.numel()});
    const int64_t ranks = dp_.size();
    for (const Part& p : parts_) {
      const int64_t part = p.unit.size() / ranks;
      const Tensor mine = shard_view(*shard, p);
      copy_bytes(w.slice_rows(p.global.begin, part).data, w.device, mine.data, mine.device, mine.bytes());
      for (int r = 1; r < ranks; ++r) parts.push_back(dp_.recv(w.slice_rows(p.unit.begin + r * part, part), r));
    }
    for (CollectiveHandle& h : parts) h.wait();
    copy_bytes(target.data, target.device, w.data, w.device, target.bytes());
  }
  if (full != nullptr) full->restore_steps_taken(steps_taken_);
}

void DataParallel::take_moments(AdamW& full) {
  DT_CHECK(zero_stage_ >= 1, "take_moments is ZeRO's");
  for (const auto& [shard, source] : {std::pair{&m_, &full.m()}, std::pair{&v_, &full.v()}}) {
    const Tensor s = source->all();
    for (const Part& p : parts_) {
      const Tensor to = shard_view(*shard, p), from = s.slice_rows(p.global.begin, p.global.size());
      copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
    }
  }
  steps_taken_ = full.steps_taken();
}

}  // namespace dt
