// Every collective of comm/communicator.h checked against its definition, on any backend and
// device, at any group size: the MPI backend on host and CUDA buffers, NCCL on one GPU or
// several. Values are small integers in f32, so every sum is exact and every result is compared
// for equality; outputs start as kUnwritten, a value no correct result holds, so a backend that
// writes nothing fails even at one rank.
#pragma once

#include "comm/communicator.h"

namespace dt::testing {

inline constexpr float kUnwritten = -1.0f;

// all_reduce (sum, average, max, three in flight at once), reduce_scatter, all_gather, broadcast
// from the last rank, all_to_all with equal parts, and with uneven ones in f32 and bf16 (parts
// of 0 to 3 elements, the counts exchanged by all_to_all_counts; at two ranks or more the last
// rank receives nothing), a ring of sends and receives (two ranks or more) and a barrier, on
// buffers of `device`. At one rank the in-place ones (all_reduce, broadcast) are the identity by
// definition; the out-of-place ones still have to write their outputs.
void expect_collectives_give_their_defined_results(Communicator& world, Device device);

}  // namespace dt::testing
