// `dtrain bench comm`: the collectives of comm/communicator.h timed over message sizes, with
// the figures nccl-tests prints and what a person needs beside them to trust and place them.
//
// For each collective and size (bytes of f32 as nccl-tests counts them: the buffer of
// all_reduce, broadcast and all_to_all, reduce_scatter's input, all_gather's output):
//   time     seconds per call through dtrain's Communicator (start, wait), the mean of a run of
//            calls sized to about `seconds_per_size`, on the slowest rank
//   algbw    bytes / time
//   busbw    algbw × the collective's bus factor (all_reduce 2(p−1)/p; reduce_scatter,
//            all_gather, all_to_all (p−1)/p; broadcast 1): comparable across collectives and
//            rank counts, and with the hardware's link bandwidth
//   wrong    elements that differ from the exact result, over all ranks: each rank compares
//            what one call wrote (its output filled with NaN before) with the closed form of the
//            inputs, small integers, so every sum is exact. The sum over ranks goes through
//            all_reduce, so each rank also keeps its own count, which no collective touches
//   MPI      the same collective called directly through MPI in the same run: the nonblocking
//            call and MPI_Wait the backend makes (the peer: ours / MPI is dtrain's overhead), and
//            the blocking call, which Open MPI serves with other algorithms (its tuned
//            collectives, against libnbc's schedules for the nonblocking ones)
//   model    the α–β model's time for a ring, steps × α + factor × bytes / B, with α and B
//            fitted to this run's times of that collective (least squares on relative error;
//            steps: 2(p−1) for all_reduce, p−1 for the others)
#pragma once

#include <cstddef>
#include <vector>

#include "comm/communicator.h"

namespace dt {

struct CommBenchOptions {
  std::vector<CollectiveKind> kinds;  // empty: all five
  size_t min_bytes = 8;
  size_t max_bytes = size_t{1} << 30;
  int factor = 2;                  // each size is `factor` times the last
  double seconds_per_size = 0.2;   // calls per size: about this long, at least 3, at most 1000
  bool raw_mpi = true;             // time the MPI peer (only with the MPI backend)
};

struct CommBenchRow {
  CollectiveKind kind;
  size_t bytes = 0;
  double seconds = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;       // over all ranks
  int64_t wrong_here = 0;  // on this rank, found without any collective
  double mpi_seconds = 0;           // nonblocking; 0 when not measured
  double mpi_blocking_seconds = 0;  // 0 when not measured
  double model_seconds = 0;
};

struct CommBenchFit {
  CollectiveKind kind;
  double alpha_s = 0;        // per step
  double bandwidth = 0;      // bytes/s
};

struct CommBenchResult {
  std::vector<CommBenchRow> rows;
  std::vector<CommBenchFit> fits;
};

// A collective over `world`: every rank calls it. Rank 0 prints the table as it goes and the
// fits and the overhead at the end.
CommBenchResult run_comm_bench(Communicator& world, const CommBenchOptions& options);

// The bus factor and the ring's step count of `kind` over p ranks (above).
double bus_factor(CollectiveKind kind, int ranks);
int ring_steps(CollectiveKind kind, int ranks);

}  // namespace dt
