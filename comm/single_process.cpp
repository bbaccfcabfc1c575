#include "comm/single_process.h"

#include "core/device.h"

namespace dt {

namespace {
std::unique_ptr<Work> copied(const Tensor& out, const Tensor& in) {
  if (out.data != in.data) copy_bytes(out.data, out.device, in.data, in.device, in.bytes());
  return std::make_unique<CompletedWork>();
}
}  // namespace

// With one rank, the sum, the average and the maximum of a buffer are the buffer itself.
std::unique_ptr<Work> SingleProcessCommunicator::start_all_reduce(Tensor, ReduceOp) {
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> SingleProcessCommunicator::start_reduce_scatter(Tensor out, Tensor in, ReduceOp) {
  return copied(out, in);
}

std::unique_ptr<Work> SingleProcessCommunicator::start_all_gather(Tensor out, Tensor in) { return copied(out, in); }

std::unique_ptr<Work> SingleProcessCommunicator::start_broadcast(Tensor, int) {
  return std::make_unique<CompletedWork>();
}

// The one part of each buffer is all of it (the counts are checked to say so).
std::unique_ptr<Work> SingleProcessCommunicator::start_all_to_all(Tensor out, std::span<const int64_t>, Tensor in,
                                                                  std::span<const int64_t>) {
  return copied(out, in);
}

std::unique_ptr<Work> SingleProcessCommunicator::start_send(Tensor, int) {
  throw Error(str("send on '", name(), "': a single process has no other rank to send to; pipeline stages need ",
                  "one process each (launch with mpirun)"));
}

std::unique_ptr<Work> SingleProcessCommunicator::start_recv(Tensor, int) {
  throw Error(str("recv on '", name(), "': a single process has no other rank to receive from; pipeline stages ",
                  "need one process each (launch with mpirun)"));
}

std::unique_ptr<Work> SingleProcessCommunicator::start_barrier() { return std::make_unique<CompletedWork>(); }

std::unique_ptr<Communicator> SingleProcessCommunicator::split_group(int, int, std::string name) {
  return std::make_unique<SingleProcessCommunicator>(device(), std::move(name));
}

}  // namespace dt
