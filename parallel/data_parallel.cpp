#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "core/allocator.h"
#include "core/device.h"
#include "core/fault_injection.h"
#include "kernels/add.h"
#include "kernels/convert.h"
#include "kernels/reduce.h"

namespace dt {

namespace {

// Ranges of whole parameters, from the end of the layout, each of at least `bucket_elements`
// (the last may be smaller) unless the kind changes — experts or not — before it is full,
// together covering [0, total elements).
std::vector<DataParallel::Bucket> make_buckets(const ParameterLayout& layout, int64_t bucket_elements) {
  std::vector<DataParallel::Bucket> buckets;
  int64_t end = layout.total_elements();
  const auto& params = layout.params();
  for (auto p = params.rbegin(); p != params.rend(); ++p) {
    const bool last = std::next(p) == params.rend();
    if (end - p->offset >= bucket_elements || last || std::next(p)->is_expert != p->is_expert) {
      buckets.push_back({{last ? 0 : p->offset, end}, p->is_expert});
      end = p->offset;
    }
  }
  return buckets;
}

}  // namespace

DataParallel::DataParallel(Transformer& model, Communicator& group, double bucket_mb, const ZeroPolicy& zero,
                           const AdamWConfig& adamw, Communicator* pipeline, Communicator* experts)
    : model_(model),
      group_(group),
      expert_group_(experts != nullptr ? *experts : group),
      pipeline_(pipeline),
      policy_(zero),
      hooks_(zero, model.layout().units().size(), *this) {
  DT_CHECK(group.device() == model.device(), "data parallelism over a ", device_name(group.device()),
           " communicator for a model on ", device_name(model.device()));
  DT_CHECK(zero.precision == model.precision() && zero.ranks == group.size(), "a ZeRO policy of ",
           dtype_name(zero.precision), " over ", zero.ranks, " ranks for a ", dtype_name(model.precision()),
           " model over ", group.size());
  DT_CHECK(model.single_stage() || zero.allows_pipeline(), "a rank of several pipeline stages: ",
           zero.pipeline_conflict());
  DT_CHECK(expert_group_.size() * model.layout().expert_shard().size == group.size(), "data parallelism over ",
           group.size(), " ranks with experts over ", expert_group_.size(), " for a model of expert-parallel size ",
           model.layout().expert_shard().size);
  const ParameterLayout& layout = model.layout();
  if (zero.reduction() == ZeroPolicy::Reduction::all_reduce_buckets) {
    buckets_ = make_buckets(layout, std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / sizeof(float))));
  } else {
    const ParameterStorage needed = zero.storage();
    DT_CHECK(layout.unit_multiple() % needed.unit_multiple == 0, "ZeRO over ", group.size(),
             " ranks needs the model's layout made with unit multiple ", needed.unit_multiple, ", not ",
             layout.unit_multiple());
    DT_CHECK(model.weights().storage() == needed.weights && model.grads().storage() == needed.grads &&
                 !model.keeps_master_weights(),
             "ZeRO stage ", zero.stage, " needs the model made with its ZeroPolicy::storage()");
    // Each unit's pieces: the parameters but its experts over the group, its experts over theirs.
    // The unit multiple is a multiple of 16 × the group's size, so each splits evenly.
    const auto add = [&](size_t u, kernels::FlatRange piece, Communicator& over) {
      const int64_t part = piece.size() / over.size();
      parts_.push_back({.unit = u,
                        .piece = piece,
                        .owned = {piece.begin + over.rank() * part, piece.begin + (over.rank() + 1) * part},
                        .shard_offset = shard_elements_,
                        .group = &over});
      shard_elements_ += part;
    };
    for (size_t u = 0; u < layout.units().size(); ++u) {
      unit_parts_.push_back(parts_.size());
      const kernels::FlatRange unit = layout.units()[u], experts = layout.experts_of_unit(u);
      add(u, {unit.begin, experts.begin}, group_);
      if (experts.size() > 0) add(u, experts, expert_group_);
    }
    unit_parts_.push_back(parts_.size());
    DT_CHECK(shard_elements_ == zero.optimizer_elements(layout), "a shard of ", shard_elements_,
             " elements where the policy counts ", zero.optimizer_elements(layout));
    for (const ZeroPolicy::ShardBuffer& spec : zero.shard_buffers()) {
      Buffer shard(static_cast<size_t>(shard_elements_) * dtype_size(spec.dtype), spec.tag, model.device());
      (spec.role == ZeroPolicy::ShardRole::gradients        ? grad_shard_
       : spec.role == ZeroPolicy::ShardRole::f32_parameters ? param_shard_
                                                            : weight_shard_) = std::move(shard);
    }
    gathering_.resize(layout.units().size());
  }
  optimizer_.emplace(layout, optimizer_parts(), adamw);
  // A pipeline rank's stages run without hooks: reduce_gradients() follows the schedule.
  if (model.single_stage()) model_.set_unit_hooks(&hooks_);
}

