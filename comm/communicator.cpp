#include "comm/communicator.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "core/allocator.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/trace.h"

namespace dt {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::average:
      return "average";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

std::string_view collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::all_to_all:
      return "all_to_all";
  }
  return "?";
}

CollectiveKind collective_kind_from_name(std::string_view name) {
  for (const CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter,
                                    CollectiveKind::all_gather, CollectiveKind::broadcast, CollectiveKind::all_to_all})
    if (collective_kind_name(kind) == name) return kind;
  throw Error(str("unknown collective '", name, "'; valid ones are all_reduce, reduce_scatter, all_gather, ",
                  "broadcast, all_to_all"));
}

std::string CollectiveInfo::describe() const {
  return str(op, " of ", format_bytes(static_cast<double>(bytes)), " ", dtype_name(dtype), " on ", group, " (#",
             sequence, ")");
}

CollectiveHandle& CollectiveHandle::operator=(CollectiveHandle&& other) noexcept {
  if (this != &other) {
    CollectiveHandle previous(std::move(*this));  // waits for the collective it held
    work_ = std::move(other.work_);
    info_ = std::move(other.info_);
  }
  return *this;
}

CollectiveHandle::~CollectiveHandle() {
  if (!work_) return;
  try {
    work_->wait();
  } catch (const std::exception&) {
    // A failure nobody waited for: the watchdog and the backend have reported it already, and a
    // destructor must not throw.
  }
}

void CollectiveHandle::wait() {
  if (!work_) return;
  // The time the caller blocks here is not compute (core/trace.h's waiting track).
  const bool blocks = trace::enabled() && !work_->done();
  const auto begin = std::chrono::steady_clock::now();
  // Released only after a successful wait: a failed one rethrows again if waited on again.
  work_->wait();
  work_.reset();
  if (blocks) trace::record(trace::Track::waiting, str("wait for ", info_.describe()), begin, std::chrono::steady_clock::now());
}

bool CollectiveHandle::done() { return !work_ || work_->done(); }

CollectiveInfo Communicator::next(std::string op, const Tensor& t) {
  return {.op = std::move(op), .group = name_, .sequence = ++sequence_, .bytes = t.bytes(), .dtype = t.dtype};
}

void Communicator::check_buffer(const CollectiveInfo& c, std::string_view arg, const Tensor& t) const {
  if (!t.defined() && t.numel() > 0)
    throw Error(str(c.describe(), ": ", arg, " has no memory (", t.describe(), ")"));
  if (t.device != device_)
    throw Error(str(c.describe(), ": ", arg, " is on ", device_name(t.device), " but the communicator '", name_,
                    "' moves ", device_name(device_), " buffers; copy it first or use a communicator for that device"));
}

void Communicator::check_peer(const CollectiveInfo& c, std::string_view what, int peer) const {
  if (peer < 0 || peer >= size_)
    throw Error(str(c.describe(), ": ", what, " ", peer, " is not a rank of '", name_, "' (ranks 0 to ", size_ - 1,
                    ")"));
}

void Communicator::check_counts(const CollectiveInfo& c, std::string_view arg, std::span<const int64_t> counts,
                                const Tensor& t) const {
  if (counts.size() != static_cast<size_t>(size_))
    throw Error(str(c.describe(), ": ", arg, "_counts has ", counts.size(), " counts for a group of ", size_,
                    "; give one per rank (part r of ", arg, arg == "in" ? " goes to" : " comes from", " rank r)"));
  int64_t sum = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0)
      throw Error(str(c.describe(), ": ", arg, "_counts[", r, "] is ", counts[r], "; a part has 0 elements or more"));
    sum += counts[r];
  }
  if (sum != t.numel())
    throw Error(str(c.describe(), ": ", arg, "_counts sum to ", sum, " elements but ", arg, " ", t.describe(), " has ",
                    t.numel(), "; the parts must cover it exactly"));
}

CollectiveHandle Communicator::all_reduce(Tensor buffer, ReduceOp op) {
  CollectiveInfo c = next(str("all_reduce ", reduce_op_name(op)), buffer);
  check_buffer(c, "buffer", buffer);
  count(CollectiveKind::all_reduce, buffer);
  return launch(std::move(c), [&] { return start_all_reduce(buffer, op); });
}

