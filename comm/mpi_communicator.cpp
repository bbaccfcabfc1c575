// The MPI backend: every collective is one of MPI's nonblocking operations, started and
// completed on the process's MPI thread (comm/mpi_progress.h), so it overlaps with whatever the
// caller computes before it waits.
//
// MPI reduces f32, f64 and i32 (average is a sum divided by the group's size once it is
// complete); the other dtypes move as raw 8-, 16- or 32-bit words in the collectives that do
// not reduce. CUDA buffers go through a host copy: device to host when the collective starts
// (after the kernels queued before it), host to device in wait().
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "comm/mpi.h"
#include "comm/mpi_progress.h"
#include "core/buffer.h"
#include "core/device.h"

namespace dt {

namespace {

MPI_Datatype word_type(DType dtype) {
  switch (dtype_size(dtype)) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    default:
      return MPI_UINT64_T;
  }
}

// The MPI type of a buffer MPI reduces; throws for a dtype it cannot.
MPI_Datatype reduce_type(DType dtype, ReduceOp op, const std::string& group) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      if (op != ReduceOp::average) return MPI_INT32_T;
      break;
    default:
      break;
  }
  throw Error(str(reduce_op_name(op), " of ", dtype_name(dtype), " on '", group,
                  "': the MPI backend reduces f32, f64 and (not averaging) i32; reduce in f32"));
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

int count_of(const Tensor& t) {
  DT_CHECK(t.numel() <= INT32_MAX, "an MPI message of ", t.numel(), " elements is above MPI's int count");
  return static_cast<int>(t.numel());
}

// An all_to_all's parts of one buffer as MPI_Ialltoallv takes them: counts and offsets in
// elements, as int.
struct MpiParts {
  std::vector<int> counts, offsets;
};

// Throws, naming the part, where a count or an offset is past MPI's int.
MpiParts mpi_parts(const CollectiveInfo& c, std::string_view arg, std::span<const int64_t> counts) {
  MpiParts parts;
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > INT32_MAX || offset > INT32_MAX)
      throw Error(str(c.describe(), ": part ", r, " of ", arg, " (", counts[r], " elements from element ", offset,
                      ") is past the ", INT32_MAX, " that MPI's int counts and offsets reach; ",
                      "split the exchange over several all_to_alls"));
    parts.counts.push_back(static_cast<int>(counts[r]));
    parts.offsets.push_back(static_cast<int>(offset));
    offset += counts[r];
  }
  return parts;
}

// A buffer as MPI sees it: the tensor's own memory on the CPU, a host copy of a CUDA tensor.
struct HostView {
  Tensor device_tensor;  // the caller's tensor
  Buffer staging;        // empty on the CPU
  void* data = nullptr;

  HostView(const Tensor& t, bool copy_in) : device_tensor(t) {
    if (t.device == Device::cpu) {
      data = t.data;
      return;
    }
    staging = Buffer(t.bytes(), MemTag::communication, Device::cpu, false);
    data = staging.data();
    if (copy_in) copy_bytes(data, Device::cpu, t.data, t.device, t.bytes());  // after the queued kernels
  }
  void copy_out() const {
    if (device_tensor.device != Device::cpu)
      copy_bytes(device_tensor.data, device_tensor.device, data, Device::cpu, device_tensor.bytes());
  }
};

// Host buffers for the results of all-reduces, kept and reused: a fresh buffer per call paid
// its page faults every time (tens of ms per 64 MiB). Taken on the caller's thread, returned on
// the MPI thread.
class ResultBuffers {
 public:
  // The smallest kept buffer that fits (the first that fits let a small all-reduce take a
  // bucket's buffer and the bucket allocate another: 1.5x the gradients held at ZeRO 0).
  std::shared_ptr<Buffer> take(size_t bytes) {
    std::lock_guard lock(mutex_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if ((*it)->bytes() >= bytes && (best == free_.end() || (*it)->bytes() < (*best)->bytes())) best = it;
    if (best == free_.end()) return std::make_shared<Buffer>(bytes, MemTag::communication, Device::cpu, false);
    std::shared_ptr<Buffer> b = std::move(*best);
    free_.erase(best);
    return b;
  }
  void give_back(std::shared_ptr<Buffer> b) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(b));
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<Buffer>> free_;
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiOpState> state, std::unique_ptr<HostView> out)
      : state_(std::move(state)), out_(std::move(out)) {}
  void wait() override {
    state_->wait();
    if (out_) out_->copy_out();
    out_.reset();
  }
  bool done() override { return state_->done(); }

 private:
  std::shared_ptr<MpiOpState> state_;
  std::unique_ptr<HostView> out_;  // copied to the device after completion (CUDA buffers)
};

