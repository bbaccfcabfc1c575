#include "parallel/parallel_dims.h"

#include <tuple>

namespace dt {

ParallelDims::Coords ParallelDims::coords_of(int rank) const {
  Coords c;
  c.tp = rank % tp;
  rank /= tp;
  c.cp = rank % cp;
  rank /= cp;
  c.dp = rank % dp;
  c.pp = rank / dp;
  return c;
}

int ParallelDims::rank_of(Coords c) const { return c.tp + tp * (c.cp + cp * (c.dp + dp * c.pp)); }

std::string ParallelDims::describe() const {
  return str("dp ", dp, " × cp ", cp, " × tp ", tp, " × pp ", pp, " = ", world_size(), " rank",
             world_size() == 1 ? "" : "s", ep > 1 ? str(", ep ", ep, " over dp × cp") : "");
}

std::string ParallelDims::rank_description(int rank) const {
  const Coords c = coords_of(rank);
  std::string coordinates;
  int above_one = 0;
  for (const auto& [name, size, coordinate] :
       {std::tuple{"dp", dp, c.dp}, std::tuple{"cp", cp, c.cp}, std::tuple{"tp", tp, c.tp},
        std::tuple{"pp", pp, c.pp}, std::tuple{"ep", ep, ep_rank(c)}}) {
    if (size == 1) continue;
    ++above_one;
    coordinates += str(coordinates.empty() ? "" : ", ", name, " ", coordinate);
  }
  return above_one > 1 ? str("rank ", rank, " (", coordinates, ")") : str("rank ", rank);
}

void ParallelDims::check_world_size(int world_size) const {
  if (dp < 1 || cp < 1 || tp < 1 || pp < 1 || ep < 1)
    throw Error(str("parallel dimensions must be at least 1; got ", describe(), ep < 1 ? str(", ep ", ep) : ""));
  if ((dp * cp) % ep != 0)
    throw Error(str("expert parallelism spreads experts over ep = ", ep, " of the dp × cp = ", dp * cp,
                    " ranks that hold the same other parameters, which must divide them; set parallel.ep to a "
                    "divisor of ", dp * cp, " or change parallel.dp"));
  if (world_size != this->world_size())
    throw Error(str("this job has ", world_size, " rank", world_size == 1 ? "" : "s", " but the parallel layout is ",
                    describe(), "; launch with mpirun -np ", this->world_size(),
                    " or set parallel.dp, cp, tp and pp so that their product is ", world_size));
}

ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, const ParallelDims& dims) {
  dims.check_world_size(world->size());
  ProcessGroups g;
  g.dims = dims;
  g.coords = dims.coords_of(world->rank());
  const ParallelDims::Coords c = g.coords;
  // Color: the rank with this dimension's coordinate at 0, the same for the whole group.
  const auto group = [&](ParallelDims::Coords base, int key, const char* name) {
    return world->split(dims.rank_of(base), key, name);
  };
  g.dp = group({.dp = 0, .cp = c.cp, .tp = c.tp, .pp = c.pp}, c.dp, "dp");
  g.cp = group({.dp = c.dp, .cp = 0, .tp = c.tp, .pp = c.pp}, c.cp, "cp");
  g.tp = group({.dp = c.dp, .cp = c.cp, .tp = 0, .pp = c.pp}, c.tp, "tp");
  g.pp = group({.dp = c.dp, .cp = c.cp, .tp = c.tp, .pp = 0}, c.pp, "pp");
  // The ranks holding the same parameters: those that differ in dp or cp, ordered dp-major.
  if (dims.cp > 1) g.dp_cp_ = group({.dp = 0, .cp = 0, .tp = c.tp, .pp = c.pp}, dims.replica_index(c), "dp×cp");
  // Expert parallelism: ep consecutive ones of those; colored by the group's first.
  const int first = dims.replica_index(c) - dims.ep_rank(c);
  g.ep = group({.dp = first / dims.cp, .cp = first % dims.cp, .tp = c.tp, .pp = c.pp}, dims.ep_rank(c), "ep");
  // The same place in each ep group; colored by the first ep group's rank there.
  const int place = dims.ep_rank(c);
  g.expert_dp = group({.dp = place / dims.cp, .cp = place % dims.cp, .tp = c.tp, .pp = c.pp},
                      dims.replica_index(c) / dims.ep, "ep-dp");
  g.world = std::move(world);
  return g;
}

}  // namespace dt
