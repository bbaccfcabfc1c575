#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "core/allocator.h"
#include "core/device.h"
#include "kernels/add.h"
#include "kernels/convert.h"
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

}  // namespace

// Reductions of units kept in flight at once under ZeRO 2 and 3 before the oldest is waited for
// and its gradients freed: enough to overlap with backward, few enough to bound the memory.
constexpr size_t kUnitReductionsInFlight = 2;

ParameterStorage DataParallel::storage(int ranks, int zero_stage) {
  if (zero_stage == 0) return {};
  return {.unit_multiple = kParamAlignment * ranks,
          .weights = zero_stage >= 3 ? Storage::per_unit : Storage::whole,
          .grads = zero_stage >= 2 ? Storage::per_unit : Storage::whole,
          .master_weights = false};
}

int64_t DataParallel::shard_elements(const ParameterLayout& layout, int ranks) {
  int64_t elements = 0;
  for (const kernels::FlatRange& unit : layout.units()) elements += unit.size() / ranks;
  return elements;
}

namespace {

bool parameters_sharded(int zero_stage, DType precision) {
  return zero_stage == 3 || (zero_stage >= 1 && precision != DType::f32);
}

}  // namespace

std::vector<DataParallel::ShardSpec> DataParallel::shard_buffers(DType precision, int zero_stage) {
  if (zero_stage == 0) return {};
  std::vector<ShardSpec> specs = {{ShardRole::gradients, MemTag::gradients, DType::f32}};
  // The f32 parameters' parts: the weights themselves at stage 3 in f32; a 16-bit run's master
  // weights, which the paper counts with the optimizer state.
  if (parameters_sharded(zero_stage, precision))
    specs.push_back({ShardRole::f32_parameters, precision == DType::f32 ? MemTag::parameters : MemTag::optimizer_state,
                     DType::f32});
  if (zero_stage == 3 && precision != DType::f32) specs.push_back({ShardRole::weights, MemTag::parameters, precision});
  return specs;
}

namespace {

// DataParallel's hooks at stages 2 and 3 (below), keeping count of the bytes they would hold
// rather than holding them: a unit's gradients from gradients_needed until its reduction is
// finished, once more than kUnitReductionsInFlight are in flight after a gradients_final; the
// staging of each reduction that adds to the shard, as long; at stage 3 a unit's weights from
// its gather (for the pass, or prefetched for the next) until weights_done.
class HeldUnits : public UnitHooks {
 public:
  HeldUnits(const ParameterLayout& layout, DType precision, int ranks, int zero_stage, bool accumulate)
      : layout_(layout), precision_(precision), ranks_(ranks), zero_stage_(zero_stage), accumulate_(accumulate),
        weights_(layout.units().size()), gradients_(layout.units().size()) {}

  void weights_needed(size_t u, std::optional<size_t> next) override {
    if (zero_stage_ < 3) return;
    gather(u);
    if (next) gather(*next);
  }
  void weights_done(size_t u) override {
    if (zero_stage_ < 3) return;
    weights_[u] = false;
    add(MemTag::parameters, -unit_bytes(u, precision_));
  }
  void gradients_needed(size_t u) override {
    if (gradients_[u]) return;
    gradients_[u] = true;
    add(MemTag::gradients, unit_bytes(u, DType::f32));
  }
  void gradients_final(size_t u) override {
    const int64_t staged = accumulate_ ? layout_.units()[u].size() / ranks_ * int64_t{sizeof(float)} : 0;
    add(MemTag::communication, staged);
    reductions_.push_back({u, staged});
    while (reductions_.size() > kUnitReductionsInFlight) finish_oldest_reduction();
  }
  // wait_for_gradients, after backward.
  void finish_reductions() {
    while (!reductions_.empty()) finish_oldest_reduction();
  }
  const std::array<int64_t, kNumMemTags>& peak() const { return peak_; }

 private:
  struct Reduction {
    size_t unit;
    int64_t staged;
  };
  int64_t unit_bytes(size_t u, DType dtype) const {
    return static_cast<int64_t>(FlatTensors::unit_bytes(layout_, dtype, u));
  }
  void gather(size_t u) {
    if (weights_[u]) return;
    weights_[u] = true;
    add(MemTag::parameters, unit_bytes(u, precision_));
  }
  void finish_oldest_reduction() {
    const Reduction& r = reductions_.front();
    add(MemTag::communication, -r.staged);
    gradients_[r.unit] = false;
    add(MemTag::gradients, -unit_bytes(r.unit, DType::f32));
    reductions_.pop_front();
  }
  void add(MemTag tag, int64_t bytes) {
    const auto t = static_cast<size_t>(tag);
    held_[t] += bytes;
    peak_[t] = std::max(peak_[t], held_[t]);
  }

