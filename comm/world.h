// The job's world, made the same way by every command: without a launcher this process alone
// (SingleProcessCommunicator; MPI is never initialized); under mpirun, mpiexec or srun every rank
// of the job, over MPI or NCCL.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "comm/communicator.h"

namespace dt {

// The communicator of every rank of this job for buffers on `device`, named `name`. backend:
// "mpi" (CUDA buffers are staged through host memory), "nccl", or "auto": NCCL for CUDA buffers,
// else MPI. NCCL's unique id travels over `control`, a host world the caller made first, which
// NCCL then needs. Without a launcher, one process's. Throws dt::Error for an unknown backend,
// and for several tasks that srun started without PMIx (each would be a world of one).
std::unique_ptr<Communicator> make_world(Device device, std::string_view backend = "mpi",
                                         Communicator* control = nullptr, std::string name = "world");

// Whether a job's ranks talk through NCCL with this device and backend ("nccl", or "auto" for
// CUDA buffers), as make_world decides under a launcher.
bool uses_nccl(Device device, std::string_view backend);

// This process's rank in the job as its launcher numbers it, read from the launcher's
// environment before any communicator exists; nullopt without a launcher.
std::optional<int> launcher_rank();

// How lines printed on this process's behalf name it under a launcher: "rank R" from the
// launcher until a command knows its parallel layout and sets a fuller one ("rank 5 (dp 1, tp
// 1)", ParallelDims::rank_description); "" without a launcher.
std::string rank_description();
void set_rank_description(std::string description);
// rank_description(), or "rank R" with the caller's world rank when the launcher's is unknown.
std::string who(int world_rank);

}  // namespace dt
