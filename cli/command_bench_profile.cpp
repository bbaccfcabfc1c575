#include <cstdio>
#include <memory>

#include "bench/profile_bench.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "comm/world.h"
#include "plan/hardware_profile.h"

namespace dt::cli {

int command_bench_profile(int argc, char** argv, int first) {
  Args args("bench profile",
            "measure this machine as a hardware profile for `dtrain plan --gpu cpu-local` (run it under mpirun, as many "
            "ranks as a job would place here): GEMM peaks, memory and its bandwidth, attention's share, the links");
  args.flag("out", "",
            "where to write the profile (default: cpu-local.toml in the profiles/ directory `dtrain plan` reads)")
      .flag("seconds", "0.05", "time spent per message size timing the links");
  if (!args.parse(argc, argv, first)) return 0;
  const std::string out = args.was_given("out") ? args.get("out") : (profile_directory() / "cpu-local.toml").string();
  const std::unique_ptr<Communicator> world = make_world(Device::cpu, "mpi", nullptr, "profile");
  const std::string text =
      run_profile_bench(*world, {.out = out, .seconds_per_size = args.get_double("seconds")});
  if (world->rank() == 0) std::printf("\nwrote %s:\n%s", out.c_str(), text.c_str());
  return 0;
}

}  // namespace dt::cli
