// The NCCL backend (comm/nccl.h): collectives on CUDA buffers, on the communication stream.
//
// Each start_* records an event on the compute stream and makes the communication stream wait
// for it (the input was written by kernels queued there), issues the NCCL call on the
// communication stream, and records a second event there; the handle's wait() makes the
// compute stream wait for that event. Nothing blocks the host; done() asks the event. In a job
// started by a launcher the MPI thread asks it too, for the collective watchdog.
// all_to_all, even or not, is a group of sends and receives, as NCCL has no all-to-all call;
// barrier is an all-reduce of one float. NCCL errors become dt::Error with the call, the error
// string and NCCL's last error message.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/mpi.h"
#include "comm/nccl.h"
#include "core/buffer.h"
#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/error.h"

namespace dt::cuda {

namespace {

void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  throw Error(str(call, " failed: ", ncclGetErrorString(result), last != nullptr && *last ? str(" (", last, ")") : ""));
}
#define DT_NCCL_CHECK(call, comm) check_nccl((call), #call, (comm))

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::u32:
      return ncclUint32;
    default:
      return ncclUint8;  // moved as bytes (counts are scaled by the caller)
  }
}

// Elements of t as NCCL counts them for its type.
size_t nccl_count(const Tensor& t) {
  return nccl_type(t.dtype) == ncclUint8 ? t.bytes() : static_cast<size_t>(t.numel());
}