CollectiveHandle Communicator::reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
  CollectiveInfo c = next(str("reduce_scatter ", reduce_op_name(op)), in);
  check_buffer(c, "out", out);
  check_buffer(c, "in", in);
  if (in.dtype != out.dtype || in.numel() != out.numel() * size_)
    throw Error(str(c.describe(), ": in ", in.describe(), " must have ", size_, " times the elements of out ",
                    out.describe(), " and its dtype (rank r keeps part r)"));
  count(CollectiveKind::reduce_scatter, in);
  return launch(std::move(c), [&] { return start_reduce_scatter(out, in, op); });
}

CollectiveHandle Communicator::all_gather(Tensor out, Tensor in) {
  CollectiveInfo c = next("all_gather", in);
  check_buffer(c, "out", out);
  check_buffer(c, "in", in);
  if (in.dtype != out.dtype || out.numel() != in.numel() * size_)
    throw Error(str(c.describe(), ": out ", out.describe(), " must have ", size_, " times the elements of in ",
                    in.describe(), " and its dtype (part r comes from rank r)"));
  const char *o = static_cast<const char*>(out.data), *i = static_cast<const char*>(in.data);
  const bool overlap = i < o + out.bytes() && o < i + in.bytes();
  if (overlap && i != o + static_cast<size_t>(rank_) * in.bytes())
    throw Error(str(c.describe(), ": in overlaps out other than as this rank's part ", rank_,
                    " of it (the one overlap allowed: gathering in place)"));
  count(CollectiveKind::all_gather, out);
  return launch(std::move(c), [&] { return start_all_gather(out, in); });
}

CollectiveHandle Communicator::broadcast(Tensor buffer, int root) {
  CollectiveInfo c = next(str("broadcast from ", root), buffer);
  check_buffer(c, "buffer", buffer);
  check_peer(c, "root", root);
  count(CollectiveKind::broadcast, buffer);
  return launch(std::move(c), [&] { return start_broadcast(buffer, root); });
}

CollectiveHandle Communicator::all_to_all(Tensor out, Tensor in) {
  CollectiveInfo c = next("all_to_all", in);
  check_buffer(c, "out", out);
  check_buffer(c, "in", in);
  if (in.dtype != out.dtype || in.numel() != out.numel() || in.numel() % size_ != 0)
    throw Error(str(c.describe(), ": in ", in.describe(), " and out ", out.describe(),
                    " must have one dtype and the same number of elements, a multiple of the group's ", size_,
                    " ranks"));
  const std::vector<int64_t> counts(static_cast<size_t>(size_), in.numel() / size_);
  count(CollectiveKind::all_to_all, in);
  return launch(std::move(c), [&] { return start_all_to_all(out, counts, in, counts); });
}

CollectiveHandle Communicator::all_to_all(Tensor out, std::span<const int64_t> out_counts, Tensor in,
                                          std::span<const int64_t> in_counts) {
  CollectiveInfo c = next("all_to_all", in);
  check_buffer(c, "out", out);
  check_buffer(c, "in", in);
  if (in.dtype != out.dtype)
    throw Error(str(c.describe(), ": in ", in.describe(), " and out ", out.describe(), " must have one dtype"));
  check_counts(c, "in", in_counts, in);
  check_counts(c, "out", out_counts, out);
  count(CollectiveKind::all_to_all, in);
  return launch(std::move(c), [&] { return start_all_to_all(out, out_counts, in, in_counts); });
}

CollectiveHandle Communicator::send(Tensor buffer, int peer) {
  CollectiveInfo c = next(str("send to ", peer), buffer);
  check_buffer(c, "buffer", buffer);
  check_peer(c, "peer", peer);
  return launch(std::move(c), [&] { return start_send(buffer, peer); });
}

CollectiveHandle Communicator::recv(Tensor buffer, int peer) {
  CollectiveInfo c = next(str("recv from ", peer), buffer);
  check_buffer(c, "buffer", buffer);
  check_peer(c, "peer", peer);
  return launch(std::move(c), [&] { return start_recv(buffer, peer); });
}

CollectiveHandle Communicator::exchange(Tensor send, int to, Tensor recv, int from) {
  CollectiveInfo c = next(str("send to ", to, " and recv from ", from), send);
  check_buffer(c, "send", send);
  check_buffer(c, "recv", recv);
  check_peer(c, "to", to);
  check_peer(c, "from", from);
  return launch(std::move(c), [&] { return start_exchange(send, to, recv, from); });
}

