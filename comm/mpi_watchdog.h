// A hang is never silent: the watchdog of the MPI backend.
//
// Every collective in flight is registered with its description and sequence number
// (comm/communicator.h) and the world ranks of its group. When one has waited longer than the
// collective timeout (parallel.timeout_s), this rank asks every other rank where it is — the
// question and the answers travel on a communicator of their own, answered by each rank's MPI
// thread, which keeps running while its main thread computes or is stuck — and then prints, on
// stderr, which collective it is in and which ranks of its group have not reached it, with
// what each of them was last doing; then it ends the job (MPI_Abort) with status 3. Every rank
// stuck in the collective reports, so the rank that stopped calling collectives is named by
// all the others; a rank that does not answer within 5 seconds is named as not answering.
//
// Internal to comm/ (called on the MPI thread by comm/mpi_progress.cpp).
#pragma once

#include <mpi.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dt {

class MpiWatchdog {
 public:
  MpiWatchdog(MPI_Comm world, int world_rank, int world_size);
  ~MpiWatchdog();

  // A collective started (members: the world ranks of its group) and finished.
  void started(const CollectiveInfo& collective, const std::vector<int>& members);
  void finished(const CollectiveInfo& collective);
  // Each pass of the MPI thread: answers other ranks' questions, and reports and ends the job
  // when a collective has waited past the timeout.
  void poll();

 private:
  struct InFlight {
    CollectiveInfo collective;
    std::vector<int> members;
    std::chrono::steady_clock::time_point since;
  };
  std::string status() const;  // where this rank is: one line per group
  void answer_questions();
  [[noreturn]] void report_and_abort(const InFlight& stuck);

  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_, size_;
  std::map<std::pair<std::string, uint64_t>, InFlight> in_flight_;  // by (group, sequence)
  std::map<std::string, CollectiveInfo> last_started_;               // by group
};

}  // namespace dt