  const ParameterLayout& layout_;
  DType precision_;
  int64_t ranks_;
  int zero_stage_;
  bool accumulate_;
  std::vector<bool> weights_, gradients_;  // held, per unit
  std::deque<Reduction> reductions_;
  std::array<int64_t, kNumMemTags> held_{}, peak_{};
};

}  // namespace

std::array<size_t, kNumMemTags> DataParallel::working_set(const ParameterLayout& layout, DType precision, int ranks,
                                                          int zero_stage, const std::vector<UnitHookCall>& calls,
                                                          int micro_batches) {
  std::array<size_t, kNumMemTags> bytes{};
  if (zero_stage < 2) return bytes;
  // The first micro-batch's reductions write into the shard; every later one's is staged, and
  // holds the most.
  HeldUnits held(layout, precision, ranks, zero_stage, /*accumulate=*/micro_batches > 1);
  replay(calls, held);
  held.finish_reductions();
  for (size_t t = 0; t < bytes.size(); ++t) bytes[t] = static_cast<size_t>(held.peak()[t]);
  return bytes;
}

DataParallel::DataParallel(Transformer& model, Communicator& group, double bucket_mb, int zero_stage,
                           const AdamWConfig& adamw, Communicator* pipeline)
    : model_(model),
      group_(group),
      pipeline_(pipeline),
      zero_stage_(zero_stage),
      shards_parameters_(parameters_sharded(zero_stage, model.precision())) {
  DT_CHECK(group.device() == model.device(), "data parallelism over a ", device_name(group.device()),
           " communicator for a model on ", device_name(model.device()));
  DT_CHECK(zero_stage >= 0 && zero_stage <= 3, "ZeRO stage ", zero_stage, " does not exist (0 to 3)");
  DT_CHECK(model.single_stage() || zero_stage <= 1, "pipeline stages under ZeRO stage ", zero_stage,
           ": stages 2 and 3 reduce or gather during every pass, which a schedule interleaves");
  const ParameterLayout& layout = model.layout();
  if (zero_stage == 0) {
    buckets_ = make_buckets(layout, std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / sizeof(float))));
  } else {
    const int ranks = group.size(), rank = group.rank();
    const ParameterStorage needed = storage(ranks, zero_stage);
    DT_CHECK(layout.unit_multiple() % needed.unit_multiple == 0, "ZeRO over ", ranks,
             " ranks needs the model's layout made with unit multiple ", needed.unit_multiple, ", not ",
             layout.unit_multiple());
    DT_CHECK(model.weights().storage() == needed.weights && model.grads().storage() == needed.grads &&
                 !model.keeps_master_weights(),
             "ZeRO stage ", zero_stage, " needs the model made with DataParallel::storage(ranks, ", zero_stage, ")");
    for (const kernels::FlatRange& unit : layout.units()) {
      const int64_t part = unit.size() / ranks;
      parts_.push_back({.unit = unit,
                        .owned = {unit.begin + rank * part, unit.begin + (rank + 1) * part},
                        .shard_offset = shard_elements_});
      shard_elements_ += part;
    }
    for (const ShardSpec& spec : shard_buffers(model.precision(), zero_stage)) {
      Buffer shard(static_cast<size_t>(shard_elements_) * dtype_size(spec.dtype), spec.tag, model.device());
      (spec.role == ShardRole::gradients ? grad_shard_ : spec.role == ShardRole::f32_parameters ? param_shard_
                                                                                                : weight_shard_) =
          std::move(shard);
    }
    gathering_.resize(parts_.size());
  }
  optimizer_.emplace(layout, optimizer_parts(), adamw);
  // A pipeline rank's stages run without hooks: reduce_gradients() follows the schedule.
  if (model.single_stage()) model_.set_unit_hooks(this);
}

