#include "model/recompute.h"

#include "core/error.h"

namespace dt {

std::string_view recompute_name(Recompute policy) {
  switch (policy) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

Recompute recompute_from_name(std::string_view name) {
  for (Recompute policy : {Recompute::none, Recompute::selective, Recompute::full})
    if (recompute_name(policy) == name) return policy;
  throw Error(str("unknown recomputation policy '", name, "'; valid policies are none, selective, full"));
}

}  // namespace dt
