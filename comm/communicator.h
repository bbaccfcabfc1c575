// Communicator: the collectives every parallel dimension is built from, over one group of ranks.
//
// Every collective returns at once with a handle; the caller waits where it needs the result,
// so communication overlaps with the compute queued in between
// (docs/architecture.md#the-communicator-model):
//
//   CollectiveHandle h = dp.all_reduce(bucket, ReduceOp::average);
//   ... backward of the layers below ...
//   h.wait();                       // the bucket now holds the average over the group
//
// Collectives on one communicator run in the order they were started, and every rank of the
// group must start the same collectives in the same order with the same sizes and dtypes: the
// n-th collective of a group on one rank meets the n-th on the others. Each collective carries
// that n, its sequence number, so that a rank stuck in one can say which (the watchdog).
//
// Buffers are contiguous Tensors on the communicator's device. In-place ops take one tensor;
// the others take disjoint ones. reduce_scatter's input has size() times the output's
// elements (rank r keeps part r of the reduction), all_gather's output size() times the
// input's (part r comes from rank r). all_to_all cuts both buffers into size() parts in rank
// order: part r of the input goes to rank r, and part r of the output comes from rank r. Its
// parts are equal, or given as element counts per rank (expert parallelism's token dispatch,
// where each rank sends each peer a different number of rows):
//
//   std::vector<int64_t> out_counts = all_to_all_counts(ep, in_counts);  // what each peer sends here
//   ep.all_to_all(out, out_counts, in, in_counts).wait();
//
// all_gather may be in place: `in` exactly this rank's part of `out`. Arguments are checked
// before anything is sent, and the error names the collective, the group and the argument.
//
// Backends (comm/single_process.h, comm/mpi.h, comm/nccl.h) implement start_*; the checks and
// the numbering live here, once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace dt {

enum class ReduceOp { sum, average, max };
std::string_view reduce_op_name(ReduceOp op);

// The collectives that move a buffer among all ranks of a group, by name (benchmarks, doctor).
enum class CollectiveKind { all_reduce, reduce_scatter, all_gather, broadcast, all_to_all };
std::string_view collective_kind_name(CollectiveKind kind);
// Parses a name written by collective_kind_name; throws dt::Error naming the valid names.
CollectiveKind collective_kind_from_name(std::string_view name);

// What a collective is, for messages, the watchdog and traces.
struct CollectiveInfo {
  std::string op;     // "all_reduce sum", "all_gather", "send to 3", ...
  std::string group;  // the communicator's name: "world", "dp", "tp", ...
  uint64_t sequence = 0;  // 1 for the group's first collective
  size_t bytes = 0;       // this rank's input (for all_gather) or buffer
  DType dtype = DType::f32;
  bool timed = true;  // false: the watchdog lets it wait (a barrier behind rank 0's own work)
  std::string describe() const;  // "all_reduce sum of 4.0 MiB f32 on dp (#42)"
};

// The part a backend implements: a collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Returns when the result is in the output buffer — on a GPU (NCCL), when work queued on the
  // compute stream from now on will see it, without blocking the host; rethrows the
  // collective's failure.
  virtual void wait() = 0;
  // Whether wait() would return at once.
  virtual bool done() = 0;
};

// The handle a collective returns. wait() is idempotent; a handle dropped without wait() waits
// in its destructor, so no buffer is freed under a collective that still writes it.
class CollectiveHandle {
 public:
  CollectiveHandle() = default;
  CollectiveHandle(std::unique_ptr<Work> work, CollectiveInfo info) : work_(std::move(work)), info_(std::move(info)) {}
  CollectiveHandle(CollectiveHandle&&) noexcept = default;
  CollectiveHandle& operator=(CollectiveHandle&& other) noexcept;
  ~CollectiveHandle();

  void wait();
  bool done();
  const CollectiveInfo& info() const { return info_; }

 private:
  std::unique_ptr<Work> work_;
  CollectiveInfo info_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  // The backend, for logs: "single process", "MPI (Open MPI 4.1.4)", ...
  virtual std::string backend() const = 0;

  CollectiveHandle all_reduce(Tensor buffer, ReduceOp op);
  CollectiveHandle reduce_scatter(Tensor out, Tensor in, ReduceOp op);
  CollectiveHandle all_gather(Tensor out, Tensor in);
  CollectiveHandle broadcast(Tensor buffer, int root);
  // size() equal parts each way: all_to_all(out, counts, in, counts) with every count
  // in.numel() / size().
  CollectiveHandle all_to_all(Tensor out, Tensor in);
  // Part r of `in` is in_counts[r] elements, part r of `out` out_counts[r] (both in rank order,
  // zero allowed); each list has size() counts and sums to its tensor's elements. A rank's
  // out_counts[q] must equal rank q's in_counts[this rank]: all_to_all_counts exchanges them.
  CollectiveHandle all_to_all(Tensor out, std::span<const int64_t> out_counts, Tensor in,
                              std::span<const int64_t> in_counts);
  CollectiveHandle send(Tensor buffer, int peer);
  CollectiveHandle recv(Tensor buffer, int peer);
  // A send to `to` and a receive from `from` in flight together (one may be the other's peer):
  // what a ring step needs. NCCL issues both in one group, so that two ranks sending to each
  // other cannot both wait in their send.
  CollectiveHandle exchange(Tensor send, int to, Tensor recv, int from);
  // `timed` = false exempts the barrier from the collective watchdog: for waiting out work only
  // some ranks do (rank 0's validation, samples, checkpoint writes), which may take longer than
  // any collective should.
  CollectiveHandle barrier(bool timed = true);