class MpiCommunicator final : public Communicator {
 public:
  // members: the world rank of each rank of the group, for the watchdog's reports.
  MpiCommunicator(MPI_Comm comm, int rank, int size, std::string name, Device device, std::vector<int> members)
      : Communicator(rank, size, std::move(name), device), comm_(comm), members_(std::move(members)) {}
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD) MpiProgress::instance().run([comm = comm_]() mutable { MPI_Comm_free(&comm); });
  }
  std::string backend() const override { return str("MPI (", MpiProgress::instance().library(), ")"); }

 protected:
  std::unique_ptr<Work> start_all_reduce(Tensor buffer, ReduceOp op) override {
    const MPI_Datatype type = reduce_type(buffer.dtype, op, name());
    auto view = std::make_unique<HostView>(buffer, true);
    // Into a second buffer, then copied back: Open MPI's nonblocking all-reduce in place ran
    // 2.5-3x slower at 64 MiB on 2 ranks than out of place (bench comm), far more than the copy.
    auto result = results_->take(buffer.bytes());
    void* data = view->data;
    const int count = count_of(buffer), ranks = size();
    const DType dtype = buffer.dtype;
    const size_t bytes = buffer.bytes();
    return started(
        "MPI_Iallreduce",
        [=, this](MPI_Request* r) { return MPI_Iallreduce(data, result->data(), count, type, mpi_op(op), comm_, r); },
        std::move(view), [=, results = results_] {
          std::memcpy(data, result->data(), bytes);
          results->give_back(result);
          if (op == ReduceOp::average) divide(data, dtype, count, ranks);
        });
  }

  std::unique_ptr<Work> start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    const MPI_Datatype type = reduce_type(in.dtype, op, name());
    auto in_view = std::make_shared<HostView>(in, true);
    auto out_view = std::make_unique<HostView>(out, false);
    void* data = out_view->data;
    const int count = count_of(out), ranks = size();
    const DType dtype = out.dtype;
    return started(
        "MPI_Ireduce_scatter_block",
        [=, this](MPI_Request* r) {
          return MPI_Ireduce_scatter_block(in_view->data, data, count, type, mpi_op(op), comm_, r);
        },
        std::move(out_view), [=] {
          if (op == ReduceOp::average) divide(data, dtype, count, ranks);
        });
  }

  std::unique_ptr<Work> start_all_gather(Tensor out, Tensor in) override {
    // In place when `in` is this rank's part of `out` (ZeRO gathers parameters so): MPI then
    // reads it there.
    const bool in_place = in.device == Device::cpu && in.data == static_cast<char*>(out.data) + rank() * in.bytes();
    auto in_view = std::make_shared<HostView>(in, !in_place);
    auto out_view = std::make_unique<HostView>(out, false);
    void* data = out_view->data;
    const int count = count_of(in);
    const MPI_Datatype type = word_type(in.dtype);
    return started(
        "MPI_Iallgather",
        [=, this](MPI_Request* r) {
          return MPI_Iallgather(in_place ? MPI_IN_PLACE : in_view->data, count, type, data, count, type, comm_, r);
        },
        std::move(out_view));
  }

  std::unique_ptr<Work> start_broadcast(Tensor buffer, int root) override {
    auto view = std::make_unique<HostView>(buffer, rank() == root);
    void* data = view->data;
    const int count = count_of(buffer);
    const MPI_Datatype type = word_type(buffer.dtype);
    return started(
        "MPI_Ibcast", [=, this](MPI_Request* r) { return MPI_Ibcast(data, count, type, root, comm_, r); },
        std::move(view));
  }

  // Even or not, one MPI_Ialltoallv. MPI reads its count and offset arrays until the request
  // completes: the call keeps them.
  std::unique_ptr<Work> start_all_to_all(Tensor out, std::span<const int64_t> out_counts, Tensor in,
                                         std::span<const int64_t> in_counts) override {
    auto sent = std::make_shared<const MpiParts>(mpi_parts(starting(), "in", in_counts));
    auto received = std::make_shared<const MpiParts>(mpi_parts(starting(), "out", out_counts));
    auto in_view = std::make_shared<HostView>(in, true);
    auto out_view = std::make_unique<HostView>(out, false);
    void* data = out_view->data;
    const MPI_Datatype type = word_type(in.dtype);
    return started(
        "MPI_Ialltoallv",
        [=, this](MPI_Request* r) {
          return MPI_Ialltoallv(in_view->data, sent->counts.data(), sent->offsets.data(), type, data,
                                received->counts.data(), received->offsets.data(), type, comm_, r);
        },
        std::move(out_view));
  }

  std::unique_ptr<Work> start_send(Tensor buffer, int peer) override {
    auto view = std::make_shared<HostView>(buffer, true);
    const int count = count_of(buffer);
    const MPI_Datatype type = word_type(buffer.dtype);
    return started(
        "MPI_Isend",
        [=, this](MPI_Request* r) { return MPI_Isend(view->data, count, type, peer, kPointToPointTag, comm_, r); },
        nullptr);
  }

  std::unique_ptr<Work> start_recv(Tensor buffer, int peer) override {
    auto view = std::make_unique<HostView>(buffer, false);
    void* data = view->data;
    const int count = count_of(buffer);
    const MPI_Datatype type = word_type(buffer.dtype);
    return started(
        "MPI_Irecv", [=, this](MPI_Request* r) { return MPI_Irecv(data, count, type, peer, kPointToPointTag, comm_, r); },
        std::move(view));
  }

  std::unique_ptr<Work> start_barrier() override {
    return started("MPI_Ibarrier", [this](MPI_Request* r) { return MPI_Ibarrier(comm_, r); }, nullptr);
  }

  std::unique_ptr<Communicator> split_group(int color, int key, std::string name) override {
    MPI_Comm sub = MPI_COMM_NULL;
    int sub_rank = 0, sub_size = 0;
    std::vector<int> members;
    MpiProgress::instance().run([&] {
      check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
      check_mpi(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      check_mpi(MPI_Comm_rank(sub, &sub_rank), "MPI_Comm_rank");
      check_mpi(MPI_Comm_size(sub, &sub_size), "MPI_Comm_size");
      MPI_Group sub_group, world_group;
      MPI_Comm_group(sub, &sub_group);
      MPI_Comm_group(MPI_COMM_WORLD, &world_group);
      std::vector<int> ranks(static_cast<size_t>(sub_size));
      std::iota(ranks.begin(), ranks.end(), 0);
      members.resize(ranks.size());
      check_mpi(MPI_Group_translate_ranks(sub_group, sub_size, ranks.data(), world_group, members.data()),
                "MPI_Group_translate_ranks");
      MPI_Group_free(&sub_group);
      MPI_Group_free(&world_group);
    });
    return std::make_unique<MpiCommunicator>(sub, sub_rank, sub_size, std::move(name), device(), std::move(members));
  }

 private:
  static constexpr int kPointToPointTag = 7;

  // Submits `call` (an MPI nonblocking call, named for its errors) to the MPI thread. What `call`
  // captured — the host copies MPI reads — lives until the request completes (the thread keeps
  // the start function); `out` is copied to the device in wait(); `finish` runs on the MPI
  // thread after completion.
  std::unique_ptr<Work> started(const char* call_name, std::function<int(MPI_Request*)> call,
                                std::unique_ptr<HostView> out, std::function<void()> finish = [] {}) {
    auto start = [call = std::move(call), call_name] {
      MPI_Request r;
      check_mpi(call(&r), call_name);
      return r;
    };
    auto state = MpiProgress::instance().submit(
        {.start = std::move(start), .finish = std::move(finish), .collective = starting(), .members = members_, .completed = {}});
    return std::make_unique<MpiWork>(std::move(state), std::move(out));
  }

  static void divide(void* data, DType dtype, int count, int ranks) {
    if (dtype == DType::f32) {
      float* p = static_cast<float*>(data);
      for (int i = 0; i < count; ++i) p[i] /= static_cast<float>(ranks);
    } else {
      double* p = static_cast<double*>(data);
      for (int i = 0; i < count; ++i) p[i] /= ranks;
    }
  }

  MPI_Comm comm_;
  std::vector<int> members_;
  // Shared with the finishing steps, which may run after this communicator is gone.
  std::shared_ptr<ResultBuffers> results_ = std::make_shared<ResultBuffers>();
};

}  // namespace

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(variable) != nullptr) return true;
  return false;
}

