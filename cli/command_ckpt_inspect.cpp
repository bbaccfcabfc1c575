#include <cstdio>

#include "ckpt/checkpoint.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/allocator.h"

namespace dt::cli {

int command_ckpt_inspect(int argc, char** argv, int first) {
  Args args("ckpt inspect", "print a checkpoint's manifest and verify every tensor's checksum");
  args.positional("DIR", "a checkpoint step directory, or a checkpoint root (its latest step)");
  if (!args.parse(argc, argv, first)) return 0;
  if (args.positionals().size() != 1)
    throw Error(str("ckpt inspect: give one checkpoint directory\n", args.usage()));
  const std::filesystem::path directory = ckpt::Checkpoint::step_or_latest(args.positionals().front());
  const ckpt::Checkpoint checkpoint(directory);
  std::printf("checkpoint %s\nstep %lld, format version %d\nmodel %s\nstate %s\ntensors:\n", directory.c_str(),
              static_cast<long long>(checkpoint.step()), checkpoint.manifest()["format_version"].get<int>(),
              checkpoint.model().dump().c_str(), checkpoint.state().dump().c_str());
  double bytes = 0;
  for (const auto& t : checkpoint.manifest()["tensors"]) {
    std::printf("  %-32s %-5s %-18s crc32c %08x\n", t["name"].get<std::string>().c_str(),
                t["dtype"].get<std::string>().c_str(), t["shape"].dump().c_str(), t["crc32c"].get<uint32_t>());
    int64_t n = dtype_size(dtype_from_name(t["dtype"].get<std::string>()));
    for (const auto& d : t["shape"]) n *= d.get<int64_t>();
    bytes += static_cast<double>(n);
  }
  checkpoint.verify();
  std::printf("all %zu checksums verified (%s)\n", checkpoint.tensor_names().size(), format_bytes(bytes).c_str());
  return 0;
}

}  // namespace dt::cli
