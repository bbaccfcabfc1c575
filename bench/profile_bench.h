// `dtrain bench profile`: this machine measured as a hardware profile (plan/hardware_profile.h,
// docs/profiles.md), written as TOML — profiles/cpu-local.toml by default (git ignores it) — so that
// `dtrain plan --gpu cpu-local` predicts runs here. Run it under mpirun with as many ranks as a
// job would place on the machine: the links are what dtrain's own collectives reach between them.
//
//   peak_tflops      the GEMM rate of a 2048^3 product through linear_forward in each precision
//                    (measure_gemm_peak_gflop_per_s), so efficiency.gemm is 1: the peak is what
//                    GEMMs reach here
//   memory           what the operating system reports available, and the bandwidth of a
//                    multi-threaded copy of 256 MiB (bytes read and written), efficiency.memory 1
//   efficiency.attention  attention forward and backward (B 4, T 512, 8 heads of 64) in each
//                    precision against that precision's peak, FLOPs counted as
//                    plan/step_time.h counts them
//   links            `bench comm`'s ring fit of all-reduce between the ranks (4 KiB to 64 MiB):
//                    α per step and the bus bandwidth, the same within and "between" nodes (one
//                    machine); gpus_per_node is the number of ranks
#pragma once

#include <string>

#include "comm/communicator.h"

namespace dt {

struct ProfileBenchOptions {
  std::string out;                     // where rank 0 writes the profile
  double seconds_per_size = 0.05;      // the collectives' timing per message size
};

// Every rank calls it (a collective over `world`, which must have at least two ranks); rank 0
// writes the file and returns its text, the others an empty string.
std::string run_profile_bench(Communicator& world, const ProfileBenchOptions& options);

}  // namespace dt
