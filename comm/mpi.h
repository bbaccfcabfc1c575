// MPI as the layers above see it: whether this process was started by a launcher, and the
// world communicator over MPI (comm/mpi_communicator.cpp). No MPI header here.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace dt {

// Whether mpirun, mpiexec or srun started this process (their environment variables say so):
// then the world is MPI's; otherwise it is a single process and MPI is never initialized.
bool launched_by_mpi();

// The communicator of every rank of the job, named "world", for buffers on `device` (CUDA
// buffers are staged through host memory: the MPI backend lets multi-rank GPU code run on one
// GPU). Initializes MPI on its own thread on first use (comm/mpi_progress.h).
// `name` tells two communicators over the same ranks apart in messages and the watchdog.
std::unique_ptr<Communicator> mpi_world(Device device, std::string name = "world");

// The peers `dtrain bench comm` measures dtrain against: seconds per MPI call of `kind`
// (all_reduce sum, reduce_scatter_block, all_gather, broadcast, all_to_all) on f32, `bytes` as
// bench/comm_bench.h counts them, made directly on the MPI thread; the mean of `iterations`
// calls after one warm-up, on the slowest rank. `nonblocking`: MPI_Iallreduce ... and MPI_Wait,
// the calls the MPI backend makes (the same algorithms; MPI_Ialltoallv for all_to_all); else the
// blocking MPI_Allreduce ... (MPI_Alltoall), which a library may implement with other
// algorithms. A collective: every rank calls it.
double raw_mpi_seconds(CollectiveKind kind, size_t bytes, int iterations, bool nonblocking);

// How long a collective may wait before the watchdog reports where every rank is and ends the
// job (comm/mpi_watchdog.h). Process-wide; 600 s unless set.
void set_collective_timeout(double seconds);
double collective_timeout_s();

// For another backend's collectives (NCCL's, which run on a GPU stream): the MPI thread's
// watchdog (comm/mpi_watchdog.h) watches `collective`, run by `members` (the world ranks of its
// group, in group rank order), asking `completed` about once a millisecond until it returns
// true. Past the collective timeout the watchdog reports where every rank is and ends the job,
// as for MPI's own collectives; if `completed` throws, the error is printed and the job ends.
// Call it in the order the collectives start. Needs a process started by a launcher.
void watch_collective(CollectiveInfo collective, std::vector<int> members, std::function<bool()> completed);
// For the top-level error handler: when this process has initialized MPI, ends every rank of
// the job at once (MPI_Abort) with `exit_code`, so that no rank is left waiting in a collective
// for the one that failed; returns without doing anything otherwise.
void abort_job_if_mpi(int exit_code);

}  // namespace dt
