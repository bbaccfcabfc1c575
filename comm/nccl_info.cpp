#include "comm/nccl_info.h"

#ifdef DTRAIN_WITH_CUDA
#include <nccl.h>
#endif

#include "core/error.h"

namespace dt {

std::string nccl_version() {
#ifdef DTRAIN_WITH_CUDA
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "ncclGetVersion failed";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z from 2.9 on.
  return str(version / 10000, ".", version / 100 % 100, ".", version % 100);
#else
  return "none: this build has no CUDA backend";
#endif
}

}  // namespace dt
