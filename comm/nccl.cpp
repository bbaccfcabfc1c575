#include "comm/nccl.h"

#include <algorithm>

#include "core/device.h"

namespace dt {

std::string nccl_version() {
#ifdef DTRAIN_WITH_CUDA
  return cuda::nccl_version();
#else
  return "none: this build has no CUDA backend";
#endif
}

std::unique_ptr<Communicator> nccl_world(Communicator& bootstrap) {
  require_device(Device::cuda);
#ifdef DTRAIN_WITH_CUDA
  return cuda::nccl_world(bootstrap);
#else
  (void)bootstrap;
  throw Error("the NCCL backend needs a build with the CUDA backend");
#endif
}

std::string ranks_per_node_refusal(const std::vector<uint64_t>& hosts, int gpus) {
  int most = 0;
  for (const uint64_t host : hosts) most = std::max(most, static_cast<int>(std::ranges::count(hosts, host)));
  if (most <= gpus) return "";
  const char* plural = gpus == 1 ? "" : "s";
  return str("the NCCL backend needs a GPU per rank, and a node of this job runs ", most, " ranks on ", gpus, " GPU",
             plural, ": start at most ", gpus, " rank", plural, " per node, or use parallel.backend = \"mpi\" (CUDA ",
             "buffers through host memory, several ranks on one GPU)");
}

}  // namespace dt
