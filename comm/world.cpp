#include "comm/world.h"

#include <cstdlib>

#include "comm/mpi.h"
#include "comm/nccl.h"
#include "comm/single_process.h"

namespace dt {

std::unique_ptr<Communicator> make_world(Device device, std::string_view backend, Communicator* control,
                                         std::string name) {
  if (backend != "mpi" && backend != "nccl" && backend != "auto")
    throw Error(str("unknown communication backend '", backend, "'; valid backends are auto, mpi, nccl"));
  if (!launched_by_mpi()) {
    // srun without PMI starts every task as a job of its own: each would train alone.
    if (const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS"); tasks != nullptr && std::atoi(tasks) > 1)
      throw Error(str("srun started ", tasks, " tasks without MPI's process management (PMIx), so each would run "
                      "alone; launch with srun --mpi=pmix (srun --mpi=list names what this Slurm offers), or set "
                      "MpiDefault=pmix in slurm.conf"));
    return std::make_unique<SingleProcessCommunicator>(device, std::move(name));
  }
  if (uses_nccl(device, backend)) {
    DT_CHECK(control != nullptr, "an NCCL world needs a host world to send its unique id over");
    return nccl_world(*control);
  }
  return mpi_world(device, std::move(name));
}

bool uses_nccl(Device device, std::string_view backend) {
  return backend == "nccl" || (backend == "auto" && device == Device::cuda);
}

std::optional<int> launcher_rank() {
  if (!launched_by_mpi()) return std::nullopt;
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const char* value = std::getenv(variable)) return std::atoi(value);
  return std::nullopt;
}

namespace {
std::string& rank_description_set() {
  static std::string description;
  return description;
}
}  // namespace

std::string rank_description() {
  if (!rank_description_set().empty()) return rank_description_set();
  const std::optional<int> rank = launcher_rank();
  return rank ? str("rank ", *rank) : "";
}

std::string who(int world_rank) {
  const std::string description = rank_description();
  return description.empty() ? str("rank ", world_rank) : description;
}

void set_rank_description(std::string description) { rank_description_set() = std::move(description); }

}  // namespace dt