// The NCCL type of a buffer NCCL reduces; throws for a dtype it cannot (bytes cannot be summed).
ncclDataType_t reduce_type(const Tensor& t, const std::string& group) {
  const ncclDataType_t type = nccl_type(t.dtype);
  if (type == ncclUint8)
    throw Error(str("a reduction of ", dtype_name(t.dtype), " on '", group,
                    "': the NCCL backend reduces f32, f64, bf16, f16, i32 and u32"));
  return type;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::average:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

// The GPU of this rank: its local rank on the node (from the launcher), modulo the GPUs there.
// Before that, a node running more ranks than it has GPUs is refused on every rank
// (ranks_per_node_refusal), the ranks per node counted over the bootstrap from each rank's host
// name, whatever the launcher.
void select_local_gpu(Communicator& bootstrap) {
  int local = 0;
  for (const char* variable : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* value = std::getenv(variable)) {
      local = std::atoi(value);
      break;
    }
  int count = 0;
  DT_CUDA_CHECK(cudaGetDeviceCount(&count));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::vector<uint64_t> hosts(static_cast<size_t>(bootstrap.size()));
  uint64_t mine = std::hash<std::string_view>{}(host);
  bootstrap.all_gather({.data = hosts.data(), .dtype = DType::u32, .shape = {2 * bootstrap.size()}},
                       {.data = &mine, .dtype = DType::u32, .shape = {2}}).wait();
  if (const std::string refusal = ranks_per_node_refusal(hosts, count); !refusal.empty()) throw Error(refusal);
  DT_CUDA_CHECK(cudaSetDevice(local % count));
}

// The event recorded after a collective: shared by its handle and the watchdog's test, which
// may outlive the handle.
class DoneEvent {
 public:
  DoneEvent() { DT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~DoneEvent() { cudaEventDestroy(event_); }
  DoneEvent(const DoneEvent&) = delete;
  DoneEvent& operator=(const DoneEvent&) = delete;
  cudaEvent_t get() const { return event_; }
  bool reached() const {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    DT_CUDA_CHECK(status);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclWork final : public Work {
 public:
  explicit NcclWork(std::shared_ptr<const DoneEvent> done) : done_(std::move(done)) {}
  void wait() override { DT_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), done_->get(), 0)); }
  bool done() override { return done_->reached(); }

 private:
  std::shared_ptr<const DoneEvent> done_;
};

class NcclCommunicator final : public Communicator {
 public:
  // members: the world rank of each rank of the group, when the MPI thread's watchdog watches
  // its collectives (a launched job); empty otherwise.
  NcclCommunicator(ncclComm_t comm, int rank, int size, std::string name, std::vector<int> members)
      : Communicator(rank, size, std::move(name), Device::cuda), comm_(comm), members_(std::move(members)) {}
  // Destroying waits for the communicator's unfinished operations; while an error unwinds, a
  // peer may never join them, so the communicator is aborted instead and the error reaches
  // main, which ends the job.
  ~NcclCommunicator() override {
    if (std::uncaught_exceptions() > 0)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }
  std::string backend() const override { return str("NCCL ", nccl_version()); }

 protected:
  std::unique_ptr<Work> start_all_reduce(Tensor buffer, ReduceOp op) override {
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(ncclAllReduce(buffer.data, buffer.data, nccl_count(buffer), reduce_type(buffer, name()), nccl_op(op),
                                  comm_, s),
                    comm_);
    });
  }
  std::unique_ptr<Work> start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(
          ncclReduceScatter(in.data, out.data, nccl_count(out), reduce_type(out, name()), nccl_op(op), comm_, s), comm_);
    });
  }
  std::unique_ptr<Work> start_all_gather(Tensor out, Tensor in) override {
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(ncclAllGather(in.data, out.data, nccl_count(in), nccl_type(in.dtype), comm_, s), comm_);
    });
  }
  std::unique_ptr<Work> start_broadcast(Tensor buffer, int root) override {
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(ncclBroadcast(buffer.data, buffer.data, nccl_count(buffer), nccl_type(buffer.dtype), root, comm_, s),
                    comm_);
    });
  }
  // Parts move as bytes, whatever the dtype. An empty part is not issued: its peer's count is 0
  // too, so neither side waits for it.
  std::unique_ptr<Work> start_all_to_all(Tensor out, std::span<const int64_t> out_counts, Tensor in,
                                         std::span<const int64_t> in_counts) override {
    const size_t element_bytes = dtype_size(in.dtype);
    return issue([&](cudaStream_t s) {
      size_t sent_bytes = 0, received_bytes = 0;  // offsets of the parts
      DT_NCCL_CHECK(ncclGroupStart(), comm_);
      for (int peer = 0; peer < size(); ++peer) {
        const size_t send_bytes = static_cast<size_t>(in_counts[peer]) * element_bytes;
        const size_t recv_bytes = static_cast<size_t>(out_counts[peer]) * element_bytes;
        if (send_bytes > 0)
          DT_NCCL_CHECK(ncclSend(static_cast<const char*>(in.data) + sent_bytes, send_bytes, ncclUint8, peer, comm_, s),
                        comm_);
        if (recv_bytes > 0)
          DT_NCCL_CHECK(ncclRecv(static_cast<char*>(out.data) + received_bytes, recv_bytes, ncclUint8, peer, comm_, s),
                        comm_);
        sent_bytes += send_bytes;
        received_bytes += recv_bytes;
      }
      DT_NCCL_CHECK(ncclGroupEnd(), comm_);
    });
  }
  std::unique_ptr<Work> start_send(Tensor buffer, int peer) override {
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(ncclSend(buffer.data, nccl_count(buffer), nccl_type(buffer.dtype), peer, comm_, s), comm_);
    });
  }
  std::unique_ptr<Work> start_recv(Tensor buffer, int peer) override {
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(ncclRecv(buffer.data, nccl_count(buffer), nccl_type(buffer.dtype), peer, comm_, s), comm_);
    });
  }
  std::unique_ptr<Work> start_exchange(Tensor send, int to, Tensor recv, int from) override {
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(ncclGroupStart(), comm_);
      DT_NCCL_CHECK(ncclSend(send.data, nccl_count(send), nccl_type(send.dtype), to, comm_, s), comm_);
      DT_NCCL_CHECK(ncclRecv(recv.data, nccl_count(recv), nccl_type(recv.dtype), from, comm_, s), comm_);
      DT_NCCL_CHECK(ncclGroupEnd(), comm_);
    });
  }
  std::unique_ptr<Work> start_barrier() override {
    if (!barrier_word_.data()) barrier_word_ = Buffer(sizeof(float), MemTag::communication, Device::cuda, true);
    return issue([&](cudaStream_t s) {
      DT_NCCL_CHECK(ncclAllReduce(barrier_word_.data(), barrier_word_.data(), 1, ncclFloat32, ncclSum, comm_, s), comm_);
    });
  }
  std::unique_ptr<Communicator> split_group(int color, int key, std::string name) override {
    ncclComm_t sub = nullptr;
    DT_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr), comm_);
    int sub_rank = 0, sub_size = 0;
    DT_NCCL_CHECK(ncclCommUserRank(sub, &sub_rank), sub);
    DT_NCCL_CHECK(ncclCommCount(sub, &sub_size), sub);
    return std::make_unique<NcclCommunicator>(sub, sub_rank, sub_size, std::move(name),
                                              members_.empty() ? std::vector<int>{} : split_members(color, key));
  }

 private:
  // Orders the communication stream after the compute stream's queued work, runs `call` there,
  // and returns the work whose event marks its end.
  // In a launched job the MPI thread's watchdog watches the collective until its event is
  // reached: a hang on the GPU is reported as one in MPI would be (comm/mpi.h).
  template <typename Call>
  std::unique_ptr<Work> issue(Call&& call) {
    cudaEvent_t inputs_ready = nullptr;
    DT_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
    DT_CUDA_CHECK(cudaEventRecord(inputs_ready, compute_stream()));
    DT_CUDA_CHECK(cudaStreamWaitEvent(communication_stream(), inputs_ready, 0));
    DT_CUDA_CHECK(cudaEventDestroy(inputs_ready));  // released once recorded work completes
    call(communication_stream());
    auto done = std::make_shared<const DoneEvent>();
    DT_CUDA_CHECK(cudaEventRecord(done->get(), communication_stream()));
    if (!members_.empty()) watch_collective(starting(), members_, [done] { return done->reached(); });
    return std::make_unique<NcclWork>(std::move(done));
  }

  // The world ranks of the group that split(color, key) makes, in its rank order (NCCL's as
  // MPI's: by key, then by rank here): every rank's color and key gathered over this group.
  std::vector<int> split_members(int color, int key) {
    const int32_t mine[2] = {color, key};
    const size_t pair_bytes = sizeof mine;
    const Buffer sent(pair_bytes, MemTag::communication, Device::cuda), gathered(pair_bytes * size(), MemTag::communication,
                                                                                 Device::cuda);
    copy_bytes(sent.data(), Device::cuda, mine, Device::cpu, pair_bytes);
    DT_NCCL_CHECK(ncclAllGather(sent.data(), gathered.data(), 2, ncclInt32, comm_, communication_stream()), comm_);
    DT_CUDA_CHECK(cudaStreamSynchronize(communication_stream()));
    std::vector<int32_t> pairs(2 * static_cast<size_t>(size()));
    copy_bytes(pairs.data(), Device::cpu, gathered.data(), Device::cuda, gathered.bytes());
    std::vector<int> ranks;  // of this group with this color
    for (int r = 0; r < size(); ++r)
      if (pairs[2 * r] == color) ranks.push_back(r);
    std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) { return pairs[2 * a + 1] < pairs[2 * b + 1]; });
    std::vector<int> members;
    for (const int r : ranks) members.push_back(members_[static_cast<size_t>(r)]);
    return members;
  }

  ncclComm_t comm_;
  std::vector<int> members_;
  Buffer barrier_word_;
};

}  // namespace

