// How long a collective takes on a profile's links (plan/hardware_profile.h), by the α–β model of
// the ring algorithms NCCL uses for large messages. For a group of p ranks and a buffer of n
// bytes (the whole buffer: what each rank holds before an all-reduce, after an all-gather):
//
//   all-reduce       2 (p − 1) steps of n / p bytes:   2 (p − 1) α + 2 (p − 1) / p · n / β
//   reduce-scatter   (p − 1) steps of n / p bytes:     (p − 1) α + (p − 1) / p · n / β
//   all-gather       the same as reduce-scatter
//   all-to-all       the same: (p − 1) exchanges of n / p bytes
//   broadcast        a scatter and an all-gather: as all-reduce
//   send / recv      one message:                      α + n / β
//
// The link is the group's placement: a group whose ranks all sit in one node uses the node's
// links; one that spans nodes is as fast as the slowest hop of its ring, the network.
#pragma once

#include "comm/communicator.h"
#include "plan/hardware_profile.h"

namespace dt {

// Where a group's ranks sit: how many, and whether they span nodes.
struct GroupPlacement {
  int ranks = 1;
  bool spans_nodes = false;
  // A group of `ranks` whose members are `stride` global ranks apart (tp's neighbours: 1; dp's:
  // tp × cp; see parallel/parallel_dims.h), on nodes of gpus_per_node.
  static GroupPlacement of(int ranks, int stride, int gpus_per_node);
};

// Seconds for one collective of `kind` over a buffer of `bytes`; for one message, between nodes
// or within one.
double collective_seconds(const HardwareProfile& profile, GroupPlacement group, CollectiveKind kind, double bytes);
double message_seconds(const HardwareProfile& profile, bool between_nodes, double bytes);

}  // namespace dt