OptimizerParts DataParallel::optimizer_parts() {
  if (zero_stage_ == 0) {
    OptimizerParts whole = OptimizerParts::whole(model_);
    whole.pipeline = pipeline_;
    return whole;
  }
  OptimizerParts o;
  o.pipeline = pipeline_;
  o.grads = grad_shard_.view(DType::f32, {shard_elements_});
  o.group = &group_;
  o.tensor_parallel = model_.regions().group();
  for (const Part& p : parts_) o.ranges.push_back(p.owned);
  // The f32 parameters: the master shard where sharded, else the model's whole parameters.
  o.params_local = shards_parameters_;
  o.params = shards_parameters_ ? param_shard_.view(DType::f32, {shard_elements_}) : model_.params().all();
  if (model_.precision() != DType::f32) {
    // The 16-bit weights: stage 3's shard, which the gathers send from, else the model's whole copy.
    o.weights_local = zero_stage_ == 3;
    o.weights = o.weights_local ? weight_shard_.view(model_.precision(), {shard_elements_}) : model_.weights().all();
  }
  return o;
}

DataParallel::~DataParallel() {
  model_.set_unit_hooks(nullptr);
  try {
    wait_for_gradients();  // nothing may still write into buffers about to be freed
    for (auto& g : gathering_)
      if (g) g->wait();
  } catch (const Error&) {  // already unwinding from the collective's failure
  }
}

Tensor DataParallel::shard_view(const Buffer& b, const Part& p, DType dtype) const {
  return b.view(dtype, {p.owned.size()}, static_cast<size_t>(p.shard_offset) * dtype_size(dtype));
}

Tensor DataParallel::weight_part(const Part& p) const {
  const FlatTensors& weights = model_.weights();
  if (weights.storage() == Storage::whole) return weights.all().slice_rows(p.owned.begin, p.owned.size());
  return weight_shard_.data() != nullptr ? shard_view(weight_shard_, p, weights.dtype()) : shard_view(param_shard_, p);
}

void DataParallel::share_weights() {
  if (zero_stage_ == 0 || zero_stage_ == 3) return;  // whole already, or gathered as forward reads them
  // Every rank's parts into every rank's weights, unit by unit (in flight together).
  const FlatTensors& weights = model_.weights();
  std::vector<CollectiveHandle> gathers;
  for (size_t u = 0; u < parts_.size(); ++u)
    gathers.push_back(group_.all_gather(weights.unit(u), weight_part(parts_[u])));
  for (CollectiveHandle& h : gathers) h.wait();
}

void DataParallel::reduce_during_next_backward(bool first_of_step) {
  DT_CHECK(reductions_.empty(), "the previous backward's gradient reduction was not waited for");
  // ZeRO reduce-scatters even over one rank: the update reads the shard.
  armed_ = group_.size() > 1 || zero_stage_ >= 1;
  accumulate_ = reduces_every_micro_batch() && !first_of_step;
  next_bucket_ = 0;
}

void DataParallel::gradients_needed(size_t u) {
  FlatTensors& grads = model_.grads();
  if (grads.held(u)) return;
  grads.hold(u);
  zero_bytes(grads.unit(u).data, grads.device(), grads.unit(u).bytes());
}

void DataParallel::gradients_final(size_t u) {
  if (!armed_) return;
  const FlatTensors& grads = model_.grads();
  if (zero_stage_ == 0) {
    const int64_t ready_from = model_.layout().units()[u].begin;
    for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= ready_from; ++next_bucket_) {
      const kernels::FlatRange& b = buckets_[next_bucket_];
      Reduction r;
      r.handle = group_.all_reduce(grads.all().slice_rows(b.begin, b.size()), ReduceOp::sum);
      reductions_.push_back(std::move(r));
    }
  } else {
    const Part& p = parts_[u];
    Reduction r;
    if (zero_stage_ >= 2) r.unit = u;
    Tensor into = shard_view(grad_shard_, p);
    if (accumulate_) {
      r.staged = Buffer(into.bytes(), MemTag::communication, model_.device(), false);
      into = r.staged.view(DType::f32, {p.owned.size()});
    }
    r.handle = group_.reduce_scatter(into, grads.unit(u), ReduceOp::sum);
    reductions_.push_back(std::move(r));
    // The units' gradients are freed as their reductions complete, a few behind backward.
    while (zero_stage_ >= 2 && reductions_.size() > kUnitReductionsInFlight) finish_oldest_reduction();
  }
  if (u == 0) armed_ = false;  // the embeddings are backward's last unit
}

