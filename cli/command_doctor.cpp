// `dtrain doctor`: what a person checks first on a new machine or cluster, in one report from
// rank 0 of the job (run it under mpirun to see every rank): the CPU and its vector units, the
// BLAS, the MPI library and how the ranks sit on the nodes, CUDA's driver and runtime, NCCL, the
// GPUs and which reach each other peer to peer, and a short all-reduce over every rank with its
// result checked.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "comm/mpi.h"
#include "comm/nccl.h"
#include "comm/world.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/fault_injection.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/onednn_matmul.h"

namespace dt::cli {

namespace {

// The CPU's model name and the flags that decide our kernels' speed.
std::string cpu_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string model = "unknown CPU", flags;
  for (std::string line; std::getline(in, line);) {
    const auto value = [&] {
      const size_t colon = line.find(": ");
      return colon == std::string::npos ? std::string() : line.substr(colon + 2);
    };
    if (line.rfind("model name", 0) == 0 && model == "unknown CPU") model = value();
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = str(" ", value(), " ");
  }
  std::string present;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"})
    if (flags.find(str(" ", f, " ")) != std::string::npos) present += str(present.empty() ? "" : " ", f);
  return str(model, " | ", std::thread::hardware_concurrency(), " hardware threads, ", omp_get_max_threads(),
             " OpenMP threads | ", present.empty() ? "no AVX2" : present);
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

int command_doctor(int argc, char** argv, int first) {
  Args args("doctor",
            "what to check first on a new machine or cluster (run it under mpirun for every rank): CPU, BLAS, MPI, "
            "CUDA, NCCL, GPUs, and a checked all-reduce");
  args.flag("timeout", "60", "seconds the all-reduce may take before the watchdog ends the job");
  if (!args.parse(argc, argv, first)) return 0;
  set_collective_timeout(args.get_double("timeout"));
  const std::unique_ptr<Communicator> world =
      make_world(Device::cpu);
  const int rank = world->rank(), ranks = world->size();
  const bool lead = rank == 0;

  // Where every rank runs: host names, 64 bytes each.
  std::vector<uint32_t> mine(16, 0), all(16 * static_cast<size_t>(ranks), 0);
  const std::string host = host_name().substr(0, 63);
  std::memcpy(mine.data(), host.data(), host.size());
  world->all_gather({.data = all.data(), .dtype = DType::u32, .shape = {static_cast<int64_t>(all.size())}},
                    {.data = mine.data(), .dtype = DType::u32, .shape = {16}})
      .wait();
  std::map<std::string, std::vector<int>> ranks_by_host;
  for (int r = 0; r < ranks; ++r) ranks_by_host[reinterpret_cast<const char*>(all.data() + 16 * r)].push_back(r);

  // A short all-reduce over every rank: 1 MiB of f32, rank r contributing r + 1 + i mod 7 at
  // element i, small integers whose sums are exact: p(p + 1)/2 + p (i mod 7) over p ranks.
  constexpr int64_t n = 262144;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(rank + 1 + i % 7);
  world->barrier().wait();
  const auto start = std::chrono::steady_clock::now();
  world->all_reduce({.data = values.data(), .dtype = DType::f32, .shape = {n}}, ReduceOp::sum).wait();
  const double seconds = all_reduce_value(
      *world, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), ReduceOp::max);
  if (fault_injected("collective-result-wrong", rank)) values.back() += 1;
  // This rank's count needs no collective; the sum over ranks is only as right as the all-reduce
  // that forms it, so each rank fails on its own count too.
  int64_t wrong_here = 0;
  for (int64_t i = 0; i < n; ++i)
    wrong_here += values[i] != static_cast<float>(ranks * (ranks + 1) / 2 + ranks * (i % 7));
  const auto wrong = static_cast<int64_t>(all_reduce_value(*world, static_cast<double>(wrong_here), ReduceOp::sum));

  if (lead) {
    std::printf("dtrain doctor\n");
    std::printf("CPU     %s\n", cpu_line().c_str());
    std::printf("BLAS    OpenBLAS with %s kernels | oneDNN bf16 matmul: %s\n", kernels::cpu::blas_core_name().c_str(),
                kernels::cpu::onednn_has_native_bf16() ? "native (AVX-512 BF16 / AMX)" : "emulated (no bf16 units)");
    std::printf("memory  %s available\n", format_bytes(static_cast<double>(device_free_bytes(Device::cpu))).c_str());
    std::printf("MPI     %s | %d rank%s on %zu node%s:", world->backend().c_str(), ranks, ranks == 1 ? "" : "s",
                ranks_by_host.size(), ranks_by_host.size() == 1 ? "" : "s");
    for (const auto& [name, on_host] : ranks_by_host) std::printf(" %s %zu", name.c_str(), on_host.size());
    std::printf("%s\n", launched_by_mpi() ? "" : " (no launcher: run `mpirun -np N dtrain doctor` to check a job)");
    const CudaSystem cuda = cuda_system();
    if (!cuda.unavailable.empty()) {
      std::printf("CUDA    not usable: %s\n", cuda.unavailable.c_str());
    } else {
      std::printf("CUDA    driver %d.%d, runtime %d.%d\n", cuda.driver_version / 1000, cuda.driver_version % 1000 / 10,
                  cuda.runtime_version / 1000, cuda.runtime_version % 1000 / 10);
      for (const GpuInfo& g : cuda.gpus)
        std::printf("GPU %d   %s, %s, sm_%d\n", g.ordinal, g.name.c_str(),
                    format_bytes(static_cast<double>(g.total_bytes)).c_str(), g.compute_capability);
      if (cuda.gpus.size() > 1) {
        std::printf("P2P     (row reaches column)\n        ");
        for (size_t j = 0; j < cuda.gpus.size(); ++j) std::printf(" %3zu", j);
        std::printf("\n");
        for (size_t i = 0; i < cuda.gpus.size(); ++i) {
          std::printf("     %3zu", i);
          for (size_t j = 0; j < cuda.gpus.size(); ++j) std::printf(" %3s", i == j ? "-" : cuda.peer_access[i][j] ? "yes" : "no");
          std::printf("\n");
        }
      }
    }
    std::printf("NCCL    %s\n", nccl_version().c_str());
    std::printf("check   all_reduce of 1 MiB f32 over %d rank%s: %s in %.1f us\n", ranks, ranks == 1 ? "" : "s",
                wrong == 0 && wrong_here == 0 ? "correct" : str(wrong, " wrong elements").c_str(), seconds * 1e6);
    std::fflush(stdout);
  }
  world->barrier().wait();  // rank 0's report is out before any rank can end the job with an error
  if (wrong != 0 || wrong_here != 0)
    throw Error(str("doctor: the all-reduce over ", ranks, " ranks gave ", wrong, " wrong elements, ", wrong_here,
                    " of them on rank ", rank, "; the MPI installation or the network is broken"));
  return 0;
}

}  // namespace dt::cli