namespace {

// Two works waited for together.
class BothWork final : public Work {
 public:
  BothWork(std::unique_ptr<Work> a, std::unique_ptr<Work> b) : a_(std::move(a)), b_(std::move(b)) {}
  void wait() override {
    a_->wait();
    b_->wait();
  }
  bool done() override { return a_->done() && b_->done(); }

 private:
  std::unique_ptr<Work> a_, b_;
};

}  // namespace

std::unique_ptr<Work> Communicator::start_exchange(Tensor send, int to, Tensor recv, int from) {
  std::unique_ptr<Work> sending = start_send(send, to);
  return std::make_unique<BothWork>(std::move(sending), start_recv(recv, from));
}

CollectiveHandle Communicator::barrier(bool timed) {
  CollectiveInfo c = next(timed ? "barrier" : "barrier (untimed)", Tensor{});
  c.timed = timed;
  return launch(std::move(c), [&] { return start_barrier(); });
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, std::string name) {
  DT_CHECK(color >= 0, "split of '", name_, "': color ", color, " must be at least 0");
  ++sequence_;  // a split is a collective of this group too
  return split_group(color, key, std::move(name));
}

namespace {

// Runs `collective` on `bytes` of host memory at `host` as the group's device holds them: the
// memory itself on the CPU, else a device copy, copied back after the collective (which waits).
template <typename Collective>
void on_group_device(const Communicator& group, void* host, size_t bytes, Collective&& collective) {
  if (group.device() == Device::cpu) {
    collective(host);
    return;
  }
  const Buffer on_device(bytes, MemTag::communication, group.device(), false);
  copy_bytes(on_device.data(), group.device(), host, Device::cpu, bytes);
  collective(on_device.data());
  copy_bytes(host, Device::cpu, on_device.data(), group.device(), bytes);
}

}  // namespace

double all_reduce_value(Communicator& group, double value, ReduceOp op) {
  all_reduce_values(group, {&value, 1}, op);
  return value;
}

void all_reduce_values(Communicator& group, std::span<double> values, ReduceOp op) {
  if (group.size() == 1 || values.empty()) return;
  on_group_device(group, values.data(), values.size_bytes(), [&](void* data) {
    const Tensor t{.data = data, .dtype = DType::f64, .shape = {static_cast<int64_t>(values.size())},
                   .device = group.device()};
    group.all_reduce(t, op).wait();
  });
}

std::vector<int64_t> all_to_all_counts(Communicator& group, std::span<const int64_t> in_counts) {
  const size_t ranks = static_cast<size_t>(group.size());
  if (in_counts.size() != ranks)
    throw Error(str("all_to_all_counts on '", group.name(), "': ", in_counts.size(), " in_counts for a group of ",
                    ranks, "; give one per rank (the elements this rank sends it)"));
  std::vector<int64_t> counts(2 * ranks);  // in_counts, then the out_counts received
  std::copy(in_counts.begin(), in_counts.end(), counts.begin());
  on_group_device(group, counts.data(), counts.size() * sizeof(int64_t), [&](void* data) {
    // No dtype is a 64-bit integer: each count travels as two u32 words, moved and never added.
    const Shape words{static_cast<int64_t>(2 * ranks)};
    const Tensor in{.data = data, .dtype = DType::u32, .shape = words, .device = group.device()};
    const Tensor out{.data = static_cast<int64_t*>(data) + ranks, .dtype = DType::u32, .shape = words,
                     .device = group.device()};
    group.all_to_all(out, in).wait();
  });
  return {counts.begin() + static_cast<std::ptrdiff_t>(ranks), counts.end()};
}

std::vector<int64_t> all_gather_counts(Communicator& group, std::span<const int64_t> counts) {
  const size_t ranks = static_cast<size_t>(group.size()), n = counts.size();
  std::vector<int64_t> all((ranks + 1) * n);  // this rank's, then every rank's
  std::copy(counts.begin(), counts.end(), all.begin());
  on_group_device(group, all.data(), all.size() * sizeof(int64_t), [&](void* data) {
    // As all_to_all_counts: each count two u32 words, moved and never added.
    const Tensor in{.data = data, .dtype = DType::u32, .shape = {static_cast<int64_t>(2 * n)},
                    .device = group.device()};
    const Tensor out{.data = static_cast<int64_t*>(data) + n, .dtype = DType::u32,
                     .shape = {static_cast<int64_t>(2 * n * ranks)}, .device = group.device()};
    group.all_gather(out, in).wait();
  });
  return {all.begin() + static_cast<std::ptrdiff_t>(n), all.end()};
}

}  // namespace dt