OptimizerParts DataParallel::optimizer_parts() {
  if (!policy_.shards_optimizer_state) {
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
  o.params_local = policy_.shards_f32_parameters();
  o.params = o.params_local ? param_shard_.view(DType::f32, {shard_elements_}) : model_.params().all();
  if (model_.precision() != DType::f32) {
    // The 16-bit weights: their shard, which the gathers send from, else the model's whole copy.
    o.weights_local = policy_.shards_weights;
    o.weights = o.weights_local ? weight_shard_.view(model_.precision(), {shard_elements_}) : model_.weights().all();
  }
  return o;
}

DataParallel::~DataParallel() {
  model_.set_unit_hooks(nullptr);
  try {
    wait_for_gradients();  // nothing may still write into buffers about to be freed
    for (auto& unit : gathering_)
      for (CollectiveHandle& h : unit) h.wait();
  } catch (const Error&) {  // already unwinding from the collective's failure
  }
}

std::span<const DataParallel::Part> DataParallel::parts_of(size_t u) const {
  return std::span(parts_).subspan(unit_parts_[u], unit_parts_[u + 1] - unit_parts_[u]);
}

Tensor DataParallel::piece_of(const FlatTensors& buffer, const Part& p) const {
  return buffer.unit(p.unit).slice_rows(p.piece.begin - model_.layout().units()[p.unit].begin, p.piece.size());
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
  if (policy_.gathers_weights() != ZeroPolicy::Gather::after_update) return;
  // Every rank's parts into every rank's weights, piece by piece (in flight together).
  std::vector<CollectiveHandle> gathers;
  for (const Part& p : parts_) gathers.push_back(p.group->all_gather(piece_of(model_.weights(), p), weight_part(p)));
  for (CollectiveHandle& h : gathers) h.wait();
}

void DataParallel::reduce_during_next_backward(bool first_of_step) {
  next_bucket_ = 0;
  hooks_.arm(first_of_step);
}

void DataParallel::wait_for_gradients() { hooks_.finish_reductions(); }

void DataParallel::reduce_gradients() {
  reduce_during_next_backward(/*first_of_step=*/true);
  for (size_t u = model_.layout().units().size(); u-- > 0;) hooks_.gradients_final(u);
  wait_for_gradients();
}

void DataParallel::start_gathering(size_t u) {
  model_.weights().hold(u);
  for (const Part& p : parts_of(u))
    gathering_[u].push_back(p.group->all_gather(piece_of(model_.weights(), p), weight_part(p)));
}

void DataParallel::wait_for_gathering(size_t u) {
  for (CollectiveHandle& h : gathering_[u]) h.wait();
  gathering_[u].clear();
}

void DataParallel::free_weights(size_t u) {
  DT_CHECK(gathering_[u].empty(), "unit ", u, "'s weights done before they were needed");
  model_.weights().release(u);
}

void DataParallel::hold_gradients(size_t u) {
  FlatTensors& grads = model_.grads();
  grads.hold(u);
  zero_bytes(grads.unit(u).data, grads.device(), grads.unit(u).bytes());
}

void DataParallel::free_gradients(size_t u) { model_.grads().release(u); }

void DataParallel::all_reduce_buckets(size_t u) {
  const Tensor grads = model_.grads().all();
  const int64_t ready_from = model_.layout().units()[u].begin;
  for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].range.begin >= ready_from; ++next_bucket_) {
    const Bucket& b = buckets_[next_bucket_];
    if (next_bucket_ == 0 && fault_injected("gradient-bucket-unsummed", optimizer_->steps_taken() + 1)) continue;
    Communicator& over = b.experts ? expert_group_ : group_;
    Reduction r;
    r.handles.push_back(over.all_reduce(grads.slice_rows(b.range.begin, b.range.size()), ReduceOp::sum));
    reductions_.push_back(std::move(r));
  }
}