double raw_mpi_seconds(CollectiveKind kind, size_t bytes, int iterations, bool nonblocking) {
  MpiProgress& progress = MpiProgress::instance();
  const int ranks = progress.world_size();
  const int count = static_cast<int>(bytes / sizeof(float));  // elements of the buffer bytes names
  // reduce_scatter's input and all_gather's output are `count`; the other side is a part of it.
  const int part = kind == CollectiveKind::reduce_scatter || kind == CollectiveKind::all_gather ? count / ranks : count;
  const int share = count / ranks;  // all_to_all's per-peer part
  // all_to_all's parts as the backend passes them to MPI_Ialltoallv.
  std::vector<int> shares(static_cast<size_t>(ranks), share), offsets(static_cast<size_t>(ranks));
  for (int q = 0; q < ranks; ++q) offsets[q] = q * share;
  std::vector<float> in(static_cast<size_t>(count), 1.0f), out(static_cast<size_t>(count), 0.0f);
  const MPI_Comm w = MPI_COMM_WORLD;
  double seconds = 0;
  progress.run([&] {
    const auto blocking = [&] {
      switch (kind) {
        case CollectiveKind::all_reduce:
          return MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, w);
        case CollectiveKind::reduce_scatter:
          return MPI_Reduce_scatter_block(in.data(), out.data(), part, MPI_FLOAT, MPI_SUM, w);
        case CollectiveKind::all_gather:
          return MPI_Allgather(in.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT, w);
        case CollectiveKind::broadcast:
          return MPI_Bcast(in.data(), count, MPI_FLOAT, 0, w);
        case CollectiveKind::all_to_all:
          return MPI_Alltoall(in.data(), share, MPI_FLOAT, out.data(), share, MPI_FLOAT, w);
      }
      return MPI_SUCCESS;
    };
    const auto started = [&](MPI_Request* r) {
      switch (kind) {
        case CollectiveKind::all_reduce:
          return MPI_Iallreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, w, r);
        case CollectiveKind::reduce_scatter:
          return MPI_Ireduce_scatter_block(in.data(), out.data(), part, MPI_FLOAT, MPI_SUM, w, r);
        case CollectiveKind::all_gather:
          return MPI_Iallgather(in.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT, w, r);
        case CollectiveKind::broadcast:
          return MPI_Ibcast(in.data(), count, MPI_FLOAT, 0, w, r);
        case CollectiveKind::all_to_all:
          return MPI_Ialltoallv(in.data(), shares.data(), offsets.data(), MPI_FLOAT, out.data(), shares.data(),
                                offsets.data(), MPI_FLOAT, w, r);
      }
      return MPI_SUCCESS;
    };
    const auto call = [&] {
      if (!nonblocking) return check_mpi(blocking(), "the raw MPI collective");
      MPI_Request r;
      check_mpi(started(&r), "the raw MPI collective");
      check_mpi(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
    };
    call();
    check_mpi(MPI_Barrier(w), "MPI_Barrier");
    const double start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) call();
    double mine = (MPI_Wtime() - start) / iterations;
    check_mpi(MPI_Allreduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, w), "MPI_Allreduce");
  });
  return seconds;
}

void watch_collective(CollectiveInfo collective, std::vector<int> members, std::function<bool()> completed) {
  DT_CHECK(launched_by_mpi(), "watching ", collective.describe(), " needs the MPI thread of a launched job");
  MpiProgress::instance().submit({.start = {},
                                  .finish = [] {},
                                  .collective = std::move(collective),
                                  .members = std::move(members),
                                  .completed = std::move(completed)});
}

void abort_job_if_mpi(int exit_code) {
  if (!MpiProgress::started()) return;
  MpiProgress::instance().run([exit_code] { MPI_Abort(MPI_COMM_WORLD, exit_code); });
}

std::unique_ptr<Communicator> mpi_world(Device device, std::string name) {
  MpiProgress& progress = MpiProgress::instance();
  std::vector<int> everyone(static_cast<size_t>(progress.world_size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, progress.world_rank(), progress.world_size(),
                                           std::move(name), device, std::move(everyone));
}

namespace {
std::atomic<double> timeout_s{600};
}  // namespace

void set_collective_timeout(double seconds) {
  DT_CHECK(seconds > 0, "the collective timeout must be above 0 seconds, not ", seconds);
  timeout_s = seconds;
}

double collective_timeout_s() { return timeout_s;
}

}  // namespace dt
