// NCCL as the layers above see it (no NCCL header here): the GPU backend of comm/communicator.h.
//
// The NCCL communicator moves CUDA buffers on the communication stream (core/cuda/runtime.h).
// A collective is ordered after the kernels already queued on the compute stream (an event
// there makes the communication stream wait), and its handle's wait() orders the compute
// stream after the collective in turn — without blocking the host: kernels queued after wait()
// see the result. NCCL's unique id is handed out over a bootstrap communicator (MPI's world,
// on the CPU), and each rank first selects the GPU of its local rank on the node.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dt {

// The NCCL library's version ("2.28.9"), or why there is none ("this build has no CUDA backend").
std::string nccl_version();

// The communicator of every rank of `bootstrap` (a collective over it) for CUDA buffers, named
// "world". Throws dt::Error naming the fix when the build has no CUDA backend or no GPU can be used.
std::unique_ptr<Communicator> nccl_world(Communicator& bootstrap);

// Why NCCL cannot give every rank a GPU of its own when rank r runs on the node named hosts[r]
// (any id of the node) and each node has `gpus` GPUs; empty when it can. NCCL itself would put
// two ranks on one GPU and fail in its own words, or wait; every rank computes the same answer.
std::string ranks_per_node_refusal(const std::vector<uint64_t>& hosts, int gpus);

namespace cuda {
std::string nccl_version();
std::unique_ptr<Communicator> nccl_world(Communicator& bootstrap);
}  // namespace cuda

}  // namespace dt