void DataParallel::reduce_scatter(size_t u, bool staged) {
  Reduction r;
  r.unit = u;
  for (const Part& p : parts_of(u)) {
    Tensor into = shard_view(grad_shard_, p);
    if (staged) {
      r.staged.emplace_back(into.bytes(), MemTag::communication, model_.device(), false);
      into = r.staged.back().view(DType::f32, {p.owned.size()});
    }
    r.handles.push_back(p.group->reduce_scatter(into, piece_of(model_.grads(), p), ReduceOp::sum));
  }
  reductions_.push_back(std::move(r));
}

std::optional<size_t> DataParallel::finish_oldest_reduction() {
  Reduction& r = reductions_.front();
  for (CollectiveHandle& h : r.handles) h.wait();
  for (size_t i = 0; i < r.staged.size(); ++i) {
    const Tensor shard = shard_view(grad_shard_, parts_of(*r.unit)[i]);
    kernels::add_forward(shard, shard, r.staged[i].view(DType::f32, {shard.numel()}));
  }
  const std::optional<size_t> unit = r.unit;
  reductions_.pop_front();
  return unit;
}

void DataParallel::update(float lr, float grad_scale) {
  optimizer_->step(lr, grad_scale);
  share_weights();
}

void DataParallel::gather_shard(const Buffer& shard, Tensor whole) {
  const bool lead = group_.rank() == 0 || expert_group_.rank() == 0;
  DT_CHECK(lead == whole.defined(), "gathering shards: rank 0 of the group or of the expert group, and only they, "
           "pass the whole buffer");
  // Each piece's rank 0 receives every other rank's part of it, in the group's device memory,
  // then copies the whole buffer to its destination.
  std::optional<Buffer> staged;
  if (lead) staged.emplace(whole.bytes(), MemTag::communication, group_.device());
  const Tensor w = lead ? staged->view(DType::f32, {whole.numel()}) : Tensor{};
  // An expert group's rank 0 receives only its experts: the rest of `whole` stays.
  if (lead && group_.rank() != 0) copy_bytes(w.data, w.device, whole.data, whole.device, whole.bytes());
  std::vector<CollectiveHandle> transfers;
  for (const Part& p : parts_) {
    Communicator& over = *p.group;
    const Tensor mine = shard_view(shard, p);
    if (over.rank() != 0) {
      transfers.push_back(over.send(mine, 0));
      continue;
    }
    const int64_t part = p.owned.size();
    copy_bytes(w.slice_rows(p.owned.begin, part).data, w.device, mine.data, mine.device, mine.bytes());
    for (int r = 1; r < over.size(); ++r)
      transfers.push_back(over.recv(w.slice_rows(p.piece.begin + r * part, part), r));
  }
  for (CollectiveHandle& h : transfers) h.wait();
  if (lead) copy_bytes(whole.data, whole.device, w.data, w.device, whole.bytes());
}

void DataParallel::take_shard(Buffer& shard, Tensor whole) {
  for (const Part& p : parts_) {
    const Tensor to = shard_view(shard, p), from = whole.slice_rows(p.owned.begin, p.owned.size());
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
}

std::vector<Tensor> DataParallel::parameter_parts() const {
  DT_CHECK(policy_.shards_f32_parameters(), "parameter_parts: this run keeps the f32 parameters whole");
  std::vector<Tensor> out;
  for (const Part& p : parts_) out.push_back(shard_view(param_shard_, p));
  return out;
}

void DataParallel::gather_parameters(FlatTensors* whole) {
  DT_CHECK(policy_.shards_f32_parameters(), "gather_parameters: this run keeps the f32 parameters whole");
  gather_shard(param_shard_, whole != nullptr ? whole->all() : Tensor{});
}

void DataParallel::take_parameters(const FlatTensors& whole) {
  if (policy_.shards_f32_parameters()) {
    take_shard(param_shard_, whole.all());
  } else if (&whole != &model_.params()) {
    const Tensor to = model_.params().all(), from = whole.all();
    copy_bytes(to.data, to.device, from.data, from.device, to.bytes());
  }
  optimizer_->round_weights();
  share_weights();
}

}  // namespace dt