  // The communicator of the ranks that pass the same color, ranked by key (then by rank here),
  // named `name`. Every rank of this group must call it, in the same order as its collectives.
  std::unique_ptr<Communicator> split(int color, int key, std::string name);

  // What this rank's collectives of one kind have moved since the communicator was made: how
  // many, and the bytes of their whole buffers — an all-reduce's or a broadcast's buffer, a
  // reduce-scatter's input, an all-gather's output, an all-to-all's input. A ring moves
  // (size - 1) / size of that from each rank, twice for an all-reduce. For measurements.
  struct Traffic {
    uint64_t collectives = 0;
    uint64_t bytes = 0;
  };
  const Traffic& traffic(CollectiveKind kind) const { return traffic_[static_cast<size_t>(kind)]; }

 protected:
  Communicator(int rank, int size, std::string name, Device device)
      : rank_(rank), size_(size), name_(std::move(name)), device_(device) {}

  virtual std::unique_ptr<Work> start_all_reduce(Tensor buffer, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> start_all_gather(Tensor out, Tensor in) = 0;
  virtual std::unique_ptr<Work> start_broadcast(Tensor buffer, int root) = 0;
  // The counts are checked, and live only for the call: a backend keeps its own copy.
  virtual std::unique_ptr<Work> start_all_to_all(Tensor out, std::span<const int64_t> out_counts, Tensor in,
                                                 std::span<const int64_t> in_counts) = 0;
  virtual std::unique_ptr<Work> start_send(Tensor buffer, int peer) = 0;
  virtual std::unique_ptr<Work> start_recv(Tensor buffer, int peer) = 0;
  // By default a send and a receive started together, waited for together.
  virtual std::unique_ptr<Work> start_exchange(Tensor send, int to, Tensor recv, int from);
  virtual std::unique_ptr<Work> start_barrier() = 0;
  virtual std::unique_ptr<Communicator> split_group(int color, int key, std::string name) = 0;

  // The collective a start_* call is starting (for a backend's watchdog and traces).
  const CollectiveInfo& starting() const { return starting_; }

 private:
  CollectiveInfo next(std::string op, const Tensor& t);
  template <typename Start>
  CollectiveHandle launch(CollectiveInfo c, Start&& start) {
    starting_ = c;
    return {start(), std::move(c)};
  }
  void check_buffer(const CollectiveInfo& c, std::string_view arg, const Tensor& t) const;
  void check_peer(const CollectiveInfo& c, std::string_view what, int peer) const;
  // `counts` (named `arg`_counts) cut t into size() parts: one count per rank, none negative,
  // summing to t's elements.
  void check_counts(const CollectiveInfo& c, std::string_view arg, std::span<const int64_t> counts,
                    const Tensor& t) const;

  void count(CollectiveKind kind, const Tensor& whole) {
    Traffic& t = traffic_[static_cast<size_t>(kind)];
    ++t.collectives;
    t.bytes += whole.bytes();
  }

  int rank_;
  int size_;
  std::string name_;
  Device device_;
  uint64_t sequence_ = 0;
  std::array<Traffic, 5> traffic_{};  // by CollectiveKind
  CollectiveInfo starting_;
};

// One host value reduced over the group and returned on every rank (target counts, losses,
// stop flags, peaks): through a one-element buffer on the group's device. Waits.
double all_reduce_value(Communicator& group, double value, ReduceOp op);
// The same for several values at once, reduced in place (the experts' loads).
void all_reduce_values(Communicator& group, std::span<double> values, ReduceOp op);

// The out_counts of an uneven all_to_all: given this rank's in_counts (size() counts, the
// elements it sends each rank), returns what each rank sends it — element q is rank q's
// in_counts[this rank]. An even all_to_all of the counts, through the group's device. Waits.
std::vector<int64_t> all_to_all_counts(Communicator& group, std::span<const int64_t> in_counts);
// Every rank's `counts` (the same number on each) on every rank, in rank order: rank q's are
// elements [q · counts.size(), (q + 1) · counts.size()) (expert parallelism's rows per rank and
// expert). An all_gather through the group's device. Waits.
std::vector<int64_t> all_gather_counts(Communicator& group, std::span<const int64_t> counts);

}  // namespace dt