void DataParallel::finish_oldest_reduction() {
  Reduction& r = reductions_.front();
  r.handle.wait();
  if (r.unit) {
    if (r.staged.data() != nullptr) {
      const Tensor shard = shard_view(grad_shard_, parts_[*r.unit]);
      kernels::add_forward(shard, shard, r.staged.view(DType::f32, {shard.numel()}));
    }
    model_.grads().release(*r.unit);
  }
  reductions_.pop_front();
}

void DataParallel::reduce_gradients() {
  reduce_during_next_backward(/*first_of_step=*/true);
  for (size_t u = model_.layout().units().size(); u-- > 0;) gradients_final(u);
  armed_ = false;
  wait_for_gradients();
}

void DataParallel::wait_for_gradients() {
  DT_CHECK(!armed_, "waiting for the gradients before backward reported them all final");
  while (!reductions_.empty()) finish_oldest_reduction();
}

void DataParallel::start_gathering(size_t u) {
  FlatTensors& weights = model_.weights();
  if (weights.held(u)) return;
  weights.hold(u);
  gathering_[u] = group_.all_gather(weights.unit(u), weight_part(parts_[u]));
}

void DataParallel::weights_needed(size_t u, std::optional<size_t> next) {
  if (zero_stage_ < 3) return;
  start_gathering(u);
  if (gathering_[u]) {
    gathering_[u]->wait();
    gathering_[u].reset();
  }
  if (next) start_gathering(*next);  // arrives while unit u computes
}

void DataParallel::weights_done(size_t u) {
  if (zero_stage_ < 3) return;
  DT_CHECK(!gathering_[u], "unit ", u, "'s weights done before they were needed");
  model_.weights().release(u);
}

void DataParallel::update(float lr, float grad_scale) {
  optimizer_->step(lr, grad_scale);
  share_weights();
}

void DataParallel::gather_shard(const Buffer& shard, Tensor whole) {
  const bool lead = group_.rank() == 0;
  DT_CHECK(lead == whole.defined(), "gathering shards: rank 0 of the group, and only it, passes the whole buffer");
  std::vector<CollectiveHandle> parts;
  if (!lead) {
    for (const Part& p : parts_) parts.push_back(group_.send(shard_view(shard, p), 0));
    for (CollectiveHandle& h : parts) h.wait();
    return;
  }
  // Rank 0 receives every other rank's part of every unit, in the group's device memory, then
  // copies the whole buffer to its destination.
  const Buffer staged(whole.bytes(), MemTag::communication, group_.device());
  const Tensor w = staged.view(DType::f32, {whole.numel()});
  const int64_t ranks = group_.size();
  for (const Part& p : parts_) {
    const int64_t part = p.unit.size() / ranks;
    const Tensor mine = shard_view(shard, p);
    copy_bytes(w.slice_rows(p.owned.begin, part).data, w.device, mine.data, mine.device, mine.bytes());
    for (int r = 1; r < ranks; ++r) parts.push_back(group_.recv(w.slice_rows(p.unit.begin + r * part, part), r));
  }
  for (CollectiveHandle& h : parts) h.wait();
  copy_bytes(whole.data, whole.device, w.data, w.device, whole.bytes());
}

void DataParallel::take_shard(Buffer& shard, Tensor whole) {
  for (const Part& p : parts_) {
    const Tensor to = shard_view(shard, p), from = whole.slice_rows(p.owned.begin, p.owned.size());
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
}

std::vector<Tensor> DataParallel::parameter_parts() const {
  DT_CHECK(shards_parameters_, "the parameters are sharded at ZeRO 3 and with 16-bit precision only");
  std::vector<Tensor> out;
  for (const Part& p : parts_) out.push_back(shard_view(param_shard_, p));
  return out;
}

void DataParallel::gather_parameters(FlatTensors* whole) {
  DT_CHECK(shards_parameters_, "gather_parameters: this run keeps the parameters whole");
  gather_shard(param_shard_, whole != nullptr ? whole->all() : Tensor{});
}

void DataParallel::take_parameters(const FlatTensors& whole) {
  if (shards_parameters_) {
    take_shard(param_shard_, whole.all());
  } else if (&whole != &model_.params()) {
    const Tensor to = model_.params().all(), from = whole.all();
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
  optimizer_->round_weights();
  share_weights();
}

}  // namespace dt
