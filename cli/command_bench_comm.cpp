#include <sstream>

#include "bench/comm_bench.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "comm/mpi.h"
#include "comm/world.h"
#include "core/device.h"

namespace dt::cli {

namespace {

// "8", "64K", "16M", "1G": bytes, with binary suffixes.
size_t parse_bytes(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string suffix = text.substr(used);
  const double scale = suffix.empty() ? 1 : suffix == "K" ? 1024.0 : suffix == "M" ? 1048576.0 : suffix == "G" ? 1073741824.0 : 0;
  if (used == 0 || scale == 0 || value < 1)
    throw Error(str("--", flag, " ", text, ": give a size in bytes, with K, M or G for KiB, MiB or GiB (8, 64K, 1G)"));
  return static_cast<size_t>(value * scale);
}

}  // namespace

int command_bench_comm(int argc, char** argv, int first) {
  Args args("bench comm",
            "time the collectives over message sizes on every rank of the job (run it under mpirun): time, algorithm "
            "and bus bandwidth, a check of every result, raw MPI beside dtrain, and a fitted ring model");
  args.flag("ops", "all_reduce,reduce_scatter,all_gather,broadcast,all_to_all", "collectives to time, comma-separated")
      .flag("min-bytes", "8", "smallest size (K, M, G: KiB, MiB, GiB)")
      .flag("max-bytes", "1G", "largest size")
      .flag("factor", "2", "each size is this many times the last")
      .flag("seconds", "0.2", "time spent per size (sets the number of calls, 3 to 1000)")
      .flag("device", "cpu", "where the buffers live: cpu, or cuda (staged through host memory by the MPI backend)")
      .flag("backend", "mpi", "mpi, or nccl (a GPU per rank; --device cuda), under mpirun; one process alone times the "
                              "single-process backend")
      .flag("timeout", "600", "seconds a collective may wait before the watchdog ends the job");
  if (!args.parse(argc, argv, first)) return 0;
  CommBenchOptions options;
  std::istringstream ops(args.get("ops"));
  for (std::string op; std::getline(ops, op, ',');) options.kinds.push_back(collective_kind_from_name(op));
  options.min_bytes = parse_bytes("min-bytes", args.get("min-bytes"));
  options.max_bytes = parse_bytes("max-bytes", args.get("max-bytes"));
  options.factor = static_cast<int>(args.get_int("factor"));
  options.seconds_per_size = args.get_double("seconds");
  if (options.min_bytes > options.max_bytes || options.factor < 2)
    throw Error(str("bench comm: --min-bytes must not exceed --max-bytes and --factor must be at least 2"));
  const Device device = device_from_name(args.get("device"));
  require_device(device);
  set_collective_timeout(args.get_double("timeout"));
  const std::string backend = args.get("backend");
  if (backend == "nccl" && device != Device::cuda)
    throw Error("bench comm: --backend nccl needs --device cuda (NCCL moves GPU buffers)");
  // NCCL's unique id travels over a host world made first.
  const std::unique_ptr<Communicator> control = make_world(Device::cpu, "mpi", nullptr, "control");
  const std::unique_ptr<Communicator> world = make_world(device, backend, control.get());
  const CommBenchResult result = run_comm_bench(*world, options);
  // Rank 0's table is out before any rank can end the job with an error. A rank fails on its own
  // count too: the sum over ranks is only as right as the all_reduce that forms it.
  world->barrier().wait();
  for (const CommBenchRow& row : result.rows)
    if (row.wrong > 0 || row.wrong_here > 0)
      throw Error(str("bench comm: ", collective_kind_name(row.kind), " of ", row.bytes, " bytes gave ", row.wrong,
                      " wrong elements over all ranks, ", row.wrong_here, " of them on rank ", world->rank()));
  return 0;
}

}  // namespace dt::cli
