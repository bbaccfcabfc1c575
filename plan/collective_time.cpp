#include "plan/collective_time.h"

#include "core/error.h"

namespace dt {

GroupPlacement GroupPlacement::of(int ranks, int stride, int gpus_per_node) {
  DT_CHECK(ranks >= 1 && stride >= 1 && gpus_per_node >= 1, "a group of ", ranks, " ranks ", stride, " apart on nodes of ",
           gpus_per_node);
  // The group's ranks lie within one node when its span does and it starts at a node's start
  // (the layouts put whole groups on nodes: parallel/parallel_dims.h).
  const int64_t span = int64_t{ranks - 1} * stride + 1;
  return {.ranks = ranks, .spans_nodes = span > gpus_per_node};
}

double collective_seconds(const HardwareProfile& profile, GroupPlacement group, CollectiveKind kind, double bytes) {
  const int p = group.ranks;
  if (p <= 1) return 0;
  const LinkProfile& link = group.spans_nodes ? profile.inter_node : profile.intra_node;
  const double steps = p - 1, share = bytes / p;
  switch (kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::broadcast: return 2 * steps * link.seconds(share);
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all: return steps * link.seconds(share);
  }
  return 0;
}

double message_seconds(const HardwareProfile& profile, bool between_nodes, double bytes) {
  return (between_nodes ? profile.inter_node : profile.intra_node).seconds(bytes);
}

}  // namespace dt
