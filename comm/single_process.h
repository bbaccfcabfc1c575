// The communicator of a run with no launcher: one rank, so every collective is a copy at most,
// done when it returns. Needs neither MPI nor NCCL.
#pragma once

#include "comm/communicator.h"

namespace dt {

class SingleProcessCommunicator final : public Communicator {
 public:
  explicit SingleProcessCommunicator(Device device, std::string name = "world")
      : Communicator(0, 1, std::move(name), device) {}
  std::string backend() const override { return "single process"; }

 protected:
  std::unique_ptr<Work> start_all_reduce(Tensor buffer, ReduceOp op) override;
  std::unique_ptr<Work> start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) override;
  std::unique_ptr<Work> start_all_gather(Tensor out, Tensor in) override;
  std::unique_ptr<Work> start_broadcast(Tensor buffer, int root) override;
  std::unique_ptr<Work> start_all_to_all(Tensor out, std::span<const int64_t> out_counts, Tensor in,
                                         std::span<const int64_t> in_counts) override;
  std::unique_ptr<Work> start_send(Tensor buffer, int peer) override;
  std::unique_ptr<Work> start_recv(Tensor buffer, int peer) override;
  std::unique_ptr<Work> start_barrier() override;
  std::unique_ptr<Communicator> split_group(int color, int key, std::string name) override;
};

// A collective that finished before its handle was returned.
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool done() override { return true; }
};

}  // namespace dt