std::string nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "ncclGetVersion failed";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z from 2.9 on.
  return str(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

std::unique_ptr<Communicator> nccl_world(Communicator& bootstrap) {
  DT_CHECK(bootstrap.device() == Device::cpu, "the NCCL id goes over a CPU communicator");
  select_local_gpu(bootstrap);
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) throw Error(str("ncclGetUniqueId failed: ", ncclGetErrorString(result)));
  }
  static_assert(sizeof(ncclUniqueId) % sizeof(uint32_t) == 0);
  bootstrap.broadcast({.data = &id, .dtype = DType::u32, .shape = {sizeof(ncclUniqueId) / sizeof(uint32_t)}}, 0).wait();
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
  if (result != ncclSuccess)
    throw Error(str("ncclCommInitRank of rank ", bootstrap.rank(), " of ", bootstrap.size(),
                    " failed: ", ncclGetErrorString(result),
                    "; NCCL needs one GPU per rank (for several ranks on one GPU use parallel.backend = \"mpi\")"));
  // The bootstrap is MPI's world in a launched job: its ranks are the world ranks.
  std::vector<int> members;
  if (launched_by_mpi()) {
    members.resize(static_cast<size_t>(bootstrap.size()));
    std::iota(members.begin(), members.end(), 0);
  }
  return std::make_unique<NcclCommunicator>(comm, bootstrap.rank(), bootstrap.size(), "world", std::move(members));
}

}  // namespace dt::cuda
